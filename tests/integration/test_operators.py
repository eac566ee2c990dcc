"""Stateless operators against plain-Python references, at parallelism 1, 2 and 4."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows, read_parquet_dir

MakeEnv = Callable[..., ed.StreamEnvironment]

ROWS = [{"id": i, "group": i % 3, "x": float(i) / 4, "tag": f"t{i % 4}"} for i in range(60)]


def _run(env: ed.StreamEnvironment, handle: ed.CollectHandle) -> list[dict[str, Any]]:
    env.execute()
    return handle.to_pylist()


def test_map_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()

    def fn(r: dict[str, Any]) -> dict[str, Any]:
        return {"id": r["id"], "twice": r["id"] * 2}

    out = env.from_collection(ROWS).map(fn).collect()
    assert_same_rows(_run(env, out), [fn(r) for r in ROWS])


def test_map_with_declared_schema_casts_values(make_env: MakeEnv) -> None:
    env = make_env()
    schema = pa.schema([("id", pa.int64()), ("y", pa.float32())])
    stream = env.from_collection(ROWS).map(lambda r: {"id": r["id"], "y": r["id"]}, schema=schema)
    assert stream.schema == schema
    out = stream.collect()
    env.execute()
    assert out.to_arrow().schema == schema


def test_flat_map_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()

    def fn(r: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"id": r["id"], "k": k} for k in range(r["id"] % 3)]

    out = env.from_collection(ROWS).flat_map(fn).collect()
    assert_same_rows(_run(env, out), [o for r in ROWS for o in fn(r)])


def test_flat_map_generators_and_none(make_env: MakeEnv) -> None:
    env = make_env()

    def fn(r: dict[str, Any]) -> Any:
        if r["id"] % 2:
            return None
        return ({"v": r["id"] + k} for k in range(2))

    out = env.from_collection(ROWS).flat_map(fn).collect()
    expected = [{"v": r["id"] + k} for r in ROWS if r["id"] % 2 == 0 for k in range(2)]
    assert_same_rows(_run(env, out), expected)


def test_filter_function_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_collection(ROWS).filter(lambda r: r["group"] == 1).collect()
    result = _run(env, out)
    assert_same_rows(result, [r for r in ROWS if r["group"] == 1])


def test_filter_expression_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    pred = (ed.col("x") > 3) & ~(ed.col("group") == 0)
    out = env.from_collection(ROWS).filter(pred).collect()
    expected = [r for r in ROWS if r["x"] > 3 and r["group"] != 0]
    assert_same_rows(_run(env, out), expected)


def test_fused_chain_of_record_functions(make_env: MakeEnv) -> None:
    env = make_env()
    stream = (
        env.from_collection(ROWS)
        .map(lambda r: {"id": r["id"], "sq": r["id"] ** 2})
        .filter(lambda r: r["sq"] % 2 == 0)
        .flat_map(lambda r: [r, {"id": -r["id"], "sq": r["sq"]}])
        .map(lambda r: {**r, "neg": r["id"] < 0})
    )
    out = stream.collect()
    result = env.execute()
    expected = []
    for r in ROWS:
        sq = r["id"] ** 2
        if sq % 2 == 0:
            for o in ({"id": r["id"], "sq": sq}, {"id": -r["id"], "sq": sq}):
                expected.append({**o, "neg": o["id"] < 0})
    assert_same_rows(out, expected)
    assert "map_1+filter_2+flat_map_3+map_4" in result.metrics["operators"]


def test_fusion_keeps_user_names(make_env: MakeEnv) -> None:
    env = make_env()
    out = (
        env.from_collection(ROWS)
        .map(lambda r: r)
        .name("first")
        .filter(lambda r: True)
        .name("second")
        .collect()
    )
    result = env.execute()
    assert "first+second" in result.metrics["operators"]
    assert len(out) == len(ROWS)


def test_branches_are_not_fused_into_each_other(make_env: MakeEnv) -> None:
    env = make_env()
    base = env.from_collection(ROWS).map(lambda r: {"id": r["id"]})
    left = base.map(lambda r: {"id": r["id"], "side": "l"}).collect()
    right = base.filter(lambda r: r["id"] < 10).collect()
    env.execute()
    assert_same_rows(left, [{"id": r["id"], "side": "l"} for r in ROWS])
    assert_same_rows(right, [{"id": r["id"]} for r in ROWS if r["id"] < 10])


def test_map_batches_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch({"id": batch.column("id"), "y": pc.multiply(batch.column("x"), 2)})

    out = env.from_collection(ROWS).map_batches(fn).collect()
    assert_same_rows(_run(env, out), [{"id": r["id"], "y": r["x"] * 2} for r in ROWS])


def test_map_batches_accepts_tables_and_none(make_env: MakeEnv) -> None:
    env = make_env()

    def fn(batch: pa.RecordBatch) -> pa.Table | None:
        kept = batch.filter(pc.equal(batch.column("group"), 0))
        return pa.Table.from_batches([kept]) if kept.num_rows else None

    out = env.from_collection(ROWS).map_batches(fn).collect()
    assert_same_rows(_run(env, out), [r for r in ROWS if r["group"] == 0])


def test_with_columns_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    stream = env.from_collection(ROWS).with_columns(
        id=ed.col("id") * 10, shifted=ed.col("x") + 1, big=ed.col("id") >= 30
    )
    assert stream.schema is not None
    assert stream.schema.names[:4] == ["id", "group", "x", "tag"]
    out = stream.collect()
    expected = [
        {**r, "id": r["id"] * 10, "shifted": r["x"] + 1, "big": r["id"] >= 30} for r in ROWS
    ]
    assert_same_rows(_run(env, out), expected)


def test_select_names_and_aliases(make_env: MakeEnv) -> None:
    env = make_env()
    stream = env.from_collection(ROWS).select("tag", (ed.col("id") + 1).alias("next"), ed.col("x"))
    assert stream.schema is not None and stream.schema.names == ["tag", "next", "x"]
    out = stream.collect()
    expected = [{"tag": r["tag"], "next": r["id"] + 1, "x": r["x"]} for r in ROWS]
    assert_same_rows(_run(env, out), expected)


def test_select_expression_without_alias_raises() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(TypeError, match="alias"):
        env.from_collection(ROWS).select(ed.col("id") + 1)


def test_union_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    a = env.from_collection(ROWS[:20])
    b = env.from_collection(ROWS[20:45])
    c = env.from_collection(ROWS[45:]).set_parallelism(1)
    out = a.union(b, c).collect()
    assert_same_rows(_run(env, out), ROWS)


def test_a_sequence_united_with_a_collection_collects_to_one_table(make_env: MakeEnv) -> None:
    # The sequence's "value" is not null, a collection's is nullable: the union's is
    # nullable and all its batches carry that schema (they went out with their
    # input's, and the collected table could not be built from the two kinds).
    env = make_env()
    numbers = env.from_sequence(0, 30)
    more = env.from_collection([{"value": 100 + i} for i in range(5)])
    united = numbers.union(more)
    out = united.collect()
    alone = numbers.collect()
    env.execute("union")
    assert not numbers.schema.field("value").nullable
    assert united.schema.field("value").nullable
    table = out.to_arrow()
    assert table.schema == united.schema
    assert sorted(table["value"].to_pylist()) == list(range(30)) + list(range(100, 105))
    assert alone.to_arrow().schema == numbers.schema, "the declared schema is the batches'"


def test_a_union_of_nullable_and_non_null_inputs_writes_one_parquet_table(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(1, batch_size=4)
    strict = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    a = env.from_arrow(pa.table({"id": list(range(10))}, schema=strict))
    b = env.from_collection([{"id": 100 + i} for i in range(10)])
    a.union(b).sink_to(ed.ParquetSink(str(tmp_path / "out")))
    env.execute("parquet union")
    ids = read_parquet_dir(tmp_path / "out")["id"].to_pylist()
    assert sorted(ids) == list(range(10)) + list(range(100, 110))


def test_union_of_different_schemas_raises_schema_error() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(ed.SchemaError, match="same column names and types"):
        env.from_collection([{"a": 1}]).union(env.from_collection([{"b": 1}]))


def test_connect_map_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    words = env.from_collection([{"w": f"w{i}"} for i in range(25)])
    numbers = env.from_sequence(0, 30)
    out = (
        words.connect(numbers)
        .map(
            lambda r: {"text": r["w"], "n": None},
            lambda r: {"text": None, "n": r["value"]},
            schema=pa.schema([("text", pa.string()), ("n", pa.int64())]),
        )
        .collect()
    )
    expected = [{"text": f"w{i}", "n": None} for i in range(25)]
    expected += [{"text": None, "n": i} for i in range(30)]
    assert_same_rows(_run(env, out), expected)


def test_connect_map_batches_matches_reference(make_env: MakeEnv) -> None:
    env = make_env()
    left = env.from_collection([{"a": i} for i in range(20)])
    right = env.from_collection([{"b": i} for i in range(15)])

    def from_left(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch({"v": batch.column("a"), "side": ["l"] * batch.num_rows})

    def from_right(batch: pa.RecordBatch) -> pa.RecordBatch:
        return pa.record_batch({"v": batch.column("b"), "side": ["r"] * batch.num_rows})

    out = left.connect(right).map_batches(from_left, from_right).collect()
    expected = [{"v": i, "side": "l"} for i in range(20)] + [
        {"v": i, "side": "r"} for i in range(15)
    ]
    assert_same_rows(_run(env, out), expected)


def test_parallelism_changes_between_operators(make_env: MakeEnv) -> None:
    env = make_env()
    out = (
        env.from_sequence(0, 100)
        .set_parallelism(1)
        .map(lambda r: {"v": r["value"] + 1})
        .set_parallelism(3)
        .filter(ed.col("v") % 2 == 0)
        .collect()
    )
    assert_same_rows(_run(env, out), [{"v": i + 1} for i in range(100) if (i + 1) % 2 == 0])


def test_schema_tracking_through_operators() -> None:
    env = ed.StreamEnvironment()
    s = env.from_collection(ROWS)
    assert s.map(lambda r: r).schema is None
    assert s.filter(lambda r: True).schema == s.schema
    assert s.key_by("group").reduce(lambda a, b: a).schema == s.schema
    assert s.key_by("group").count().schema is not None
