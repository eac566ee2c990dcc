"""The ``_spark_metadata`` log of a Spark streaming file sink, read and written.

A directory with a ``_spark_metadata`` subdirectory is read by Spark through
that log only: ``spark.read.parquet(dir)`` and a catalog table located at
``dir`` see exactly the files listed in it. Batch ``k`` is the file
``_spark_metadata/k`` (or ``k.compact``, which repeats every file of the
earlier batches), holding ``v1`` and one JSON line per file. Writing a batch
file is one atomic step (a hard link of a complete, fsynced file, which fails
if the batch exists), so a reader sees all files of a batch or none.

On an object store (:class:`ObjectSinkLog`) a batch is one object created
with ``If-None-Match: *`` (object_store's ``PutMode::Create``): of concurrent
writers of batch ``k`` exactly one succeeds, the others read the log again.

Pure Python and pyarrow: nothing here imports pyspark.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable
from urllib.parse import unquote, urlparse

__all__ = ["COMPACT_INTERVAL", "ObjectSinkLog", "SinkLog", "local_path", "path_uri", "spark_uri"]

LOG_DIR = "_spark_metadata"
LOG_MARKER = ".eddyline-log"
"""The object under an object store's log that makes the log exist before its first batch."""
VERSION_LINE = "v1"
COMPACT_INTERVAL = 10
"""Spark's default ``spark.sql.streaming.fileSink.log.compactInterval``: batch
``k`` with ``(k + 1) % 10 == 0`` is a compaction batch."""


def local_path(uri: str) -> str:
    """The local path of a ``file:`` URI (or of a plain path)."""
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        return unquote(parsed.path) if parsed.scheme else uri
    raise ValueError(f"only local files are supported, got {uri!r}")


def path_uri(path: str) -> str:
    """The ``file://`` URI Spark writes into its log for a local path."""
    return "file://" + os.path.abspath(path)


def _entry(path: str) -> str:
    st = os.stat(path)
    return json.dumps(
        {
            "path": path_uri(path),
            "size": st.st_size,
            "isDir": False,
            "modificationTime": int(st.st_mtime * 1000),
            "blockReplication": 1,
            "blockSize": 33554432,
            "action": "add",
        },
        separators=(",", ":"),
    )


