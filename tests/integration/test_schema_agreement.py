"""One operator has one output schema at every parallelism (DESIGN.md "One schema per operator").

A per-record function's output schema is inferred from its first output. Every
test here gives each source subtask a contiguous range of ``from_sequence`` in
which the function returns one Python type, and another type in the other
subtasks' ranges: subtask 0 returns ints, the others strings (no conversion
fits) or whole floats (either way converts exactly). The first subtask to infer
a schema fixes it for all; the others convert their rows to it, as a single
subtask converts its later batches, or fail with the same ``SchemaError``. With
the default runner and with worker processes (``ed.ProcessRunner``), where the
driver answers which schema was agreed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed

PER_SUBTASK = 60
RUNNERS = ["threads", "processes"]


def _runner(kind: str) -> ed.ProcessRunner | None:
    return ed.ProcessRunner(workers=2) if kind == "processes" else None


def _typed_by_range(other: Callable[[int], Any]) -> Callable[[Any], Any]:
    """``v`` is the value (an int) in subtask 0's range, ``other(value)`` beyond it."""

    def fn(row: Any) -> Any:
        value = row["value"]
        return {"value": value, "v": value if value < PER_SUBTASK else other(value)}

    return fn


def _job(
    parallelism: int, other: Callable[[int], Any], *, rows: int | None = None
) -> tuple[ed.StreamEnvironment, ed.DataStream]:
    """``rows`` values (``PER_SUBTASK`` per subtask), in batches of 10."""
    env = ed.StreamEnvironment(parallelism, batch_size=10)
    n = PER_SUBTASK * parallelism if rows is None else rows
    stream = env.from_sequence(0, n).map(_typed_by_range(other)).name("shape")
    return env, stream


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("parallelism", [2, 3])
def test_subtasks_whose_rows_disagree_fail_with_the_schema_error_of_one(
    parallelism: int, runner: str
) -> None:
    env, stream = _job(parallelism, lambda value: "x")
    stream.collect()
    # Whichever subtask fixed the schema, another one's row does not fit it:
    # the error a single subtask gives for a later batch of the other type.
    with pytest.raises(ed.SchemaError, match="operator 'shape' returned field 'v' of type") as e:
        env.execute("disagree", runner=_runner(runner))
    assert e.value.operator == "shape"
    assert "which does not hold it exactly" in str(e.value)
    # Parallelism 1 gives the same error: ints first, then a string.
    env, stream = _job(1, lambda value: "x", rows=PER_SUBTASK * parallelism)
    stream.collect()
    with pytest.raises(ed.SchemaError, match="operator 'shape' returned field 'v' of type str"):
        env.execute("disagree-p1")


def _values(table: pa.Table) -> list[tuple[int, Any]]:
    return sorted(zip(table["value"].to_pylist(), table["v"].to_pylist(), strict=True))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("parallelism", [2, 3])
def test_rows_that_convert_to_the_agreed_schema_give_one_table(
    parallelism: int, runner: str
) -> None:
    env, stream = _job(parallelism, float)
    out = stream.collect()
    env.execute("convert", runner=_runner(runner))
    table = out.to_arrow()  # one schema: ArrowInvalid if the subtasks' differed
    assert table.schema.field("v").type in (pa.int64(), pa.float64())
    n = PER_SUBTASK * parallelism
    assert _values(table) == [(i, i) for i in range(n)]
    # At parallelism 1 the first batch (ints) fixes int64 and the later whole
    # floats convert to it: the same rows.
    env1, stream1 = _job(1, float, rows=n)
    one = stream1.collect()
    env1.execute("convert-p1")
    assert one.to_arrow().schema.field("v").type == pa.int64()
    assert _values(one.to_arrow()) == _values(table)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_parquet_sink_at_parallelism_2_writes_files_of_one_schema(
    tmp_path: Path, runner: str
) -> None:
    env, stream = _job(2, float)
    stream.sink_to(ed.ParquetSink(str(tmp_path / "out"))).name("files")
    env.execute("parquet", runner=_runner(runner))
    files = sorted(
        p for p in (tmp_path / "out").rglob("*.parquet") if not p.name.startswith(("_", "."))
    )
    schemas = {pq.read_schema(p).remove_metadata() for p in files}
    assert len(files) >= 2 and len(schemas) == 1, schemas
    table = pa.concat_tables(pq.read_table(p) for p in files)
    assert _values(table) == [(i, i) for i in range(2 * PER_SUBTASK)]
