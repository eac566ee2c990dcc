"""Checkpoints make progress while a slow job runs, also right after a restore.

An aligned barrier waits behind every batch queued in front of it. Channels bound
their queued data by the consumer's measured throughput (FLIP-183's buffer
debloating, ``channel.rs``), so a barrier waits about one checkpoint interval of
work at a hop, not eight whole batches: checkpoints complete at about the interval
while the job runs. Before, a slow operator behind buffered input completed its
first checkpoint only when the job ended.

Loops: a loop head that reads its feedback first leaves the barrier on its input
channel waiting as long as records circulate (FLIP-15 names this stall); the head
now reads its input first while a triggered barrier is on its way, so a job with
nested loops, fresh or restored from ``latest``, checkpoints at about the interval.

The slow functions sleep (they do not burn CPU), so the timing holds on a loaded
machine. A source finishes the batch it is emitting before it injects a barrier, so
with 4,096-row batches a checkpoint takes about a second here (three or four
complete while a 4 s job runs, the first after about 1.3 s); the bounds (two while
the job runs, the first within 2.5 s) leave room for a loaded machine and are far
below what the old engine needed (none before the job ended).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from support.faults import completed_checkpoints, sigkill_when

INTERVAL_S = 0.25
SECONDS_PER_ROW = 50e-6
BATCH = 4096


class SleepPerRow:
    """A ``map_batches`` function that needs ``seconds`` per row (by sleeping)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(self.seconds * batch.num_rows)  # slow operators are the thing under test
        return batch


def slow_keyed(row: dict[str, Any], ctx: Any) -> list[dict[str, Any]]:
    """A keyed process function that needs about 60 us per row."""
    time.sleep(SECONDS_PER_ROW)  # slow operators are the thing under test
    return [row]


def completions(result: ed.JobResult, started: float) -> list[float]:
    """When each checkpoint completed, in seconds since ``started``."""
    return sorted(
        (c.trigger_time_ms + c.duration_ms) / 1000.0 - started for c in result.checkpoints
    )


def assert_progress(result: ed.JobResult, started: float, ended: float, what: str) -> None:
    wall = ended - started
    done = completions(result, started)
    running = [t for t in done if t < wall - 0.5]
    report = f"{what}: job ran {wall:.2f} s, checkpoints completed at {[round(t, 2) for t in done]}"
    assert wall >= 2.5, f"the job must run long enough to prove anything; {report}"
    assert running, f"no checkpoint completed while the job ran; {report}"
    assert running[0] <= 2.5, f"the first checkpoint came too late; {report}"
    assert len(running) >= 2, f"too few checkpoints while the job ran; {report}"


def environment(parallelism: int, tmp_path: Path) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval=f"{int(INTERVAL_S * 1000)}ms"),
        batch_size=BATCH,
    )


def run(env: ed.StreamEnvironment, what: str) -> None:
    started = time.time()
    result = env.execute(what)
    assert_progress(result, started, time.time(), what)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_checkpoints_progress_through_a_union_into_a_slow_map(
    parallelism: int, tmp_path: Path
) -> None:
    env = environment(parallelism, tmp_path)
    half = 40_000 * parallelism
    a, b = env.from_sequence(0, half), env.from_sequence(half, 2 * half)
    out = a.union(b).map_batches(SleepPerRow(SECONDS_PER_ROW)).collect()
    run(env, "union")
    assert sorted(out.to_arrow()["value"].to_pylist()) == list(range(2 * half))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_checkpoints_progress_through_connect_into_a_slow_co_map(
    parallelism: int, tmp_path: Path
) -> None:
    env = environment(parallelism, tmp_path)
    half = 40_000 * parallelism
    a, b = env.from_sequence(0, half), env.from_sequence(half, 2 * half)
    slow = SleepPerRow(SECONDS_PER_ROW)
    out = a.connect(b).map_batches(slow, slow).collect()
    run(env, "connect")
    assert sorted(out.to_arrow()["value"].to_pylist()) == list(range(2 * half))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_checkpoints_progress_through_a_keyed_exchange_into_a_slow_process_function(
    parallelism: int, tmp_path: Path
) -> None:
    env = environment(parallelism, tmp_path)
    n = 40_000 * parallelism
    keyed = env.from_sequence(0, n).with_columns(k=ed.col("value") % 97).key_by("k")
    out = keyed.process(slow_keyed).collect()
    run(env, "keyed")
    assert sorted(out.to_arrow()["value"].to_pylist()) == list(range(n))


@pytest.mark.parametrize("parallelism", [1, 2])
def test_checkpoints_progress_through_a_rebalance_into_a_slow_map(
    parallelism: int, tmp_path: Path
) -> None:
    """``2 * parallelism`` source subtasks feed ``parallelism`` slow map subtasks
    (2-to-1 at p=1, 4-to-2 at p=2)."""
    env = environment(parallelism, tmp_path)
    n = 80_000 * parallelism
    src = env.from_sequence(0, n).set_parallelism(2 * parallelism)
    out = src.map_batches(SleepPerRow(SECONDS_PER_ROW)).set_parallelism(parallelism).collect()
    run(env, "rebalance")
    assert sorted(out.to_arrow()["value"].to_pylist()) == list(range(n))


