"""Running jobs: :class:`JobClient` (a submitted job) and :class:`JobResult`.

``env.execute()`` blocks and returns a :class:`JobResult`;
``env.execute_async()`` returns a :class:`JobClient` to wait on, cancel or
checkpoint the running job.

The DSL returns these, so they sit below it (in the plan layer,
docs/ARCHITECTURE.md "The Python package"); the client re-exports them as
``eddyline.client.job``. The dashboard, which is the client's, is reached
through the registry (``_registry.dashboard_server``).
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TextIO

import pyarrow as pa

from ._registry import dashboard_server
from ._storage import storage_location
from .errors import CheckpointError

__all__ = ["CheckpointStats", "JobClient", "JobResult", "OperatorCheckpointStats"]

_POLL_S = 0.1
_PROGRESS_EVERY_S = 0.25


class Collected(Protocol):
    """What a job hands its collected batches to (``stream.collect()``'s
    :class:`~eddyline.CollectHandle`) when it finishes."""

    def _set(self, batches: list[pa.RecordBatch]) -> None: ...


@dataclass(frozen=True)
class OperatorCheckpointStats:
    """What one operator (all its subtasks) wrote into one checkpoint.

    Attributes:
        uid: The operator's stable id (``.uid(...)``, or the generated one).
        name: The operator's name.
        bytes: The size of its state in the checkpoint, over all subtasks.
        subtasks: How many subtasks acknowledged the checkpoint.
        recomputes: True when the operator persisted no state and is rebuilt
            by replaying input on recovery (``CheckpointConfig(recovery="recompute")``);
            False when its state was persisted.
    """

    uid: str
    name: str
    bytes: int
    subtasks: int
    recomputes: bool = False


@dataclass(frozen=True)
class CheckpointStats:
    """One completed checkpoint (or savepoint) of a job.

    Also readable like the dict the engine reports (``stats["id"]``).

    Attributes:
        id: The checkpoint id; ids keep increasing across restarts and restores.
        kind: ``"checkpoint"`` or ``"savepoint"``.
        trigger_time_ms: When it was triggered, in milliseconds since the epoch.
        duration_ms: From trigger to completion, in milliseconds.
        alignment_ms: The longest barrier alignment of any task, in milliseconds
            (0 when no task had to wait for a barrier).
        bytes: The bytes written for it (its state files).
        path: Its directory (``DIR/chk-<id>``).
        operators: Per-operator stats, by operator uid.
        null_state_checkpoint: The checkpoint a recompute-mode recovery of
            this one rewinds the sources to (FLINK-4120); the id itself when no
            operator recomputes (0 means the start of the job).
        state_bytes: The size of its whole state: what it wrote plus the
            sections it reuses from earlier checkpoints
            (``CheckpointConfig(incremental=True)``); equal to ``bytes`` for a
            full checkpoint.
        retention_errors: The deletions of older checkpoints (retention) that
            failed after this one completed, each naming the path and the
            cause (the job goes on; the job's metrics count them under
            ``"checkpoint_retention_failures"``).

    Example:
        >>> stats = CheckpointStats.from_dict({"id": 3, "kind": "checkpoint",
        ...     "trigger_time_ms": 1, "duration_ms": 2.5, "alignment_ms": 0.0,
        ...     "bytes": 10, "path": "/c/chk-3",
        ...     "operators": {"sum": {"name": "sum", "bytes": 10, "subtasks": 2}}})
        >>> stats.id, stats["bytes"], stats.operators["sum"].subtasks
        (3, 10, 2)
    """

    id: int
    kind: Literal["checkpoint", "savepoint"]
    trigger_time_ms: int
    duration_ms: float
    alignment_ms: float
    bytes: int
    path: str
    operators: Mapping[str, OperatorCheckpointStats] = field(
        default_factory=dict, hash=False, compare=True
    )
    null_state_checkpoint: int = -1
    state_bytes: int = -1
    retention_errors: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckpointStats:
        """Builds the stats from the engine's dict (missing numbers read as 0)."""
        operators = {
            str(uid): OperatorCheckpointStats(
                uid=str(uid),
                name=str(op.get("name", uid)),
                bytes=int(op.get("bytes", 0)),
                subtasks=int(op.get("subtasks", 0)),
                recomputes=bool(op.get("recomputes", False)),
            )
            for uid, op in dict(data.get("operators") or {}).items()
        }
        return cls(
            id=int(data["id"]),
            kind=data.get("kind", "checkpoint"),
            trigger_time_ms=int(data.get("trigger_time_ms", 0)),
            duration_ms=float(data.get("duration_ms", 0.0)),
            alignment_ms=float(data.get("alignment_ms", 0.0)),
            bytes=int(data.get("bytes", 0)),
            path=str(data.get("path", "")),
            operators=operators,
            null_state_checkpoint=int(data.get("null_state_checkpoint", data["id"])),
            state_bytes=int(data.get("state_bytes", data.get("bytes", 0))),
            retention_errors=tuple(str(e) for e in data.get("retention_errors") or ()),
        )

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)


