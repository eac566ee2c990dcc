"""from_spark replays its pinned input after a failure; the table is committed exactly once."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Any

import pytest

import eddyline as ed
from eddyline.connectors.spark.source import PINS_DIR
from eddyline.spark import SparkTableSink
from support.faults import FailOnce, SleepPerBatch, completed_checkpoints

N = 12_000


def _job(
    spark: Any, df: Any, table: str, location: str, chk: str, fail: FailOnce | None
) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(chk, interval="50ms"),
        restart=ed.RestartStrategy.none(),
        batch_size=400,
    )
    rows = env.from_spark(df).uid("orders")
    schema = rows.schema
    rows = rows.map_batches(SleepPerBatch(0.01), schema=schema).uid("slow")
    if fail is not None:
        rows = rows.map_batches(fail, schema=schema).uid("fail")
    sums = rows.select("k", "amount").key_by("k").sum("amount").uid("sum")
    sums.sink_to(SparkTableSink(spark, table, path=location)).uid("table")
    return env


def _rows(spark: Any, table: str) -> Counter[tuple[int, int]]:
    spark.catalog.refreshTable(table)
    return Counter((r.k, r.amount) for r in spark.table(table).collect())


def _final_sums(rows: Counter[tuple[int, int]]) -> dict[int, int]:
    """The last (largest) running sum of each key."""
    final: dict[int, int] = {}
    for k, amount in rows:
        final[k] = max(final.get(k, amount), amount)
    return final


def test_from_spark_replay_after_failure_commits_exactly_once(spark: Any, tmp_path: Any) -> None:
    source = str(tmp_path / "in")
    spark.range(N).selectExpr("id", "id % 11 AS k", "id % 7 + 1 AS amount").repartition(
        2
    ).write.parquet(source)
    # A filter makes the plan more than a file scan: the input is pinned as a snapshot.
    df = spark.read.parquet(source).filter("id >= 0")

    reference_env = _job(spark, df, "replay_ref", str(tmp_path / "ref"), str(tmp_path / "c0"), None)
    reference_env.execute("reference")
    expected = _rows(spark, "replay_ref")
    assert sum(expected.values()) > 11

    chk = str(tmp_path / "chk")
    marker = tmp_path / "marker"
    marker.mkdir()
    fail = FailOnce(None, marker, column="id", at=N // 2, armed_by=chk)
    location = str(tmp_path / "out")
    with pytest.raises(ed.JobFailedError, match="injected failure"):
        _job(spark, df, "replay_out", location, chk, fail).execute("first")
    assert fail.fired, "the injected failure never fired"
    assert fail.fired_info()["armed_after"], "no checkpoint completed before the failure"
    manifest = os.path.join(chk, PINS_DIR, "orders", "pin.json")
    with open(manifest, encoding="utf-8") as fh:
        pinned = json.load(fh)
    assert pinned["snapshot"] and pinned["snapshot"].startswith(chk)
    committed_before = sum(_rows(spark, "replay_out").values())

    # A new environment (as a new process would build it) restores the latest checkpoint.
    restored = _job(spark, df, "replay_out", location, chk, fail)
    result = restored.execute("second", restore_from="latest")
    assert result.checkpoints, "the restored run completed no checkpoint"
    with open(manifest, encoding="utf-8") as fh:
        assert json.load(fh) == pinned, "the restore pinned a new input"
    assert completed_checkpoints(chk)
    assert committed_before < sum(expected.values())
    # The running sums in between depend on how the two snapshot files'
    # batches interleave, which flow control (batches cut by measured
    # throughput) and the restore point change from run to run; exactly once
    # means: no running sum committed twice, and per key the sums climb to
    # exactly the reference's final sum (a lost or replayed row would miss it).
    got = _rows(spark, "replay_out")
    assert max(got.values()) == 1, f"a running sum was committed twice: {got.most_common(3)}"
    assert _final_sums(got) == _final_sums(expected)


def test_from_spark_restore_without_its_pinned_input_is_refused(spark: Any, tmp_path: Any) -> None:
    source = str(tmp_path / "in")
    spark.range(2_000).selectExpr("id", "id % 11 AS k", "id % 7 + 1 AS amount").write.parquet(
        source
    )
    df = spark.read.parquet(source).filter("id >= 0")
    chk, location = str(tmp_path / "chk"), str(tmp_path / "out")
    _job(spark, df, "pins_gone", location, chk, None).execute("first")
    assert completed_checkpoints(chk), "no checkpoint to restore"
    manifest = os.path.join(chk, PINS_DIR, "orders", "pin.json")
    with open(manifest, encoding="utf-8") as fh:
        gone = json.load(fh)["files"][0]
    os.remove(gone)
    with pytest.raises(
        ed.CheckpointError, match=rf"cannot replay its pinned input: '{re.escape(gone)}' \(recorded"
    ):
        _job(spark, df, "pins_gone", location, chk, None).execute("again", restore_from="latest")
    os.remove(manifest)
    with pytest.raises(
        ed.CheckpointError, match=r"has no pinned input recorded at .*restoring from 'latest'"
    ):
        _job(spark, df, "pins_gone", location, chk, None).execute("again", restore_from="latest")
