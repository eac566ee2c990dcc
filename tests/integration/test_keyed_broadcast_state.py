"""Broadcast state on a keyed stream (API.md "Keyed state and timers":
``keyed.connect(rules.broadcast()).process(fn)`` "adds keyed state and timers").

The function counts each key's rows in a ValueState, reads the key's rule
(a factor) from the broadcast state and registers an event-time timer past
the last row; the timer reports the key's count and rule once event time
ends. Against a plain-Python reference: the counts a key emits are exactly
1..c (c rows of that key) whatever the interleaving, a rule seen is always
the key's own, and every key's timer fires once with the full count and its
rule, also across an injected failure, SIGKILL + restore, and a savepoint
restored at parallelism 1 and 3 (where only the restored broadcast state
knows the rules: the rules source had finished).
"""

from __future__ import annotations

import os
import pickle
import random
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import FailOnce, SleepPerBatch, kill_after_checkpoints, wait_until

KEYS = 11
RULES = [{"k": k, "factor": k + 1} for k in range(KEYS)]
SCHEMA = pa.schema(
    [("k", pa.int64()), ("value", pa.int64()), ("n", pa.int64()), ("factor", pa.int64())]
)


class CountWithRules(ed.KeyedBroadcastProcessFunction):
    """Counts rows per key, reads the key's rule, reports both when event time ends."""

    def __init__(self, end: int) -> None:
        self.end = end

    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> None:
        ctx.broadcast_state.put(row["k"], row["factor"])

    def process_element(
        self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext
    ) -> list[dict[str, Any]]:
        count = ctx.get_state("count")
        n = (count.value() or 0) + 1
        count.update(n)
        ctx.timer_service.register_event_time_timer(self.end)
        factor = ctx.broadcast_state.get(ctx.key)
        return [{"k": ctx.key, "value": row["value"], "n": n, "factor": factor}]

    def on_timer(self, timestamp: int, ctx: ed.KeyedBroadcastContext) -> list[dict[str, Any]]:
        return [
            {
                "k": ctx.key,
                "value": -1,
                "n": ctx.get_state("count").value(),
                "factor": ctx.broadcast_state.get(ctx.key),
            }
        ]


def check(rows: list[dict[str, Any]], n: int, *, all_rules_seen: bool = False) -> None:
    """``rows`` against the plain-Python reference of ``n`` values."""
    data = [r for r in rows if r["value"] >= 0]
    assert sorted(r["value"] for r in data) == list(range(n)), "every value exactly once"
    sizes = Counter(v % KEYS for v in range(n))
    per_key: dict[int, list[int]] = {}
    for r in data:
        assert r["k"] == r["value"] % KEYS
        assert r["factor"] in (None, r["k"] + 1), f"a wrong rule for key {r['k']}: {r}"
        if all_rules_seen:
            assert r["factor"] == r["k"] + 1, f"the restored broadcast state lacks {r}"
        per_key.setdefault(r["k"], []).append(r["n"])
    for k, counts in per_key.items():
        assert sorted(counts) == list(range(1, sizes[k] + 1)), f"the count state of key {k}"
    fired = sorted((r["k"], r["n"], r["factor"]) for r in rows if r["value"] == -1)
    assert fired == [(k, sizes[k], k + 1) for k in range(KEYS)], "one timer per key"


def job(
    env: ed.StreamEnvironment, n: int, *, fail: FailOnce | None = None, sleep: float = 0.0
) -> ed.DataStream:
    rules = env.from_collection(RULES).name("rules").uid("rules")
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    if fail is not None:
        numbers = numbers.map_batches(fail).name("fail").uid("fail")
    if sleep:
        numbers = numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow")
    keyed = (
        numbers.assign_timestamps("value")
        .uid("ts")
        .with_columns(k=ed.col("value") % KEYS)
        .select("k", "value")
        .key_by("k")
    )
    out = keyed.connect(rules.broadcast()).process(CountWithRules(n), schema=SCHEMA)
    return out.name("bcast").uid("bcast")


@pytest.mark.parametrize(("parallelism", "workers"), [(1, 0), (2, 0), (2, 2)])
def test_keyed_broadcast_equals_the_reference(parallelism: int, workers: int) -> None:
    n = 3000
    env = ed.StreamEnvironment(parallelism, batch_size=100)
    out = job(env, n).collect()
    env.execute("keyed-broadcast", runner=ed.ProcessRunner(workers=workers) if workers else None)
    check(out.to_pylist(), n)


