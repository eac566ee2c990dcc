"""Channel state of an operator that the restored run would chain
(docs/DESIGN.md "Channel state of an operator that would now be chained").

At parallelism 2 a slow map reads a rebalance edge from a source at 3 and its
channel state holds rows; at 3 that edge is a forward edge at equal
parallelism, which would chain the map behind the source. The restoring run
keeps the map unchained (``Plan::for_restore``) so its rows are replayed into
it first. Under ``ProcessRunner`` the driver and every worker build the chains
from the same checkpoint: a job SIGKILLed at 2 and restored at 3 across two
worker processes commits every row exactly once (the in-process case is in
``test_unaligned_rescale_edges.py``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eddyline.testing import read_parquet_dir
from support.checkpoints import channel_state_rows
from support.faults import assert_exact_ids, completed_checkpoints

N = 6000
RUN_TIMEOUT_S = 120.0

SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch, completed_checkpoints
    from support.checkpoints import channel_state_rows

    out, chk, n, p, mode = sys.argv[1:6]
    n, p = int(n), int(p)
    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=True),
        batch_size=20,
    )
    # Rebalanced at parallelism 2, forwarded (and chained unless restored
    # with its channel state) at 3.
    a = env.from_sequence(0, n).set_parallelism(3).name("a").uid("a")
    slow = a.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    runner = ed.ProcessRunner(workers=2)
    client = env.execute_async("chain-break", runner=runner, restore_from="latest")
    if mode == "finish":
        client.wait(timeout=120)
        print("finished", flush=True)
        sys.exit(0)
    seen = 0
    while client.status == "running":
        newest = max(completed_checkpoints(chk), default=0)
        if newest > seen:
            seen = newest
            try:
                rows = channel_state_rows(os.path.join(chk, f"chk-{newest}"))
            except Exception:
                continue  # deleted by retention meanwhile
            if any(k[0].startswith("slow") for k in rows):
                print(f"killed after chk-{newest}", flush=True)
                for pid in runner.worker_pids():
                    os.kill(pid, signal.SIGKILL)
                os.kill(os.getpid(), signal.SIGKILL)
    print("ended before a checkpoint with channel state of 'slow'", flush=True)
    sys.exit(3)
    """
)


def _run(script: Path, tmp: Path, p: int, mode: str) -> str:
    command = [sys.executable, str(script), str(tmp / "out"), str(tmp / "chk"), str(N), str(p)]
    proc = subprocess.run([*command, mode], capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    expected = -9 if mode == "kill" else 0
    assert proc.returncode == expected, (proc.returncode, proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_process_runner_restores_channel_state_of_an_operator_it_would_chain(
    tmp_path: Path,
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    killed = _run(script, tmp_path, 2, "kill")
    chk = tmp_path / "chk"
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    rows = channel_state_rows(chk / f"chk-{newest}")
    assert sum(n for k, n in rows.items() if k[0].startswith("slow")) > 0, rows
    assert "finished" in _run(script, tmp_path, 3, "finish")
    table = read_parquet_dir(tmp_path / "out")
    assert_exact_ids(table["value"].to_pylist(), range(N), "ParquetSink")
