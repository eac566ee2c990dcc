"""Restoring a loop's checkpoint at another parallelism (docs/DESIGN.md
"Unaligned checkpoints", "Loops").

A loop head's state is the feedback in flight (the FLIP-16 log of an aligned
checkpoint, the feedback channel state of an unaligned one); its loop input
channels hold channel state too under ``unaligned=True``. A collatz loop whose
body is slow and whose feedback always spills runs at parallelism 2, SIGKILLs
itself right after the newest completed checkpoint provably holds feedback
state (and, unaligned, loop input channel state: rows in the head's
"(channel state)" entry), and is restored with ``restore_from="latest"`` at
parallelism 3 and 1, and across worker processes 2 -> 3
(``core/src/checkpoint/feedback_rescale.rs`` deals every old head subtask's
feedback to exactly one new one; ``channel_rescale.rs`` the loop input).
The committed ParquetSink rows are exactly the failure-free
output: every number once, with its exact number of collatz steps (a lost
feedback record loses a row, a duplicated one duplicates it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eddyline.testing import read_parquet_dir
from support.checkpoints import channel_state_rows
from support.faults import completed_checkpoints
from support.loops import collatz_steps

N = 1200
RUN_TIMEOUT_S = 90.0

SCRIPT = textwrap.dedent(
    """
    import functools
    import os
    import signal
    import sys

    import eddyline as ed
    from support.faults import completed_checkpoints
    from support.checkpoints import channel_state_rows
    from support.loops import collatz_body

    out, chk, spill, n, p, checkpoints, mode, runner = sys.argv[1:9]
    n, p, unaligned = int(n), int(p), checkpoints == "unaligned"
    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=unaligned),
        batch_size=20,
    )


    collatz = functools.partial(collatz_body, sleep_per_batch=0.001)


    numbers = env.from_sequence(1, n + 1).name("numbers").uid("numbers")
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0)).uid("start")
    looped = start.iterate(collatz, feedback_memory=1, spill_dir=spill)
    looped = looped.name("looped").uid("looped")
    looped.select("value", "steps").sink_to(ed.ParquetSink(out)).name("files").uid("files")
    runner = ed.ProcessRunner(workers=2) if runner == "process" else None
    client = env.execute_async("loop-rescale", restore_from="latest", runner=runner)
    if mode == "finish":
        client.wait(timeout=120)
        print("finished", flush=True)
        sys.exit(0)


    def feedback_held(d):
        # The loop head's state (its name starts with "iterate"): an Arrow
        # schema naming "steps" is written only with a batch.
        from eddyline._core import inspect_checkpoint

        manifest = inspect_checkpoint(d)
        for op in manifest["operators"]:
            if not op["name"].startswith("iterate") or op["name"].endswith("(channel state)"):
                continue
            for sub in op["subtasks"]:
                f = sub.get("file")
                data = open(os.path.join(d, f), "rb").read() if f else b""
                at = data.find(b"EDCHST01") if unaligned else 0
                if at >= 0 and b"steps" in data[at:]:
                    return True
        return False


    def input_held(d):
        return any(k[0].startswith("iterate") for k in channel_state_rows(d))


    seen = 0
    while client.status == "running":
        newest = max(completed_checkpoints(chk), default=0)
        if newest > seen:
            seen = newest
            d = os.path.join(chk, f"chk-{newest}")
            try:
                held = feedback_held(d) and (input_held(d) or not unaligned)
            except Exception:
                continue  # deleted by retention meanwhile
            if held:
                print(f"killed after chk-{newest}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    print("ended before a checkpoint with feedback state", flush=True)
    sys.exit(3)
    """
)


def _run(script: Path, tmp: Path, p: int, checkpoints: str, mode: str, runner: str) -> str:
    command = [sys.executable, str(script), str(tmp / "out"), str(tmp / "chk"), str(tmp / "spill")]
    command += [str(N), str(p), checkpoints, mode, runner]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if mode == "kill":
        assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    else:
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("before", "after", "checkpoints", "runner"),
    [
        (2, 3, "unaligned", "local"),
        (2, 1, "unaligned", "local"),
        (2, 3, "aligned", "local"),
        (2, 1, "aligned", "local"),
        # Worker processes (ProcessRunner(workers=2)): each worker deals out
        # the feedback state of the head subtasks it now runs.
        (2, 3, "unaligned", "process"),
    ],
)
def test_loop_feedback_state_restores_at_another_parallelism_exactly(
    before: int, after: int, checkpoints: str, runner: str, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    killed = _run(script, tmp_path, before, checkpoints, "kill", runner)
    chk = tmp_path / "chk"
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    if checkpoints == "unaligned":
        # Non-vacuity: the loop input channels held rows too.
        rows = channel_state_rows(chk / f"chk-{newest}")
        assert any(k[0].startswith("iterate") for k in rows), rows
    assert "finished" in _run(script, tmp_path, after, checkpoints, "finish", runner)
    table = read_parquet_dir(tmp_path / "out")
    got = sorted(zip(table["value"].to_pylist(), table["steps"].to_pylist(), strict=True))
    assert len(got) == N, f"{len(got)} rows committed for {N} inputs"
    assert got == [(x, collatz_steps(x)) for x in range(1, N + 1)]
