"""``SparkTableSink``: exactly-once appends to a Spark table.

The table is a Parquet table whose location carries a Spark file sink log
(``_spark_metadata``): Spark reads such a location through the log only, both
as ``spark.table(table)`` and ``spark.read.parquet(location)``.

Two-phase commit on eddyline's checkpoints:

* **write** — each subtask writes its rows into a Parquet file under
  ``<location>/_eddyline_staging/inprogress/`` (a name Spark ignores);
* **pre-commit** (checkpoint ``n`` taken) — the file is closed, fsynced and
  moved into ``_eddyline_staging/<run>-a<attempt>-c<n>/``;
* **commit** (checkpoint ``n`` completed) — whichever subtask commits first
  hard-links every staged file of ``n`` to its final name in the location and
  appends one log batch listing them all: one atomic step, so a Spark reader
  sees the whole checkpoint or nothing of it. Only then are the staged names
  removed, so the staging dir lists the whole checkpoint until it is
  published. Subtasks in other worker processes (``SparkRunner``,
  ``ProcessRunner``) may commit the same checkpoint at the same time: the log
  append recomputes what is missing whenever another writer took the batch id
  first, so ``n`` is listed by exactly one batch. Files already in the log are
  skipped, so a commit repeated after a restore changes nothing;
* **restore** — the restored checkpoint's transactions are committed again
  (idempotent), then staging left by checkpoints that never completed in the
  job's earlier runs and attempts is removed.

On an object store (``path="s3://bucket/table"``; Spark sees ``s3a://``) there
are no links or renames, so the same protocol runs on objects, through
eddyline's storage layer (``eddyline._core.StoreDir``, ``storage_options`` over
the ``AWS_*`` environment variables):

* **attach** — an empty marker object is put under ``_spark_metadata``: Spark
  reads a location through its log only if the log exists, and a store has no
  empty directories, so without it a reader before the first batch would list
  the objects the first commit had copied so far;
* **write** — rows go into a Parquet file in a local temporary directory;
* **pre-commit** — the file is uploaded to
  ``<location>/_eddyline_staging/<run>-a<attempt>-c<n>/`` (multipart when large);
* **commit** — each staged object not yet in the log is copied server-side to
  its final name in the location, then one log batch listing them all is
  created *only if absent* (``If-None-Match: *``, object_store's
  ``PutMode::Create``): of two committers of one batch id exactly one wins and
  the other recomputes what is missing, so ``n`` is still listed by exactly one
  batch and a reader of the log sees all of ``n`` or none of it. Final objects
  copied by a committer that died before the log batch are unlisted, so Spark
  never reads them; the re-commit after the restore lists them;
* **restore** — as on a disk; the staging prefixes of earlier runs' and
  attempts' uncompleted checkpoints are deleted.

Spark itself needs Hadoop's S3A filesystem to create and read such a table
(see :mod:`eddyline.connectors.spark._s3a`).

The Spark session is used only in the driver, when the sink is attached to a
stream (to create or check the table) and, in-process, to refresh the table's
cached file listing after a commit. It is not part of the sink's pickled state
(worker processes get the sink without it and only write files and the log);
under a runner, :func:`refresh_tables` refreshes the listing in the driver
after each attempt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..._storage import checked_storage_options, is_object_store_uri
from ...errors import EddylineError, GraphError, SchemaError, StorageError
from ...sinks import TwoPhaseCommitSink
from ._filelog import ObjectSinkLog, SinkLog, eddyline_uri, fsync_dir, local_path, sink_log
from ._lazy import require_pyspark
from ._s3a import missing_s3a, spark_location

__all__ = ["SparkTableSink"]

STAGING = "_eddyline_staging"
INPROGRESS = "inprogress"

# Spark sessions by sink token, for refreshing a table after a commit in this
# process (sessions cannot be pickled into the per-subtask sink copies).
_SESSIONS: dict[str, Any] = {}
# Tables of the sinks attached in this process, by sink token (see refresh_tables).
_TABLES: dict[str, str] = {}
_LOG_LOCK = threading.Lock()


@dataclass
class _Txn:
    run: str
    attempt: int
    subtask: int
    seq: int
    checkpoint: int | None = None
    file: str | None = None
    """The staged file's base name, once rows were written and pre-committed."""
    rows: int = 0
    writer: Any = field(default=None, repr=False, compare=False)
    inprogress: str | None = None

    @property
    def key(self) -> str:
        return f"{self.run}-a{self.attempt}-c{self.checkpoint:020d}"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["writer"] = None
        return state


