"""SparkRunner on a real Spark standalone cluster (issue 14): a job reading
``s3://`` Parquet, with checkpoints and its ParquetSink on ``s3://``, runs on
two executors and its committed output is exact — undisturbed, and after
SIGKILL of one executor JVM mid-run (the job restarts from its latest
checkpoint)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storage.conftest import S3

from .conftest import Cluster

ROWS, FILES, KEYS = 40_000, 4, 23

JOB = textwrap.dedent(
    """
    import json
    import sys

    from pyspark.sql import SparkSession

    import eddyline as ed
    from eddyline.spark import SparkRunner
    from eddyline.testing import SleepPerBatch

    master, bucket, options, tag = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    spark = (
        SparkSession.builder.master(master)
        .appName("eddyline-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.task.maxFailures", "1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(f"s3://{bucket}/{tag}/chk", interval="200ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "500ms"),
        batch_size=500,
        storage_options=options,
    )
    rows = env.from_parquet(f"s3://{bucket}/in").name("rows").uid("rows")
    slow = rows.map_batches(SleepPerBatch(0.05)).name("slow").uid("slow")
    sums = slow.key_by("k").sum("amount").name("sums").uid("sums")
    sums.sink_to(ed.ParquetSink(f"s3://{bucket}/{tag}/out")).name("out").uid("out")
    print("running", flush=True)
    result = env.execute("cluster-sum", runner=SparkRunner(spark, workers=2))
    print(json.dumps({"restarts": result.restarts, "checkpoints": len(result.checkpoints)}))
    spark.stop()
    """
)


def _input(s3: S3) -> dict[int, int]:
    rng = np.random.default_rng(14)
    keys = rng.integers(0, KEYS, ROWS)
    amounts = rng.integers(1, 1000, ROWS)
    table = pa.table({"k": pa.array(keys, pa.int64()), "amount": pa.array(amounts, pa.int64())})
    for i in range(FILES):
        part = table.slice(i * ROWS // FILES, ROWS // FILES)
        sink = io.BytesIO()
        pq.write_table(part, sink)
        s3.client.put_object(Bucket=s3.bucket, Key=f"in/part-{i}.parquet", Body=sink.getvalue())  # type: ignore[attr-defined]
    sums = np.bincount(keys, weights=amounts, minlength=KEYS).astype(np.int64)
    return {k: int(v) for k, v in enumerate(sums)}


def _committed(s3: S3, prefix: str) -> pa.Table:
    tables = []
    for key in s3.keys(prefix):
        if key.rsplit("/", 1)[-1].startswith(("_", ".")):
            continue
        body = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        tables.append(pq.read_table(io.BytesIO(body)))
    return pa.concat_tables(tables)


def _assert_exact(s3: S3, tag: str, expected: dict[int, int]) -> None:
    rows = _committed(s3, f"{tag}/out/").to_pylist()
    final: dict[int, int] = {}
    for r in rows:
        final[r["k"]] = max(final.get(r["k"], 0), r["amount"])
    assert final == expected
    # running sums of positive amounts grow strictly: a duplicate commit repeats a row
    assert len({(r["k"], r["amount"]) for r in rows}) == len(rows)


def _start(cluster: Cluster, s3: S3, tmp_path: Path, tag: str) -> subprocess.Popen[str]:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    return subprocess.Popen(
        [sys.executable, str(script), cluster.master, s3.bucket, json.dumps(s3.options), tag],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.mark.timeout(300)
def test_cluster_job_on_s3_is_exact(cluster: Cluster, s3: S3, tmp_path: Path) -> None:
    expected = _input(s3)
    proc = _start(cluster, s3, tmp_path, "plain")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["restarts"] == 0 and summary["checkpoints"] > 0, summary
    _assert_exact(s3, "plain", expected)


@pytest.mark.timeout(300)
def test_cluster_executor_sigkill_restores_exactly(
    cluster: Cluster, s3: S3, tmp_path: Path
) -> None:
    expected = _input(s3)
    proc = _start(cluster, s3, tmp_path, "killed")
    try:
        deadline = time.monotonic() + 180
        # wait for a completed checkpoint on S3, then kill one executor JVM
        while not any(k.endswith("/_manifest.json") for k in s3.keys("killed/chk/")):
            assert proc.poll() is None, proc.communicate()[1][-4000:]
            assert time.monotonic() < deadline, "no checkpoint completed"
            time.sleep(0.2)
        pids = cluster.executor_pids()
        assert pids, "no executor running"
        os.kill(pids[0], signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-4000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["restarts"] >= 1, summary
    _assert_exact(s3, "killed", expected)