def test_keyed_broadcast_survives_an_injected_failure_exactly(tmp_path: Path) -> None:
    n = 20_000
    chk, marker = tmp_path / "chk", tmp_path / "marker"
    marker.mkdir()
    # The failing map paces the job (2 ms a batch, 200 batches) so that a checkpoint
    # completes (arming it) before the rows past n // 2 have all gone by.
    fail = FailOnce(SleepPerBatch(0.002), marker, column="value", at=n // 2, armed_by=chk)
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="20ms"),
        restart=ed.RestartStrategy.fixed_delay(2, "10ms"),
        batch_size=100,
    )
    job(env, n, fail=fail).sink_to(ed.ParquetSink(tmp_path / "out")).name("files")
    result = env.execute("keyed-broadcast-fail")
    assert fail.fired and result.restarts == 1
    check(read_parquet_dir(tmp_path / "out").to_pylist(), n)
    # read_state of the final checkpoint: the keyed part, one row per key.
    final = result.checkpoints[-1].path
    state = ed.read_state(final, "bcast").sort_by("k").to_pylist()
    sizes = Counter(v % KEYS for v in range(n))
    assert state == [{"k": k, "count": sizes[k]} for k in range(KEYS)]


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from test_keyed_broadcast_state import job

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
    )
    job(env, n, sleep=0.004).sink_to(ed.ParquetSink(out)).name("files").uid("files")
    env.execute("keyed-broadcast-kill", restore_from="latest")
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(180)
def test_keyed_broadcast_after_sigkill_and_restore_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 40_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(n)]
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.getenv("PYTHONPATH")])))
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(16), timeout=90, max_delay=0.25
    )
    assert "finished" in outputs[-1]
    check(read_parquet_dir(out).to_pylist(), n)