def _spark_type_names(schema: Any) -> list[tuple[str, str]]:
    return [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]


class SparkTableSink(TwoPhaseCommitSink):
    """Appends a stream to a Spark table, exactly once.

    Args:
        spark: The ``SparkSession`` whose catalog holds (or will hold) the table.
        table: The table name (``db.table`` or ``table``). A missing table is
            created as an unmanaged Parquet table at ``path`` (or, without
            ``path``, as a managed table in the warehouse).
        path: Where a new table's files live: a local or shared filesystem, or
            an ``s3://bucket/prefix`` URI (Spark needs Hadoop's S3A filesystem,
            see ``eddyline.spark.s3a_settings``; ``gs://`` and ``az://`` are a
            :class:`~eddyline.errors.StorageError`). An existing table's
            location may be ``s3a://`` too.
        schema: The rows' Arrow schema, for streams whose schema is only known
            at run time (by default the stream's schema).
        storage_options: How eddyline reaches the object store of an ``s3://``
            table (the keys object_store accepts, e.g. ``aws_endpoint_url``),
            over the standard ``AWS_*`` environment variables.

    Raises:
        SchemaError: The existing table's columns differ from the stream's.
        GraphError: The table is not a Parquet table on a filesystem or S3,
            its local location cannot be written, or it holds files that were
            not written through a Spark file sink log.
        StorageError: The object store location cannot be reached or written,
            or the Spark session lacks Hadoop's S3A filesystem.

    Example:
        >>> from eddyline.spark import SparkTableSink              # doctest: +SKIP
        >>> totals.sink_to(SparkTableSink(spark, "totals"))         # doctest: +SKIP
    """

    def __init__(
        self,
        spark: Any,
        table: str,
        *,
        path: str | os.PathLike[str] | None = None,
        schema: pa.Schema | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> None:
        require_pyspark("SparkTableSink")
        if not isinstance(table, str) or not table:
            raise ValueError(f"SparkTableSink needs a table name, got {table!r}")
        self.table = table
        self.path = os.fspath(path) if path is not None else None
        self._spark_path: str | None = None
        if self.path is not None:
            self._spark_path = spark_location(self.path, what=f"SparkTableSink({table!r})")
            if self._spark_path is None:
                self._spark_path = os.path.abspath(self.path)
        self.storage_options = checked_storage_options(storage_options)
        self.schema = schema
        self.location: str | None = None
        self._token = uuid.uuid4().hex
        _SESSIONS[self._token] = spark
        self._ctx: dict[str, Any] = {}
        self._seq = 0
        self._lineage: set[str] = set()
        self._opened = False
        self._logged: set[str] = set()
        self._logged_upto = -1
        self._tmp: str | None = None
        self._dirs: dict[str, Any] = {}
        self._swept = False

    @property
    def _remote(self) -> bool:
        return self.location is not None and is_object_store_uri(self.location)

    def _dir(self, *names: str) -> Any:
        """The ``StoreDir`` of ``location/names...`` (cached; not pickled)."""
        key = "/".join(names)
        found = self._dirs.get(key)
        if found is None:
            from ..._core import StoreDir

            found = StoreDir(self._root(), self.storage_options or None)
            for name in names:
                found = found.child(name)
            self._dirs[key] = found
        return found

    def _log(self) -> SinkLog:
        return sink_log(self._root(), self.storage_options)

    def __repr__(self) -> str:
        return f"SparkTableSink({self.table!r})"

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_dirs"] = {}
        return state

    # ---- driver side: attach to a stream --------------------------------------

    def _bind(self, operator: str, schema: pa.Schema | None) -> None:
        """Creates or checks the table for a stream of ``schema`` (driver side)."""
        spark = _SESSIONS[self._token]
        schema = schema if schema is not None else self.schema
        if schema is None:
            raise GraphError(
                f"operator '{operator}': SparkTableSink({self.table!r}) needs the stream's "
                "schema when it is attached; give the preceding operator an output schema "
                "(e.g. map_batches(fn, schema=...)) or pass SparkTableSink(..., schema=...)",
                operator=operator,
            )
        from pyspark.sql.pandas.types import from_arrow_schema

        try:
            wanted = from_arrow_schema(schema)
        except Exception as exc:
            raise SchemaError(
                f"operator '{operator}': the stream's schema\n{schema}\nhas no Spark "
                f"equivalent: {exc}",
                operator=operator,
            ) from exc
        try:
            exists = spark.catalog.tableExists(self.table)
        except Exception as exc:
            raise GraphError(
                f"operator '{operator}': cannot look up Spark table {self.table!r}: {exc}",
                operator=operator,
            ) from exc
        if not exists:
            if self._spark_path is not None:
                self._check_location(operator, eddyline_uri(self._spark_path))
            try:
                if self._spark_path is not None:
                    spark.catalog.createTable(
                        self.table, path=self._spark_path, source="parquet", schema=wanted
                    )
                else:
                    spark.catalog.createTable(self.table, source="parquet", schema=wanted)
            except Exception as exc:
                s3a = missing_s3a(exc, self._spark_path or "", f"operator '{operator}'")
                if s3a is not None:
                    raise s3a from exc
                raise GraphError(
                    f"operator '{operator}': cannot create Spark table {self.table!r}: {exc}",
                    operator=operator,
                ) from exc
        details = {
            str(row[0]).strip(): str(row[1]).strip()
            for row in spark.sql(f"DESCRIBE TABLE EXTENDED {self.table}").collect()
            if row[0] is not None and row[1] is not None
        }
        provider = details.get("Provider", "").lower()
        if provider != "parquet":
            raise GraphError(
                f"operator '{operator}': Spark table {self.table!r} has provider "
                f"{provider or 'unknown'!r}; SparkTableSink appends to Parquet tables only",
                operator=operator,
            )
        found = details.get("Location", "")
        try:
            if spark_location(found, what=f"operator '{operator}'") is not None:
                location = eddyline_uri(found).rstrip("/")
            else:
                location = local_path(found)
        except ValueError as exc:
            raise GraphError(
                f"operator '{operator}': Spark table {self.table!r} is neither on a "
                f"filesystem nor on S3: {exc}",
                operator=operator,
            ) from exc
        have = _spark_type_names(spark.table(self.table).schema)
        want = _spark_type_names(wanted)
        if sorted(have) != sorted(want):
            raise SchemaError(
                f"operator '{operator}': Spark table {self.table!r} has columns "
                f"{have} but the stream has {want}",
                operator=operator,
            )
        self._check_location(operator, location)
        self.location = location
        _TABLES[self._token] = self.table

    def _check_location(self, operator: str, location: str) -> None:
        if is_object_store_uri(location):
            self._check_object_location(operator, location)
            return
        probe = os.path.join(location, STAGING, f".probe-{uuid.uuid4().hex}")
        try:
            os.makedirs(location, exist_ok=True)
            os.makedirs(os.path.dirname(probe), exist_ok=True)
            with open(probe, "wb") as fh:
                fh.write(b"ok")
            os.unlink(probe)
        except OSError as exc:
            raise GraphError(
                f"operator '{operator}': cannot write into the location {location!r} of "
                f"Spark table {self.table!r}: {exc}",
                operator=operator,
            ) from exc
        log = SinkLog(location)
        if not log.exists():
            stray = [
                name
                for name in os.listdir(location)
                if not name.startswith(("_", "."))
                and os.path.isfile(os.path.join(location, name))
                and not _interrupted(
                    name, lambda key, n: os.path.exists(os.path.join(location, STAGING, key, n))
                )
            ]
            if stray:
                raise GraphError(
                    f"operator '{operator}': the location {location!r} of Spark table "
                    f"{self.table!r} already holds data files ({stray[0]!r}, ...) not listed in "
                    "a _spark_metadata log; SparkTableSink needs a table it alone appends to",
                    operator=operator,
                )
            log.create()

    def _check_object_location(self, operator: str, location: str) -> None:
        """A probe object written and removed (a missing bucket or bad credentials
        is a StorageError naming the URI), and no data files outside a log."""
        from ..._core import StoreDir

        root = StoreDir(location, self.storage_options or None)
        staging = root.child(STAGING)
        probe = f".probe-{uuid.uuid4().hex}"
        created = staging.put_if_absent(probe, b"ok")
        again = staging.put_if_absent(probe, b"again")
        staging.remove(probe)
        if not created or again:
            # Log batches are published with If-None-Match: a store that ignores
            # it would let two committers overwrite each other's batch.
            raise StorageError(
                f"operator '{operator}': the object store of {location!r} ignores "
                "conditional writes (If-None-Match: *), which SparkTableSink needs to "
                "publish each checkpoint exactly once",
                uri=location,
            )
        log = sink_log(location, self.storage_options)
        if not log.exists():
            stray = [
                n
                for n in root.files()
                if not n.startswith(("_", "."))
                and not _interrupted(n, lambda key, name: staging.child(key).stat(name) is not None)
            ]
            if stray:
                raise GraphError(
                    f"operator '{operator}': the location {location!r} of Spark table "
                    f"{self.table!r} already holds data files ({stray[0]!r}, ...) not listed in "
                    "a _spark_metadata log; SparkTableSink needs a table it alone appends to",
                    operator=operator,
                )
            # Before the first batch Spark would list the location itself, and
            # see the objects a commit copied before listing them: part of a
            # checkpoint. With the log present it reads through the log only.
            log.create()

    # ---- subtask side: two-phase commit ---------------------------------------

    def _root(self) -> str:
        if self.location is None:
            raise EddylineError(
                f"SparkTableSink({self.table!r}) was not attached with stream.sink_to()"
            )
        return self.location

    def open(self, ctx: dict[str, Any]) -> None:
        self._ctx = dict(ctx)
        self._opened = True
        run = self._run()
        attempt = int(ctx.get("attempt", 0))
        staging = os.path.join(self._root(), STAGING)
        lineage = self._lineage | {run}

        def stale(name: str) -> bool:
            owner = _owner(name)
            return owner is not None and (
                owner[0] in lineage and (owner[0] != run or owner[1] < attempt)
            )

        if self._remote:
            # Uploaded staging of checkpoints that never completed (see below);
            # that of other runs is swept after this run's first commit.
            staging_dir = self._dir(STAGING)
            for name in staging_dir.dirs():
                if name != INPROGRESS and stale(name):
                    staging_dir.child(name).remove_all()
            return
        # Staging of checkpoints that never completed, left by earlier runs of
        # this job (restored from) or earlier attempts of this run. The
        # restored checkpoint was committed by restore() before open().
        with contextlib.suppress(FileNotFoundError):
            for name in filter(stale, os.listdir(staging)):
                shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
        inprogress = os.path.join(staging, INPROGRESS)
        with contextlib.suppress(FileNotFoundError):
            for name in filter(stale, os.listdir(inprogress)):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(inprogress, name))

    def _run(self) -> str:
        return str(self._ctx.get("run_tag") or self._token[:12])

    def begin_transaction(self) -> _Txn:
        self._seq += 1
        return _Txn(
            run=self._run(),
            attempt=int(self._ctx.get("attempt", 0)),
            subtask=int(self._ctx.get("subtask_index", 0)),
            seq=self._seq,
        )

    def write(self, txn: _Txn, batch: pa.RecordBatch) -> None:
        if txn.writer is None:
            directory = self._inprogress_dir()
            os.makedirs(directory, exist_ok=True)
            txn.inprogress = os.path.join(
                directory,
                f"{txn.run}-a{txn.attempt}-s{txn.subtask:04d}-{txn.seq:06d}-{uuid.uuid4().hex[:8]}"
                ".parquet",
            )
            txn.writer = pq.ParquetWriter(
                txn.inprogress,
                batch.schema,
                coerce_timestamps="us",
                allow_truncated_timestamps=False,
            )
        txn.writer.write_batch(batch)
        txn.rows += batch.num_rows

    def _inprogress_dir(self) -> str:
        """Where open files are written: staging on a disk; on an object store a
        local temporary directory (the file is uploaded at pre-commit)."""
        if not self._remote:
            return os.path.join(self._root(), STAGING, INPROGRESS)
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="eddyline-spark-sink-")
        return self._tmp

    def on_checkpoint(self, txn: _Txn, checkpoint_id: int) -> None:
        txn.checkpoint = checkpoint_id

    def pre_commit(self, txn: _Txn) -> None:
        if txn.writer is None:
            return
        txn.writer.close()
        txn.writer = None
        assert txn.inprogress is not None and txn.checkpoint is not None
        with open(txn.inprogress, "rb") as fh:
            os.fsync(fh.fileno())
        txn.file = f"part-{txn.key}-s{txn.subtask:04d}-{txn.seq:06d}.parquet"
        if self._remote:
            self._dir(STAGING, txn.key).upload(txn.file, txn.inprogress)
            os.unlink(txn.inprogress)
            txn.inprogress = None
            return
        staged_dir = os.path.join(self._root(), STAGING, txn.key)
        os.makedirs(staged_dir, exist_ok=True)
        os.rename(txn.inprogress, os.path.join(staged_dir, txn.file))
        fsync_dir(staged_dir)
        txn.inprogress = None

    def commit(self, txn: _Txn) -> None:
        if not self._opened:
            # Called by restore(), before open(): remember the runs this job
            # descends from, whose leftover staging open() may remove.
            self._lineage.add(txn.run)
        if txn.checkpoint is None:
            return
        published = self._commit_objects(txn) if self._remote else self._commit_files(txn)
        spark = _SESSIONS.get(self._token)
        if spark is not None and published is not None:
            with contextlib.suppress(Exception):  # best effort: only the cached listing
                spark.catalog.refreshTable(self.table)

    def _commit_objects(self, txn: _Txn) -> int | None:
        """The commit on an object store (see the module docs): copy, then one log batch."""
        assert txn.checkpoint is not None
        root, staged_dir, log = self._dir(), self._dir(STAGING, txn.key), self._log()
        with _LOG_LOCK:
            logged = self._logged_files(log)
            staged = sorted(staged_dir.files())
            names = [n for n in staged if n not in logged]
            if txn.file is not None and txn.file not in logged and txn.file not in staged:
                if root.stat(txn.file) is None:
                    raise EddylineError(
                        f"SparkTableSink({self.table!r}) cannot commit checkpoint "
                        f"{txn.checkpoint}: its file {txn.file!r} is neither staged nor published",
                    )
                names.append(txn.file)
            published = None
            if names:
                present = []
                for name in names:
                    # A staged object another committer already logged and removed
                    # is missing here; its final object exists.
                    if root.copy_from(staged_dir, name, name) or root.stat(name) is not None:
                        present.append(name)
                assert isinstance(log, ObjectSinkLog)
                published = log.append_missing(log.file_uri(n) for n in present)
                self._check_logged(log, names, txn.checkpoint)
            for name in staged:
                staged_dir.remove(name)
        if not self._swept and self._opened and txn.run == self._run() and txn.subtask == 0:
            self._sweep_other_runs()
        return published

    def _sweep_other_runs(self) -> None:
        """Removes the staging of this job's runs that no restore descends from.

        Runs of one job share ``<job>`` in their tags ``<job>r<time>``
        (``environment._run_tag``). A run killed before any checkpoint of its
        own was restored from left staging nobody will publish: restoring
        "latest" restores the newest completed checkpoint. Swept once this
        run's first checkpoint is committed, when every subtask has restored
        (and so published) the checkpoint it started from, as ParquetSink
        sweeps its killed runs' files (``core/src/sink/parquet.rs``).
        """
        self._swept = True
        run = self._run()
        if "r" not in run:
            return  # no checkpoint dir: no job identity across runs
        job = run.split("r", 1)[0]
        staging_dir = self._dir(STAGING)
        for name in staging_dir.dirs():
            owner = _owner(name)
            if owner is None or owner[0] == run or owner[0] in self._lineage:
                continue
            if owner[0].startswith(f"{job}r"):
                staging_dir.child(name).remove_all()

    def _commit_files(self, txn: _Txn) -> int | None:
        """The commit on a filesystem (see the module docs): links, then one log batch."""
        assert txn.checkpoint is not None
        root = self._root()
        staged_dir = os.path.join(root, STAGING, txn.key)
        log = SinkLog(root)
        with _LOG_LOCK:
            logged = self._logged_files(log)
            try:
                staged = sorted(os.listdir(staged_dir))
            except FileNotFoundError:
                staged = []
            # Every subtask pre-committed into the staging dir before the
            # checkpoint completed, and a staged file stays there until a log
            # batch lists it: the dir names the whole checkpoint.
            names = [n for n in staged if n not in logged]
            if txn.file is not None and txn.file not in logged and txn.file not in staged:
                if not os.path.exists(os.path.join(root, txn.file)):
                    raise EddylineError(
                        f"SparkTableSink({self.table!r}) cannot commit checkpoint "
                        f"{txn.checkpoint}: its file {txn.file!r} is neither staged nor published",
                    )
                names.append(txn.file)
            published = None
            if names:
                for name in names:
                    with contextlib.suppress(FileExistsError, FileNotFoundError):
                        # A link, not a rename: the staged name stays until logged.
                        os.link(os.path.join(staged_dir, name), os.path.join(root, name))
                fsync_dir(root)
                final = [os.path.abspath(os.path.join(root, n)) for n in names]
                # One batch lists the whole checkpoint; a committer in another
                # process that got there first leaves nothing missing.
                published = log.append_missing(f for f in final if os.path.exists(f))
                self._check_logged(log, names, txn.checkpoint)
            for name in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(staged_dir, name))
            with contextlib.suppress(OSError):
                os.rmdir(staged_dir)
        return published

    def _check_logged(self, log: SinkLog, names: list[str], checkpoint: int) -> None:
        """Raises unless every file of checkpoint ``checkpoint`` is in the log now."""
        logged = self._logged_files(log)
        unlisted = [n for n in names if n not in logged]
        if unlisted:
            raise EddylineError(
                f"SparkTableSink({self.table!r}) cannot commit checkpoint "
                f"{checkpoint}: {unlisted[0]!r} is not in the log after publishing",
            )

    def _logged_files(self, log: SinkLog) -> set[str]:
        """Names of the files the log lists, read incrementally (batches are immutable)."""
        latest = log.latest()
        if self._logged_upto < 0:
            self._logged = {os.path.basename(f) for f in log.files_upto(latest)}
        else:
            for batch in range(self._logged_upto + 1, latest + 1):
                self._logged.update(os.path.basename(f) for f in log.new_files(batch))
        self._logged_upto = latest
        return self._logged

    def abort(self, txn: _Txn) -> None:
        if txn.writer is not None:
            with contextlib.suppress(Exception):
                txn.writer.close()
            txn.writer = None
        if txn.inprogress is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(txn.inprogress)
            txn.inprogress = None

    def close(self) -> None:
        if self._tmp is not None:  # the local directory of open files (object stores)
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


