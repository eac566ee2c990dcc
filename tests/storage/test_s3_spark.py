"""``SparkTableSink`` on ``s3://`` and ``from_spark`` pins with checkpoints on
``s3://``, against moto_server and a local[2] Spark session that has
Hadoop's S3A filesystem (the jars ``.ci/run`` fetches, ``EDDYLINE_TEST_S3A_JARS``).

eddyline writes every object through its storage layer (object_store); Spark
creates and reads the table, and writes the DataFrame snapshot, through S3A.
One Spark session serves the module (shared with tests/spark when both run).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.spark import SparkTableSink
from support.faults import (
    FailOnce,
    SleepPerBatch,
    assert_exact_ids,
    completed_checkpoints,
    sigkill_when,
)
from support.spark_s3a import spark_s3a_test_conf

from .conftest import S3

pytestmark = pytest.mark.spark
pytest.importorskip("pyspark", reason="the Spark S3 tests need pyspark (test extra)")


@pytest.fixture(scope="module")
def spark(s3_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    conf, why = spark_s3a_test_conf()
    if conf is None:
        if os.environ.get("CI"):
            pytest.fail(why)  # in CI a missing install step fails, never skips
        pytest.skip(why)
    from pyspark.sql import SparkSession

    from eddyline.spark import s3a_settings

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    ours = SparkSession.getActiveSession() is None
    root = tmp_path_factory.mktemp("spark-s3")
    builder = SparkSession.builder.master("local[2]").appName("eddyline-s3-tests")
    for key, value in {
        **conf,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.warehouse.dir": str(root / "warehouse"),
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={root}",
    }.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if "hadoop-aws" not in (session.sparkContext.getConf().get("spark.jars") or ""):
        pytest.fail("the running Spark session was started without the S3A jars")
    # The endpoint is known only now: set on the live Hadoop configuration
    # (S3A filesystems are created per bucket, after this).
    hadoop = session.sparkContext._jsc.hadoopConfiguration()
    options = S3(s3_endpoint, "", None).options
    for key, value in s3a_settings(options).items():
        hadoop.set(key.removeprefix("spark.hadoop."), value)
    yield session
    if ours:
        session.stop()


def _ids(spark: Any, location: str) -> list[int]:
    return [r[0] for r in spark.read.parquet(location).select("value").collect()]


def _log_batches(s3: S3, prefix: str) -> list[list[str]]:
    """The files each ``_spark_metadata`` batch lists, by batch id."""
    batches = []
    for key in s3.keys(f"{prefix}/_spark_metadata/"):
        if not key.rsplit("/", 1)[-1].removesuffix(".compact").isdigit():
            continue  # not a batch: the marker that makes Spark read through the log
        body = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        lines = body.decode().splitlines()
        assert lines[0] == "v1", key
        batches.append([json.loads(line)["path"] for line in lines[1:] if line.strip()])
    return batches


def test_table_sink_on_s3_commits_exactly_what_spark_reads(spark: Any, s3: S3) -> None:
    from pyspark.errors import AnalysisException

    location = f"s3://{s3.bucket}/sums"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(f"s3://{s3.bucket}/chk", interval="100ms"),
        batch_size=250,
    )
    schema = pa.schema([("value", pa.int64())])
    # 12 batches of 250 ms per subtask: the rows span many 100 ms checkpoints,
    # and a Spark read of the table (~0.2-1 s) fits mid-run.
    slow = env.from_sequence(0, 6000).map_batches(SleepPerBatch(0.25))
    slow.sink_to(SparkTableSink(spark, "s3_values", path=location, schema=schema))
    # A reader with its own session polls the table's files (through the log) meanwhile.
    seen: list[dict[str, set[str]]] = []
    stop = threading.Event()
    reader = spark.newSession()

    def poll() -> None:
        while not stop.is_set():
            try:
                files = reader.read.schema("value long").parquet(f"s3a://{s3.bucket}/sums")
            except AnalysisException as exc:
                # No object under the location before the first commit.
                if "PATH_NOT_FOUND" not in str(exc):
                    raise
                continue
            seen.append(_by_checkpoint(files.inputFiles()))

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        result = env.execute("s3-table")
    finally:
        stop.set()
        poller.join()
    assert len(result.checkpoints) >= 2

    assert_exact_ids(_ids(spark, f"s3a://{s3.bucket}/sums"), range(6000), "spark.read")
    spark.catalog.refreshTable("s3_values")
    assert_exact_ids([r[0] for r in spark.table("s3_values").collect()], range(6000), "spark.table")
    keys = s3.keys("sums/")
    assert not [k for k in keys if "/_eddyline_staging/" in k], "staging left after commit"
    data = [k for k in keys if "/_spark_metadata/" not in k]
    listed = [p for batch in _log_batches(s3, "sums") for p in batch]
    # Each data object is listed once, by its s3a:// URI; nothing unlisted is left.
    assert sorted(listed) == sorted(f"s3a://{s3.bucket}/{k}" for k in data)
    assert len(set(listed)) == len(listed)
    assert len(_log_batches(s3, "sums")) >= 2, "one log batch per completed checkpoint"
    complete = _by_checkpoint(listed)
    assert any(0 < len(s) < len(complete) for s in seen), (
        f"the reader never observed the table mid-run ({len(seen)} reads)"
    )
    for snapshot in seen:
        for key, names in snapshot.items():
            assert names == complete[key], f"the reader saw part of checkpoint {key}"


def test_new_table_reads_through_its_log_before_the_first_commit(
    spark: Any, s3: S3, tmp_path: Path
) -> None:
    """A committer copies a checkpoint's objects one by one, then creates the
    log batch that lists them. Spark reads a location through the log only if
    ``_spark_metadata`` exists; before the first batch it would list the
    location itself and read the first copied object alone: part of a
    checkpoint. Attaching the sink makes the log exist, so such an object is
    invisible until its batch is published."""
    import pyarrow.parquet as pq

    from eddyline._core import StoreDir

    env = ed.StreamEnvironment(1)
    schema = pa.schema([("value", pa.int64())])
    sink = SparkTableSink(spark, "s3_first_commit", path=f"s3://{s3.bucket}/first", schema=schema)
    env.from_sequence(0, 10).sink_to(sink)
    local = tmp_path / "copied.parquet"
    pq.write_table(pa.table({"value": pa.array([7], pa.int64())}), local)
    # The first object of checkpoint 1, copied to its final name; no batch yet.
    StoreDir(f"s3://{s3.bucket}/first").upload("part-copied-c1-s0000.parquet", str(local))
    assert spark.read.schema("value long").parquet(f"s3a://{s3.bucket}/first").collect() == []
    spark.catalog.refreshTable("s3_first_commit")
    assert spark.table("s3_first_commit").collect() == []
    # The sink still runs on the location, and the log then lists its rows only.
    env.execute("first-commit")
    spark.catalog.refreshTable("s3_first_commit")
    assert_exact_ids([r[0] for r in spark.table("s3_first_commit").collect()], range(10), "table")


def _by_checkpoint(files: list[str]) -> dict[str, set[str]]:
    """File names grouped by their checkpoint (``part-<run>-a<attempt>-c<n>-s...``)."""
    out: dict[str, set[str]] = {}
    for f in files:
        name = f.rsplit("/", 1)[-1]
        out.setdefault(name.split("-s")[0], set()).add(name)
    return out


def test_log_batch_is_created_only_if_absent(spark: Any, s3: S3) -> None:
    """Two committers that both computed batch 0: the second's conditional PUT
    fails (moto honours If-None-Match), it reads the log again and finds its
    files listed, so no file is listed twice and no batch is overwritten."""
    from eddyline._core import StoreDir
    from eddyline.connectors.spark._filelog import ObjectSinkLog

    root = StoreDir(f"s3://{s3.bucket}/t")
    for name in ("part-a.parquet", "part-b.parquet"):
        root.put(name, b"x" * 10)
    assert root.put_if_absent("probe", b"1")
    assert not root.put_if_absent("probe", b"2")
    assert root.read("probe") == b"1"

    first, second = ObjectSinkLog(f"s3://{s3.bucket}/t"), ObjectSinkLog(f"s3a://{s3.bucket}/t")
    wanted = [first.file_uri("part-a.parquet"), first.file_uri("part-b.parquet")]
    real_latest, calls = second.latest, []

    def stale_latest() -> int:  # the log as `second` read it before `first` published
        calls.append(1)
        return -1 if len(calls) == 1 else real_latest()

    second.latest = stale_latest  # type: ignore[method-assign]
    assert first.append_missing(wanted) == 0
    assert second.append_missing(wanted) is None  # lost batch 0, then nothing was missing
    assert _log_batches(s3, "t") == [wanted]
    assert first.append_missing([*wanted, first.file_uri("probe")]) == 1


def test_compaction_batch_on_s3_is_read_by_spark(spark: Any, s3: S3, tmp_path: Path) -> None:
    """Batch 9 repeats batches 0-8 as a compaction batch (Spark's default
    interval); Spark reads all files through it, and later batches after it."""
    import pyarrow.parquet as pq

    from eddyline._core import StoreDir
    from eddyline.connectors.spark._filelog import ObjectSinkLog

    root = StoreDir(f"s3://{s3.bucket}/compact")
    log = ObjectSinkLog(f"s3://{s3.bucket}/compact")
    for i in range(12):
        local = tmp_path / f"{i}.parquet"
        pq.write_table(pa.table({"value": pa.array([i], pa.int64())}), local)
        root.upload(f"part-{i:02d}.parquet", str(local))
        assert log.append_missing([log.file_uri(f"part-{i:02d}.parquet")]) == i
    names = [k.rsplit("/", 1)[-1] for k in s3.keys("compact/_spark_metadata/")]
    assert "9.compact" in names and "9" not in names
    assert len(log.files_upto(11)) == 12 and log.new_files(9) == [log.file_uri("part-09.parquet")]
    assert log.append_missing([log.file_uri("part-03.parquet")]) is None  # listed before 9
    assert sorted(_ids(spark, f"s3a://{s3.bucket}/compact")) == list(range(12))


def test_two_worker_processes_commit_each_checkpoint_once(spark: Any, s3: S3) -> None:
    """Subtasks in two worker processes commit the same checkpoints at the same
    time: every checkpoint is published by exactly one log batch."""
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(f"s3://{s3.bucket}/chk", interval="100ms"),
        batch_size=250,
    )
    schema = pa.schema([("value", pa.int64())])
    slow = env.from_sequence(0, 8000).map_batches(SleepPerBatch(0.02))
    slow.sink_to(
        SparkTableSink(spark, "s3_two_workers", path=f"s3://{s3.bucket}/two", schema=schema)
    )
    env.execute("s3-two-workers", runner=ed.ProcessRunner(workers=2))
    assert_exact_ids(_ids(spark, f"s3a://{s3.bucket}/two"), range(8000), "two workers")
    by_checkpoint: dict[str, set[int]] = {}
    for batch, files in enumerate(_log_batches(s3, "two")):
        if (batch + 1) % 10 == 0:
            continue  # a compaction batch repeats the earlier ones
        for path in files:
            checkpoint = path.rsplit("/", 1)[-1].split("-s")[0]
            by_checkpoint.setdefault(checkpoint, set()).add(batch)
    assert by_checkpoint and all(len(b) == 1 for b in by_checkpoint.values()), by_checkpoint
    subtasks = {p.rsplit("-s", 1)[-1][:4] for files in _log_batches(s3, "two") for p in files}
    assert subtasks == {"0000", "0001"}, "both workers' subtasks wrote rows"


def test_from_spark_with_s3_checkpoints_replays_its_pin(spark: Any, s3: S3, tmp_path: Path) -> None:
    """The pinned snapshot and pin.json live under the checkpoint dir on S3; a
    restored run reads them, not the DataFrame's input as it is now."""
    source = str(tmp_path / "input")
    spark.range(0, 3000, numPartitions=3).selectExpr("id AS value").write.parquet(source)
    chk = f"s3://{s3.bucket}/pins-chk"
    location = f"s3://{s3.bucket}/pinned"
    marker = tmp_path / "marker"
    marker.mkdir()

    def run() -> None:
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(chk, interval="50ms"), batch_size=200
        )
        values = env.from_spark(spark.read.parquet(source)).uid("input")
        slow = values.map_batches(SleepPerBatch(0.003)).uid("slow")
        # Fails the first run once, at value 2000; later runs pass through.
        failing = slow.map_batches(FailOnce(None, str(marker), column="value", at=2000))
        schema = pa.schema([("value", pa.int64())])
        sink = SparkTableSink(spark, "s3_pinned", path=location, schema=schema)
        failing.uid("fail").sink_to(sink).uid("table")
        env.execute("s3-pinned", restore_from="latest")

    with pytest.raises(ed.JobFailedError, match="injected failure"):
        run()
    pins = [k for k in s3.keys("pins-chk/_eddyline_spark_sources/input/")]
    assert "pins-chk/_eddyline_spark_sources/input/pin.json" in pins
    pinned = json.loads(
        s3.client.get_object(  # type: ignore[attr-defined]
            Bucket=s3.bucket, Key="pins-chk/_eddyline_spark_sources/input/pin.json"
        )["Body"].read()
    )
    assert pinned["files"] and all(
        f.startswith(f"s3://{s3.bucket}/pins-chk/") for f in pinned["files"]
    )
    # The input changes after the pin: the replay must not see it.
    spark.range(5000, 5100).selectExpr("id AS value").write.mode("append").parquet(source)
    run()
    assert_exact_ids(_ids(spark, f"s3a://{s3.bucket}/pinned"), range(3000), "replayed pin")
    snapshots = {
        k.split("/")[3] for k in s3.keys("pins-chk/_eddyline_spark_sources/input/snapshot-")
    }
    assert len(snapshots) == 1, f"the restored run pinned again: {snapshots}"


