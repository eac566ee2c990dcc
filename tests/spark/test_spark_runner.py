"""SparkRunner: the job's workers as Spark barrier tasks of the one local[2] session."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

import eddyline as ed
from eddyline.connectors.spark._filelog import SinkLog
from eddyline.spark import SparkRunner, SparkTableSink
from support.faults import FailOnce, SleepPerBatch

KeyedSumInput = Callable[[int], tuple[Any, dict[int, int]]]


def _final_sums(rows: list[Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in rows:
        out[row["k"]] = max(out.get(row["k"], 0), row["amount"])
    return out


def _assert_exact_table(spark: Any, table: str, expected: dict[int, int]) -> None:
    rows = [r.asDict() for r in spark.table(table).collect()]
    assert _final_sums(rows) == expected
    # Running sums of positive amounts grow strictly: a duplicate commit would repeat a row.
    assert len({(r["k"], r["amount"]) for r in rows}) == len(rows)


def test_keyed_sum_with_spark_runner_equals_numpy_reference(
    spark: Any, tmp_path: Any, keyed_sum_input: KeyedSumInput
) -> None:
    df, expected = keyed_sum_input(20_000)
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms"), batch_size=500
    )
    rows = env.from_spark(df)
    slow = rows.map_batches(SleepPerBatch(0.02), schema=rows.schema)  # a few checkpoints
    sums = slow.select("k", "amount").key_by("k").sum("amount")
    sums.sink_to(SparkTableSink(spark, "sums_spark_runner", path=str(tmp_path / "sums")))
    result = env.execute("spark-runner-sum", runner=SparkRunner(spark, workers=2))

    assert result.restarts == 0
    _assert_exact_table(spark, "sums_spark_runner", expected)
    # Both workers commit every checkpoint: still exactly one log batch per
    # checkpoint, listing the files of both workers' sink subtasks.
    log = SinkLog(str(tmp_path / "sums"))
    batches = [log.new_files(b) for b in range(log.latest() + 1)]
    names = [[os.path.basename(f) for f in files] for files in batches]
    checkpoints = [{n.split("-s")[0] for n in batch} for batch in names]
    assert all(len(c) == 1 for c in checkpoints), names
    assert len(set().union(*checkpoints)) == len(batches) > 1, names
    assert any({n.split("-s")[1][:4] for n in batch} == {"0000", "0001"} for batch in names)


def test_spark_task_killed_once_yields_exact_committed_output(
    spark: Any, tmp_path: Any, keyed_sum_input: KeyedSumInput
) -> None:
    df, expected = keyed_sum_input(20_000)
    chk = tmp_path / "chk"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="100ms"),
        batch_size=500,
    )
    rows = env.from_spark(df)
    # The Spark task running the first subtask to see a batch after a completed
    # checkpoint exits (its Python worker crashes), once over all attempts.
    crash = FailOnce(SleepPerBatch(0.03), tmp_path, column="id", armed_by=chk, exit_code=1)
    slow = rows.map_batches(crash, schema=rows.schema)
    sums = slow.select("k", "amount").key_by("k").sum("amount")
    sums.sink_to(SparkTableSink(spark, "sums_spark_killed", path=str(tmp_path / "sums")))
    started = time.monotonic()
    result = env.execute("spark-runner-kill", runner=SparkRunner(spark, workers=2))

    assert crash.fired, "no Spark task was killed"
    assert crash.fired_info()["armed_after"], "the kill came before any completed checkpoint"
    assert result.restarts >= 1
    _assert_exact_table(spark, "sums_spark_killed", expected)
    assert time.monotonic() - started < 120


def test_spark_runner_rejects_more_workers_than_task_slots(spark: Any) -> None:
    with pytest.raises(ValueError, match=r"workers=3\) needs 3 task slots.*has 2"):
        SparkRunner(spark, workers=3)


def test_spark_runner_rejects_a_non_session(spark: Any) -> None:
    with pytest.raises(TypeError, match="needs a pyspark SparkSession, got SparkContext"):
        SparkRunner(spark.sparkContext, workers=1)


def test_spark_runner_rejects_another_worker_interpreter(spark: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(spark.sparkContext, "pythonExec", "/opt/other/bin/python3")
    with pytest.raises(ValueError, match="set the environment variable PYSPARK_PYTHON"):
        SparkRunner(spark, workers=1)


def test_the_dashboard_serves_the_workers_metrics_aggregated_by_the_driver(
    spark: Any, tmp_path: Any
) -> None:
    import json
    import urllib.request

    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="50ms"), batch_size=500
    )
    numbers = env.from_sequence(0, 20_000).name("numbers")
    numbers.with_columns(k=ed.col("value") % 5).key_by("k").sum("value").name("sums").collect()
    client = env.execute_async("spark-dashboard", runner=SparkRunner(spark, workers=2), dashboard=0)
    assert client._inner.wait(120.0), "the job did not end"
    url = client.dashboard_url
    assert url is not None
    with urllib.request.urlopen(url + "api/v1/jobs", timeout=10) as r:
        jid = json.loads(r.read())["jobs"][0]["id"]
    with urllib.request.urlopen(f"{url}api/v1/jobs/{jid}", timeout=10) as r:
        job = json.loads(r.read())
    own = client.metrics()["operators"]
    for vertex in job["vertices"]:
        m, subs = vertex["metrics"], vertex["subtasks"]
        assert m["read-records"] == own[vertex["name"]]["records_in"]
        assert m["write-records"] == own[vertex["name"]]["records_out"]
        # Both workers' subtasks reached the driver.
        assert len(subs) == 2
        assert sum(s["write-records"] for s in subs) == m["write-records"]
        assert all(s["busyTimeMs"] + s["idleTimeMs"] > 0 for s in subs), vertex["name"]
    by_name = {v["name"]: v["metrics"] for v in job["vertices"]}
    assert by_name["numbers"]["write-records"] == by_name["sums"]["read-records"] == 20_000
    client.wait()