def refresh_tables(spark: Any) -> None:
    """Refreshes ``spark``'s cached file listing of every table a sink attached here writes.

    Worker processes commit without a session; the driver calls this after
    their attempt so that ``spark.table(table)`` sees what they committed.
    """
    for table in {t for token, t in list(_TABLES.items()) if _SESSIONS.get(token) is spark}:
        with contextlib.suppress(Exception):  # best effort: only the cached listing
            spark.catalog.refreshTable(table)


def _interrupted(name: str, staged: Any) -> bool:
    """Whether ``name`` is a file this sink published whose log batch never landed.

    A commit copies (or links) each staged file to its final name before it
    appends the log batch, and removes the staged name only once the batch
    lists it: a run killed in between leaves the final file next to its staged
    twin (``staged(key, name)``), and the restore commits that checkpoint again.
    """
    if not (name.startswith("part-") and name.endswith(".parquet")):
        return False
    key = name[len("part-") : -len(".parquet")].rsplit("-", 2)[0]
    return _owner(key) is not None and bool(staged(key, name))


def _owner(name: str) -> tuple[str, int] | None:
    """``(run, attempt)`` of a staging name ``<run>-a<attempt>-...``."""
    parts = name.split("-")
    if len(parts) < 2 or not parts[1].startswith("a") or not parts[1][1:].isdigit():
        return None
    return parts[0], int(parts[1][1:])
