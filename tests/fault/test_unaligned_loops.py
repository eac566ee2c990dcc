"""Unaligned checkpoints in loops (docs/DESIGN.md "Unaligned checkpoints",
"Loops").

With ``unaligned=True`` the barrier overtakes the loop body's channels and, at the
tail, the feedback queue (its in-memory part and its spilled segments); the
feedback the FLIP-16 log would have collected is the feedback channel's state,
stored as the loop head's state and re-emitted first on restore.

* SIGKILL + ``restore_from="latest"``, both modes (aligned: the FLIP-16 log;
  unaligned: feedback channel state), parallelism 1 and 2, a loop whose feedback
  always spills (``feedback_memory=1``) and two nested loops: the committed
  ParquetSink rows are exactly the failure-free output. Under ``unaligned=True``
  some checkpoint really held feedback channel state.
* The same across worker processes (ProcessRunner): the loop input crosses the
  data plane, a worker is SIGKILLed, the job restores exactly.
* Under backpressure (a slow loop body and a growing feedback backlog) unaligned
  loop checkpoints complete far faster than aligned ones.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import (
    SleepPerBatch,
    assert_exact_ids,
    completed_checkpoints,
    kill_after_checkpoints,
    wait_until,
)
from support.loops import collatz_body, collatz_steps, nested_steps

N = 3000
KILLS = 2
RUN_TIMEOUT_S = 90.0

SCRIPT = textwrap.dedent(
    """
    import functools
    import glob
    import os
    import sys

    import eddyline as ed
    from eddyline._core import inspect_checkpoint
    from support.faults import SleepPerBatch
    from support.loops import collatz_body, nested_body

    out, chk, spill = sys.argv[1], sys.argv[2], sys.argv[3]
    n, p, unaligned, shape = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1", sys.argv[7]
    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=unaligned),
        batch_size=50,
    )

    collatz = functools.partial(collatz_body, sleep_per_batch=0.0005)

    nested = functools.partial(nested_body, spill_dir=spill, sleep_per_batch=0.0005)

    numbers = env.from_sequence(1, n + 1).name("numbers").uid("numbers")
    if shape == "collatz":
        start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0))
        looped = start.iterate(collatz, feedback_memory=1, spill_dir=spill)
    else:
        start = numbers.with_columns(outer=ed.col("value") % 7 + 1, steps=ed.lit(0))
        looped = start.select("value", "outer", "steps").iterate(
            nested, feedback_memory=1, spill_dir=spill
        )
    looped = looped.name("looped").uid("looped")
    looped.select("value", "steps").sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("loop-kill", restore_from="latest")
    print("started", flush=True)
    scanned = set()

    def scan():
        # Feedback channel state: the loop head's state in the channel-state format.
        for d in glob.glob(os.path.join(chk, "chk-*")):
            if d in scanned or not os.path.exists(os.path.join(d, "_manifest.json")):
                continue
            scanned.add(d)
            try:
                manifest = inspect_checkpoint(d)
            except Exception:
                continue  # deleted by retention meanwhile
            print(f"checkpoint {manifest['id']} completed", flush=True)
            for op in manifest["operators"]:
                if not op["name"].startswith("iterate"):
                    continue  # not a loop head
                for sub in op["subtasks"]:
                    f = sub.get("file")
                    try:
                        data = open(os.path.join(d, f), "rb").read() if f else b""
                    except OSError:
                        continue
                    at = data.find(b"EDCHST01")
                    # Not empty: an Arrow schema (field names) follows the header.
                    if at >= 0 and b"steps" in data[at:]:
                        print(f"feedback channel state of {op['name']} in {d}", flush=True)

    while True:
        try:
            client.wait(timeout=0.02)
            done = True
        except TimeoutError:
            done = False
        scan()
        if done:
            break
    # Spill files of this run still on disk (a SIGKILLed run leaves its own).
    mine = glob.glob(os.path.join(spill, f"*-{os.getpid()}-*.arrows"))
    print(f"left {len(mine)} spill files", flush=True)
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("shape", "parallelism", "unaligned"),
    [
        ("collatz", 1, True),
        ("collatz", 2, True),
        ("collatz", 2, False),
        ("nested", 1, True),
        ("nested", 2, True),
        ("nested", 1, False),
    ],
)
def test_loop_sigkill_and_restore_latest_is_exact_in_both_modes(
    shape: str, parallelism: int, unaligned: bool, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk, spill = tmp_path / "out", tmp_path / "chk", tmp_path / "spill"
    command = [
        sys.executable,
        str(script),
        str(out),
        str(chk),
        str(spill),
        str(N),
        str(parallelism),
        "1" if unaligned else "0",
        shape,
    ]
    outputs = kill_after_checkpoints(
        command,
        chk,
        kills=KILLS,
        rng=rng,
        timeout=RUN_TIMEOUT_S,
        max_delay=0.3,
        allow_early_end=True,
    )
    assert len(outputs) > 1, "the job was never killed mid-run; make it longer"
    assert "finished" in outputs[-1]
    table = read_parquet_dir(out)
    got = sorted(zip(table["value"].to_pylist(), table["steps"].to_pylist(), strict=True))
    steps = collatz_steps if shape == "collatz" else nested_steps
    expected = [(x, steps(x)) for x in range(1, N + 1)]
    assert len(got) == len(expected), f"{len(got)} rows committed for {N} inputs"
    assert got == expected
    held = [o for o in outputs if re.search(r"^feedback channel state of ", o, re.M)]
    if unaligned:
        # Non-vacuity: the feedback in flight was captured as channel state.
        assert held, outputs
    else:
        assert not held, "aligned checkpoints keep the FLIP-16 log, not channel state"
    # The feedback spilled, and the last run deleted its spill files (also
    # those a checkpoint referred to) when it ended.
    assert spill.exists() and list(spill.iterdir()), "the feedback never spilled"
    assert "left 0 spill files" in outputs[-1], outputs[-1]


def _feedback_state_checkpoints(chk: Path, column: str) -> int:
    """Completed checkpoints whose loop head state is non-empty feedback channel
    state (the channel-state format, then an Arrow schema naming ``column``)."""
    found = 0
    for d in chk.glob("chk-*"):
        with contextlib.suppress(Exception):  # in progress, or deleted by retention
            manifest = inspect_checkpoint(str(d))
            for op in manifest["operators"]:
                if not op["name"].startswith("iterate"):
                    continue
                for sub in op["subtasks"]:
                    data = (d / sub["file"]).read_bytes() if sub.get("file") else b""
                    at = data.find(b"EDCHST01")
                    if at >= 0 and column.encode() in data[at:]:
                        found += 1
                        break
    return found


@pytest.mark.timeout(180)
def test_unaligned_loop_sigkill_of_a_worker_process_restores_exactly(tmp_path: Path) -> None:
    n = 3000
    out, chk = tmp_path / "out", tmp_path / "chk"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", unaligned=True),
        restart=ed.RestartStrategy.fixed_delay(attempts=3, delay="50ms"),
        batch_size=50,
    )

    collatz = functools.partial(collatz_body, sleep_per_batch=0.001)

    # A source at parallelism 1 feeds the loop heads in both workers: the
    # loop input crosses the data plane.
    numbers = env.from_sequence(1, n + 1).set_parallelism(1)
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0))
    looped = start.iterate(collatz, feedback_memory=1, spill_dir=tmp_path / "spill")
    looped.map(lambda r: {"id": r["value"], "steps": r["steps"], "pid": os.getpid()}).sink_to(
        ed.ParquetSink(out)
    )
    runner = ed.ProcessRunner(workers=2)
    client = env.execute_async("unaligned-loop-workers", runner=runner)
    wait_until(
        lambda: (
            (
                _feedback_state_checkpoints(chk, "steps") >= 1
                and len(completed_checkpoints(chk)) >= 2
            )
            or client.status != "running"
        ),
        timeout=60,
        what="2 checkpoints, one with feedback channel state",
    )
    pids = runner.worker_pids()
    assert len(pids) == 2 and client.status == "running", "the job ended before the kill"
    os.kill(pids[1], signal.SIGKILL)
    result = client.wait(timeout=RUN_TIMEOUT_S)
    assert result.restarts >= 1
    table = read_parquet_dir(out)
    assert_exact_ids(table["id"].to_pylist(), range(1, n + 1), "ParquetSink")
    steps = dict(zip(table["id"].to_pylist(), table["steps"].to_pylist(), strict=True))
    assert steps == {x: collatz_steps(x) for x in range(1, n + 1)}
    assert len(set(table["pid"].to_pylist())) >= 3, "both attempts' workers wrote rows"


