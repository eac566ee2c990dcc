"""SparkRunner on a real Spark standalone cluster: a job reading
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
from support.faults import wait_until

from .conftest import Cluster, spark_home

ROWS, FILES, KEYS = 40_000, 4, 23

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster_sum.py"

# The README's example with each batch slowed down, so that a checkpoint
# completes before the executor is killed.
SLOWED = textwrap.dedent(
    """
    import runpy
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    plain_from_parquet = ed.StreamEnvironment.from_parquet

    def slowed(self, *args, **kwargs):
        rows = plain_from_parquet(self, *args, **kwargs)
        return rows.map_batches(SleepPerBatch(1.0), schema=rows.schema)

    ed.StreamEnvironment.from_parquet = slowed
    sys.argv = [sys.argv[1], *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
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


def _manifests(s3: S3, prefix: str) -> set[str]:
    return {k for k in s3.keys(prefix) if k.endswith("/_manifest.json")}


def _await_checkpoint(proc: subprocess.Popen[str], s3: S3, prefix: str) -> None:
    """Waits until the running job completed a checkpoint under ``prefix``."""
    wait_until(
        lambda: _manifests(s3, prefix) or proc.poll() is not None,
        timeout=180,
        what=f"a completed checkpoint under {prefix}",
        interval=0.2,
    )
    assert proc.poll() is None, _errors(proc.communicate()[1])


def _errors(stderr: str) -> str:
    """What the driver said, without Spark's INFO log lines."""
    lines = [line for line in stderr.splitlines() if " INFO " not in line]
    return "\n".join(lines[-60:])


def _start(
    cluster: Cluster, s3: S3, tmp_path: Path, tag: str, *, slowed: bool = False
) -> subprocess.Popen[str]:
    """``spark-submit`` of the README's cluster example, as written there
    (``slowed``: through a wrapper that slows its batches down)."""
    env = {
        **os.environ,
        **s3.env,
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    uri = f"s3://{s3.bucket}"
    command = [
        os.path.join(spark_home(), "bin", "spark-submit"),
        "--master",
        cluster.master,
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.executor.memory=512m",
        "--conf",
        "spark.task.maxFailures=1",
        *([str(tmp_path / "slowed.py")] if slowed else []),
        str(EXAMPLE),
        f"{uri}/in",
        f"{uri}/{tag}/chk",
        f"{uri}/{tag}/out",
    ]
    (tmp_path / "slowed.py").write_text(SLOWED)
    return subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # the driver JVM and its Python process, killable together
    )


@pytest.mark.timeout(300)
def test_cluster_job_on_s3_is_exact(cluster: Cluster, s3: S3, tmp_path: Path) -> None:
    expected = _input(s3)
    proc = _start(cluster, s3, tmp_path, "plain")
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, _errors(err) + "\n" + out[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["restarts"] == 0 and summary["checkpoints"] > 0, summary
    _assert_exact(s3, "plain", expected)


@pytest.mark.timeout(300)
def test_cluster_executor_sigkill_restores_exactly(
    cluster: Cluster, s3: S3, tmp_path: Path
) -> None:
    expected = _input(s3)
    proc = _start(cluster, s3, tmp_path, "killed", slowed=True)
    try:
        _await_checkpoint(proc, s3, "killed/chk/")  # then kill one executor JVM
        pids = wait_until(
            cluster.python_executor_pids,
            timeout=60,
            what="an executor running the job's Python tasks",
            interval=0.05,
        )
        before = _manifests(s3, "killed/chk/")
        os.kill(pids[0], signal.SIGKILL)
        killed_at = time.monotonic()
        # Figure for benches/RESULTS.md: from the kill to the first checkpoint
        # the restarted job completes (the job is running again by then).
        wait_until(
            lambda: _manifests(s3, "killed/chk/") - before or proc.poll() is not None,
            timeout=240,
            what="a checkpoint of the restarted job",
            interval=0.05,
        )
        print(f"kill -> next completed checkpoint: {time.monotonic() - killed_at:.2f} s")
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    assert proc.returncode == 0, _errors(err) + "\n" + out[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["restarts"] >= 1, summary
    _assert_exact(s3, "killed", expected)


@pytest.mark.timeout(300)
def test_cluster_driver_sigkill_and_resubmit_restores_exactly(
    cluster: Cluster, s3: S3, tmp_path: Path
) -> None:
    expected = _input(s3)
    proc = _start(cluster, s3, tmp_path, "driver", slowed=True)
    try:
        _await_checkpoint(proc, s3, "driver/chk/")
        os.killpg(proc.pid, signal.SIGKILL)  # the driver host dies: JVM and Python
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
    # Executors of the dead driver's application go away with it; the job is
    # submitted again and continues from the latest checkpoint on S3.
    again = _start(cluster, s3, tmp_path, "driver", slowed=True)
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, _errors(err) + "\n" + out[-3000:]
    _assert_exact(s3, "driver", expected)


LOCAL_PATHS = textwrap.dedent(
    """
    import sys

    from pyspark.sql import SparkSession

    import eddyline as ed
    from eddyline.spark import SparkRunner

    master, chk, out = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = SparkSession.builder.master(master).config("spark.ui.enabled", "false").getOrCreate()
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(chk))
    env.from_sequence(0, 10).sink_to(ed.ParquetSink(out))
    try:
        env.execute("local-paths", runner=SparkRunner(spark, workers=2))
    except ed.GraphError as exc:
        print(f"refused: {exc}")
    spark.stop()
    """
)


@pytest.mark.timeout(120)
def test_cluster_refuses_local_paths_before_running(cluster: Cluster, tmp_path: Path) -> None:
    script = tmp_path / "local_paths.py"
    script.write_text(LOCAL_PATHS)
    chk, out = tmp_path / "chk", tmp_path / "out"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, str(script), cluster.master, str(chk), str(out)],
        capture_output=True,
        text=True,
        timeout=100,
        env=env,
    )
    assert done.returncode == 0, _errors(done.stderr)
    assert "refused: SparkRunner on" in done.stdout and repr(str(chk)) in done.stdout, done.stdout
    assert not chk.exists() and not out.exists(), "something ran before the refusal"
