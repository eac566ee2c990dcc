"""eddyline and Spark: read DataFrames, append to tables, be read as a stream.

* ``env.from_spark(df)`` — a DataFrame as a replayable, checkpointed source.
* :func:`from_spark_files` — tail a Spark streaming file sink's committed output
  (``env.from_source(from_spark_files(path))``).
* :class:`SparkTableSink` — exactly-once appends to a Spark table.
* :class:`SparkRunner` — run a job's workers as Spark barrier tasks
  (``env.execute(name, runner=SparkRunner(spark, workers=N))``).
* :func:`register` — makes ``spark.readStream.format("eddyline").load(dir)``
  read the committed output of a ``ParquetSink`` or ``SparkTableSink``.

pyspark is an optional extra (``pip install "eddyline[spark]"``): this package
imports without it, and raises :class:`SparkNotInstalledError` (an
``EddylineError`` and an ``ImportError``) when a feature that needs it is used.
"""

from __future__ import annotations

from typing import Any

from ._lazy import SparkNotInstalledError, require_pyspark
from .runner import SparkRunner
from .sink import SparkTableSink
from .source import SparkFilesSource, from_spark_files

__all__ = [
    "SparkFilesSource",
    "SparkNotInstalledError",
    "SparkRunner",
    "SparkTableSink",
    "from_spark_files",
    "register",
]


def register(spark: Any) -> None:
    """Registers the ``eddyline`` Spark data source with ``spark`` (once per session).

    After it, ``spark.readStream.format("eddyline").load(dir)`` (and
    ``spark.read.format("eddyline")``) read the committed files under ``dir``.
    """
    require_pyspark("eddyline.spark.register()")
    from .datasource import EddylineDataSource

    spark.dataSource.register(EddylineDataSource)
