"""Connectors: where a job's rows come from and go to, beyond the core API.

Each connector builds on the source and sink API of the DSL layer
(:class:`eddyline.Source`, :class:`eddyline.TwoPhaseCommitSink`) and is
re-exported at the top of the package (``ed.KafkaSink``, ``ed.DeltaSink``,
``ed.ParquetSink``):

* :mod:`eddyline.connectors.files` — ``ParquetSink``, exactly-once Parquet files.
* :mod:`eddyline.connectors.kafka` — ``KafkaSource``, ``KafkaSink``, ``end_offsets``
  (also importable as ``eddyline.kafka``).
* :mod:`eddyline.connectors.delta` — ``DeltaSink``, exactly-once Delta Lake commits.
* :mod:`eddyline.connectors.spark` — DataFrames in, Spark tables out, the
  ``SparkRunner`` (also importable as ``eddyline.spark``; pyspark is imported
  only when a feature needs it).
"""

from __future__ import annotations

from typing import Any

from .._registry import register_connector
from .delta import DeltaSink
from .files import ParquetSink
from .kafka import KafkaSink, KafkaSource


def _from_spark(env: Any, df: Any) -> Any:
    # Loaded on first use: the Spark connector is imported only by jobs that
    # read a DataFrame (it needs pyspark to do anything).
    from .spark.source import from_spark

    return from_spark(env, df)


# The DSL's env.from_kafka / env.from_spark find these by name
# (eddyline._registry): it never imports the connectors above it.
register_connector("kafka", KafkaSource)
register_connector("spark", _from_spark)

__all__ = ["DeltaSink", "KafkaSink", "KafkaSource", "ParquetSink"]
