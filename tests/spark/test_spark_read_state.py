"""``eddyline.spark.read_state``: an operator's keyed state as a Spark DataFrame.

The same rows as ``ed.read_state``; a process function's ``MapState`` becomes a
Spark ``MapType`` and its ``ListState`` an ``ArrayType``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import eddyline as ed
from eddyline.spark import read_state

KEYS = 3


class Collect(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        ctx.get_list_state("seen").add(row["value"])
        # The two source subtasks' rows reach a key in either order: keep the largest.
        largest = ctx.get_map_state("last_by_parity")
        parity = row["value"] % 2
        largest.put(parity, max(row["value"], largest.get(parity, row["value"])))
        return None


def test_spark_read_state_matches_read_state(spark: Any, tmp_path: Path) -> None:
    from pyspark.sql.types import ArrayType, MapType

    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
    rows = env.from_sequence(0, 30).with_columns(k=ed.col("value") % KEYS)
    rows.key_by("k").sum("value").uid("sums").collect()
    rows.key_by("k").process(Collect()).uid("collect").collect()
    final = env.execute("spark-read-state").checkpoints[-1].path

    sums = read_state(spark, final, "sums")
    assert sorted(tuple(r) for r in sums.collect()) == sorted(
        (r["k"], r["value"]) for r in ed.read_state(final, "sums").to_pylist()
    )
    assert sorted(tuple(r) for r in sums.collect()) == [(0, 135), (1, 145), (2, 155)]

    states = read_state(spark, final, "collect")
    assert isinstance(states.schema["last_by_parity"].dataType, MapType)
    assert isinstance(states.schema["seen"].dataType, ArrayType)
    got = {r["k"]: (sorted(r["seen"]), r["last_by_parity"]) for r in states.collect()}
    assert got[1] == (list(range(1, 30, 3)), {0: 28, 1: 25})
    assert got == {
        r["k"]: (sorted(r["seen"]), dict(r["last_by_parity"]))
        for r in ed.read_state(final, "collect").to_pylist()
    }
    only = read_state(spark, final, "collect", state="seen")
    assert only.columns == ["k", "seen"]
