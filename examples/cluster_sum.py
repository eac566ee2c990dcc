"""A keyed sum on a Spark cluster, reading and writing an object store.

    spark-submit --master spark://HOST:7077 examples/cluster_sum.py \
        s3://bucket/in s3://bucket/jobs/sum/chk s3://bucket/jobs/sum/out

Reads the Parquet objects under the first URI (columns ``k`` and ``amount``),
sums ``amount`` per ``k`` on two workers (Spark barrier tasks), checkpoints
every second to the second URI and writes the running sums as Parquet to the
third, exactly once. Credentials and the endpoint come from the driver's
environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) and travel with
the job to the executors as ``storage_options``.
Run it again after a driver failure: it restores from the latest checkpoint.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession

import eddyline as ed
from eddyline.spark import SparkRunner

# What the executors need to reach the store, taken from the driver's environment.
S3_SETTINGS = (
    "AWS_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_REGION",
    "AWS_ALLOW_HTTP",
)


def main(source: str, checkpoints: str, out: str, workers: int = 2) -> None:
    spark = SparkSession.builder.appName("eddyline-cluster-sum").getOrCreate()
    options = {k.lower(): os.environ[k] for k in S3_SETTINGS if k in os.environ}
    env = ed.StreamEnvironment(
        workers,
        checkpoint=ed.CheckpointConfig(checkpoints, interval="1s"),
        restart=ed.RestartStrategy.fixed_delay(3, "500ms"),
        storage_options=options,
    )
    rows = env.from_parquet(source).name("rows").uid("rows")
    sums = rows.key_by("k").sum("amount").name("sums").uid("sums")
    sums.sink_to(ed.ParquetSink(out)).name("out").uid("out")
    result = env.execute(
        "cluster-sum", runner=SparkRunner(spark, workers=workers), restore_from="latest"
    )
    print(json.dumps({"restarts": result.restarts, "checkpoints": len(result.checkpoints)}))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