@pytest.mark.parametrize("parallelism", [1, 3])
def test_keyed_and_broadcast_state_restore_at_another_parallelism(
    tmp_path: Path, parallelism: int
) -> None:
    n = 4_000

    def build(p: int, out: Path, sleep: float) -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            p,
            batch_size=50,
            checkpoint=ed.CheckpointConfig(str(tmp_path / f"chk{p}"), interval="50ms"),
        )
        job(env, n, sleep=sleep).sink_to(ed.ParquetSink(str(out))).uid("out")
        return env

    client = build(2, tmp_path / "out1", 0.01).execute_async("first")
    wait_until(
        lambda: (
            client.metrics()["operators"]["numbers"]["records_out"] >= n // 4
            and client.metrics()["operators"]["rules"]["records_out"] >= KEYS
        ),
        timeout=60,
        what="a quarter of the data and every rule",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    first = client.wait(timeout=60)
    assert int(first.metrics["operators"]["numbers"]["records_out"]) < n
    build(parallelism, tmp_path / "out2", 0.0).execute("resumed", restore_from=savepoint)
    before = read_parquet_dir(tmp_path / "out1").to_pylist()
    after = read_parquet_dir(tmp_path / "out2").to_pylist()
    assert not [r for r in before if r["value"] == -1], "no timer fired before the savepoint"
    # The rules source had finished: only the restored broadcast state knows the rules.
    check(before + after, n)
    check_after = [r for r in after if r["value"] >= 0]
    assert check_after and all(r["factor"] == r["k"] + 1 for r in check_after)


class Rescore(ed.KeyedBroadcastProcessFunction):
    """A rule row rescales every key's total (apply_to_keyed_state)."""

    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> Any:
        ctx.broadcast_state.put("factor", row["factor"])

        def rescale(key: Any, kctx: ed.ProcessContext) -> list[dict[str, Any]]:
            total = kctx.get_state("total")
            total.update(total.value() * row["factor"])
            return [{"k": key, "total": total.value()}]

        ctx.apply_to_keyed_state(rescale, state="total")

    def process_element(self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext) -> Any:
        total = ctx.get_state("total", default=0)
        total.update(total.value() + row["v"])
        return [{"k": ctx.key, "total": total.value()}]


def test_apply_to_keyed_state_visits_every_key_with_the_state() -> None:
    from eddyline._exec.broadcast import KeyedBroadcastProcessRunner

    runner = KeyedBroadcastProcessRunner("rescore", ["k"], Rescore(), None)
    runner.open({"subtask_index": 0, "parallelism": 1})
    data = pa.record_batch({"k": [1, 2, 1], "v": [10, 20, 5]})
    groups = pa.array([3, 7, 3], type=pa.uint32())
    first = runner.process(0, data, groups)
    assert first is not None and first.to_pylist()[-1] == {"k": 1, "total": 15}
    rescaled = runner.process(1, pa.record_batch({"factor": [3]}), None)
    assert rescaled is not None
    assert rescaled.to_pylist() == [{"k": 1, "total": 45}, {"k": 2, "total": 60}]
    snapshot = runner.snapshot(1)
    assert isinstance(snapshot, tuple) and sorted(snapshot[1]) == [3, 7]
    restored = KeyedBroadcastProcessRunner("rescore", ["k"], Rescore(), None)
    restored.restore(snapshot)
    restored.open({"subtask_index": 1, "parallelism": 2})
    again = restored.process(0, pa.record_batch({"k": [2], "v": [1]}), pa.array([7], pa.uint32()))
    assert again is not None and again.to_pylist() == [{"k": 2, "total": 61}]
    second = restored.snapshot(2)
    # Only subtask 0 writes the broadcast state; every subtask its watermark entry.
    assert isinstance(second, tuple)
    formats = [pickle.loads(e)[0] for e in second[0]]
    assert formats == ["eddyline.keyed_process.watermark.v1"]
    assert [pickle.loads(e)[0] for e in snapshot[0]] == ["eddyline.broadcast.v1", *formats]
    assert second[1][3] == snapshot[1][3], "key group 3 holds what was restored"


def test_keyed_broadcast_errors_name_the_operator() -> None:
    class WritesBroadcast(ed.BroadcastProcessFunction):
        def process_broadcast_element(self, row: dict[str, Any], ctx: Any) -> None:
            return None

        def process_element(self, row: dict[str, Any], ctx: Any) -> None:
            ctx.broadcast_state.put("x", 1)

    env = ed.StreamEnvironment()
    data, rules = env.from_collection([{"v": 1}]), env.from_collection([{"w": 1}])
    data.key_by("v").connect(rules.broadcast()).process(WritesBroadcast).name("kb").collect()
    with pytest.raises(ed.JobFailedError, match=r"'kb'.*read-only in process_element"):
        env.execute("read-only")

    class TimerWithoutOnTimer(ed.BroadcastProcessFunction):
        def process_broadcast_element(self, row: dict[str, Any], ctx: Any) -> None:
            return None

        def process_element(self, row: dict[str, Any], ctx: Any) -> None:
            ctx.timer_service.register_event_time_timer(5)

    env = ed.StreamEnvironment()
    data, rules = env.from_collection([{"v": 1}]), env.from_collection([{"w": 1}])
    data.key_by("v").connect(rules.broadcast()).process(TimerWithoutOnTimer).name("kt").collect()
    with pytest.raises(ed.JobFailedError, match=r"'kt'.*implements on_timer"):
        env.execute("no-on-timer")

    class KeyedStateOutsideAKey(ed.BroadcastProcessFunction):
        def process_broadcast_element(self, row: dict[str, Any], ctx: Any) -> None:
            ctx.apply_to_keyed_state(lambda key, kctx: None)
            return None

        def process_element(self, row: dict[str, Any], ctx: Any) -> None:
            return None

    env = ed.StreamEnvironment()
    data, rules = env.from_collection([{"v": 1}]), env.from_collection([{"w": 1}])
    data.connect(rules.broadcast()).process(KeyedStateOutsideAKey).name("nk").collect()
    with pytest.raises(ed.JobFailedError, match=r"'nk'.*apply_to_keyed_state\(\) needs a keyed"):
        env.execute("not-keyed")

    with pytest.raises(TypeError, match="needs a keyed stream"):
        data.connect(rules.broadcast()).process(Rescore)
    with pytest.raises(TypeError, match=r"a.connect\(b\).key_by"):
        data.key_by("v").connect(rules)  # type: ignore[arg-type]


class Reminder(ed.KeyedBroadcastProcessFunction):
    """A processing-time timer per key; the timer reads the key's state and the rule."""

    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> None:
        ctx.broadcast_state.put("delay", row["delay"])

    def process_element(self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext) -> None:
        ctx.get_list_state("seen").add(row["v"])
        now = ctx.timer_service.current_processing_time()
        ctx.timer_service.register_processing_time_timer(now + ctx.broadcast_state.get("delay", 0))
        if row["v"] < 0:
            ctx.output(NEGATIVE, {"k": ctx.key, "v": row["v"]})

    def on_timer(self, timestamp: int, ctx: ed.KeyedBroadcastContext) -> list[dict[str, Any]]:
        assert ctx.time_domain == "processing_time"
        return [{"k": ctx.key, "seen": sum(ctx.get_list_state("seen").get()), "at": timestamp}]


NEGATIVE = ed.OutputTag("negative")


def test_processing_time_timers_and_side_outputs_on_a_keyed_broadcast_stream() -> None:
    from eddyline._exec.broadcast import KeyedBroadcastProcessRunner
    from eddyline.testing import ManualClock

    assert KeyedBroadcastProcessRunner.processing_time_for("r", ["k"], Reminder())
    with ManualClock(1_000) as clock:
        runner = KeyedBroadcastProcessRunner("remind", ["k"], Reminder(), None, None, {})
        runner.open({"subtask_index": 0, "parallelism": 1})
        assert runner.process(1, pa.record_batch({"delay": [100]}), None) is None
        data = pa.record_batch({"k": [1, 2, 1], "v": [3, 4, 5]})
        runner.process(0, data, pa.array([1, 2, 1], type=pa.uint32()))
        assert runner.processing_timer() == (1_100, 1_000)
        assert runner.on_processing_time() is None
        clock.advance(100)
        fired = runner.on_processing_time()
        assert fired is not None
        assert sorted(fired.to_pylist(), key=lambda r: r["k"]) == [
            {"k": 1, "seen": 8, "at": 1_100},
            {"k": 2, "seen": 4, "at": 1_100},
        ]

    env = ed.StreamEnvironment(2)
    rules = env.from_collection([{"delay": 1}])
    data = env.from_collection([{"k": k % 3, "v": -k} for k in range(9)])
    out = data.key_by("k").connect(rules.broadcast()).process(Reminder())
    negative = out.side_output(NEGATIVE).collect()
    out.collect()
    env.execute("side-output")
    assert sorted(r["v"] for r in negative.to_pylist()) == [-k for k in range(8, 0, -1)]
