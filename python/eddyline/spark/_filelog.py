"""The ``_spark_metadata`` log of a Spark streaming file sink, read and written.

A directory with a ``_spark_metadata`` subdirectory is read by Spark through
that log only: ``spark.read.parquet(dir)`` and a catalog table located at
``dir`` see exactly the files listed in it. Batch ``k`` is the file
``_spark_metadata/k`` (or ``k.compact``, which repeats every file of the
earlier batches), holding ``v1`` and one JSON line per file. Writing a batch
file is one atomic step (a hard link of a complete, fsynced file, which fails
if the batch exists), so a reader sees all files of a batch or none.

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

__all__ = ["COMPACT_INTERVAL", "SinkLog", "local_path", "path_uri"]

LOG_DIR = "_spark_metadata"
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

    def _entries(self, batch: int) -> tuple[list[str], bool] | None:
        path = self._batch_path(batch)
        if path is None:
            return None
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
        if not lines or lines[0].strip() != VERSION_LINE:
            raise ValueError(f"{path!r} is not a Spark file sink log batch (no 'v1' header)")
        files = []
        for line in lines[1:]:
            if line.strip():
                entry = json.loads(line)
                if entry.get("action", "add") == "add" and not entry.get("isDir", False):
                    files.append(local_path(entry["path"]))
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
        added in between makes the link fail, so no file is ever listed twice."""
        os.makedirs(self.dir, exist_ok=True)
        while True:
            latest = self.latest()
            files = files_now(latest)
            if not files and not allow_empty:
                return None
            batch = latest + 1
            compact = (batch + 1) % COMPACT_INTERVAL == 0
            listed = (self.files_upto(batch - 1) if compact else []) + files
            body = [_entry(p) for p in listed]
            name = f"{batch}.compact" if compact else str(batch)
            tmp = os.path.join(self.dir, f".{name}.{uuid.uuid4().hex}.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write("\n".join([VERSION_LINE, *body]))
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, os.path.join(self.dir, name))
            except FileExistsError:
                time.sleep(0.001)
                continue
            finally:
                os.unlink(tmp)
            fsync_dir(self.dir)
            return batch
