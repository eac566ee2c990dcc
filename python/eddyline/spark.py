"""``eddyline.spark``: the import path docs/API.md gives for the Spark connectors.

They live in :mod:`eddyline.connectors.spark`; this module re-exports its
public names (``from eddyline.spark import SparkRunner, SparkTableSink``).
"""

from __future__ import annotations

from .connectors.spark import (
    SparkFilesSource,
    SparkNotInstalledError,
    SparkRunner,
    SparkTableSink,
    UnorderedInputWarning,
    from_spark_files,
    read_state,
    register,
    s3a_settings,
)

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