def _checkpoint_stats(
    items: Iterable[CheckpointStats | Mapping[str, Any]],
) -> list[CheckpointStats]:
    return [
        item if isinstance(item, CheckpointStats) else CheckpointStats.from_dict(item)
        for item in items
    ]


class JobResult:
    """The outcome of a finished job.

    Attributes:
        name: The job name.
        restarts: How many times the job was restarted after a failure.
        checkpoints: The completed checkpoints (:class:`CheckpointStats`), oldest
            first; with checkpointing on, the last one is the final checkpoint
            taken after every task finished (it committed the sinks' output).
        failed_checkpoints: How many checkpoints were aborted.
        checkpoint_failures: The latest failed checkpoints with their causes,
            oldest first: ``{"id": int, "kind": "checkpoint" | "savepoint",
            "reason": str}`` (a checkpoint that could not begin, timed out, or
            whose state or manifest could not be written).
        metrics: ``{"wall_time_s": float, "operators": {name: {"records_in",
            "records_out", "batches_in", "batches_out", "kind"}}}``.
    """

    def __init__(
        self,
        name: str,
        *,
        restarts: int = 0,
        checkpoints: Iterable[CheckpointStats | Mapping[str, Any]] = (),
        failed_checkpoints: int = 0,
        metrics: dict[str, Any] | None = None,
        checkpoint_failures: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        self.name = name
        self.restarts = restarts
        self.checkpoints: list[CheckpointStats] = _checkpoint_stats(checkpoints)
        self.failed_checkpoints = failed_checkpoints
        self.checkpoint_failures: list[dict[str, Any]] = [dict(f) for f in checkpoint_failures]
        self.metrics: dict[str, Any] = metrics if metrics is not None else {}

    @property
    def wall_time_s(self) -> float:
        """The job's wall time in seconds."""
        return float(self.metrics.get("wall_time_s", 0.0))

    @property
    def checkpoint_ids(self) -> list[int]:
        """The ids of the completed checkpoints."""
        return [c.id for c in self.checkpoints]

    def __repr__(self) -> str:
        return (
            f"JobResult(name={self.name!r}, restarts={self.restarts}, "
            f"checkpoints={len(self.checkpoints)}, wall_time_s={self.wall_time_s:.3f})"
        )


def _count(value: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def _rate(count: float, seconds: float) -> str:
    return _count(count / seconds if seconds > 0 else 0.0)


def progress_line(
    name: str,
    metrics: dict[str, Any],
    elapsed: float,
    *,
    previous: dict[str, Any] | None = None,
    interval: float = 0.0,
    last_checkpoint: CheckpointStats | None = None,
    restarts: int = 0,
) -> str:
    """Formats one line of live progress from a metrics snapshot.

    Each source and sink shows its total rows and its current rate: the
    rows since ``previous`` (the snapshot ``interval`` seconds earlier), or
    the average over ``elapsed`` without one. Then the last checkpoint and
    the restarts.

    Example:
        >>> m = {"operators": {"src": {"kind": "source", "records_out": 2000},
        ...                    "out": {"kind": "sink", "records_in": 1000}}}
        >>> progress_line("job", m, 2.0)
        'job 2.0s | src 2.0k rows 1.0k/s | out 1.0k rows 500/s | no checkpoint'
        >>> before = {"operators": {"src": {"records_out": 1900}, "out": {"records_in": 900}}}
        >>> progress_line("job", m, 2.0, previous=before, interval=0.5, restarts=1)
        'job 2.0s | src 2.0k rows 200/s | out 1.0k rows 200/s | no checkpoint | 1 restart'
    """
    parts = [f"{name} {elapsed:.1f}s"]
    operators: dict[str, dict[str, Any]] = metrics.get("operators", {})
    old: dict[str, dict[str, Any]] = (previous or {}).get("operators", {})
    for kind, key in (("source", "records_out"), ("sink", "records_in")):
        for op, stats in operators.items():
            if stats.get("kind") != kind:
                continue
            total = stats.get(key, 0)
            if previous is not None:
                rate = _rate(total - old.get(op, {}).get(key, total), interval)
            else:
                rate = _rate(total, elapsed)
            parts.append(f"{op} {_count(total)} rows {rate}/s")
    if last_checkpoint is None:
        parts.append("no checkpoint")
    else:
        c = last_checkpoint
        parts.append(f"checkpoint {c.id} ({_count(c.bytes)}B, {c.duration_ms:.0f} ms)")
    if restarts:
        parts.append(f"{restarts} restart{'s' if restarts != 1 else ''}")
    return " | ".join(parts)


class _Progress:
    """A live status line on a terminal (``rich``), redrawn in place; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._enabled = _is_tty(stream)
        self._last = 0.0
        self._live: Any = None
        self._previous: dict[str, Any] | None = None

    def update(self, client: JobClient) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last < _PROGRESS_EVERY_S:
            return
        metrics = client.metrics()
        checkpoints = client.checkpoints
        text = progress_line(
            client.name,
            metrics,
            now - client._started,
            previous=self._previous,
            interval=now - self._last,
            last_checkpoint=checkpoints[-1] if checkpoints else None,
            restarts=len(client.restart_causes()),
        )
        self._previous, self._last = metrics, now
        if self._live is None:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self._stream, highlight=False)
            self._live = Live(console=console, transient=True, auto_refresh=False)
            self._live.start()
        from rich.text import Text

        self._live.update(Text(text, overflow="ellipsis", no_wrap=True), refresh=True)

    def clear(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


_LIVE_HANDLES: weakref.WeakSet[Any] = weakref.WeakSet()


@atexit.register
def _cancel_running_jobs() -> None:
    """Cancels jobs still running when the interpreter exits.

    Their threads call into Python; letting them run into interpreter
    finalization would abort the process. Each job is cancelled and waited
    for briefly (committed output is never touched by a cancellation).
    """
    for handle in list(_LIVE_HANDLES):
        with contextlib.suppress(Exception):  # best effort at exit
            if handle.status in ("running", "restarting"):
                handle.cancel()
                handle.wait(10.0)


class JobClient:
    """A submitted job.

    Use :meth:`wait` for the result; Ctrl-C while waiting cancels the job.
    """

    def __init__(
        self,
        handle: Any,
        name: str,
        collects: Sequence[tuple[Collected, int]] = (),
    ) -> None:
        self._inner = handle
        with contextlib.suppress(TypeError):  # a test double without weak references
            _LIVE_HANDLES.add(handle)
        self._name = name
        self._collects = list(collects)
        self._result: JobResult | None = None
        self._started = time.monotonic()
        self._dashboard: Any = None

    def _serve_dashboard(self, nodes: Sequence[Mapping[str, Any]], port: int, host: str) -> None:
        """Starts the job's dashboard (``execute(dashboard=...)``) and prints its address."""
        serve = dashboard_server()
        try:
            self._dashboard = serve(self, nodes, port, host)
        except BaseException:
            self._inner.cancel()
            self._inner.wait(5.0)
            raise
        url = self._dashboard.url
        print(f"eddyline: dashboard of job '{self._name}' at {url}", file=sys.stderr)

    @property
    def dashboard_url(self) -> str | None:
        """The address of the job's web dashboard, ``None`` without one."""
        return self._dashboard.url if self._dashboard is not None else None

    def _close_dashboard(self) -> None:
        if self._dashboard is not None:
            self._dashboard.close()

    def restart_causes(self) -> list[dict[str, Any]]:
        """Every restart so far, oldest first: ``{"attempt", "time_ms", "cause"}``."""
        causes = getattr(self._inner, "restart_causes", None)
        return [dict(c) for c in causes()] if causes is not None else []

    @property
    def name(self) -> str:
        """The job name."""
        return self._name

    @property
    def status(self) -> str:
        """``"running"``, ``"restarting"``, ``"finished"``, ``"failed"`` or ``"cancelled"``."""
        return str(self._inner.status)

    def metrics(self) -> dict[str, Any]:
        """A live snapshot of the job's metrics."""
        metrics: dict[str, Any] = self._inner.metrics()
        return metrics

    def wait(self, timeout: float | None = None) -> JobResult:
        """Waits for the job to end and returns its result.

        Args:
            timeout: Seconds to wait at most; ``None`` waits as long as it takes.

        Returns:
            The job's result.

        Raises:
            JobFailedError: The job failed (after exhausting its restarts).
            TimeoutError: ``timeout`` passed and the job is still running.
            KeyboardInterrupt: The wait was interrupted; the job was cancelled.
        """
        if self._result is not None:
            return self._result
        deadline = math.inf if timeout is None else time.monotonic() + max(timeout, 0.0)
        progress = _Progress(sys.stderr)
        try:
            while True:
                remaining = deadline - time.monotonic()
                if self._inner.wait(max(0.0, min(_POLL_S, remaining))):
                    break
                if remaining <= 0:
                    raise TimeoutError(f"job '{self._name}' is still running after {timeout} s")
                progress.update(self)
        except KeyboardInterrupt:
            progress.clear()
            self._inner.cancel()
            self._inner.wait(5.0)
            self._close_dashboard()
            raise
        finally:
            progress.clear()
        self._close_dashboard()
        outcome = self._inner.result()
        for handle, node in self._collects:
            handle._set(self._inner.collected(node))
        failed = outcome.get("failed_checkpoints")
        if failed is None:
            count = getattr(self._inner, "failed_checkpoints", None)
            failed = count() if count is not None else 0
        self._result = JobResult(
            self._name,
            restarts=int(outcome.get("restarts", 0)),
            checkpoints=outcome.get("checkpoints") or [],
            failed_checkpoints=int(failed),
            metrics=outcome.get("metrics", {}),
            checkpoint_failures=outcome.get("checkpoint_failures") or [],
        )
        return self._result

    def cancel(self) -> None:
        """Cancels the job; :meth:`wait` then returns or raises promptly."""
        self._inner.cancel()

    @property
    def checkpoints(self) -> list[CheckpointStats]:
        """The checkpoints completed so far (live), oldest first."""
        return _checkpoint_stats(self._inner.checkpoints())

    @property
    def failed_checkpoints(self) -> int:
        """How many checkpoints were aborted so far."""
        return int(self._inner.failed_checkpoints())

    @property
    def checkpoint_failures(self) -> list[dict[str, Any]]:
        """The latest failed checkpoints so far with their causes, oldest first.

        Each is ``{"id": int, "kind": "checkpoint" | "savepoint", "reason": str}``.
        """
        failures = getattr(self._inner, "checkpoint_failures", None)
        return [dict(f) for f in failures()] if failures is not None else []

    def trigger_checkpoint(self) -> int:
        """Triggers a checkpoint now, waits until it completed and returns its id.

        The wait releases the GIL; the id then appears in :attr:`checkpoints`.

        Raises:
            CheckpointError: If checkpointing is not enabled for the job, or the
                checkpoint failed or was aborted.
        """
        return int(self._inner.trigger_checkpoint())

    def _savepoint_call(self, method: str, path: str | os.PathLike[str]) -> Any:
        target = os.fspath(path)
        if not isinstance(target, str) or not target:
            raise TypeError(f"{method}() needs a directory path, got {path!r}")
        target = storage_location(target, what=f"{method}()")
        call = getattr(self._inner, method, None)
        if call is None:
            raise CheckpointError(
                f"{method}() is not supported by this build of eddyline._core: cannot write a "
                f"savepoint of job '{self._name}' to {target!r}"
            )
        return call, target

    def trigger_savepoint(self, path: str | os.PathLike[str]) -> str:
        """Takes a savepoint into ``path`` without stopping the job; returns its directory.

        Waits (GIL released) until the savepoint completed. Resume a job from
        it with ``env.execute(restore_from=<the returned directory>)``.

        Raises:
            CheckpointError: Checkpointing is not enabled for the job, or the
                savepoint failed.
        """
        call, target = self._savepoint_call("trigger_savepoint", path)
        return str(call(target))

    def stop_with_savepoint(self, path: str | os.PathLike[str], *, drain: bool = False) -> str:
        """Stops the job with a savepoint into ``path`` and returns the savepoint's directory.

        The sources stop; the savepoint is the job's last checkpoint and
        two-phase-commit sinks commit on it. Without ``drain`` nothing is
        flushed: open windows and pending timers stay in the savepoint (and
        fire after a resume), ``finish`` is not called. With ``drain=True`` the
        job ends for good: the maximum watermark fires every window and timer
        and the operators finish before the savepoint is taken.

        After it returns, :meth:`wait` returns the job's result.

        Raises:
            CheckpointError: Checkpointing is not enabled for the job, or the
                savepoint failed (the job then keeps running).
        """
        if not isinstance(drain, bool):
            raise TypeError(f"stop_with_savepoint(): drain must be a bool, got {drain!r}")
        call, target = self._savepoint_call("stop_with_savepoint", path)
        return str(call(target, drain))

    def __repr__(self) -> str:
        return f"JobClient({self._name!r}, status={self.status!r})"
