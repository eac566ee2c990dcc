"""Event time: watermarks, keyed tumbling and sliding windows, late records, timers.

Every job reads its batches from one source at parallelism 1 and assigns
timestamps at parallelism 1, so the window operators (at the parametrized
parallelism) see each batch's records followed by the watermark
``max timestamp so far - bound - 1``. The plain-Python reference replays the
same batches and watermarks, so it decides exactly which records are late,
what every window holds and at which watermark every timer fires.
"""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eddyline as ed
from eddyline.testing import assert_same_rows
from support.faults import FailOnce, SleepPerBatch

MIN_WM = -(2**63)
MAX_WM = 2**63 - 1
KEYS = ["a", "b", "c", "d", "e"]


# ---------------------------------------------------------------------------
# input and reference


@dataclass
class EventInput:
    """Batches of ``{id, k, t, v}`` rows and the bound they were generated for."""

    batches: list[list[dict[str, Any]]]
    bound_ms: int

    @property
    def rows(self) -> list[dict[str, Any]]:
        return [row for batch in self.batches for row in batch]

    def arrow(self, time_type: pa.DataType | None = None) -> list[pa.RecordBatch]:
        time_type = pa.int64() if time_type is None else time_type
        schema = pa.schema(
            [("id", pa.int64()), ("k", pa.string()), ("t", time_type), ("v", pa.int64())]
        )
        out = []
        for batch in self.batches:
            columns = {name: [row[name] for row in batch] for name in ("id", "k", "t", "v")}
            if pa.types.is_timestamp(time_type):
                unit = {"s": 1 / 1000, "ms": 1, "us": 1000, "ns": 10**6}[time_type.unit]
                columns["t"] = [int(t * unit) for t in columns["t"]]
            out.append(pa.record_batch(columns, schema=schema))
        return out


def make_input(
    rng: random.Random, n: int, *, bound_ms: int, late_every: int = 40, max_batch: int = 25
) -> EventInput:
    """Event times that mostly advance, jitter within ``bound_ms``, and some late stragglers."""
    rows = []
    clock = 1_000_000
    for i in range(n):
        clock += rng.randint(0, 40)
        t = clock - rng.randint(0, bound_ms)
        if late_every and i % late_every == late_every - 1:
            t = clock - bound_ms - rng.randint(200, 2000)  # likely behind the watermark
        rows.append({"id": i, "k": rng.choice(KEYS), "t": t, "v": rng.randint(-50, 100)})
    batches = []
    i = 0
    while i < n:
        size = rng.randint(1, max_batch)
        batches.append(rows[i : i + size])
        i += size
    return EventInput(batches, bound_ms)


@dataclass
class Reference:
    """What the window operator must do with an :class:`EventInput`."""

    windows: dict[tuple[str, int], list[dict[str, Any]]]
    late: int
    watermarks: list[int]
    """The watermark after each batch (non-decreasing)."""
    late_rows: list[dict[str, Any]]
    """The late records, in arrival order."""


def reference(data: EventInput, size: int, slide: int) -> Reference:
    """Replays batches and watermarks: window contents (arrival order) and the late count."""
    watermark = MIN_WM
    max_ts = MIN_WM
    windows: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    late_rows = []
    watermarks = []
    for batch in data.batches:
        for row in batch:
            t = row["t"]
            last = t - t % slide
            if last + size - 1 <= watermark:
                late_rows.append(row)
                continue
            start = last
            while start > t - size and start + size - 1 > watermark:
                windows[(row["k"], start)].append(row)
                start -= slide
        max_ts = max(max_ts, max(row["t"] for row in batch))
        watermark = max(watermark, max_ts - data.bound_ms - 1)
        watermarks.append(watermark)
    return Reference(dict(windows), len(late_rows), watermarks, late_rows)


def expected_agg(ref: Reference, size: int, agg: str) -> list[dict[str, Any]]:
    out = []
    for (key, start), rows in ref.windows.items():
        values = [row["v"] for row in rows]
        aggregates: dict[str, Callable[[list[int]], int]] = {
            "sum": sum,
            "min": min,
            "max": max,
            "count": len,
        }
        result = aggregates[agg](values)
        name = "count" if agg == "count" else "v"
        out.append({"k": key, "window_start": start, "window_end": start + size, name: result})
    return out