def _loop_durations(tmp_path: Path, unaligned: bool) -> list[float]:
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(
            tmp_path / f"chk-{unaligned}", interval="100ms", unaligned=unaligned
        ),
        batch_size=4,
    )

    # Every record comes back twice until depth 5: the feedback backlog grows
    # in front of a body that takes 10 ms per batch, so an aligned barrier that
    # went around waits behind all of it; an unaligned one overtakes it.
    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        slow = s.map_batches(SleepPerBatch(0.01))
        twice = slow.union(slow).with_columns(depth=ed.col("depth") + 1)
        return twice.filter(ed.col("depth") < 5), twice.filter(ed.col("depth") >= 5)

    src = env.from_sequence(0, 24).with_columns(depth=ed.lit(0))
    out = src.iterate(body).collect()
    result = env.execute(f"loop-backpressure-{unaligned}")
    assert len(out.to_pylist()) == 24 * 2**5
    return [c.duration_ms / 1000 for c in result.checkpoints if c.kind == "checkpoint"]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@pytest.mark.timeout(180)
def test_unaligned_loop_checkpoints_complete_fast_under_backpressure(tmp_path: Path) -> None:
    aligned = _loop_durations(tmp_path, False)
    unaligned = _loop_durations(tmp_path, True)
    assert len(unaligned) >= 3, unaligned
    # Generous slack: an unaligned barrier waits for about one batch per hop.
    assert _median(unaligned) < 0.6, f"unaligned durations {unaligned}"
    # Aligned barriers wait behind the feedback backlog. (Measured on a debug
    # build: medians ~0.46 s aligned vs ~0.024 s unaligned.)
    assert len(aligned) >= 2, aligned
    assert _median(unaligned) * 3 < _median(aligned), (aligned, unaligned)


