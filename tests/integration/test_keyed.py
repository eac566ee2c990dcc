"""Keyed aggregates, reduce and process with state, against plain-Python references."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eddyline as ed
from eddyline.testing import assert_same_rows, last_by_key

MakeEnv = Callable[..., ed.StreamEnvironment]

ROWS = [{"k": i % 7, "j": i % 2, "v": (i * 37) % 101 - 50} for i in range(200)]


def _reference(rows: list[dict[str, Any]], keys: list[str], agg: str, col: str | None) -> dict:
    out: dict[Any, Any] = {}
    for r in rows:
        key = r[keys[0]] if len(keys) == 1 else tuple(r[k] for k in keys)
        if agg == "count":
            out[key] = out.get(key, 0) + 1
            continue
        assert col is not None
        value = r[col]
        if key not in out:
            out[key] = value
        elif agg == "sum":
            out[key] += value
        elif agg == "min":
            out[key] = min(out[key], value)
        else:
            out[key] = max(out[key], value)
    return out


@pytest.mark.parametrize("agg", ["sum", "count", "min", "max"])
def test_keyed_aggregates_final_value_matches_reference(make_env: MakeEnv, agg: str) -> None:
    env = make_env()
    keyed = env.from_collection(ROWS).key_by("k")
    stream = keyed.count() if agg == "count" else getattr(keyed, agg)("v")
    out = stream.collect()
    env.execute()
    column = "count" if agg == "count" else "v"
    assert out.to_arrow().schema.names == ["k", column]
    final = {k: row[column] for k, row in last_by_key(out, "k").items()}
    assert final == _reference(ROWS, ["k"], agg, "v")


def test_keyed_sum_over_two_key_columns(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_collection(ROWS).key_by(["k", "j"]).sum("v").collect()
    env.execute()
    final = {key: row["v"] for key, row in last_by_key(out, ["k", "j"]).items()}
    assert final == _reference(ROWS, ["k", "j"], "sum", "v")


def test_keyed_sum_emits_at_most_one_row_per_key_per_batch(make_env: MakeEnv) -> None:
    env = make_env(batch_size=50)
    out = env.from_collection(ROWS).key_by("k").sum("v").collect()
    env.execute()
    batches = -(-len(ROWS) // 50)
    assert len(out) <= 7 * batches


def test_keyed_reduce_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()

    def add(acc: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
        return {"k": acc["k"], "j": max(acc["j"], row["j"]), "v": acc["v"] + row["v"]}

    out = env.from_collection(ROWS).key_by("k").reduce(add).collect()
    env.execute()
    final = {k: row["v"] for k, row in last_by_key(out, "k").items()}
    assert final == _reference(ROWS, ["k"], "sum", "v")
    assert out.to_arrow().schema.names == ["k", "j", "v"]


def test_keyed_process_with_function_and_state(make_env: MakeEnv) -> None:
    env = make_env()

    def running(row: dict[str, Any], ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        total = (ctx.state.value() or 0) + row["v"]
        ctx.state.update(total)
        seen = ctx.get_state("seen")
        seen.update((seen.value() or 0) + 1)
        return [{"k": ctx.key, "total": total, "seen": seen.value()}]

    out = env.from_collection(ROWS).key_by("k").process(running).collect()
    env.execute()
    final = last_by_key(out, "k")
    sums = _reference(ROWS, ["k"], "sum", "v")
    counts = _reference(ROWS, ["k"], "count", None)
    assert {k: r["total"] for k, r in final.items()} == sums
    assert {k: r["seen"] for k, r in final.items()} == counts
    assert len(out) == len(ROWS)


class Deduplicate(ed.ProcessFunction):
    """Emits each (k, j) once; the first row of a key wins."""

    def open(self, ctx: ed.ProcessContext) -> None:
        self.opened = True

    def process_element(
        self, row: dict[str, Any], ctx: ed.ProcessContext
    ) -> list[dict[str, Any]] | None:
        assert self.opened
        if ctx.state.value():
            return None
        ctx.state.update(True)
        return [{"k": row["k"], "j": row["j"]}]


def test_keyed_process_with_process_function_subclass(make_env: MakeEnv) -> None:
    env = make_env()
    schema = pa.schema([("k", pa.int64()), ("j", pa.int64())])
    out = env.from_collection(ROWS).key_by(["k", "j"]).process(Deduplicate(), schema=schema)
    handle = out.collect()
    env.execute()
    expected = {(r["k"], r["j"]) for r in ROWS}
    assert_same_rows(handle, [{"k": k, "j": j} for k, j in expected])


def test_keyed_state_clear_removes_value(make_env: MakeEnv) -> None:
    env = make_env()

    def pairs(row: dict[str, Any], ctx: ed.ProcessContext) -> list[dict[str, Any]] | None:
        previous = ctx.state.value()
        if previous is None:
            ctx.state.update(row["v"])
            return None
        ctx.state.clear()
        return [{"k": ctx.key, "a": previous, "b": row["v"]}]

    # one source subtask, so that the rows of a key arrive in input order
    source = env.from_collection(ROWS).set_parallelism(1)
    out = source.key_by("k").process(pairs).collect()
    env.execute()
    expected = []
    pending: dict[int, int] = {}
    for r in ROWS:
        if r["k"] in pending:
            expected.append({"k": r["k"], "a": pending.pop(r["k"]), "b": r["v"]})
        else:
            pending[r["k"]] = r["v"]
    assert_same_rows(out, expected)


def test_key_by_missing_column_raises_at_build_time() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(ed.GraphError, match="'nope'"):
        env.from_collection(ROWS).key_by("nope")


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    values=st.lists(
        st.tuples(st.integers(0, 6), st.integers(-1000, 1000)), min_size=0, max_size=120
    ),
    batch_size=st.integers(1, 40),
    agg=st.sampled_from(["sum", "count", "min", "max"]),
)
def test_keyed_aggregates_property(
    parallelism: int, values: list[tuple[int, int]], batch_size: int, agg: str
) -> None:
    rows = [{"k": k, "v": v} for k, v in values]
    env = ed.StreamEnvironment(parallelism, batch_size=batch_size)
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    keyed = env.from_collection(rows, schema=schema).key_by("k")
    out = (keyed.count() if agg == "count" else getattr(keyed, agg)("v")).collect()
    env.execute()
    column = "count" if agg == "count" else "v"
    final = {k: row[column] for k, row in last_by_key(out, "k").items()}
    assert final == _reference(rows, ["k"], agg, "v")
