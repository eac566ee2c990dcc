"""One local[2] SparkSession for the whole Spark suite (JVM start costs ~10 s).

The UI is off, shuffles use 2 partitions, the warehouse lives under a pytest
temp dir, and the Python workers run this interpreter (so they import this
eddyline). Every test here is marked ``spark``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    root = tmp_path_factory.mktemp("spark")
    from support.spark_s3a import spark_s3a_test_conf

    # With the S3A jars (.ci/run), this one session also serves the S3 suite
    # (tests/storage/test_s3_spark.py): a JVM's classpath is fixed at its start.
    s3a, _ = spark_s3a_test_conf()
    builder = SparkSession.builder
    for key, value in (s3a or {}).items():
        builder = builder.config(key, value)
    session = (
        builder.master("local[2]")
        .appName("eddyline-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.warehouse.dir", str(root / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={root}")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    from eddyline.spark import register

    register(session)
    yield session
    session.stop()


KeyedSumInput = tuple[Any, dict[int, int]]


@pytest.fixture
def keyed_sum_input(spark: Any, tmp_path: Any) -> Callable[[int], KeyedSumInput]:
    """``make(n)``: a Parquet DataFrame of ``n`` rows (id, k, amount) in 3 files, and
    the numpy reference of the sum of ``amount`` per key ``k``."""

    def make(n: int) -> KeyedSumInput:
        rng = np.random.default_rng(6)
        keys = rng.integers(0, 37, n)
        amounts = rng.integers(1, 1000, n)
        table = pa.table(
            {
                "id": np.arange(n, dtype=np.int64),
                "k": pa.array(keys, pa.int64()),
                "amount": amounts,
            }
        )
        path = str(tmp_path / "in")
        spark.createDataFrame(table.to_pandas()).repartition(3).write.parquet(path)
        sums = np.bincount(keys, weights=amounts, minlength=37).astype(np.int64)
        return spark.read.parquet(path), {k: int(v) for k, v in enumerate(sums) if v}

    return make
