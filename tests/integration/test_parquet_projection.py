"""``from_parquet(columns=...)`` and projection pushdown: the columns a job does not use
are neither fetched nor decoded.

The proof is a file whose unused column chunk is garbage: reading it fails, and a job that
never reads that column succeeds on it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from support.parquet import corrupt_column

N = 2_000


def _table() -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(N), pa.int64()),
            "text": pa.array([f"row-{i}-" * 4 for i in range(N)]),
            "price": pa.array([i * 3 for i in range(N)], pa.int64()),
        }
    )


def _write(path: Path) -> None:
    pq.write_table(_table(), path, row_group_size=500, compression="none")


@pytest.fixture
def broken_text(tmp_path: Path) -> Path:
    path = tmp_path / "rows.parquet"
    _write(path)
    corrupt_column(path, "text")
    with pytest.raises(Exception):  # noqa: B017 - the premise: the column is unreadable
        pq.read_table(path)
    return path


def test_explicit_columns_read_only_those_in_file_order(broken_text: Path) -> None:
    env = ed.StreamEnvironment(2)
    stream = env.from_parquet(broken_text, columns=["price", "id"])
    assert stream.schema is not None and stream.schema.names == ["id", "price"]
    out = stream.collect()
    env.execute()
    got = out.to_arrow().sort_by("id")
    assert got.to_pydict() == _table().select(["id", "price"]).to_pydict()


def test_filter_then_select_pushes_the_columns_they_use_down(broken_text: Path) -> None:
    env = ed.StreamEnvironment(2)
    rows = env.from_parquet(broken_text)
    assert rows.schema is not None and rows.schema.names == ["id", "text", "price"]
    picked = rows.filter(ed.col("id") % 7 == 0).select((ed.col("price") * 2).alias("double"))
    out = picked.collect()
    env.execute()
    assert sorted(r["double"] for r in out.to_pylist()) == [i * 6 for i in range(0, N, 7)]


def test_a_reader_that_may_use_any_column_reads_them_all(broken_text: Path) -> None:
    """The source also feeds a collect: nothing is pushed down, and the garbage column
    fails the job with an error that names the source."""
    env = ed.StreamEnvironment(1)
    rows = env.from_parquet(broken_text)
    rows.select("id").collect()
    rows.collect()
    with pytest.raises(ed.EddylineError, match="from_parquet"):
        env.execute()


def test_the_compiled_source_reads_the_union_of_its_selects(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    _write(path)
    env = ed.StreamEnvironment(1)
    rows = env.from_parquet(path)
    rows.select("price").collect()
    rows.filter(ed.col("id") > 5).select("price").collect()
    compiled = env._graph.compile([n.id for n in env._graph.nodes], complete=True)
    (source,) = [s for s in compiled.nodes if s.kind == "source_parquet"]
    assert source.op.columns == ["id", "price"]

    env = ed.StreamEnvironment(1)
    rows = env.from_parquet(path)
    rows.map(lambda r: r).collect()
    compiled = env._graph.compile([n.id for n in env._graph.nodes], complete=True)
    (source,) = [s for s in compiled.nodes if s.kind == "source_parquet"]
    assert source.op.columns is None


def test_bad_columns_are_refused_naming_the_source(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    _write(path)
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.SchemaError, match=r"from_parquet.*'nope'"):
        env.from_parquet(path, columns=["id", "nope"])
    with pytest.raises(TypeError, match="list of column names"):
        env.from_parquet(path, columns="id")
    with pytest.raises(ed.GraphError, match="at least one column"):
        env.from_parquet(path, columns=[])
