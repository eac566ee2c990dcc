"""``stream.explode`` / ``F.explode`` in ``select`` / ``with_columns``: the
native flat-map (one row per element, the other columns repeated,
``explode_outer`` keeping null and empty arrays), and exactly-once output
through SIGKILLs and ``restore_from="latest"`` like the other stateless
operators."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, killable_script, run_killed

ROWS: list[dict[str, Any]] = [
    {"id": 0, "xs": [1, 2], "name": "a"},
    {"id": 1, "xs": None, "name": "b"},
    {"id": 2, "xs": [], "name": "c"},
    {"id": 3, "xs": [3, None, 4], "name": "d"},
]
SCHEMA = pa.schema([("id", pa.int64()), ("xs", pa.list_(pa.int64())), ("name", pa.string())])


def _run(build: Any) -> tuple[list[dict[str, Any]], pa.Schema]:
    env = ed.StreamEnvironment(2)
    stream = build(env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA)))
    out = stream.collect()
    env.execute()
    assert stream.schema is not None
    return sorted(out.to_pylist(), key=_row_order), stream.schema


def _row_order(row: dict[str, Any]) -> tuple[Any, ...]:
    """Rows in id order, then by their other values (nulls last)."""
    return tuple((v is None, v) if not isinstance(v, str) else (False, v) for v in row.values())


def _pairs(pairs: list[tuple[int, int | None]]) -> list[tuple[int, int | None]]:
    return sorted(pairs, key=lambda p: (p[0], p[1] is None, p[1] or 0))


INNER = _pairs([(0, 1), (0, 2), (3, 3), (3, None), (3, 4)])
OUTER = _pairs([(0, 1), (0, 2), (1, None), (2, None), (3, 3), (3, None), (3, 4)])


@pytest.mark.parametrize("outer", [False, True])
def test_stream_explode_replaces_the_column_in_place(outer: bool) -> None:
    rows, schema = _run(lambda s: s.explode("xs", outer=outer))
    assert schema.names == ["id", "xs", "name"]
    assert schema.field("xs").type == pa.int64()
    names = {r["id"]: r["name"] for r in ROWS}
    want = [{"id": i, "xs": x, "name": names[i]} for i, x in (OUTER if outer else INNER)]
    assert sorted(rows, key=_row_order) == sorted(want, key=_row_order)


def test_stream_explode_alias_appends_and_takes_generators() -> None:
    rows, schema = _run(lambda s: s.explode(F.explode_outer("xs"), alias="x"))
    assert schema.names == ["id", "xs", "name", "x"]
    assert _pairs([(r["id"], r["x"]) for r in rows]) == OUTER


def test_select_explode_keeps_its_position() -> None:
    rows, schema = _run(
        lambda s: s.select(F.upper("name").alias("u"), F.explode("xs").alias("x"), "id")
    )
    assert schema.names == ["u", "x", "id"]
    assert _pairs([(r["id"], r["x"]) for r in rows]) == INNER
    assert all(r["u"] == ROWS[r["id"]]["name"].upper() for r in rows)


def test_with_columns_explode_is_spark_with_column() -> None:
    rows, schema = _run(lambda s: s.with_columns(x=F.explode(F.array("id", F.col("id") * 10))))
    assert schema.names == ["id", "xs", "name", "x"]
    assert _pairs([(r["id"], r["x"]) for r in rows]) == sorted(
        (i, v) for i in range(4) for v in (i, i * 10)
    )


def test_explode_of_structs_then_field_access() -> None:
    rows, _ = _run(
        lambda s: s.select("id", F.explode(F.array(F.struct("id", "name"))).alias("p")).select(
            "id", F.col("p.name")
        )
    )
    assert rows == [{"id": r["id"], "name": r["name"]} for r in ROWS]


N = 60_000
KILLS = 2

SCRIPT = killable_script(
    """
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.005)).name("slow").uid("slow")
    pairs = slow.with_columns(
        xs=F.when(F.col("value") % 3 == 0, F.array(F.col("value") * 2, F.col("value") * 2 + 1))
        .when(F.col("value") % 3 == 1, F.array(F.col("value") * 2))
    )
    exploded = pairs.explode("xs", outer=True).name("explode").uid("explode")
    exploded.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("killable", restore_from="latest")
    print("started", flush=True)
    result = client.wait()
    print("finished", flush=True)
    """,
    imports=["import eddyline.functions as F"],
)


def _expected(n: int) -> tuple[list[int], int]:
    """The exploded values (``value % 3 == 2`` has a null array: one null
    row with ``outer``) and the number of null rows."""
    values = []
    nulls = 0
    for v in range(n):
        if v % 3 == 0:
            values += [2 * v, 2 * v + 1]
        elif v % 3 == 1:
            values.append(2 * v)
        else:
            nulls += 1
    return values, nulls


@pytest.mark.timeout(120)
def test_explode_sigkill_and_restore_latest_is_exact(seed: int, tmp_path: Path) -> None:
    outputs, out = run_killed(
        SCRIPT, tmp_path, N, kills=KILLS, rng=random.Random(seed), timeout=60.0
    )
    assert len(outputs) == KILLS + 1 and "finished" in outputs[-1]
    table = read_parquet_dir(out)
    values, nulls = _expected(N)
    xs = table["xs"].to_pylist()
    assert_exact_ids([x for x in xs if x is not None], values, "ParquetSink")
    null_ids = [v for v, x in zip(table["value"].to_pylist(), xs, strict=True) if x is None]
    assert_exact_ids(null_ids, [v for v in range(N) if v % 3 == 2], "ParquetSink nulls")
    assert len(null_ids) == nulls
