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
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from .._storage import is_object_store_uri
from ..errors import EddylineError, GraphError, SchemaError, StorageError
from ..sinks import TwoPhaseCommitSink
from ._filelog import SinkLog, fsync_dir, local_path
from ._lazy import require_pyspark

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
        path: Where a new table's files live (a local or shared filesystem; an
            object store URI is a :class:`~eddyline.errors.StorageError`).
        schema: The rows' Arrow schema, for streams whose schema is only known
            at run time (by default the stream's schema).

    Raises:
        SchemaError: The existing table's columns differ from the stream's.
        GraphError: The table is not a Parquet table on the local filesystem,
            its location cannot be written, or it holds files that were not
            written through a Spark file sink log.

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
    ) -> None:
        require_pyspark("SparkTableSink")
        if not isinstance(table, str) or not table:
            raise ValueError(f"SparkTableSink needs a table name, got {table!r}")
        self.table = table
        self.path = os.fspath(path) if path is not None else None
        if self.path is not None and is_object_store_uri(self.path):
            # Spark would have to create and read the table through its own S3A
            # connector (hadoop-aws), which eddyline cannot provide or test here.
            raise StorageError(
                f"SparkTableSink({table!r}): path {self.path!r} is an object store URI; "
                "SparkTableSink writes tables on local or shared filesystems only. Use "
                "ed.DeltaSink or ed.ParquetSink for s3://, gs:// or az:// locations",
                uri=self.path,
            )
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

    def __repr__(self) -> str:
        return f"SparkTableSink({self.table!r})"

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

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
            if self.path is not None:
                self._check_location(operator, os.path.abspath(self.path))
            try:
                if self.path is not None:
                    spark.catalog.createTable(
                        self.table,
                        path=os.path.abspath(self.path),
                        source="parquet",
                        schema=wanted,
                    )
                else:
                    spark.catalog.createTable(self.table, source="parquet", schema=wanted)
            except Exception as exc:
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
        try:
            location = local_path(details.get("Location", ""))
        except ValueError as exc:
            raise GraphError(
                f"operator '{operator}': Spark table {self.table!r} is not on the local "
                f"filesystem: {exc}",
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
                if not name.startswith(("_", ".")) and os.path.isfile(os.path.join(location, name))
            ]
            if stray:
                raise GraphError(
                    f"operator '{operator}': the location {location!r} of Spark table "
                    f"{self.table!r} already holds data files ({stray[0]!r}, ...) not listed in "
                    "a _spark_metadata log; SparkTableSink needs a table it alone appends to",
                    operator=operator,
                )
            os.makedirs(log.dir, exist_ok=True)

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
        # Staging of checkpoints that never completed, left by earlier runs of
        # this job (restored from) or earlier attempts of this run. The
        # restored checkpoint was committed by restore() before open().
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(staging):
                owner = _owner(name)
                if owner is None:
                    continue
                name_run, name_attempt = owner
                if name_run in lineage and (name_run != run or name_attempt < attempt):
                    shutil.rmtree(os.path.join(staging, name), ignore_errors=True)
        inprogress = os.path.join(staging, INPROGRESS)
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(inprogress):
                owner = _owner(name)
                if owner is None:
                    continue
                name_run, name_attempt = owner
                if name_run in lineage and (name_run != run or name_attempt < attempt):
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
            directory = os.path.join(self._root(), STAGING, INPROGRESS)
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
                logged = self._logged_files(log)
                unlisted = [n for n in names if n not in logged]
                if unlisted:
                    raise EddylineError(
                        f"SparkTableSink({self.table!r}) cannot commit checkpoint "
                        f"{txn.checkpoint}: {unlisted[0]!r} is not in the log after publishing",
                    )
            for name in staged:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(staged_dir, name))
            with contextlib.suppress(OSError):
                os.rmdir(staged_dir)
        spark = _SESSIONS.get(self._token)
        if spark is not None and published is not None:
            with contextlib.suppress(Exception):  # best effort: only the cached listing
                spark.catalog.refreshTable(self.table)

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


def refresh_tables(spark: Any) -> None:
    """Refreshes ``spark``'s cached file listing of every table a sink attached here writes.

    Worker processes commit without a session; the driver calls this after
    their attempt so that ``spark.table(table)`` sees what they committed.
    """
    for table in {t for token, t in list(_TABLES.items()) if _SESSIONS.get(token) is spark}:
        with contextlib.suppress(Exception):  # best effort: only the cached listing
            spark.catalog.refreshTable(table)


def _owner(name: str) -> tuple[str, int] | None:
    """``(run, attempt)`` of a staging name ``<run>-a<attempt>-...``."""
    parts = name.split("-")
    if len(parts) < 2 or not parts[1].startswith("a") or not parts[1][1:].isdigit():
        return None
    return parts[0], int(parts[1][1:])
