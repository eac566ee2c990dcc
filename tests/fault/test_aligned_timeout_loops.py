"""``aligned_timeout`` in jobs with loops (docs/DESIGN.md "Aligned
timeout").

A loop checkpoint starts aligned: the loop head snapshots once the barrier is
aligned on its loop input, keeps the FLIP-16 log and announces the barrier
ahead of the queues (into the body, and at the tail in the feedback queue).
When the checkpoint is older than the timeout, each task switches as outside
loops, and the head switches the barrier's trip around the cycle: its log so
far and what is queued before the barrier's marker become the feedback
channel state.

* Under backpressure (a slow body, a growing feedback backlog) with a tiny
  timeout the loop's checkpoints hold channel state (body channels in the
  stats, feedback channel state in the head's state file) and complete about
  as fast as ``unaligned=True`` ones; with a huge timeout they stay aligned
  (no channel state, the FLIP-16 log) and wait behind the backlog.
* SIGKILL + ``restore_from="latest"`` with either timeout, one loop, two
  nested loops and a loop fed by a union, parallelism 1 and 2: the committed
  ParquetSink rows are exactly the failure-free output.
* Across worker processes (ProcessRunner, the loop input crossing the data
  plane): a worker is SIGKILLed after a switched checkpoint; exact output.
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

N = 2000
KILLS = 2
RUN_TIMEOUT_S = 90.0
TINY, HUGE = "1ms", "1h"


def _head_feedback_state(path: str, column: str) -> bool:
    """Whether the loop head state of checkpoint ``path`` is non-empty
    feedback channel state (the channel-state format, then an Arrow schema
    naming ``column``) rather than a FLIP-16 log."""
    with contextlib.suppress(Exception):  # deleted by retention meanwhile
        manifest = inspect_checkpoint(path)
        for op in manifest["operators"]:
            if not op["name"].startswith("iterate"):
                continue
            for sub in op["subtasks"]:
                f = sub.get("file")
                data = (Path(path) / f).read_bytes() if f else b""
                at = data.find(b"EDCHST01")
                if at >= 0 and column.encode() in data[at:]:
                    return True
    return False


def _backpressured_loop(tmp_path: Path, timeout: str | None) -> list[ed.CheckpointStats]:
    name = timeout or "unaligned"
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(
            tmp_path / f"chk-{name}",
            interval="100ms",
            retained=1000,
            unaligned=True,
            aligned_timeout=timeout,
        ),
        batch_size=4,
    )

    # Every record comes back twice until depth 5: the feedback backlog grows
    # in front of a body that takes 10 ms per batch, so a barrier that goes
    # around aligned waits behind all of it.
    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        slow = s.map_batches(SleepPerBatch(0.01))
        twice = slow.union(slow).with_columns(depth=ed.col("depth") + 1)
        return twice.filter(ed.col("depth") < 5), twice.filter(ed.col("depth") >= 5)

    src = env.from_sequence(0, 24).with_columns(depth=ed.lit(0))
    out = src.iterate(body).collect()
    result = env.execute(f"loop-aligned-timeout-{name}")
    assert len(out.to_pylist()) == 24 * 2**5
    return [c for c in result.checkpoints if c.kind == "checkpoint"]


def _channel_bytes(c: ed.CheckpointStats) -> int:
    return sum(op.bytes for uid, op in c.operators.items() if uid.endswith("#channels"))


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@pytest.mark.timeout(240)
def test_loop_checkpoints_switch_to_unaligned_after_a_tiny_timeout_only(
    tmp_path: Path,
) -> None:
    tiny = _backpressured_loop(tmp_path, TINY)
    huge = _backpressured_loop(tmp_path, HUGE)
    unaligned = _backpressured_loop(tmp_path, None)
    assert len(tiny) >= 3 and len(huge) >= 2 and len(unaligned) >= 3, (tiny, huge, unaligned)
    # Tiny timeout: the head switched the trip around the cycle (its state
    # is feedback channel state, not a FLIP-16 log) in most checkpoints (the
    # last ones find the loop nearly empty).
    switched = [c for c in tiny if _head_feedback_state(c.path, "depth")]
    assert len(switched) * 2 >= len(tiny), [(c.id, c.duration_ms) for c in tiny]
    # Huge timeout: aligned throughout (no channel state anywhere).
    assert all(_channel_bytes(c) == 0 for c in huge), [c.operators for c in huge]
    assert not any(_head_feedback_state(c.path, "depth") for c in huge)
    # Switched checkpoints do not wait for the feedback backlog: about as fast
    # as unaligned ones (a debug build on a loaded machine: generous slack),
    # far faster than aligned ones.
    t = _median([c.duration_ms for c in tiny])
    u = _median([c.duration_ms for c in unaligned])
    a = _median([c.duration_ms for c in huge])
    assert t < 600, ("tiny", t, "unaligned", u, "huge", a)
    assert t * 3 < a, ("tiny", t, "unaligned", u, "huge", a)


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
    n, p, timeout, shape = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(
            chk, interval="100ms", retained=3, unaligned=True, aligned_timeout=timeout
        ),
        batch_size=50,
    )

    collatz = functools.partial(collatz_body, sleep_per_batch=0.0005)

    nested = functools.partial(nested_body, spill_dir=spill, sleep_per_batch=0.0005)

    numbers = env.from_sequence(1, n + 1).name("numbers").uid("numbers")
    if shape == "union":
        # Two loop inputs: the head aligns the barrier across its input
        # channels (behind full queues) before the trip around the cycle.
        odd = numbers.filter(ed.col("value") % 2 == 1)
        even = env.from_sequence(1, n + 1).name("more").uid("more")
        start = odd.union(even.filter(ed.col("value") % 2 == 0))
        start = start.with_columns(x=ed.col("value"), steps=ed.lit(0))
        looped = start.iterate(collatz, feedback_memory=1, spill_dir=spill)
    elif shape == "collatz":
        start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0))
        looped = start.iterate(collatz, feedback_memory=1, spill_dir=spill)
    else:
        start = numbers.with_columns(outer=ed.col("value") % 7 + 1, steps=ed.lit(0))
        looped = start.select("value", "outer", "steps").iterate(
            nested, feedback_memory=1, spill_dir=spill
        )
    looped = looped.name("looped").uid("looped")
    looped.select("value", "steps").sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("loop-aligned-timeout-kill", restore_from="latest")
    print("started", flush=True)
    scanned = set()

    def scan():
        for d in glob.glob(os.path.join(chk, "chk-*")):
            if d in scanned or not os.path.exists(os.path.join(d, "_manifest.json")):
                continue
            scanned.add(d)
            try:
                manifest = inspect_checkpoint(d)
            except Exception:
                continue  # deleted by retention meanwhile
            for op in manifest["operators"]:
                if op["uid"].endswith("#channels"):
                    print(f"channel state of {op['uid']} in {d}", flush=True)
                if not op["name"].startswith("iterate"):
                    continue  # not a loop head
                for sub in op["subtasks"]:
                    f = sub.get("file")
                    try:
                        data = open(os.path.join(d, f), "rb").read() if f else b""
                    except OSError:
                        continue
                    at = data.find(b"EDCHST01")
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
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("shape", "parallelism", "timeout"),
    [
        ("collatz", 1, TINY),
        ("collatz", 2, TINY),
        ("collatz", 2, HUGE),
        ("nested", 1, TINY),
        ("nested", 2, TINY),
        ("nested", 1, HUGE),
        ("union", 2, TINY),
    ],
)
def test_loop_with_aligned_timeout_sigkill_and_restore_latest_is_exact(
    shape: str, parallelism: int, timeout: str, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk, spill = tmp_path / "out", tmp_path / "chk", tmp_path / "spill"
    command = [sys.executable, str(script), str(out), str(chk), str(spill)]
    command += [str(N), str(parallelism), timeout, shape]
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
    steps = nested_steps if shape == "nested" else collatz_steps
    expected = [(x, steps(x)) for x in range(1, N + 1)]
    assert len(got) == len(expected), f"{len(got)} rows committed for {N} inputs"
    assert got == expected
    switched = [o for o in outputs if re.search(r"^(feedback )?channel state of ", o, re.M)]
    if timeout == TINY:
        # Non-vacuity: checkpoints switched and held data in flight.
        assert switched, outputs
        assert any(re.search(r"^feedback channel state of ", o, re.M) for o in outputs), outputs
    else:
        assert not switched, "a huge timeout keeps checkpoints aligned"


@pytest.mark.timeout(180)
def test_loop_with_aligned_timeout_sigkill_of_a_worker_process_restores_exactly(
    tmp_path: Path,
) -> None:
    n = 2000
    out, chk = tmp_path / "out", tmp_path / "chk"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(
            chk, interval="100ms", retained=1000, unaligned=True, aligned_timeout=TINY
        ),
        restart=ed.RestartStrategy.fixed_delay(attempts=3, delay="50ms"),
        batch_size=50,
    )
    collatz = functools.partial(collatz_body, sleep_per_batch=0.001)
    # A source at parallelism 1 feeds the loop heads in both workers: the
    # loop input crosses the data plane (announced barriers too).
    numbers = env.from_sequence(1, n + 1).set_parallelism(1)
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0))
    looped = start.iterate(collatz, feedback_memory=1, spill_dir=tmp_path / "spill")
    looped.map(lambda r: {"id": r["value"], "steps": r["steps"], "pid": os.getpid()}).sink_to(
        ed.ParquetSink(out)
    )
    runner = ed.ProcessRunner(workers=2)
    client = env.execute_async("aligned-timeout-loop-workers", runner=runner)

    def switched() -> bool:
        return any(_head_feedback_state(str(d), "steps") for d in chk.glob("chk-*"))

    wait_until(
        lambda: (switched() and len(completed_checkpoints(chk)) >= 2) or client.status != "running",
        timeout=60,
        what="2 checkpoints, one switched to feedback channel state",
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
