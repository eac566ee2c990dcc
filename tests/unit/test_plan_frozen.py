"""A frozen plan: stream, side-output and sink handles hold their node's id, so
a name, uid or parallelism given after the downstream was built is the one the
plan explains and the job runs (docs/ARCHITECTURE.md, "The typed plan")."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

ROWS = [{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}]
ODD = ed.OutputTag("odd", pa.schema([("v", pa.int64())]))


class Split(ed.ProcessFunction):
    """Even values to the main output, odd ones to ODD."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        if row["v"] % 2:
            ctx.output(ODD, {"v": row["v"]})
            return None
        return [{"v": row["v"]}]


def _header(plan: str, name: str) -> str:
    """The line of ``plan`` that names operator ``name``."""
    lines = [line for line in plan.splitlines() if f" '{name}'  uid " in line]
    assert len(lines) == 1, plan
    return lines[0].split("] ", 1)[1]


def test_names_and_uids_given_after_the_downstream_are_the_plans() -> None:
    env = ed.StreamEnvironment(2)
    src = env.from_collection(ROWS)
    doubled = src.with_columns(w=ed.col("v") * 2)
    summed = doubled.key_by("k").sum("w")
    out = summed.collect()
    # Every setter comes after the operators reading the node were built.
    src.name("src").uid("src-uid")
    doubled.name("double").set_parallelism(1)
    summed.name("sums").uid("sums-uid")
    out.name("out").uid("out-uid")
    assert env.explain() == "\n".join(
        [
            "eddyline plan: 3 tasks, 4 operators",
            "task 0 (parallelism 2):",
            "  [0] source_arrow 'src'  uid 'src-uid'",
            "      schema: k: string, v: int64",
            "task 1 (parallelism 1):",
            "  [1] with_columns 'double'  uid 'with_columns-1' (generated)",
            "      input: [0] rebalance",
            "      schema: k: string, v: int64, w: int64",
            "task 2 (parallelism 2):",
            "  [2] keyed_agg 'sums'  uid 'sums-uid'",
            "      input: [1] hash(k)",
            "      schema: k: string, w: int64",
            "  [3] sink_collect 'out'  uid 'out-uid'",
            "      input: [2] forward",
        ]
    )
    result = env.execute("late-names")
    assert {"src", "double", "sums", "out"} <= set(result.metrics["operators"])
    assert sorted((r["k"], r["w"]) for r in out.to_pylist()) == [("a", 8), ("b", 4)]
    assert repr(out) == "CollectHandle('out', 2 rows)"


def test_a_side_output_handle_names_the_node_it_shares() -> None:
    env = ed.StreamEnvironment(1)
    routed = env.from_collection(ROWS).key_by("k").process(Split())
    odd = routed.side_output(ODD)
    odd_out = odd.collect()
    even_out = routed.collect()
    # Naming through the side output names the process node both handles read.
    odd.name("split").uid("split-uid")
    assert routed.operator_name == "split"
    assert _header(env.explain(), "split") == "python process 'split'  uid 'split-uid'"
    result = env.execute("side-names")
    assert "split" in result.metrics["operators"]
    assert sorted(r["v"] for r in odd_out.to_pylist()) == [1, 3]
    assert [r["v"] for r in even_out.to_pylist()] == [2]


def test_a_sink_handle_named_after_attach_names_the_sink(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(1)
    sink = env.from_collection(ROWS).sink_to(ed.ParquetSink(str(tmp_path / "out")))
    sink.name("pq").uid("pq-uid")
    assert repr(sink) == "DataStreamSink('pq')"
    assert _header(env.explain(), "pq").endswith("'pq'  uid 'pq-uid'")
    result = env.execute("sink-names")
    assert "pq" in result.metrics["operators"]


def test_a_node_is_frozen_and_the_graph_keeps_its_latest_version() -> None:
    env = ed.StreamEnvironment(1)
    stream = env.from_collection(ROWS)
    before = stream._node
    with pytest.raises(dataclasses.FrozenInstanceError):
        before.name = "x"  # type: ignore[misc]
    stream.name("renamed")
    assert before.name is None and stream._node.name == "renamed"
    assert env._graph.nodes[before.id] is stream._node


def test_a_handle_from_a_failed_loop_cannot_touch_the_node_that_took_its_id() -> None:
    env = ed.StreamEnvironment(1)
    src = env.from_collection(ROWS).name("src")
    escaped: list[Any] = []

    def body(it: ed.DataStream) -> Any:
        escaped.append(it.with_columns(w=ed.col("v") + 1))
        raise ValueError("the loop body fails")

    with pytest.raises(ValueError, match="the loop body fails"):
        src.iterate(body)
    # The failed loop's nodes are gone; the next operators reuse their ids.
    later = src.with_columns(x=ed.col("v") * 3).with_columns(y=ed.col("x") + 1).name("later")
    stale = escaped[0]
    with pytest.raises(ed.GraphError, match="loop") as info:
        stale.name("renamed")
    assert info.value.operator
    assert later.operator_name == "later"
    with pytest.raises(ed.GraphError, match="loop"):
        stale.collect()
    out = later.collect()
    assert "renamed" not in env.explain()
    env.execute("after-a-failed-loop")
    assert sorted(r["y"] for r in out.to_pylist()) == [4, 7, 10]
