"""The fault tests' kill helper (``support.faults.kill_after_checkpoints``) itself."""

from __future__ import annotations

import gc
import random
import sys
import warnings
from pathlib import Path

import pytest

from support.faults import kill_after_checkpoints, sigkill_when


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


def test_sigkill_when_kills_once_ready_and_returns_what_ready_said(tmp_path: Path) -> None:
    started = tmp_path / "started"
    script = (
        "import pathlib, time; print('up', flush=True); "
        f"pathlib.Path({str(started)!r}).touch(); time.sleep(60)"  # a run to kill
    )
    run = sigkill_when(
        [sys.executable, "-c", script],
        lambda: started.exists() and "ready",
        timeout=60,
        what="the script to start",
    )
    assert run is not None
    assert (run.ready, run.stdout) == ("ready", "up\n")


def test_sigkill_when_a_run_ends_before_its_kill(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; sys.exit('gone early')"]
    never = lambda: False  # noqa: E731
    with pytest.raises(AssertionError, match=r"ended before it was killed(.|\n)*gone early"):
        sigkill_when(command, never, timeout=60, what="never")
    assert sigkill_when(command, never, timeout=60, what="never", allow_early_end=True) is None


def test_sigkill_when_ready_never_comes_is_a_timeout_naming_it() -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]  # a run to kill
    with pytest.raises(TimeoutError, match="the marker"):
        sigkill_when(command, lambda: False, timeout=0.5, what="the marker")
