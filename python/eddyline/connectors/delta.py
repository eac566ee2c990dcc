"""``ed.DeltaSink``: exactly-once writes to a Delta Lake table (API.md "Lakehouse sinks").

Built on the ``deltalake`` package (delta-rs), with one committer per
checkpoint (docs/DESIGN.md "One commit per checkpoint",
:mod:`eddyline._exec.global_commit`):

* each subtask stages the rows of checkpoint ``n`` as an Arrow IPC object under
  ``<table>/_eddyline_staging/<app id>/<n>/`` (a folder Delta readers ignore),
  written by the engine's storage layer, so the staged part is where every
  subtask, in any process, can read it;
* when ``n`` completes, one subtask reads every staged part of the run up to
  ``n`` and writes them as **one Delta commit** that carries the Delta
  application transaction ``(app_id, n)``; a re-commit after a failure finds
  ``n`` recorded and is skipped; a commit that loses a race with another
  writer is retried (Delta reconciles appends of different app ids; two
  commits of one app id conflict, and the loser finds the version recorded);
* the app id is unique to the job: made from the run's tag at the first
  start and kept in the checkpoints, so two jobs writing one table never take
  each other's commits for their own.

``mode="upsert"`` merges each commit's newest row per ``key`` into the table
(a running aggregate lands as a table of current values).

``compact_every=N`` bounds the table's file count (docs/DESIGN.md "Compacting
a Delta table"): after every N-th commit the committer compacts the table's
small files with delta-rs ``optimize.compact`` on a thread of its own, as a
Delta commit of its own that changes no rows; a compaction that conflicts with
another writer is retried, then left to the next one.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from .._storage import checked_storage_options, is_object_store_uri, local_path, probe_writable
from ..errors import EddylineError, GraphError
from ..sinks import TwoPhaseCommitSink

__all__ = ["DeltaSink"]

DeltaMode = Literal["append", "upsert"]

_STAGING = "_eddyline_staging"
"""Where subtasks stage their parts, inside the table (Delta readers skip ``_`` folders)."""
_COMMIT_ATTEMPTS = 50
_COMPACT_ATTEMPTS = 3
_COMPACTION_LOCK = "compaction.lock"
"""Held in the staging folder by the one job compacting the table (``_take_compaction_lock``)."""
_DELTA_ONLY_OPTIONS = ("aws_s3_allow_unsafe_rename", "aws_s3_locking_provider", "dynamo", "delta_")


def _deltalake() -> Any:
    try:
        import deltalake
    except ImportError as exc:  # pragma: no cover - the test extra installs it
        raise GraphError(
            "DeltaSink needs the 'deltalake' package: pip install 'eddyline[delta]'"
        ) from exc
    return deltalake


def _newest_per_key(table: pa.Table, key: Sequence[str]) -> pa.Table:
    """The last row of ``table`` for each key (rows are in arrival order)."""
    index = "__eddyline_row"
    numbered = table.append_column(index, pa.array(range(table.num_rows), pa.int64()))
    last = numbered.group_by(list(key), use_threads=False).aggregate([(index, "max")])
    return table.take(last[f"{index}_max"])


class DeltaSink(TwoPhaseCommitSink):
    """Writes a stream to a Delta Lake table, exactly once.

    Args:
        uri: The table: a local path or an object store URI (``s3://...``);
            created on the first commit if missing.
        mode: ``"append"`` adds every row; ``"upsert"`` merges each
            checkpoint's newest row per ``key`` into the table.
        key: The key columns of ``mode="upsert"``.
        storage_options: Options of the object store, as delta-rs takes them
            (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...); unset keys come
            from the environment variables.
        partition_by: Partition columns of a table the sink creates.
        compact_every: Compact the table's small files after every this many
            commits of the sink (``None``: never). The compaction is a Delta
            commit of its own that changes no rows, run off the task threads.
        target_file_size: The size in bytes the sink's writes split files at
            and compaction packs small files up to (``None``: the table's
            ``delta.targetFileSize``, else delta-rs's 100 MB).

    Raises:
        ValueError: For an unknown mode, upsert without a key, or a
            ``compact_every`` or ``target_file_size`` that is not a positive
            integer.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        mode: DeltaMode = "append",
        key: str | Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        partition_by: str | Sequence[str] | None = None,
        compact_every: int | None = None,
        target_file_size: int | None = None,
    ) -> None:
        location = os.fspath(uri)
        if not isinstance(location, str) or not location:
            raise ValueError(f"DeltaSink needs a table path or URI, got {uri!r}")
        if not is_object_store_uri(location):
            location = local_path(location, what="DeltaSink")
        if mode not in ("append", "upsert"):
            raise ValueError(f"DeltaSink mode must be 'append' or 'upsert', got {mode!r}")
        keys = [key] if isinstance(key, str) else list(key or [])
        if mode == "upsert" and not keys:
            raise ValueError("DeltaSink(mode='upsert') needs key= (the key columns)")
        self.uri = location
        self.mode: DeltaMode = mode
        self.key = keys
        self.storage_options = checked_storage_options(storage_options)
        self.partition_by = [partition_by] if isinstance(partition_by, str) else partition_by
        self.compact_every = _positive_or_none(compact_every, "compact_every")
        self.target_file_size = _positive_or_none(target_file_size, "target_file_size")
        self._env_options: dict[str, str] = {}
        self._operator = "DeltaSink"
        self._commits = 0  # since this instance last started a compaction
        self._compactor: threading.Thread | None = None
        self._compact_error: BaseException | None = None
        self._app_id = ""  # of the last commit: the job the compaction lock names
        self._attempt = ""  # this instance: "<run tag>a<attempt>\n<subtask>", set by open()

    def open(self, ctx: dict[str, Any]) -> None:
        self._operator = str(ctx.get("name") or "DeltaSink")
        run = str(ctx.get("run_tag") or uuid.uuid4().hex)
        self._attempt = f"{run}a{int(ctx.get('attempt', 0))}\n{int(ctx.get('subtask_index', 0))}"

    def __repr__(self) -> str:
        return f"DeltaSink({self.uri!r}, mode={self.mode!r})"

    def __getstate__(self) -> dict[str, Any]:
        # Sent to worker processes before it runs: no thread goes with it.
        return {**self.__dict__, "_compactor": None, "_compact_error": None, "_commits": 0}

    def close(self) -> None:
        """Waits for a running compaction; raises the error of a failed one."""
        compactor = self._compactor
        if compactor is not None:
            compactor.join()
        self._raise_compact_error()

    # The engine drives this sink with one committer per checkpoint
    # (eddyline._exec.global_commit), not with the per-subtask transactions of
    # TwoPhaseCommitSink.
    _global_committer = True

    def _bind(self, operator: str, schema: pa.Schema | None) -> None:
        missing = [k for k in self.key if schema is not None and k not in schema.names]
        if missing:
            raise GraphError(
                f"DeltaSink '{operator}': key column(s) {missing} are not in the stream "
                f"(columns: {schema.names if schema is not None else []})",
                operator=operator,
            )

    def _bind_storage(self, environment_options: Mapping[str, str]) -> None:
        """The environment's ``storage_options``, under the sink's own (API.md: "given once")."""
        self._env_options = dict(environment_options)

    def _probe_storage(self, operator: str) -> None:
        """Before the job runs: a missing bucket, wrong credentials or an unreachable
        endpoint is a StorageError naming the table and the endpoint."""
        if is_object_store_uri(self.uri):
            store = self._staging("probe")
            probe_writable(
                self.uri, self._options(), what="DeltaSink", operator=operator, store=store
            )

    def _options(self) -> dict[str, str]:
        return {**self._env_options, **self.storage_options}

    def _table(self) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.uri, storage_options=self._options() or None)
        except deltalake.exceptions.TableNotFoundError:
            return None

    def _staging_root(self) -> Any:
        from .._core import StoreDir  # the engine's storage layer (core/src/store.rs)

        # Keys only delta-rs knows (its S3 locking) are not object store keys.
        options = {
            k: v for k, v in self._options().items() if not k.startswith(_DELTA_ONLY_OPTIONS)
        }
        return StoreDir(self.uri, options or None).child(_STAGING)

    def _staging(self, app_id: str) -> Any:
        return self._staging_root().child(app_id)

    def _new_app_id(self, ctx: dict[str, Any]) -> str:
        run = str(ctx.get("run_tag") or uuid.uuid4().hex)
        name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(ctx.get("name", "delta")))
        return f"eddyline-{run}-{name}"

    def _stage(
        self, app_id: str, tag: str, subtask: int, checkpoint_id: int, rows: list[pa.RecordBatch]
    ) -> None:
        out = pa.BufferOutputStream()
        schema = rows[0].schema if rows else pa.schema([])
        with pa.ipc.new_stream(out, schema) as writer:
            for batch in rows:
                writer.write_batch(batch)
        folder = self._staging(app_id).child(f"{checkpoint_id:020d}")
        folder.put(f"{tag}-{subtask:05d}.arrow", out.getvalue().to_pybytes())

    def _is_committer(self, app_id: str, tag: str, subtask: int, checkpoint_id: int) -> bool:
        folder = self._staging(app_id).child(f"{checkpoint_id:020d}")
        staged = [_part_subtask(name, tag) for name in folder.files()]
        return min((s for s in staged if s is not None), default=-1) == subtask

    def _staged(
        self, app_id: str, tags: Mapping[str, int], floor: int, version: int
    ) -> list[pa.RecordBatch] | None:
        """The rows of every staged part of ``tags`` (tag -> highest checkpoint) in
        ``(floor, version]``, in checkpoint and subtask order; ``None`` when a part
        vanished (another committer committed and removed it)."""
        staging = self._staging(app_id)
        batches: list[pa.RecordBatch] = []
        for folder_name in sorted(staging.dirs()):
            if not folder_name.isdigit() or not floor < int(folder_name) <= version:
                continue
            checkpoint_id = int(folder_name)
            folder = staging.child(folder_name)
            parts = []
            for name in folder.files():
                for tag, upto in tags.items():
                    sub = _part_subtask(name, tag)
                    if sub is not None and checkpoint_id <= upto:
                        parts.append((sub, name))
            for _, name in sorted(parts):
                data = folder.read(name)
                if data is None:
                    return None
                batches.extend(pa.ipc.open_stream(data).read_all().to_batches())
        return batches

    def _commit(self, app_id: str, version: int, tags: dict[str, int]) -> None:
        """Commits every staged part of ``tags`` not yet in the table as one Delta
        commit recording ``(app_id, version)``; skipped if the table has it."""
        deltalake = _deltalake()
        self._raise_compact_error()
        self._app_id = app_id
        for attempt in range(_COMMIT_ATTEMPTS):
            table = self._table()
            floor = (table.transaction_version(app_id) if table is not None else None) or 0
            if floor >= version:
                return  # committed before (a re-commit after a failure, or another committer)
            rows = self._staged(app_id, tags, floor, version)
            if rows is None:
                continue
            wrote = any(b.num_rows for b in rows)
            if wrote and table is None:
                self._create(pa.Table.from_batches(rows).schema)
                continue
            try:
                if wrote:
                    self._write(table, pa.Table.from_batches(rows), app_id, version)
            except deltalake.exceptions.CommitFailedError:
                # A concurrent commit won: re-read the table and try again.
                time.sleep(min(1.0, 0.02 * (attempt + 1)) * random.random())
                continue
            except deltalake.exceptions.DeltaError:
                if table is not None:
                    raise
                continue  # another writer created the table meanwhile
            self._remove_staged(app_id, version)
            if wrote:
                self._committed()
            return
        raise EddylineError(
            f"DeltaSink '{self._operator}': the commit of checkpoint {version} to "
            f"{self.uri!r} lost the race with other writers {_COMMIT_ATTEMPTS} times",
            operator=self._operator,
        )

    def _create(self, schema: pa.Schema) -> None:
        """Creates the table, empty, unless it exists.

        A commit that creates the table reads no snapshot, so Delta checks it
        against no concurrent commit: two committers of one checkpoint (the
        subtasks of a restored job re-committing what it staged, or a job's
        committers at a change of committer) that both found no table would
        both land, and the rows twice. So the table is created without rows
        first, and every commit of rows runs against a snapshot, where Delta
        refuses the second of two commits of one app id. The create is not
        retried: of two at once, the one that loses version 0 would otherwise
        land as version 1 with a table id and schema of its own (a reader that
        follows the table, e.g. a Delta streaming source, takes that for
        another table); it fails instead, and the table it lost to is used.
        """
        deltalake = _deltalake()
        try:
            deltalake.DeltaTable.create(
                self.uri,
                schema,
                mode="ignore",
                partition_by=self.partition_by,
                storage_options=self._options() or None,
                # Not retried: a create that lost version 0 to another one
                # would land as version 1, a second table id and schema.
                commit_properties=deltalake.CommitProperties(max_commit_retries=0),
            )
        except deltalake.exceptions.DeltaError:
            if self._table() is None:
                raise  # not a concurrent create: a failure of its own

    def _remove_staged(self, app_id: str, version: int) -> None:
        staging = self._staging(app_id)
        for folder_name in staging.dirs():
            if folder_name.isdigit() and int(folder_name) <= version:
                staging.child(folder_name).remove_all()

    def _commit_alone(self, rows: list[pa.RecordBatch]) -> None:
        """Without checkpoints (nothing to restore): this subtask's rows, retried on a
        conflict."""
        deltalake = _deltalake()
        self._raise_compact_error()
        self._app_id = f"eddyline-{self._attempt.split()[0]}-unchecked"
        data = pa.Table.from_batches(rows)
        for attempt in range(_COMMIT_ATTEMPTS):
            table = self._table()
            if table is None:
                self._create(data.schema)  # one table id, however many create it at once
                continue
            try:
                self._write(table, data, None, 0)
                self._committed()
                return
            except deltalake.exceptions.CommitFailedError:
                time.sleep(min(1.0, 0.02 * (attempt + 1)) * random.random())
        raise EddylineError(
            f"DeltaSink '{self._operator}': the commit to {self.uri!r} lost the race with "
            f"other writers {_COMMIT_ATTEMPTS} times",
            operator=self._operator,
        )

    def _committed(self) -> None:
        """Counts a commit that wrote rows; every ``compact_every``-th starts a
        compaction unless one is still running (then the next commit starts it)."""
        self._commits += 1
        if self.compact_every is None or self._commits < self.compact_every:
            return
        if self._compactor is not None and self._compactor.is_alive():
            return
        self._commits = 0
        self._compactor = threading.Thread(
            target=self._compact, name=f"eddyline-compact-{self._operator}", daemon=True
        )
        self._compactor.start()

    def _compact(self) -> None:
        """Packs the table's small files into files of about ``target_file_size``.

        A compaction removes files and adds one with the same rows, in one
        commit marked as not changing data: a reader sees all of it or none,
        and a kill leaves only unreferenced files. Delta checks it against the
        commits since the version it read: a concurrent append is kept (its
        files are not in the compaction), a concurrent merge or compaction that
        removed a file it read fails it, and it is tried again on the new
        version, then left to the next compaction.
        """
        deltalake = _deltalake()
        try:
            lock = self._staging_root()
            if not self._take_compaction_lock(lock):
                return  # another job is compacting: the next compaction of this one follows
            try:
                for attempt in range(_COMPACT_ATTEMPTS):
                    table = self._table()
                    if table is None:
                        return
                    try:
                        table.optimize.compact(
                            target_size=self.target_file_size, max_concurrent_tasks=1
                        )
                        return
                    except deltalake.exceptions.CommitFailedError:
                        time.sleep(min(1.0, 0.05 * (attempt + 1)) * random.random())
            finally:
                lock.remove(_COMPACTION_LOCK)
        except BaseException as e:  # handed to the task thread by _raise_compact_error
            self._compact_error = e

    def _take_compaction_lock(self, staging: Any) -> bool:
        """One compaction of the table at a time among eddyline writers.

        delta-rs (1.x) lets two compactions that removed the same files both
        commit, and each one's new file holds those rows: they would be
        duplicated. The lock names the job's app id, its attempt and the
        subtask, and is held only while compacting. A lock of this job left by
        an earlier attempt is taken over: that attempt ended (a restart or a
        restore starts only when it did), so nothing of it is compacting.
        """
        owner = f"{self._app_id}\n{self._attempt}"
        if staging.put_if_absent(_COMPACTION_LOCK, owner.encode()):
            return True
        held = (staging.read(_COMPACTION_LOCK) or b"").decode(errors="replace").split("\n")
        mine = owner.split("\n")
        if held[0] == mine[0] and held[1:2] != mine[1:2]:
            staging.put(_COMPACTION_LOCK, owner.encode())
            return True
        return False

    def _raise_compact_error(self) -> None:
        error, self._compact_error = self._compact_error, None
        if error is not None:
            raise EddylineError(
                f"DeltaSink '{self._operator}': compacting the small files of {self.uri!r} "
                f"failed: {type(error).__name__}: {error}",
                operator=self._operator,
            ) from error

    def _write(self, table: Any, data: pa.Table, app_id: str | None, version: int) -> None:
        deltalake = _deltalake()
        props = (
            deltalake.CommitProperties(
                app_transactions=[deltalake.Transaction(app_id=app_id, version=version)]
            )
            if app_id is not None
            else None
        )
        if self.mode == "upsert":
            data = _newest_per_key(data, self.key)
            if table is not None:
                predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.key)
                (
                    table.merge(
                        data,
                        predicate=predicate,
                        source_alias="s",
                        target_alias="t",
                        commit_properties=props,
                    )
                    .when_matched_update_all()
                    .when_not_matched_insert_all()
                    .execute()
                )
                return
        deltalake.write_deltalake(
            table if table is not None else self.uri,
            data,
            mode="append",
            partition_by=self.partition_by if table is None else None,
            storage_options=self._options() or None,
            target_file_size=self.target_file_size,
            commit_properties=props,
        )


def _positive_or_none(value: int | None, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"DeltaSink {name}= must be a positive integer or None, got {value!r}")
    return value


def _part_subtask(name: str, tag: str) -> int | None:
    """The subtask of staged part ``name`` of run ``tag`` (``<tag>-<subtask>.arrow``)."""
    prefix, suffix = f"{tag}-", ".arrow"
    if (
        name.startswith(prefix)
        and name.endswith(suffix)
        and name[len(prefix) : -len(suffix)].isdigit()
    ):
        return int(name[len(prefix) : -len(suffix)])
    return None
