"""Built-in sources and the collect sink, against plain-Python references."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows

MakeEnv = Callable[..., ed.StreamEnvironment]

ROWS = [{"id": i, "name": f"n{i % 5}", "score": i * 0.5} for i in range(50)]


def test_from_collection_dicts_one_column_per_key(make_env: MakeEnv) -> None:
    env = make_env()
    stream = env.from_collection(ROWS)
    assert stream.schema is not None and stream.schema.names == ["id", "name", "score"]
    out = stream.collect()
    env.execute()
    assert_same_rows(out, ROWS)


def test_from_collection_scalars_make_column_value(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_collection(list(range(30))).collect()
    env.execute()
    assert out.to_arrow().schema.names == ["value"]
    assert_same_rows(out, [{"value": i} for i in range(30)])


def test_from_collection_with_schema(make_env: MakeEnv) -> None:
    env = make_env()
    schema = pa.schema([("id", pa.int32()), ("name", pa.string())])
    out = env.from_collection([{"id": 1, "name": "a"}], schema=schema).collect()
    env.execute()
    assert out.to_arrow().schema.field("id").type == pa.int32()


def test_from_collection_empty_needs_schema() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(ed.SchemaError, match="schema="):
        env.from_collection([])


def test_from_arrow_table_batch_and_list(make_env: MakeEnv) -> None:
    table = pa.Table.from_pylist(ROWS)
    env = make_env()
    a = env.from_arrow(table).collect()
    b = env.from_arrow(table.to_batches()[0]).collect()
    c = env.from_arrow(table.to_batches(max_chunksize=9)).collect()
    env.execute()
    for handle in (a, b, c):
        assert_same_rows(handle, ROWS)


def test_from_arrow_rejects_mixed_schemas() -> None:
    env = ed.StreamEnvironment()
    with pytest.raises(ed.SchemaError, match="batch 1"):
        env.from_arrow([pa.record_batch({"a": [1]}), pa.record_batch({"b": [1]})])


def test_from_sequence_is_half_open_int64(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_sequence(-5, 40).collect()
    env.execute()
    table = out.to_arrow()
    assert table.schema.field("value").type == pa.int64()
    assert sorted(table.column("value").to_pylist()) == list(range(-5, 40))


def test_from_sequence_empty_range_gives_empty_table(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_sequence(3, 3).collect()
    env.execute()
    table = out.to_arrow()
    assert table.num_rows == 0
    assert out.to_pylist() == []


def test_from_parquet_file_and_directory_skip_hidden_files(
    make_env: MakeEnv, tmp_path: Path
) -> None:
    table = pa.Table.from_pylist(ROWS)
    pq.write_table(table.slice(0, 20), tmp_path / "part-0.parquet")
    pq.write_table(table.slice(20), tmp_path / "part-1.parquet")
    pq.write_table(table.slice(0, 5), tmp_path / "_pending.parquet")
    pq.write_table(table.slice(0, 5), tmp_path / ".hidden.parquet")
    env = make_env()
    whole = env.from_parquet(tmp_path).collect()
    single = env.from_parquet(tmp_path / "part-0.parquet").collect()
    env.execute()
    assert_same_rows(whole, ROWS)
    assert_same_rows(single, ROWS[:20])


def test_from_parquet_missing_path_raises(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        ed.StreamEnvironment().from_parquet(tmp_path / "nope")


@pytest.mark.parametrize("bad", ["notes.txt", "part-1.parquet"], ids=["text", "truncated"])
def test_from_parquet_file_that_is_not_parquet_is_named(tmp_path: Path, bad: str) -> None:
    good = tmp_path / "part-0.parquet"
    pq.write_table(pa.Table.from_pylist(ROWS), good)
    victim = tmp_path / bad
    if bad.endswith(".txt"):
        victim.write_text("these are notes, not a table\n")
    else:
        victim.write_bytes(good.read_bytes()[:-40])
    with pytest.raises(ed.SchemaError) as info:
        ed.StreamEnvironment().from_parquet(tmp_path)
    assert info.value.operator == "from_parquet"
    assert str(info.value).startswith(f"from_parquet(): {str(victim)!r} is not a readable Parquet")
    assert isinstance(info.value.__cause__, pa.ArrowInvalid)


def test_collect_read_before_execute_raises() -> None:
    env = ed.StreamEnvironment()
    out = env.from_collection([1]).collect()
    with pytest.raises(ed.EddylineError, match="execute"):
        out.to_arrow()


def test_collect_empty_result_keeps_schema(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_collection(ROWS).filter(ed.col("id") < 0).collect()
    env.execute()
    table = out.to_arrow()
    assert table.num_rows == 0
    assert table.schema.names == ["id", "name", "score"]


def test_execute_without_sink_raises_graph_error() -> None:
    env = ed.StreamEnvironment()
    env.from_collection([1]).map(lambda r: r)
    with pytest.raises(ed.GraphError, match="no sink"):
        env.execute()
