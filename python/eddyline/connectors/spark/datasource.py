"""``spark.readStream.format("eddyline")``: Spark reads eddyline's committed output.

A PySpark Python data source over the output directory of a ``ParquetSink``
or ``SparkTableSink``. Offsets are batch numbers of an append-only log of
committed files, so they are deterministic: a Spark query restarted from its
own checkpoint asks for the same batch range and gets the same files, and a
downstream query with an exactly-once sink sees every row once.

* A ``SparkTableSink`` location has a ``_spark_metadata`` log that the sink
  appends one batch to per committed checkpoint; its batches are read as is.
* A ``ParquetSink`` directory has no log: the reader keeps one in
  ``<dir>/_eddyline_stream_log`` (same format), appending each committed file
  the first time any reader sees it. Files are committed by an atomic rename,
  so a listed file is always complete.

Register it once per session with :func:`eddyline.spark.register` (it takes
the ``SparkSession``); then ``spark.readStream.format("eddyline").load(dir)``
is a stream of the committed rows under ``dir``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow.parquet as pq
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)

from ...environment import parquet_files
from ._filelog import LOG_DIR, SinkLog

__all__ = ["EddylineDataSource", "committed_log"]

DISCOVERY_LOG = "_eddyline_stream_log"


def committed_log(path: str) -> SinkLog:
    """The log of committed files of an eddyline output directory, brought up to date.

    Returns the ``_spark_metadata`` log when the directory has one; otherwise the
    reader-side discovery log, after appending the committed files it lacks.
    """
    if os.path.isdir(os.path.join(path, LOG_DIR)):
        return SinkLog(path)
    log = SinkLog(path, log_dir=DISCOVERY_LOG)
    committed = parquet_files(path) if os.path.isdir(path) else []
    log.append_missing(committed)
    return log


class _FilePartition(InputPartition):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


def _read_file(path: str) -> Iterator[Any]:
    yield from pq.ParquetFile(path).iter_batches()


class _StreamReader(DataSourceStreamReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, int]:
        return {"batch": 0}

    def latestOffset(
        self, start: dict[str, int] | None = None, limit: Any = None
    ) -> dict[str, int]:
        return {"batch": committed_log(self.path).latest() + 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        log = SinkLog.for_existing(self.path, DISCOVERY_LOG)
        out: list[InputPartition] = []
        for batch in range(int(start["batch"]), int(end["batch"])):
            out.extend(_FilePartition(f) for f in log.new_files(batch))
        return out

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _FilePartition)
        return _read_file(partition.path)

    def commit(self, end: dict[str, int]) -> None:
        pass


class _BatchReader(DataSourceReader):
    def __init__(self, path: str) -> None:
        self.path = path

    def partitions(self) -> list[InputPartition]:
        log = committed_log(self.path)
        return [_FilePartition(f) for f in log.files_upto(log.latest())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, _FilePartition)
        return _read_file(partition.path)


class EddylineDataSource(DataSource):
    """The ``eddyline`` format: ``load(path)`` of a ParquetSink/SparkTableSink directory.

    The schema is that of the committed files (pass ``.schema(...)`` to read a
    directory before its first commit).
    """

    @classmethod
    def name(cls) -> str:
        return "eddyline"

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise ValueError('format("eddyline") needs a path: .load("/the/output/dir")')
        return os.path.abspath(str(path))

    def schema(self) -> Any:
        from pyspark.sql.pandas.types import from_arrow_schema

        path = self._path()
        log = committed_log(path)
        files = log.files_upto(log.latest())
        if not files:
            raise ValueError(
                f"eddyline output {path!r} has no committed file yet; give the schema with "
                ".schema(...)"
            )
        return from_arrow_schema(pq.read_schema(files[0]).remove_metadata())

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return _StreamReader(self._path())

    def reader(self, schema: Any) -> DataSourceReader:
        return _BatchReader(self._path())
