"""Loops end to end: Collatz, nested loops, loops in sequence, co-loops, termination.

Each job's output is compared with plain Python computing the same thing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import eddyline as ed
from support.loops import collatz_body, collatz_steps


@pytest.mark.parametrize("parallelism", [1, 2])
def test_collatz_every_integer_reaches_one_exactly(parallelism: int) -> None:
    n = 100_000
    env = ed.StreamEnvironment(parallelism, batch_size=4096)
    numbers = env.from_sequence(1, n + 1).with_columns(x=ed.col("value"), steps=ed.lit(0))
    out = numbers.iterate(collatz_body).collect()
    env.execute("collatz")
    table = out.to_arrow()
    got = dict(zip(table["value"].to_pylist(), table["steps"].to_pylist(), strict=True))
    assert table.num_rows == n, "every integer left the loop exactly once"
    assert set(table["x"].to_pylist()) == {1}
    expected = {v: collatz_steps(v) for v in range(1, n + 1)}
    assert got == expected


class Countdown(ed.LoopFunction):
    """Outer loop: ``outer`` rounds per record; each round runs an inner loop of
    ``(id + outer) % 3 + 1`` rounds that add 1 to ``acc`` each."""

    def loop(self, s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        prepared = s.with_columns(inner=(ed.col("id") + ed.col("outer")) % 3 + 1)

        def inner_body(t: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            assert t.scope.level == 2
            stepped = t.with_columns(acc=ed.col("acc") + 1, inner=ed.col("inner") - 1)
            return stepped.filter(ed.col("inner") > 0), stepped.filter(ed.col("inner") == 0)

        after_inner = prepared.iterate(inner_body)
        assert after_inner.scope == s.scope and after_inner.scope.level == 1
        stepped = after_inner.select("id", "outer", "acc").with_columns(outer=ed.col("outer") - 1)
        return stepped.filter(ed.col("outer") > 0), stepped.filter(ed.col("outer") == 0)


def nested_reference(ids: range) -> dict[int, int]:
    out = {}
    for i in ids:
        outer, acc = i % 4 + 1, 0
        while outer > 0:
            acc += (i + outer) % 3 + 1
            outer -= 1
        out[i] = acc
    return out


@pytest.mark.parametrize("parallelism", [1, 3])
def test_nested_loops_match_plain_python(parallelism: int) -> None:
    ids = range(3000)
    env = ed.StreamEnvironment(parallelism, batch_size=128)
    src = (
        env.from_sequence(0, len(ids))
        .with_columns(id=ed.col("value"), outer=ed.col("value") % 4 + 1, acc=ed.lit(0))
        .select("id", "outer", "acc")
    )
    out = src.iterate(Countdown()).collect()
    env.execute("nested")
    rows = out.to_pylist()
    assert len(rows) == len(ids)
    assert {r["id"]: r["acc"] for r in rows} == nested_reference(ids)


def test_loops_one_after_another() -> None:
    env = ed.StreamEnvironment(2, batch_size=64)
    src = env.from_sequence(0, 2000).with_columns(n=ed.col("value") % 5)

    def down(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        nxt = s.with_columns(n=ed.col("n") - 1)
        return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

    def up(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        nxt = s.with_columns(n=ed.col("n") + 1)
        return nxt.filter(ed.col("n") < 3), nxt.filter(ed.col("n") >= 3)

    first = src.with_columns(n=ed.col("n") + 1).iterate(down)
    second = first.iterate(up, priority="adaptive")
    third = second.map(lambda r: {**r, "n": r["n"] * 2}).iterate(down)
    out = third.collect()
    env.execute("sequence")
    rows = out.to_pylist()
    assert sorted(r["value"] for r in rows) == list(range(2000))
    assert {r["n"] for r in rows} == {0}


def test_co_loop_sees_input_and_feedback_apart() -> None:
    env = ed.StreamEnvironment(2, batch_size=32)
    src = env.from_sequence(0, 500)
    feedback_schema = pa.schema([("value", pa.int64()), ("hops", pa.int64())])

    class Hops(ed.CoLoopFunction):
        def loop(self, connected: ed.ConnectedStreams) -> tuple[ed.DataStream, ed.DataStream]:
            merged = connected.map(
                lambda r: {"value": r["value"], "hops": 0},
                lambda r: {"value": r["value"], "hops": r["hops"] + 1},
                schema=feedback_schema,
            )
            return (
                merged.filter(ed.col("hops") < ed.col("value") % 4),
                merged.filter(ed.col("hops") >= ed.col("value") % 4),
            )

    out = src.iterate_with_feedback(Hops(), feedback_schema=feedback_schema).collect()
    env.execute("co-loop")
    rows = out.to_pylist()
    assert sorted((r["value"], r["hops"]) for r in rows) == [(v, v % 4) for v in range(500)]


class SlowOnce:
    """Holds the record with value 7 for a while the first time it passes, so the
    loop looks idle at its head while a record is still inside."""

    def __init__(self, hold: float) -> None:
        self.hold = hold
        self.held = threading.Event()
        self.window_ms: tuple[int, int] | None = None
        """When the record was held: (from, to), wall-clock milliseconds."""

    def __call__(self, row: dict) -> dict:
        if row["value"] == 7 and row["n"] == 1 and not self.held.is_set():
            self.held.set()
            start = time.time_ns() // 1_000_000
            time.sleep(self.hold)  # the record held inside the loop is the thing under test
            self.window_ms = (start, time.time_ns() // 1_000_000)
        return row


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_termination_idle_busy_and_late_feedback(parallelism: int) -> None:
    # idle: an empty input ends the loop at once
    env = ed.StreamEnvironment(parallelism)
    empty = env.from_sequence(0, 0).with_columns(n=ed.lit(1))
    out_empty = empty.iterate(
        lambda s: (s.filter(ed.col("n") > 5), s.filter(ed.col("n") <= 5))
    ).collect()
    env.execute("idle")
    assert out_empty.to_pylist() == []

    # busy, and re-activated by late feedback: one record is held in the body
    # long enough for several termination rounds to come back; the loop must
    # not end before it came back and left.
    env = ed.StreamEnvironment(parallelism, batch_size=16)
    slow = SlowOnce(hold=0.5)
    out = _loop_holding_a_record(env, slow)
    env.execute("late")
    assert slow.held.is_set()
    _assert_every_record_left_after_three_trips(out)


def _loop_holding_a_record(env: ed.StreamEnvironment, slow: SlowOnce) -> ed.CollectHandle:
    """200 records three times round a loop whose body holds one record with ``slow``."""
    src = env.from_sequence(0, 200).with_columns(n=ed.lit(0))

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        nxt = s.with_columns(n=ed.col("n") + 1).map(slow)
        return nxt.filter(ed.col("n") < 3), nxt.filter(ed.col("n") >= 3)

    return src.key_by("value").process(lambda row, ctx: [row]).iterate(body).collect()


def _assert_every_record_left_after_three_trips(out: ed.CollectHandle) -> None:
    rows = out.to_pylist()
    assert sorted(r["value"] for r in rows) == list(range(200))
    assert {r["n"] for r in rows} == {3}


def test_loop_with_aligned_timeout_ends_only_when_its_body_is_empty(tmp_path: Path) -> None:
    # Loop termination has no timeout (DESIGN.md "Loops"): with checkpoints
    # whose aligned timeout (1 ms) passes again and again at the loop head while
    # one record is held in the body, the loop still ends only after that
    # record came back and left.
    config = ed.CheckpointConfig(
        tmp_path / "chk", interval="50ms", unaligned=True, aligned_timeout="1ms"
    )
    env = ed.StreamEnvironment(2, batch_size=16, checkpoint=config)
    slow = SlowOnce(hold=0.5)
    out = _loop_holding_a_record(env, slow)
    result = env.execute("aligned-timeout-loop")
    assert slow.window_ms is not None
    start, end = slow.window_ms
    during = [c.id for c in result.checkpoints if start <= c.trigger_time_ms <= end]
    assert during, ("no checkpoint was triggered while the record was held", slow.window_ms)
    _assert_every_record_left_after_three_trips(out)


def test_loop_output_feeds_windows_after_the_loop() -> None:
    env = ed.StreamEnvironment(2)
    src = env.from_collection([{"k": i % 3, "t": i * 100, "v": i} for i in range(60)])
    timed = src.assign_timestamps("t")

    def twice(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        return s.filter(ed.lit(False)), s.with_columns(v=ed.col("v") * 2)

    looped = timed.iterate(twice)
    sums = looped.key_by("k").window(ed.Tumbling("1s")).sum("v").collect()
    env.execute("loop-then-window")
    got = {(r["k"], r["window_start"]): r["v"] for r in sums.to_pylist()}
    expected: dict[tuple[int, int], int] = {}
    for i in range(60):
        key = (i % 3, (i * 100) // 1000 * 1000)
        expected[key] = expected.get(key, 0) + 2 * i
    assert got == expected


def test_nested_loops_restart_from_a_checkpoint_exactly(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A failure inside the inner loop after a checkpoint: both loops' logs restore."""
    from support.faults import FailOnce, SleepPerBatch

    chk = tmp_path / "chk"
    markers = tmp_path / "markers"
    markers.mkdir()
    ids = range(1500)
    env = ed.StreamEnvironment(
        2,
        batch_size=32,
        checkpoint=ed.CheckpointConfig(chk, interval="20ms"),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"),
    )
    flaky = FailOnce(SleepPerBatch(0.002), markers, column="id", at=0, armed_by=chk)

    class FlakyCountdown(Countdown):
        def loop(self, s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            return super().loop(s.map_batches(flaky))

    src = (
        env.from_sequence(0, len(ids))
        .with_columns(id=ed.col("value"), outer=ed.col("value") % 4 + 1, acc=ed.lit(0))
        .select("id", "outer", "acc")
    )
    out = src.iterate(FlakyCountdown()).collect()
    result = env.execute("nested-restart")
    assert flaky.fired_info() is not None, "the failure fired"
    assert result.restarts == 1
    rows = out.to_pylist()
    assert len(rows) == len(ids)
    assert {r["id"]: r["acc"] for r in rows} == nested_reference(ids)


def test_flat_map_output_is_split_at_batch_size_so_loop_batches_stay_bounded() -> None:
    """A per-record flat_map doubling records in a loop emits batches of at most
    batch_size rows, so batches do not double pass after pass."""
    env = ed.StreamEnvironment(1, batch_size=64)
    seen: list[int] = []

    def sizes(batch: pa.RecordBatch) -> pa.RecordBatch:
        seen.append(batch.num_rows)
        return batch

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        twice = s.flat_map(lambda r: [{**r, "d": r["d"] + 1}, {**r, "d": r["d"] + 1}])
        checked = twice.map_batches(sizes)
        return checked.filter(ed.col("d") < 10), checked.filter(ed.col("d") >= 10)

    src = env.from_sequence(0, 4).with_columns(d=ed.lit(0))
    out = src.iterate(body).key_by("value").count().collect()
    env.execute("bounded-batches")
    final: dict[int, int] = {}
    for row in out.to_pylist():
        final[row["value"]] = max(final.get(row["value"], 0), row["count"])
    assert final == {v: 2**10 for v in range(4)}
    assert max(seen) <= 64
