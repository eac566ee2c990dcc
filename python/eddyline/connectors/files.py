"""File sinks: :class:`ParquetSink`, exactly-once Parquet files in a directory.

The engine writes the files (a native sink, ``core/src/sink``); this class
names the directory and its storage options for ``stream.sink_to``.

Example:
    >>> import eddyline as ed
    >>> ed.ParquetSink("/tmp/out")
    ParquetSink('/tmp/out')
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from .._specs import SinkParquetSpec
from .._storage import (
    checked_storage_options,
    is_object_store_uri,
    probe_writable,
    storage_location,
)
from ..sinks import Sink

__all__ = ["ParquetSink"]


class ParquetSink(Sink):
    """Writes Parquet files into ``dir``, exactly once.

    Files become visible (get a name not starting with ``_`` or ``.``) only
    when the checkpoint that covers them completes, or at the end of the job;
    ``pyarrow.dataset.dataset(dir)`` reads the committed files.

    On an object store (``s3://bucket/prefix``, ...) each file is uploaded to a
    name starting with ``.`` and copied to its final ``part-...`` name when its
    checkpoint completes, so readers never see a partly written file.

    Args:
        dir: The output directory (created if missing): a local path, a
            ``file://`` URI or an object store URI.
        storage_options: Options of the object store, over the environment's
            ``storage_options`` and the standard environment variables.
    """

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        path = os.fspath(dir)
        if not isinstance(path, str) or not path:
            raise ValueError(f"ParquetSink needs a directory path, got {dir!r}")
        path = storage_location(path, what="ParquetSink")
        self.dir = path
        self.storage_options = checked_storage_options(storage_options)

    def _native_sink(
        self, env_storage_options: Mapping[str, str]
    ) -> tuple[str, SinkParquetSpec, Callable[[str], None] | None]:
        """What ``stream.sink_to`` plans for this sink: the node's default
        name, its spec (the engine writes the files) and, on an object store, a
        check that the directory is writable, run before the job with the
        operator's name."""
        options = {**env_storage_options, **self.storage_options}
        probe = None
        if is_object_store_uri(self.dir):
            location = self.dir

            def probe(operator: str) -> None:
                probe_writable(location, options, what="ParquetSink", operator=operator)

        return "parquet_sink", SinkParquetSpec(self.dir, options), probe

    def __repr__(self) -> str:
        return f"ParquetSink({self.dir!r})"