def event_env(
    parallelism: int, data: EventInput, **kwargs: Any
) -> tuple[ed.StreamEnvironment, ed.DataStream]:
    """An environment and the timestamped stream of ``data`` (source and timestamps at p=1)."""
    env = ed.StreamEnvironment(parallelism, batch_size=10_000, **kwargs)
    source = env.from_arrow(data.arrow()).name("events").set_parallelism(1)
    stamped = (
        source.assign_timestamps("t", max_out_of_orderness=data.bound_ms / 1000)
        .name("stamps")
        .set_parallelism(1)
    )
    return env, stamped


ASSIGNERS = [
    pytest.param(ed.Tumbling("1s"), id="tumbling"),
    pytest.param(ed.Sliding("1s", "250ms"), id="sliding"),
]


# ---------------------------------------------------------------------------
# native aggregates


@pytest.mark.parametrize("assigner", ASSIGNERS)
@pytest.mark.parametrize("agg", ["sum", "count", "min", "max"])
def test_window_native_aggregates_match_reference(
    parallelism: int, assigner: ed.windows.WindowAssigner, agg: str
) -> None:
    rng = random.Random(hash((parallelism, agg, assigner.slide_ms)) & 0xFFFF)
    data = make_input(rng, 600, bound_ms=300)
    ref = reference(data, assigner.size_ms, assigner.slide_ms)
    assert ref.late > 0, "the input has no late record: the test would prove nothing"

    env, stamped = event_env(parallelism, data)
    windowed = stamped.key_by("k").window(assigner)
    method = getattr(windowed, agg)
    out = (method("v") if agg != "count" else method()).name("win")
    handle = out.collect()
    result = env.execute(f"window-{agg}")

    assert_same_rows(handle.to_pylist(), expected_agg(ref, assigner.size_ms, agg))
    assert result.metrics["operators"]["win"]["late_records"] == ref.late


def test_window_timestamp_column_keeps_its_type() -> None:
    data = make_input(random.Random(7), 200, bound_ms=100, late_every=0)
    size = 500
    ref = reference(data, size, size)
    env = ed.StreamEnvironment(2, batch_size=10_000)
    stamped = (
        env.from_arrow(data.arrow(pa.timestamp("us")))
        .set_parallelism(1)
        .assign_timestamps("t", max_out_of_orderness="100ms")
        .set_parallelism(1)
    )
    handle = stamped.key_by("k").window(ed.Tumbling("500ms")).sum("v").collect()
    env.execute("window-timestamps")
    table = handle.to_arrow()
    assert table.schema.field("window_start").type == pa.timestamp("us")
    assert table.schema.field("window_end").type == pa.timestamp("us")
    as_ms = table.cast(
        pa.schema(
            [(f.name, pa.int64()) if pa.types.is_timestamp(f.type) else f for f in table.schema]
        )
    ).to_pylist()
    got = [
        {
            **row,
            "window_start": row["window_start"] // 1000,
            "window_end": row["window_end"] // 1000,
        }
        for row in as_ms
    ]
    assert_same_rows(got, expected_agg(ref, size, "sum"))


# ---------------------------------------------------------------------------
# Python window functions


def add_v(acc: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    return {**acc, "v": acc["v"] + row["v"], "id": max(acc["id"], row["id"])}


def summarize(key: str, window: ed.TimeWindow, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    assert all(window.start <= row["t"] < window.end for row in rows)
    return [
        {"n": len(rows), "total": sum(r["v"] for r in rows), "first": min(r["id"] for r in rows)}
    ]


def expected_reduce(ref: Reference, size: int) -> list[dict[str, Any]]:
    out = []
    for (key, start), rows in ref.windows.items():
        acc = dict(rows[0])
        for row in rows[1:]:
            acc = add_v(acc, row)
        out.append(
            {
                "k": key,
                "window_start": start,
                "window_end": start + size,
                "id": acc["id"],
                "t": acc["t"],
                "v": acc["v"],
            }
        )
    return out


def expected_apply(ref: Reference, size: int) -> list[dict[str, Any]]:
    return [
        {
            "k": key,
            "window_start": start,
            "window_end": start + size,
            "n": len(rows),
            "total": sum(r["v"] for r in rows),
            "first": min(r["id"] for r in rows),
        }
        for (key, start), rows in ref.windows.items()
    ]


@pytest.mark.parametrize("assigner", ASSIGNERS)
@pytest.mark.parametrize("kind", ["reduce", "apply"])
def test_window_python_functions_match_reference(
    parallelism: int, assigner: ed.windows.WindowAssigner, kind: str
) -> None:
    rng = random.Random(hash((parallelism, kind, assigner.slide_ms, 1)) & 0xFFFF)
    data = make_input(rng, 500, bound_ms=250)
    ref = reference(data, assigner.size_ms, assigner.slide_ms)
    assert ref.late > 0

    env, stamped = event_env(parallelism, data)
    windowed = stamped.key_by("k").window(assigner)
    out = (windowed.reduce(add_v) if kind == "reduce" else windowed.apply(summarize)).name("win")
    handle = out.collect()
    result = env.execute(f"window-{kind}")

    expected = (expected_reduce if kind == "reduce" else expected_apply)(ref, assigner.size_ms)
    assert_same_rows(handle.to_pylist(), expected)
    assert result.metrics["operators"]["win"]["late_records"] == ref.late
    if kind == "reduce":
        assert handle.to_arrow().schema.names[:3] == ["k", "window_start", "window_end"]


def test_window_python_state_survives_a_failure(tmp_path: Path) -> None:
    """Window contents are keyed state: a failure after a checkpoint changes nothing."""
    rng = random.Random(11)
    data = make_input(rng, 3000, bound_ms=100_000, late_every=0, max_batch=10)
    size = 2000
    ref = reference(data, size, size)
    assert ref.late == 0
    chk = tmp_path / "chk"
    marker = tmp_path / "markers"
    marker.mkdir()
    env = ed.StreamEnvironment(
        2,
        batch_size=10_000,
        checkpoint=ed.CheckpointConfig(str(chk), interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(2, "10ms"),
    )
    stamped = (
        env.from_arrow(data.arrow())
        .set_parallelism(1)
        .map_batches(SleepPerBatch(0.002))
        .set_parallelism(1)
        .assign_timestamps("t", max_out_of_orderness="100s")
        .set_parallelism(1)
    )
    fail = FailOnce(None, marker, column="id", at=2000, armed_by=chk)
    windowed = stamped.map(fail).key_by("k").window(ed.Tumbling(size / 1000))
    handle = windowed.apply(summarize).collect()
    result = env.execute("window-failure")

    assert fail.fired and fail.fired_info()["armed_after"], (
        "the failure did not fire after a checkpoint"
    )
    assert result.restarts == 1
    assert_same_rows(handle.to_pylist(), expected_apply(ref, size))


# ---------------------------------------------------------------------------
# late records on a side output


LATE = ed.OutputTag("late")


def late_side_input(seed: int) -> EventInput:
    """Small batches with stragglers: many batches hold both late and on-time records."""
    data = make_input(random.Random(seed), 500, bound_ms=200, late_every=7, max_batch=6)
    return data


@pytest.mark.parametrize("assigner", ASSIGNERS)
def test_late_side_output_native_window_has_exactly_the_late_rows(
    parallelism: int, assigner: ed.windows.WindowAssigner
) -> None:
    data = late_side_input(parallelism * 31 + assigner.slide_ms)
    ref = reference(data, assigner.size_ms, assigner.slide_ms)
    late_ids = {row["id"] for row in ref.late_rows}
    mixed = [
        batch for batch in data.batches if 0 < sum(r["id"] in late_ids for r in batch) < len(batch)
    ]
    assert ref.late > 10 and mixed, "the input needs batches with late and on-time records"

    env, stamped = event_env(parallelism, data)
    sums = stamped.key_by("k").window(assigner, late_output=LATE).sum("v").name("win")
    late = sums.side_output(LATE)
    assert late.schema == stamped.schema
    main_handle = sums.collect()
    late_handle = late.collect()
    result = env.execute("late-side-native")

    assert_same_rows(late_handle.to_pylist(), ref.late_rows)
    assert late_handle.to_arrow().schema == data.arrow()[0].schema
    assert result.metrics["operators"]["win"]["late_records"] == ref.late
    assert_same_rows(main_handle.to_pylist(), expected_agg(ref, assigner.size_ms, "sum"))
    # Per key, late records leave in arrival order.
    got_ids = [row["id"] for row in late_handle.to_pylist()]
    for key in KEYS:
        key_ids = [r["id"] for r in late_handle.to_pylist() if r["k"] == key]
        assert key_ids == sorted(key_ids), f"late records of key {key} out of order"
    assert len(got_ids) == len(set(got_ids))

    # The same job without a late output: the same windows, the same count.
    env2, stamped2 = event_env(parallelism, data)
    plain = stamped2.key_by("k").window(assigner).sum("v").name("win").collect()
    plain_result = env2.execute("late-dropped-native")
    assert_same_rows(plain.to_pylist(), main_handle.to_pylist())
    assert plain_result.metrics["operators"]["win"]["late_records"] == ref.late


@pytest.mark.parametrize("kind", ["reduce", "apply"])
def test_late_side_output_python_window_has_exactly_the_late_rows(
    parallelism: int, kind: str
) -> None:
    data = late_side_input(parallelism * 17 + len(kind))
    size = 1000
    ref = reference(data, size, size)
    assert ref.late > 10

    env, stamped = event_env(parallelism, data)
    windowed = stamped.key_by("k").window(ed.Tumbling("1s"), late_output=LATE)
    out = (windowed.reduce(add_v) if kind == "reduce" else windowed.apply(summarize)).name("win")
    main_handle = out.collect()
    # The side output feeds further operators like any stream.
    late_handle = out.side_output(LATE).map(lambda r: {**r, "late": True}).collect()
    result = env.execute(f"late-side-{kind}")

    assert_same_rows(late_handle.to_pylist(), [{**row, "late": True} for row in ref.late_rows])
    assert result.metrics["operators"]["win"]["late_records"] == ref.late
    expected = (expected_reduce if kind == "reduce" else expected_apply)(ref, size)
    assert_same_rows(main_handle.to_pylist(), expected)


@pytest.mark.parametrize("python", [False, True], ids=["native", "python"])
def test_late_side_output_unread_keeps_the_window_output(python: bool) -> None:
    """A late output nobody reads changes nothing, also when the window is chained on."""
    data = late_side_input(5)
    ref = reference(data, 1000, 1000)
    env, stamped = event_env(2, data)
    windowed = stamped.key_by("k").window(ed.Tumbling("1s"), late_output=LATE)
    if python:
        out = windowed.apply(summarize).name("win").map(lambda r: r)
        expected = expected_apply(ref, 1000)
    else:
        out = windowed.sum("v").name("win").with_columns(v=ed.col("v"))
        expected = expected_agg(ref, 1000, "sum")
    handle = out.collect()
    result = env.execute("late-unread")
    assert_same_rows(handle.to_pylist(), expected)
    assert result.metrics["operators"]["win"]["late_records"] == ref.late


def test_late_side_output_errors_name_the_operator() -> None:
    env = ed.StreamEnvironment()
    stamped = env.from_collection([{"k": "a", "t": 5, "v": 1}]).assign_timestamps("t")
    keyed = stamped.key_by("k")
    with pytest.raises(TypeError, match="OutputTag"):
        keyed.window(ed.Tumbling("1s"), late_output="late")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty str"):
        ed.OutputTag("")

    without = keyed.window(ed.Tumbling("1s")).sum("v").name("plain_win")
    with pytest.raises(ed.GraphError, match="operator 'plain_win' has no side output 'late'"):
        without.side_output(LATE)

    with_tag = keyed.window(ed.Tumbling("1s"), late_output=LATE).count().name("win")
    with pytest.raises(ed.GraphError, match=r"operator 'win' has no side output 'other'.*'late'"):
        with_tag.side_output(ed.OutputTag("other"))
    with pytest.raises(TypeError, match=r"operator 'win' needs an ed\.OutputTag"):
        with_tag.side_output("late")  # type: ignore[arg-type]
    late = with_tag.side_output(LATE)
    assert late.schema == stamped.schema
    assert "side_output='late'" in repr(late)
    assert with_tag.side_output(ed.OutputTag("late")).schema == stamped.schema
    with pytest.raises(ed.GraphError, match="operator 'win' has no side output"):
        late.side_output(LATE)
    with pytest.raises(ed.GraphError, match="operator 'after' has no side output 'late'"):
        with_tag.map(lambda r: r).name("after").side_output(LATE)
    py_win = keyed.window(ed.Tumbling("1s")).apply(summarize).name("py_win")
    with pytest.raises(ed.GraphError, match="operator 'py_win' has no side output 'late'"):
        py_win.side_output(LATE)


# ---------------------------------------------------------------------------
# timers


class TimerAfterEach(ed.ProcessFunction):
    """Counts rows per key; each row sets a timer ``delay`` after its event time."""

    def __init__(self, delay: int) -> None:
        self.delay = delay

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        assert ctx.timestamp == row["t"]
        ctx.state.update((ctx.state.value() or 0) + 1)
        ctx.timer_service.register_event_time_timer(row["t"] + self.delay)

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> Iterable[dict[str, Any]]:
        return [
            {
                "k": ctx.key,
                "ts": timestamp,
                "watermark": ctx.current_watermark,
                "seen": ctx.state.value(),
            }
        ]


def expected_timers(data: EventInput, delay: int) -> list[dict[str, Any]]:
    """Each (key, ts) fires once, at the first watermark >= ts (or the maximum at the end)."""
    ref = reference(data, 1, 1)
    timers: dict[tuple[str, int], None] = {}
    seen: dict[str, int] = defaultdict(int)
    fired = []
    for batch, watermark in zip(data.batches, ref.watermarks, strict=True):
        for row in batch:
            seen[row["k"]] += 1
            timers[(row["k"], row["t"] + delay)] = None
        for key, ts in sorted(t for t in timers if t[1] <= watermark):
            del timers[(key, ts)]
            fired.append({"k": key, "ts": ts, "watermark": watermark, "seen": seen[key]})
    fired += [
        {"k": key, "ts": ts, "watermark": MAX_WM, "seen": seen[key]} for key, ts in sorted(timers)
    ]
    return fired


def test_process_timers_fire_at_the_right_watermark(parallelism: int) -> None:
    data = make_input(random.Random(parallelism), 400, bound_ms=200, late_every=0)
    delay = 300
    env, stamped = event_env(parallelism, data)
    handle = stamped.key_by("k").process(TimerAfterEach(delay)).collect()
    env.execute("timers")
    expected = expected_timers(data, delay)
    assert any(row["watermark"] < MAX_WM for row in expected), "no timer fired before the end"
    assert_same_rows(handle.to_pylist(), expected)


class Lifecycle(ed.ProcessFunction):
    """Emits a row from end_input and finish, and from a timer deleted again (never)."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        ctx.timer_service.register_event_time_timer(row["t"] + 10**9)
        ctx.timer_service.delete_event_time_timer(row["t"] + 10**9)

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"event": "timer", "subtask": ctx.subtask_index}]

    def end_input(self, input: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"event": f"end_input {input}", "subtask": ctx.subtask_index}]

    def finish(self, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"event": "finish", "subtask": ctx.subtask_index}]


def test_process_lifecycle_end_input_and_finish_once_per_subtask(parallelism: int) -> None:
    data = make_input(random.Random(3), 100, bound_ms=10, late_every=0)
    env, stamped = event_env(parallelism, data)
    handle = stamped.key_by("k").process(Lifecycle()).collect()
    env.execute("lifecycle")
    expected = [
        {"event": event, "subtask": s}
        for s in range(parallelism)
        for event in ("end_input 0", "finish")
    ]
    assert_same_rows(handle.to_pylist(), expected)


def test_timers_need_on_timer() -> None:
    env = ed.StreamEnvironment(1, restart=ed.RestartStrategy.none())
    stamped = env.from_collection([{"k": "a", "t": 5}]).assign_timestamps("t")

    def plain(row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        ctx.timer_service.register_event_time_timer(10)

    stamped.key_by("k").process(plain).name("plain").collect()
    with pytest.raises(ed.JobFailedError, match="on_timer"):
        env.execute("no-on-timer")


# ---------------------------------------------------------------------------
# graph errors


@pytest.mark.parametrize("python", [False, True], ids=["native", "python"])
def test_window_subtasks_report_their_watermark_while_firing(python: bool) -> None:
    """A window fires by the watermark it receives; its subtasks' metrics
    show that watermark while the job runs (they showed None: only a
    forwarded watermark was recorded)."""
    gate = threading.Event()

    def hold_second_half(batch: pa.RecordBatch) -> pa.RecordBatch:
        if pa.compute.max(batch.column("value")).as_py() >= 10_000:
            gate.wait()
        return batch

    env = ed.StreamEnvironment(1, batch_size=100)
    rows = env.from_sequence(0, 20_000).map_batches(hold_second_half).name("gate")
    timed = rows.with_columns(ts=ed.col("value") * 10, k=ed.col("value") % 4)
    windowed = timed.assign_timestamps("ts").key_by("k").window(ed.Tumbling("1s"))
    if python:
        out = windowed.reduce(lambda a, b: {**a, "value": a["value"] + b["value"]})
    else:
        out = windowed.sum("value")
    out.name("win").collect()
    client = env.execute_async("watermark-metrics")
    try:
        while True:
            subtasks = client.metrics()["operators"]["win"]["subtasks"]
            if all(s["records_out"] > 0 for s in subtasks):
                break
            with pytest.raises(TimeoutError):
                client.wait(timeout=0.05)
        assert client.status == "running"
        # Held before value 10,000 (event time 100 s): windows up to there fired.
        for s in subtasks:
            assert s["watermark"] is not None, subtasks
            assert 1_000 <= s["watermark"] < 100_000, subtasks
    finally:
        gate.set()
    result = client.wait()
    assert [s["watermark"] for s in result.metrics["operators"]["win"]["subtasks"]] == [MAX_WM]


def test_window_without_event_time_is_a_graph_error() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_collection([{"k": "a", "t": 5}]).name("rows")
    with pytest.raises(ed.GraphError, match="assign_timestamps"):
        stream.key_by("k").window(ed.Tumbling("1s"))


def test_assign_timestamps_rejects_bad_columns() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_collection([{"k": "a", "t": 5.0}]).name("rows")
    with pytest.raises(ed.SchemaError, match="'t'"):
        stream.assign_timestamps("t")
    with pytest.raises((ed.GraphError, ed.SchemaError), match="'missing'"):
        stream.assign_timestamps("missing")


def test_window_durations_are_validated() -> None:
    with pytest.raises(ValueError, match="slide"):
        ed.Sliding("1s", "2s")
    with pytest.raises(ValueError, match="positive"):
        ed.Tumbling(0)
    with pytest.raises(ValueError, match="milliseconds"):
        ed.Tumbling("0.5ms")
    assert ed.Sliding(2, "500ms").windows_of(1999) == [
        ed.TimeWindow(0, 2000),
        ed.TimeWindow(500, 2500),
        ed.TimeWindow(1000, 3000),
        ed.TimeWindow(1500, 3500),
    ]


def test_time_column_follows_the_stream_through_maps() -> None:
    env = ed.StreamEnvironment()
    stamped = env.from_collection([{"k": "a", "t": 5}]).assign_timestamps("t")
    mapped = stamped.map(lambda r: r).filter(ed.col("t") > 0)
    assert mapped.time_column == "t"
    windowed = mapped.key_by("k").window(ed.Tumbling("1s")).count()
    assert windowed.time_column is None


# ---------------------------------------------------------------------------
# property


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    events=st.lists(
        st.tuples(st.sampled_from(KEYS[:3]), st.integers(0, 5000), st.integers(-100, 100)),
        min_size=1,
        max_size=120,
    ),
    cuts=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    bound=st.integers(0, 1500),
    size=st.sampled_from([1, 7, 100, 1000]),
    parallelism=st.sampled_from([1, 2, 3]),
)
def test_property_tumbling_sums_match_reference(
    events: list[tuple[str, int, int]],
    cuts: list[int],
    bound: int,
    size: int,
    parallelism: int,
) -> None:
    rows = [{"id": i, "k": k, "t": t, "v": v} for i, (k, t, v) in enumerate(events)]
    batches = []
    i = 0
    for cut in cuts * (len(rows) // max(1, sum(cuts)) + 1):
        if i >= len(rows):
            break
        batches.append(rows[i : i + cut])
        i += cut
    data = EventInput(batches, bound)
    ref = reference(data, size, size)

    env, stamped = event_env(parallelism, data)
    handle = stamped.key_by("k").window(ed.Tumbling(size / 1000)).sum("v").name("win").collect()
    result = env.execute("property")
    assert_same_rows(handle.to_pylist(), expected_agg(ref, size, "sum"))
    assert result.metrics["operators"]["win"]["late_records"] == ref.late