JOB = textwrap.dedent(
    """
    import pyarrow as pa

    import eddyline as ed
    from eddyline.spark import SparkTableSink
    from support.faults import SleepPerBatch


    def run_job(spark, location, chk, n):
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
        )
        numbers = env.from_spark(spark.range(0, n).selectExpr("id AS value")).uid("numbers")
        slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
        schema = pa.schema([("value", pa.int64())])
        sink = SparkTableSink(spark, "killed", path=location, schema=schema)
        slow.sink_to(sink).uid("table")
        env.execute("s3-table-killable", restore_from="latest")
    """
)

KILL_SCRIPT = JOB + textwrap.dedent(
    """
    import json, os, sys

    from pyspark.sql import SparkSession

    from eddyline.spark import s3a_settings

    builder = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
    conf = {**json.loads(os.environ["S3A_CONF"]), **s3a_settings()}
    conf["spark.sql.catalogImplementation"] = "in-memory"
    for key, value in conf.items():
        builder = builder.config(key, value)
    run_job(builder.getOrCreate(), sys.argv[1], sys.argv[2], int(sys.argv[3]))
    """
)


@pytest.mark.timeout(240)
def test_sigkill_and_restore_into_s3_table_is_exact(
    spark: Any, s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver (its own Spark JVM) SIGKILLed mid-run; the new driver restores
    "latest" (here, in this process's Spark session, to spare a JVM start)."""
    n = 40_000
    conf, _ = spark_s3a_test_conf()
    monkeypatch.setenv("S3A_CONF", json.dumps(conf))
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    location, chk = f"s3://{s3.bucket}/killed", f"s3://{s3.bucket}/killed-chk"
    sigkill_when(
        [sys.executable, str(script), location, chk, str(n)],
        lambda: completed_checkpoints(chk),
        timeout=120,
        what="a checkpoint of the run to kill",
        delay=random.Random(14).uniform(0.0, 0.25),  # the kill moment, from the seed
    )
    namespace: dict[str, Any] = {}
    exec(JOB, namespace)  # the same job, restored by a new driver
    namespace["run_job"](spark, location, chk, n)

    assert_exact_ids(_ids(spark, f"s3a://{s3.bucket}/killed"), range(n), "SparkTableSink(s3://)")
    # The killed run's uncompleted checkpoints' staging is swept by the last run.
    assert not [k for k in s3.keys("killed/_eddyline_staging/")], "staging left behind"
    snapshots = {
        k.split("/")[3] for k in s3.keys("killed-chk/_eddyline_spark_sources/numbers/snapshot-")
    }
    assert len(snapshots) == 1, "the restored run replays the pinned snapshot"


def test_gs_and_az_locations_are_refused(spark: Any) -> None:
    for uri in ("gs://bucket/table", "az://container/table"):
        with pytest.raises(ed.StorageError, match="not tested yet") as info:
            SparkTableSink(spark, "t", path=uri)
        assert info.value.uri == uri


def test_missing_s3a_filesystem_names_what_to_install(tmp_path: Path, s3: S3) -> None:
    """A Spark session without hadoop-aws: attaching an s3:// table is a
    StorageError saying what to install, before anything runs."""
    script = tmp_path / "no_s3a.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from pyspark.sql import SparkSession
            import eddyline as ed
            from eddyline.spark import SparkTableSink
            spark = (SparkSession.builder.master("local[1]")
                     .config("spark.ui.enabled", "false")
                     .config("spark.sql.catalogImplementation", "in-memory").getOrCreate())
            env = ed.StreamEnvironment()
            try:
                env.from_sequence(0, 10).sink_to(
                    SparkTableSink(spark, "t", path="s3://{s3.bucket}/no-s3a"))
            except ed.StorageError as exc:
                print("StorageError:", exc)
            spark.stop()
            """
        )
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    assert "StorageError:" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "hadoop-aws" in done.stdout and f"s3a://{s3.bucket}/no-s3a" in done.stdout
