"""A reference two-phase-commit sink that logs every phase, for the 2PC tests."""

from __future__ import annotations

import json
import os
import threading
import uuid
from typing import Any

import pyarrow as pa

from eddyline.sinks import TwoPhaseCommitSink


class RecordingTwoPhaseSink(TwoPhaseCommitSink):
    """A reference exactly-once sink that logs every phase durably.

    Each transaction is written at pre-commit to ``dir/pending/<txn>.arrow``
    and committed by renaming it into ``dir/committed/`` (idempotent: a
    re-commit of a committed transaction only logs ``"recommit"``). Every
    phase is appended, fsynced, to ``dir/log.jsonl`` as one JSON object:
    ``{"phase", "txn", "checkpoint", "subtask", "attempt", "rows", "pid"}``
    (``phase`` is ``begin``, ``pre_commit``, ``commit``, ``recommit`` or
    ``abort``; ``checkpoint`` is the id the transaction was pre-committed for).
    Works across threads and processes.

    Args:
        dir: The sink's directory (created if missing).
    """

    END_OF_JOB = 2**64 - 1

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = os.fspath(dir)
        self.subtask = 0
        self.attempt = 0

    # -- reading the outcome ---------------------------------------------------

    @staticmethod
    def read_log(dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """The logged phases, in the order they were written."""
        path = os.path.join(os.fspath(dir), "log.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as log:
            return [json.loads(line) for line in log if line.strip()]

    @staticmethod
    def committed(dir: str | os.PathLike[str]) -> pa.Table:
        """The rows of every committed transaction (an empty table if none)."""
        import pyarrow.ipc as ipc

        root = os.path.join(os.fspath(dir), "committed")
        tables = []
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            if name.endswith(".arrow"):
                with pa.memory_map(os.path.join(root, name)) as source:
                    tables.append(ipc.open_file(source).read_all())
        tables = [t for t in tables if t.num_rows]
        return pa.concat_tables(tables) if tables else pa.table({})

    # -- the sink ---------------------------------------------------------------

    _lock = threading.Lock()

    def _log(self, phase: str, txn: dict[str, Any], **extra: Any) -> None:
        entry = {
            "phase": phase,
            "txn": txn["id"],
            "checkpoint": txn.get("checkpoint"),
            "subtask": txn.get("subtask", self.subtask),
            "attempt": self.attempt,
            "rows": txn.get("rows", 0),
            "pid": os.getpid(),
            **extra,
        }
        line = (json.dumps(entry) + "\n").encode()
        path = os.path.join(self.dir, "log.jsonl")
        with RecordingTwoPhaseSink._lock:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _path(self, kind: str, txn: dict[str, Any]) -> str:
        suffix = ".arrow" if txn["rows"] else ".empty"
        return os.path.join(self.dir, kind, f"{txn['id']}{suffix}")

    def open(self, ctx: dict[str, Any]) -> None:
        self.subtask = int(ctx.get("subtask_index", 0))
        self.attempt = int(ctx.get("attempt", 0))
        for kind in ("pending", "committed"):
            os.makedirs(os.path.join(self.dir, kind), exist_ok=True)

    def begin_transaction(self) -> dict[str, Any]:
        txn: dict[str, Any] = {
            "id": f"s{self.subtask}-a{self.attempt}-{uuid.uuid4().hex[:12]}",
            "subtask": self.subtask,
            "checkpoint": None,
            "rows": 0,
            "batches": [],
        }
        self._log("begin", txn)
        return txn

    def write(self, txn: dict[str, Any], batch: pa.RecordBatch) -> None:
        txn["batches"].append(batch)
        txn["rows"] += batch.num_rows

    def on_checkpoint(self, txn: dict[str, Any], checkpoint_id: int) -> None:
        txn["checkpoint"] = checkpoint_id

    def pre_commit(self, txn: dict[str, Any]) -> None:
        import pyarrow.ipc as ipc

        batches: list[pa.RecordBatch] = txn["batches"]
        path = self._path("pending", txn)
        tmp = path + ".tmp"
        if batches:
            with pa.OSFile(tmp, "wb") as out, ipc.new_file(out, batches[0].schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        else:
            open(tmp, "wb").close()
        with open(tmp, "rb+") as done:
            os.fsync(done.fileno())
        os.replace(tmp, path)
        txn["batches"] = []
        self._log("pre_commit", txn)

    def commit(self, txn: dict[str, Any]) -> None:
        pending, committed = self._path("pending", txn), self._path("committed", txn)
        if os.path.exists(committed):
            self._log("recommit", txn)
            return
        try:
            os.replace(pending, committed)
        except FileNotFoundError:
            if os.path.exists(committed):  # a concurrent re-commit won the race
                self._log("recommit", txn)
                return
            raise RuntimeError(
                f"transaction {txn['id']} was never pre-committed: no {pending}"
            ) from None
        self._log("commit", txn)

    def abort(self, txn: dict[str, Any]) -> None:
        txn["batches"] = []
        self._log("abort", txn)
