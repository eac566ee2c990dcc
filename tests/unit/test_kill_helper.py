"""The fault tests' kill helper (``eddyline.testing.kill_after_checkpoints``) itself."""

from __future__ import annotations

import gc
import random
import sys
import warnings
from pathlib import Path

from eddyline.testing import kill_after_checkpoints


def test_a_run_that_ends_before_its_kill_leaves_no_open_pipe(tmp_path: Path) -> None:
    # CI once failed a fault test on "unclosed file" ResourceWarnings: a run that ended
    # early (allow_early_end) left its stdout/stderr pipes open until the garbage
    # collector met them, inside whichever test ran then.
    command = [sys.executable, "-c", "print('done')"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        outputs = kill_after_checkpoints(
            command,
            tmp_path,
            kills=2,
            rng=random.Random(0),
            timeout=60,
            max_delay=0.0,
            allow_early_end=True,
        )
        gc.collect()
    assert outputs == ["done\n"]
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []
