"""Side outputs of keyed process functions: ``ctx.output(tag, row)`` and
``stream.side_output(tag)``, exact against a reference, from process_element and
on_timer, two tags on their own ports, and exactly once across a failure."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import FailOnce

ODD = ed.OutputTag("odd", schema=pa.schema([("value", pa.int64()), ("k", pa.int64())]))
BIG = ed.OutputTag("big")
DONE = ed.OutputTag("done")


class Route(ed.ProcessFunction):
    """Even values to the main output, odd ones to ODD, big ones also to BIG."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        if row["value"] >= 900:
            ctx.output(BIG, {"value": row["value"], "tag": "big"})
        if row["value"] % 2:
            ctx.output(ODD, {"value": row["value"], "k": ctx.key})
            return None
        return [{"value": row["value"], "k": ctx.key}]


def _routed(env: ed.StreamEnvironment, n: int, fail: FailOnce | None = None) -> ed.DataStream:
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    if fail is not None:
        numbers = numbers.map_batches(fail).name("fail").uid("fail")
    keyed = numbers.with_columns(k=ed.col("value") % 5).key_by("k")
    return keyed.process(Route()).name("route").uid("route")


@pytest.mark.parametrize("parallelism", [1, 2])
def test_rows_go_to_the_main_and_the_side_outputs_exactly(parallelism: int) -> None:
    n = 1000
    env = ed.StreamEnvironment(parallelism, batch_size=64)
    routed = _routed(env, n)
    even, odd, big = (
        routed.collect(),
        routed.side_output(ODD).collect(),
        routed.side_output(BIG).collect(),
    )
    assert routed.side_output(ODD).schema == ODD.schema
    env.execute("side-outputs")
    assert sorted(r["value"] for r in even.to_pylist()) == list(range(0, n, 2))
    assert sorted(r["value"] for r in odd.to_pylist()) == list(range(1, n, 2))
    assert all(r["k"] == r["value"] % 5 for r in odd.to_pylist())
    assert odd.to_arrow().schema == ODD.schema
    assert sorted(r["value"] for r in big.to_pylist()) == list(range(900, n))
    assert {r["tag"] for r in big.to_pylist()} == {"big"}


def test_a_tag_nobody_reads_is_dropped_and_on_timer_can_emit_to_a_side_output() -> None:
    class CountThenReport(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.state.update((ctx.state.value() or 0) + 1)
            ctx.output(BIG, {"unused": 1})
            ctx.timer_service.register_event_time_timer(10**12)

        def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> None:
            ctx.output(DONE, {"k": ctx.key, "count": ctx.state.value()})

    env = ed.StreamEnvironment(2, batch_size=50)
    rows = env.from_sequence(0, 600).with_columns(k=ed.col("value") % 3)
    counted = rows.assign_timestamps("value").key_by("k").process(CountThenReport())
    main, done = counted.collect(), counted.side_output(DONE).collect()
    env.execute("on-timer-side")
    assert main.to_pylist() == []
    assert sorted((r["k"], r["count"]) for r in done.to_pylist()) == [(0, 200), (1, 200), (2, 200)]


def test_bad_side_output_calls_name_the_operator() -> None:
    class NotATag(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.output("odd", row)  # type: ignore[arg-type]

    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 3).key_by("value").process(NotATag()).name("router").collect()
    with pytest.raises(ed.EddylineError, match=r"'router'.*OutputTag"):
        env.execute()
    env = ed.StreamEnvironment(1)
    mapped = env.from_sequence(0, 3).map(lambda r: r).name("plain")
    with pytest.raises(ed.GraphError, match=r"'plain' has no side output 'odd'"):
        mapped.side_output(ODD)


def test_side_outputs_are_exactly_once_across_a_failure(tmp_path: Path) -> None:
    n = 20_000
    chk, marker = tmp_path / "chk", tmp_path / "marker"
    marker.mkdir()
    fail = FailOnce(None, marker, column="value", at=n // 2, armed_by=chk)
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="20ms"),
        restart=ed.RestartStrategy.fixed_delay(2, "10ms"),
        batch_size=100,
    )
    routed = _routed(env, n, fail)
    routed.sink_to(ed.ParquetSink(tmp_path / "even")).name("even")
    routed.side_output(ODD).sink_to(ed.ParquetSink(tmp_path / "odd")).name("odd")
    result = env.execute("side-fail")
    assert fail.fired and result.restarts == 1
    even = sorted(read_parquet_dir(tmp_path / "even")["value"].to_pylist())
    odd = sorted(read_parquet_dir(tmp_path / "odd")["value"].to_pylist())
    assert even == list(range(0, n, 2))
    assert odd == list(range(1, n, 2))
