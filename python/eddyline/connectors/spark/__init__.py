"""eddyline and Spark: read DataFrames, append to tables, be read as a stream.

* ``env.from_spark(df)`` — a DataFrame as a replayable, checkpointed source.
* :func:`from_spark_files` — tail a Spark streaming file sink's committed output
  (``env.from_source(from_spark_files(path))``).
* :class:`SparkTableSink` — exactly-once appends to a Spark table.
* :class:`SparkRunner` — run a job's workers as Spark barrier tasks
  (``env.execute(name, runner=SparkRunner(spark, workers=N))``).
* :func:`read_state` — an operator's keyed state in a checkpoint or savepoint
  as a DataFrame (``ed.read_state`` as Spark).
* :func:`register` — makes ``spark.readStream.format("eddyline").load(dir)``
  read the committed output of a ``ParquetSink`` or ``SparkTableSink``.
* :func:`s3a_settings` — the ``spark.hadoop.fs.s3a.*`` settings that let Spark
  reach the S3 store eddyline's ``storage_options`` describe (``SparkTableSink``
  on ``s3://`` and ``from_spark`` with checkpoints on ``s3://``).

pyspark is an optional extra (``pip install "eddyline[spark]"``): this package
imports without it, and raises :class:`SparkNotInstalledError` (an
``EddylineError`` and an ``ImportError``) when a feature that needs it is used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._lazy import SparkNotInstalledError, require_pyspark
from ._s3a import s3a_settings
from .runner import SparkRunner
from .sink import SparkTableSink
from .source import SparkFilesSource, UnorderedInputWarning, from_spark_files

__all__ = [
    "SparkFilesSource",
    "SparkNotInstalledError",
    "SparkRunner",
    "SparkTableSink",
    "UnorderedInputWarning",
    "from_spark_files",
    "read_state",
    "register",
    "s3a_settings",
]


def read_state(
    spark: Any,
    path: str | os.PathLike[str],
    uid: str,
    *,
    state: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> Any:
    """The keyed state of operator ``uid`` in a checkpoint or savepoint as a Spark DataFrame.

    The same rows and columns as :func:`eddyline.read_state` (which it calls:
    the checkpoint is read by eddyline on the driver, not by Spark tasks);
    Arrow types map to Spark's as ``spark.createDataFrame`` maps them (a
    ``MapState`` column becomes a ``MapType``). Read-only: writing state
    back into a checkpoint is not offered.

    Raises:
        SparkNotInstalledError: pyspark is not installed.
        CheckpointError: As :func:`eddyline.read_state`.
    """
    require_pyspark("eddyline.spark.read_state()")
    from ...state_reader import read_state as read_table

    table = read_table(path, uid, state=state, storage_options=storage_options)
    return spark.createDataFrame(table)


def register(spark: Any) -> None:
    """Registers the ``eddyline`` Spark data source with ``spark`` (once per session).

    After it, ``spark.readStream.format("eddyline").load(dir)`` (and
    ``spark.read.format("eddyline")``) read the committed files under ``dir``.
    """
    require_pyspark("eddyline.spark.register()")
    from .datasource import EddylineDataSource

    spark.dataSource.register(EddylineDataSource)
