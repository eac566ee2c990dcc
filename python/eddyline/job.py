"""Running jobs: :class:`JobClient` (a submitted job) and :class:`JobResult`.

``env.execute()`` blocks and returns a :class:`JobResult`;
``env.execute_async()`` returns a :class:`JobClient` to wait on, cancel or
checkpoint the running job.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .errors import CheckpointError

if TYPE_CHECKING:
    from .sinks import CollectHandle

__all__ = ["JobClient", "JobResult"]

_POLL_S = 0.1
_PROGRESS_EVERY_S = 0.25


class JobResult:
    """The outcome of a finished job.

    Attributes:
        name: The job name.
        restarts: How many times the job was restarted after a failure.
        checkpoints: The completed checkpoints (ids and their stats), oldest first.
        metrics: ``{"wall_time_s": float, "operators": {name: {"records_in",
            "records_out", "batches_in", "batches_out", "kind"}}}``.
    """

    def __init__(
        self,
        name: str,
        *,
        restarts: int = 0,
        checkpoints: Sequence[dict[str, Any]] = (),
        metrics: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.restarts = restarts
        self.checkpoints = list(checkpoints)
        self.metrics: dict[str, Any] = metrics if metrics is not None else {}

    @property
    def wall_time_s(self) -> float:
        """The job's wall time in seconds."""
        return float(self.metrics.get("wall_time_s", 0.0))

    @property
    def checkpoint_ids(self) -> list[int]:
        """The ids of the completed checkpoints."""
        return [int(c["id"]) for c in self.checkpoints if "id" in c]

    def __repr__(self) -> str:
        return (
            f"JobResult(name={self.name!r}, restarts={self.restarts}, "
            f"checkpoints={len(self.checkpoints)}, wall_time_s={self.wall_time_s:.3f})"
        )


def _rate(count: float, seconds: float) -> str:
    value = count / seconds if seconds > 0 else 0.0
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f}{unit}"
    return f"{value:.0f}"


def progress_line(name: str, metrics: dict[str, Any], elapsed: float) -> str:
    """Formats one line of live progress from a metrics snapshot.

    Example:
        >>> m = {"operators": {"src": {"kind": "source", "records_out": 2000},
        ...                    "out": {"kind": "sink", "records_in": 1000}}}
        >>> progress_line("job", m, 2.0)
        'job 2.0s | src 1.0k rec/s | out 500 rec/s'
    """
    parts = [f"{name} {elapsed:.1f}s"]
    operators: dict[str, dict[str, Any]] = metrics.get("operators", {})
    for op, stats in operators.items():
        kind = stats.get("kind")
        if kind == "source":
            parts.append(f"{op} {_rate(stats.get('records_out', 0), elapsed)} rec/s")
    for op, stats in operators.items():
        if stats.get("kind") == "sink":
            parts.append(f"{op} {_rate(stats.get('records_in', 0), elapsed)} rec/s")
    return " | ".join(parts)


class _Progress:
    """A single status line on a terminal, redrawn in place; silent otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._enabled = _is_tty(stream)
        self._last = 0.0
        self._shown = False

    def update(self, text: str) -> None:
        if not self._enabled:
            return
        now = time.monotonic()
        if now - self._last < _PROGRESS_EVERY_S:
            return
        self._last = now
        width = 120
        self._stream.write("\r\x1b[K" + text[:width])
        self._stream.flush()
        self._shown = True

    def clear(self) -> None:
        if self._enabled and self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = False


def _is_tty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class JobClient:
    """A submitted job.

    Use :meth:`wait` for the result; Ctrl-C while waiting cancels the job.
    """

    def __init__(
        self,
        handle: Any,
        name: str,
        collects: Sequence[tuple[CollectHandle, int]] = (),
    ) -> None:
        self._inner = handle
        self._name = name
        self._collects = list(collects)
        self._result: JobResult | None = None
        self._started = time.monotonic()

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
                if progress._enabled:
                    progress.update(
                        progress_line(self._name, self.metrics(), time.monotonic() - self._started)
                    )
        except KeyboardInterrupt:
            progress.clear()
            self._inner.cancel()
            self._inner.wait(5.0)
            raise
        finally:
            progress.clear()
        outcome = self._inner.result()
        for handle, node in self._collects:
            handle._set(self._inner.collected(node))
        self._result = JobResult(
            self._name,
            restarts=int(outcome.get("restarts", 0)),
            checkpoints=outcome.get("checkpoints", []),
            metrics=outcome.get("metrics", {}),
        )
        return self._result

    def cancel(self) -> None:
        """Cancels the job; :meth:`wait` then returns or raises promptly."""
        self._inner.cancel()

    def trigger_checkpoint(self) -> int:
        """Triggers a checkpoint now and returns its id.

        Raises:
            CheckpointError: If checkpointing is not enabled for the job.
        """
        return int(self._inner.trigger_checkpoint())

    def trigger_savepoint(self, path: str) -> str:
        """Takes a savepoint into ``path`` and returns its location.

        Raises:
            CheckpointError: Savepoints are not supported yet.
        """
        raise CheckpointError(
            f"savepoints are not supported yet: cannot write a savepoint of job "
            f"'{self._name}' to {path!r}"
        )

    def stop_with_savepoint(self, path: str, *, drain: bool = False) -> str:
        """Stops the job with a final savepoint into ``path`` and returns its location.

        Raises:
            CheckpointError: Savepoints are not supported yet.
        """
        raise CheckpointError(
            f"stop-with-savepoint is not supported yet: cannot stop job '{self._name}' with a "
            f"savepoint to {path!r} (drain={drain})"
        )

    def __repr__(self) -> str:
        return f"JobClient({self._name!r}, status={self.status!r})"