NESTED = textwrap.dedent(
    """
    import sys
    import time

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        1, checkpoint=ed.CheckpointConfig(chk, interval="200ms", retained=1000), batch_size=100
    )

    class Nested(ed.LoopFunction):
        def loop(self, s):
            prepared = s.with_columns(inner=(ed.col("id") + ed.col("outer")) % 3 + 1)

            def inner_body(t):
                stepped = t.map_batches(SleepPerBatch(0.001)).with_columns(
                    acc=ed.col("acc") + 1, inner=ed.col("inner") - 1
                )
                return stepped.filter(ed.col("inner") > 0), stepped.filter(ed.col("inner") == 0)

            after = prepared.iterate(inner_body).uid("inner")
            stepped = after.select("id", "outer", "acc").with_columns(outer=ed.col("outer") - 1)
            return stepped.filter(ed.col("outer") > 0), stepped.filter(ed.col("outer") == 0)

    src = (
        env.from_sequence(0, 3000)
        .uid("numbers")
        .with_columns(id=ed.col("value"), outer=ed.col("value") % rounds + 1, acc=ed.lit(0))
        .select("id", "outer", "acc")
    )
    src.iterate(Nested()).uid("outer").sink_to(ed.ParquetSink(out)).uid("files")
    started = time.time()
    print("started", flush=True)
    result = env.execute("nested", restore_from="latest")
    ended = time.time()
    done = sorted(
        (c.trigger_time_ms + c.duration_ms) / 1000.0 - started for c in result.checkpoints
    )
    print("wall", ended - started, flush=True)
    print("done", " ".join(str(t) for t in done), flush=True)
    """
)


def nested_reference(n: int, rounds: int) -> dict[int, int]:
    out = {}
    for i in range(n):
        outer, acc = i % rounds + 1, 0
        while outer > 0:
            acc += (i + outer) % 3 + 1
            outer -= 1
        out[i] = acc
    return out


def parse_run(stdout: str) -> tuple[float, list[float]]:
    wall = done = None
    for line in stdout.splitlines():
        if line.startswith("wall "):
            wall = float(line.split()[1])
        if line.startswith("done"):
            done = [float(t) for t in line.split()[1:]]
    assert wall is not None and done is not None, stdout
    return wall, done


@pytest.mark.timeout(240)
def test_nested_loops_checkpoint_at_the_interval_after_a_restore(tmp_path: Path) -> None:
    """SIGKILL a job with two nested loops after a checkpoint, restore
    it from ``latest``: checkpoints complete at about the interval from the start of
    the restored run (before, the first one completed when the job nearly ended)."""
    from eddyline.testing import read_parquet_dir

    rounds = 30
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(rounds)]
    # the kill comes right after the first checkpoint, while the loops are busy
    sigkill_when(
        command,
        lambda: completed_checkpoints(chk),
        timeout=120,
        what="a checkpoint of the first run",
    )
    restored_from = max(completed_checkpoints(chk))
    second = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    wall, done = parse_run(second.stdout)
    running = [t for t in done if t < wall - 0.4]
    report = (
        f"restored from chk-{restored_from}; the run took {wall:.2f} s, checkpoints "
        f"completed at {[round(t, 2) for t in done]}"
    )
    assert wall >= 2.0, f"the restored run must be long enough to prove anything; {report}"
    assert running and running[0] <= 1.5, f"the first checkpoint came too late; {report}"
    assert len(running) >= max(3, int(wall / 0.2 / 4)), f"too few checkpoints; {report}"

    table = read_parquet_dir(out)
    got = dict(zip(table["id"].to_pylist(), table["acc"].to_pylist(), strict=True))
    assert table.num_rows == 3000, "exactly once after the restore"
    assert got == nested_reference(3000, rounds)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_checkpoints_progress_with_default_batches_into_a_parquet_sink(
    parallelism: int, tmp_path: Path
) -> None:
    """The issue's own job: default 8,192-row batches, a union into a slow map and a
    ParquetSink. A whole batch is seconds of the map's work, so only a source that
    cuts its batches to what the map measured (buffer debloating at the source) lets
    a barrier through at about the interval; files appear while the job runs."""
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval=f"{int(INTERVAL_S * 1000)}ms"),
    )
    half = 40_000 * parallelism
    a, b = env.from_sequence(0, half), env.from_sequence(half, 2 * half)
    a.union(b).map_batches(SleepPerRow(SECONDS_PER_ROW)).sink_to(
        ed.ParquetSink(str(tmp_path / "out"))
    )
    run(env, "default-batches")
    from eddyline.testing import read_parquet_dir

    values = read_parquet_dir(tmp_path / "out")["value"].to_pylist()
    assert sorted(values) == list(range(2 * half))