def test_unaligned_loop_stop_with_savepoint_then_resume_is_exact(tmp_path: Path) -> None:
    """Savepoints stay aligned with ``unaligned=True``: the loop head keeps the
    FLIP-16 log for them while its checkpoints hold feedback channel state."""
    chk, files = tmp_path / "chk", tmp_path / "files"

    def build() -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(chk, interval="50ms", unaligned=True), batch_size=20
        )

        def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            nxt = s.map_batches(SleepPerBatch(0.003)).with_columns(n=ed.col("n") - 1)
            return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

        src = env.from_sequence(0, 1000).name("numbers").uid("numbers")
        looped = src.with_columns(n=ed.col("value") % 15 + 1).iterate(body, feedback_memory=1)
        looped.uid("looped").sink_to(ed.ParquetSink(files)).uid("files")
        return env

    client = build().execute_async("first")
    wait_until(
        lambda: _feedback_state_checkpoints(chk, "value") >= 1 or client.status != "running",
        timeout=30,
        what="a checkpoint with feedback channel state",
    )
    assert client.status == "running", "the job ended before the savepoint"
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=60)
    assert read_parquet_dir(files).num_rows < 1000, "the job was stopped before it finished"
    build().execute("second", restore_from=savepoint)
    table = read_parquet_dir(files)
    assert sorted(table["value"].to_pylist()) == list(range(1000))
    assert set(table["n"].to_pylist()) == {0}