def fsync_dir(path: str) -> None:
    """Flushes a directory entry change (rename, link) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SinkLog:
    """The ``_spark_metadata`` log of one directory.

    Example:
        >>> import tempfile, pathlib
        >>> root = tempfile.mkdtemp()
        >>> _ = pathlib.Path(root, "a.parquet").write_bytes(b"x")
        >>> log = SinkLog(root)
        >>> log.append([root + "/a.parquet"])
        0
        >>> [os.path.basename(p) for p in log.new_files(0)]
        ['a.parquet']
    """

    def __init__(self, root: str, *, log_dir: str = LOG_DIR) -> None:
        self.root = root
        self.dir = os.path.join(root, log_dir)

    @classmethod
    def for_existing(cls, root: str, fallback_log_dir: str) -> SinkLog:
        """The ``_spark_metadata`` log of ``root`` if it has one, else ``fallback_log_dir``."""
        log = cls(root)
        return log if log.exists() else cls(root, log_dir=fallback_log_dir)

    def exists(self) -> bool:
        """True when the directory has a log (Spark then reads through it)."""
        return os.path.isdir(self.dir)

    def create(self) -> None:
        """Makes the log exist before its first batch, so Spark reads the
        location through it (and sees nothing) rather than listing files that a
        commit has placed but not yet listed."""
        os.makedirs(self.dir, exist_ok=True)

    def _batch_path(self, batch: int) -> str | None:
        for name in (f"{batch}.compact", str(batch)):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                return path
        return None

    def latest(self) -> int:
        """The newest batch id, or -1 when the log has no batch."""
        best = -1
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self.dir):
                stem = name.removesuffix(".compact")
                if stem.isdigit():
                    best = max(best, int(stem))
        return best

    def _read_batch(self, batch: int) -> tuple[str, str] | None:
        """``(name, text)`` of batch ``batch``, or ``None`` when it is missing."""
        path = self._batch_path(batch)
        if path is None:
            return None
        with open(path, encoding="utf-8") as fh:
            return path, fh.read()

    def _entry_path(self, path: str) -> str:
        """A file of the log as this log's users name it (here: a local path)."""
        return local_path(path)

    def _entries(self, batch: int) -> tuple[list[str], bool] | None:
        read = self._read_batch(batch)
        if read is None:
            return None
        path, text = read
        lines = text.splitlines()
        if not lines or lines[0].strip() != VERSION_LINE:
            raise ValueError(f"{path!r} is not a Spark file sink log batch (no 'v1' header)")
        files = []
        for line in lines[1:]:
            if line.strip():
                entry = json.loads(line)
                if entry.get("action", "add") == "add" and not entry.get("isDir", False):
                    files.append(self._entry_path(entry["path"]))
        return files, path.endswith(".compact")

    def files_upto(self, batch: int) -> list[str]:
        """Every file of batches ``0..batch`` (inclusive), in log order."""
        if batch < 0:
            return []
        start = batch
        chain: list[list[str]] = []
        while start >= 0:
            read = self._entries(start)
            if read is None:
                if start == batch:
                    raise FileNotFoundError(f"batch {batch} of the log in {self.dir!r} is missing")
                # Spark deletes plain batches that a compaction batch covers.
                raise FileNotFoundError(
                    f"batch {start} of the log in {self.dir!r} is missing and no later "
                    "compaction batch covers it"
                )
            files, compact = read
            chain.append(files)
            if compact:
                break
            start -= 1
        out: list[str] = []
        seen: set[str] = set()
        for files in reversed(chain):
            for f in files:
                if f not in seen:
                    seen.add(f)
                    out.append(f)
        return out

    def new_files(self, batch: int) -> list[str]:
        """The files batch ``batch`` added (not listed by an earlier batch)."""
        read = self._entries(batch)
        if read is None:
            raise FileNotFoundError(f"batch {batch} of the log in {self.dir!r} is missing")
        files, compact = read
        if not compact or batch == 0:
            return files
        earlier = set(self.files_upto(batch - 1))
        return [f for f in files if f not in earlier]

    def append_missing(self, candidates: Iterable[str]) -> int | None:
        """Appends one batch with the ``candidates`` no batch lists yet.

        Safe against concurrent writers doing the same: the missing files are
        worked out again whenever another writer took the batch id first.

        Returns:
            The new batch id, or ``None`` when nothing was missing.
        """
        wanted = sorted(set(candidates))
        return self._append(
            lambda latest: [f for f in wanted if f not in set(self.files_upto(latest))],
            allow_empty=False,
        )

    def append(self, files: Iterable[str]) -> int:
        """Adds one batch listing ``files`` (local paths) and returns its id.

        The batch appears atomically; concurrent writers each get their own
        batch id.
        """
        fixed = list(files)
        batch = self._append(lambda _latest: fixed, allow_empty=True)
        assert batch is not None
        return batch

    def _append(self, files_now: Callable[[int], list[str]], *, allow_empty: bool) -> int | None:
        """Writes batch ``latest + 1`` with ``files_now(latest)``; when another writer
        took that id first, reads the log again and retries. The files are worked
        out against the same ``latest`` the new batch follows: a batch another writer
        added in between makes the write fail, so no file is ever listed twice."""
        while True:
            latest = self.latest()
            files = files_now(latest)
            if not files and not allow_empty:
                return None
            batch = latest + 1
            compact = (batch + 1) % COMPACT_INTERVAL == 0
            name = f"{batch}.compact" if compact else str(batch)
            text = "\n".join([VERSION_LINE, *self._batch_lines(batch, compact, files)])
            if self._put_if_absent(name, text):
                return batch
            time.sleep(0.001)  # another writer took batch ``batch``: read the log again

    def _batch_lines(self, batch: int, compact: bool, files: list[str]) -> list[str]:
        """The entries of batch ``batch``: ``files``, after those of every earlier
        batch when it is a compaction."""
        listed = (self.files_upto(batch - 1) if compact else []) + files
        return [_entry(p) for p in listed]

    def _put_if_absent(self, name: str, text: str) -> bool:
        """Writes log file ``name`` whole (a hard link of a synced temporary
        file); False if it exists already."""
        os.makedirs(self.dir, exist_ok=True)
        tmp = os.path.join(self.dir, f".{name}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, os.path.join(self.dir, name))
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        fsync_dir(self.dir)
        return True


def spark_uri(uri: str) -> str:
    """The URI Spark (Hadoop's S3A filesystem) knows an object by: ``s3a://`` for ``s3://``."""
    scheme, sep, rest = uri.partition("://")
    return f"s3a://{rest}" if sep and scheme.lower() == "s3" else uri


def eddyline_uri(uri: str) -> str:
    """The URI eddyline's storage layer names an object by: ``s3://`` for ``s3a://``."""
    scheme, sep, rest = uri.partition("://")
    return f"s3://{rest}" if sep and scheme.lower() in ("s3a", "s3n") else uri


class ObjectSinkLog(SinkLog):
    """The ``_spark_metadata`` log of an object store prefix (``s3://bucket/table``).

    Read and written through eddyline's storage layer (``eddyline._core.StoreDir``
    over object_store; ``storage_options`` over the standard environment
    variables). Files are named by the URIs Spark reads them by
    (``s3a://bucket/table/part-...``, see :func:`spark_uri`). A batch object is
    created only if absent, so it appears whole and exactly once; compaction
    batches repeat the earlier batches' entries as they were written.
    """

    def __init__(
        self,
        root: str,
        *,
        log_dir: str = LOG_DIR,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        from ..._core import StoreDir

        super().__init__(eddyline_uri(root.rstrip("/")), log_dir=log_dir)
        self.dir = f"{self.root}/{log_dir}"
        self._root_dir = StoreDir(self.root, storage_options or None)
        self._store = self._root_dir.child(log_dir)

    def exists(self) -> bool:
        return self.latest() >= 0

    def create(self) -> None:
        # An object store has no empty directories: Spark (S3A) sees
        # ``_spark_metadata`` once an object is under it. The marker is no batch
        # (Spark and ``latest`` read names that are numbers only).
        self._store.put_if_absent(LOG_MARKER, b"")

    def file_uri(self, name: str) -> str:
        """The URI the log lists the file ``name`` of the root by."""
        return spark_uri(f"{self.root}/{name}")

    def latest(self) -> int:
        best = -1
        for name in self._store.files():
            stem = name.removesuffix(".compact")
            if stem.isdigit():
                best = max(best, int(stem))
        return best

    def _read_batch(self, batch: int) -> tuple[str, str] | None:
        names = [f"{batch}.compact", str(batch)]
        if (batch + 1) % COMPACT_INTERVAL != 0:
            names.reverse()  # a plain batch: one GET, not a missed one first
        for name in names:
            data = self._store.read(name)
            if data is not None:
                return f"{self.dir}/{name}", data.decode("utf-8")
        return None

    def _entry_path(self, path: str) -> str:
        return path

    def _lines(self, batch: int) -> tuple[list[str], bool]:
        """The entry lines of batch ``batch`` as written, and whether it is a compaction."""
        read = self._read_batch(batch)
        if read is None:
            raise FileNotFoundError(f"batch {batch} of the log in {self.dir!r} is missing")
        lines = [line for line in read[1].splitlines()[1:] if line.strip()]
        return lines, read[0].endswith(".compact")

    def _file_entry(self, uri: str) -> str:
        name = uri.rsplit("/", 1)[-1]
        stat = self._root_dir.stat(name)
        if stat is None:
            raise FileNotFoundError(f"{uri!r} does not exist: it cannot be listed in the log")
        size, modified = stat
        return json.dumps(
            {
                "path": uri,
                "size": size,
                "isDir": False,
                "modificationTime": modified,
                "blockReplication": 1,
                "blockSize": 33554432,
                "action": "add",
            },
            separators=(",", ":"),
        )

    def _batch_lines(self, batch: int, compact: bool, files: list[str]) -> list[str]:
        earlier: list[str] = []
        if compact:
            # The entries of batches 0..batch-1 as written, back to the last compaction.
            start = batch - 1
            chain: list[list[str]] = []
            while start >= 0:
                lines, compacted = self._lines(start)
                chain.append(lines)
                if compacted:
                    break
                start -= 1
            earlier = [line for lines in reversed(chain) for line in lines]
        return [*earlier, *(self._file_entry(f) for f in files)]

    def _put_if_absent(self, name: str, text: str) -> bool:
        return bool(self._store.put_if_absent(name, text.encode()))


def sink_log(root: str, storage_options: dict[str, str] | None = None) -> SinkLog:
    """The log of ``root``: a local directory or an object store URI."""
    from ..._storage import is_object_store_uri

    if is_object_store_uri(root):
        return ObjectSinkLog(root, storage_options=storage_options)
    return SinkLog(root)
