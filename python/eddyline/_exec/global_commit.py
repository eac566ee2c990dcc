"""The executor of a sink with one committer per checkpoint (Flink's global committer).

docs/DESIGN.md "One commit per checkpoint": every subtask writes the rows of
checkpoint ``n`` as a staged part where the sink's target lives (so that
subtasks in other processes and on other hosts reach it) and keeps a
reference to it as operator state; when ``n`` completes, one subtask, the
lowest index that staged a part of ``n``, commits every staged part of this
run up to ``n`` as one commit that records ``(app_id, n)``. A commit whose
version the target has already recorded is skipped; two commits racing for
one app id conflict and the loser re-checks. The other subtasks drop their
references at the notification; the committer keeps its own until its commit
succeeded, so a checkpoint taken before that commit still names the run's
parts and a restore commits them.

The app id is created on the first start from the run's tag (shared by every
subtask and worker process) and kept in every subtask's state (union list
state, so any restore, at any parallelism, gives every subtask the same id).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar

import pyarrow as pa

from .._storage import storage_failure
from ..errors import CheckpointError, StorageError
from .base import Runner, RunnerOutput, State
from .two_phase import END_OF_JOB
from .user_code import UserCode

T = TypeVar("T")


class GlobalCommitSink(Protocol):
    """What :class:`GlobalCommitRunner` asks of its sink."""

    uri: str

    def _options(self) -> dict[str, str]: ...

    def open(self, ctx: dict[str, Any]) -> None: ...

    def _new_app_id(self, ctx: dict[str, Any]) -> str: ...

    def _stage(
        self, app_id: str, tag: str, subtask: int, checkpoint_id: int, rows: list[pa.RecordBatch]
    ) -> None: ...

    def _is_committer(self, app_id: str, tag: str, subtask: int, checkpoint_id: int) -> bool: ...

    def _commit(self, app_id: str, version: int, tags: dict[str, int]) -> None: ...

    def _commit_alone(self, rows: list[pa.RecordBatch]) -> None: ...

    def close(self) -> None: ...


class GlobalCommitRunner(Runner):
    """Drives a sink with one commit per checkpoint for all its subtasks.

    State: ``("app", app_id)`` and ``("refs", [(checkpoint_id, tag), ...])``
    entries, as union list state.
    """

    redistributable: ClassVar[bool] = True
    union_state: ClassVar[bool] = True

    def __init__(self, node: str, sink: GlobalCommitSink) -> None:
        self.name = node
        self._sink = sink
        self._rows: list[pa.RecordBatch] = []
        self._open = False
        self._finished = False
        self._app_id = ""
        self._tag = ""
        self._subtask = 0
        self._pending: set[tuple[int, str]] = set()
        self._final: list[pa.RecordBatch] | None = None
        self._restored_app: str | None = None
        self._restored: set[tuple[int, str]] = set()

    def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Calls the built-in sink. A failed request to its storage is a
        StorageError naming the sink, its URI and the endpoint (not a user
        function's failure); anything else is wrapped as user code is."""
        with UserCode(self.name):
            try:
                return fn(*args)
            except (StorageError, OSError) as exc:
                what = type(self._sink).__name__
                raise storage_failure(
                    exc, self._sink.uri, self._sink._options(), what=what, operator=self.name
                ) from exc

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._call(self._sink.open, ctx)
        self._subtask = int(ctx.get("subtask_index", 0))
        self._tag = f"{ctx.get('run_tag', '')}a{int(ctx.get('attempt', 0))}"
        self._app_id = self._restored_app or self._call(self._sink._new_app_id, ctx)
        restored, self._restored = self._restored, set()
        if restored:
            # Committed before anything else, so that every part a later
            # commit of this run could miss is already in the table.
            tags: dict[str, int] = {}
            for checkpoint_id, tag in restored:
                tags[tag] = max(tags.get(tag, 0), checkpoint_id)
            version = max(tags.values())
            self._call(self._sink._commit, self._app_id, version, tags)
        self._open = True

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows:
            self._rows.append(batch)
        return None

    def snapshot(self, checkpoint_id: int) -> State | None:
        if self._open:
            rows, self._rows = self._rows, []
            self._open = checkpoint_id != END_OF_JOB and not self._finished
            if checkpoint_id == END_OF_JOB:
                self._final = rows  # no checkpoints: nothing to restore, nothing staged
            else:
                self._call(
                    self._sink._stage,
                    self._app_id,
                    self._tag,
                    self._subtask,
                    checkpoint_id,
                    rows,
                )
                self._pending.add((checkpoint_id, self._tag))
        return [
            pickle.dumps(("app", self._app_id)),
            pickle.dumps(("refs", sorted(self._pending))),
        ]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if checkpoint_id == END_OF_JOB:
            final, self._final = self._final, None
            if final:
                self._call(self._sink._commit_alone, final)
            return
        done = {p for p in self._pending if p[0] <= checkpoint_id}
        if not done:
            return
        staged = (checkpoint_id, self._tag) in self._pending
        if staged and self._call(
            self._sink._is_committer,
            self._app_id,
            self._tag,
            self._subtask,
            checkpoint_id,
        ):
            self._call(
                self._sink._commit,
                self._app_id,
                checkpoint_id,
                {self._tag: checkpoint_id},
            )
        self._pending -= done

    def restore(self, data: State) -> None:
        if not isinstance(data, list):
            raise TypeError(
                f"operator '{self.name}': its state is a list of entries, got {type(data).__name__}"
            )
        for entry in data:
            try:
                if not isinstance(entry, bytes | bytearray | memoryview):
                    raise TypeError(f"an entry is {type(entry).__name__}, not bytes")
                kind, value = pickle.loads(entry)
            except Exception as e:
                raise CheckpointError(
                    f"operator '{self.name}': its state in the checkpoint is not a list of "
                    f"staged parts (written by an older version of the sink?): {e}",
                    operator=self.name,
                ) from e
            if kind == "app":
                self._restored_app = str(value)
            elif kind == "refs":
                self._restored.update((int(c), str(t)) for c, t in value)

    def finish(self) -> RunnerOutput:
        # Nothing commits here: only a completed checkpoint may commit.
        self._finished = True
        return None

    def close(self) -> None:
        self._rows = []
        self._call(self._sink.close)
