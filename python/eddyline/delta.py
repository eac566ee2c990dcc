"""``ed.DeltaSink``: exactly-once writes to a Delta Lake table (API.md "Lakehouse sinks").

Built on the ``deltalake`` package (delta-rs) as a :class:`TwoPhaseCommitSink`:

* a transaction holds the rows written between two checkpoints; they are
  checkpointed with it (pre-commit has nothing more to make durable);
* commit writes them as **one Delta commit** that carries a Delta application
  transaction ``(app_id, version)``: the app id names the sink instance that
  wrote the rows, the version counts its commits. A re-commit after a failure
  finds its version already recorded in the table's log and is skipped, so a
  transaction lands once, never twice;
* versions continue after the highest one the table has recorded for the app
  id, not after the checkpoint id, so a new job (another checkpoint directory)
  writing to the same table never mistakes its commits for old ones.

``mode="upsert"`` merges each transaction's newest row per ``key`` into the
table (a running aggregate lands as a table of current values).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from ._storage import checked_storage_options, is_object_store_uri, local_path
from .errors import GraphError
from .sinks import TwoPhaseCommitSink

__all__ = ["DeltaSink"]

DeltaMode = Literal["append", "upsert"]


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

    Raises:
        ValueError: For an unknown mode, or upsert without a key.
    """

    def __init__(
        self,
        uri: str | os.PathLike[str],
        *,
        mode: DeltaMode = "append",
        key: str | Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        partition_by: str | Sequence[str] | None = None,
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
        self._app_id = ""
        self._next_version = 0

    def __repr__(self) -> str:
        return f"DeltaSink({self.uri!r}, mode={self.mode!r})"

    def _bind(self, operator: str, schema: pa.Schema | None) -> None:
        missing = [k for k in self.key if schema is not None and k not in schema.names]
        if missing:
            raise GraphError(
                f"DeltaSink '{operator}': key column(s) {missing} are not in the stream "
                f"(columns: {schema.names if schema is not None else []})",
                operator=operator,
            )

    def open(self, ctx: dict[str, Any]) -> None:
        self._app_id = f"eddyline:{ctx['name']}:{ctx['subtask_index']}"
        self._next_version = 0

    def _table(self) -> Any:
        deltalake = _deltalake()
        try:
            return deltalake.DeltaTable(self.uri, storage_options=self.storage_options or None)
        except deltalake.exceptions.TableNotFoundError:
            return None

    def begin_transaction(self) -> dict[str, Any]:
        return {"id": uuid.uuid4().hex, "app_id": self._app_id, "batches": [], "version": None}

    def write(self, txn: dict[str, Any], batch: pa.RecordBatch) -> None:
        if batch.num_rows:
            txn["batches"].append(batch)

    def pre_commit(self, txn: dict[str, Any]) -> None:
        # The rows are checkpointed with the transaction; fix its version now,
        # in the order the transactions will commit.
        if self._next_version == 0:
            table = self._table()
            recorded = table.transaction_version(self._app_id) if table is not None else None
            self._next_version = (recorded or 0) + 1
        txn["version"] = self._next_version
        self._next_version += 1

    def commit(self, txn: dict[str, Any]) -> None:
        deltalake = _deltalake()
        version = txn["version"]
        if version is None or not txn["batches"]:
            return
        table = self._table()
        if table is not None and (table.transaction_version(txn["app_id"]) or 0) >= version:
            return  # committed before a failure: a re-commit is skipped
        data = pa.Table.from_batches(txn["batches"])
        props = deltalake.CommitProperties(
            app_transactions=[deltalake.Transaction(app_id=txn["app_id"], version=version)]
        )
        if self.mode == "upsert" and table is not None:
            source = _newest_per_key(data, self.key)
            predicate = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.key)
            (
                table.merge(
                    source,
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
        if self.mode == "upsert":
            data = _newest_per_key(data, self.key)
        deltalake.write_deltalake(
            self.uri,
            data,
            mode="append",
            partition_by=self.partition_by,
            storage_options=self.storage_options or None,
            commit_properties=props,
        )

    def abort(self, txn: dict[str, Any]) -> None:
        txn["batches"].clear()
