"""What the dashboard shows, computed from a running job's own metrics.

:class:`JobView` samples the job (``metrics()``, ``checkpoints``,
``restart_causes()``) at most every ``min_interval_s`` and turns two
successive samples into current rates: rows per second and, per subtask,
busy / backpressured / idle milliseconds per second (Flink's
``busyTimeMsPerSecond`` and ``backPressuredTimeMsPerSecond``). The JSON of
``/api/v1`` and the Prometheus metrics are both built from one sample, so
they agree with each other and with ``client.metrics()``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["GraphNode", "JobView", "Sample", "graph_nodes"]


class JobSource(Protocol):
    """What the dashboard reads of a job (a :class:`eddyline.JobClient`)."""

    @property
    def name(self) -> str: ...

    @property
    def status(self) -> str: ...

    def metrics(self) -> dict[str, Any]: ...

    @property
    def checkpoints(self) -> Sequence[Any]: ...

    @property
    def failed_checkpoints(self) -> int: ...

    @property
    def checkpoint_failures(self) -> list[dict[str, Any]]: ...

    def restart_causes(self) -> list[dict[str, Any]]: ...


@dataclass(frozen=True)
class GraphNode:
    """One operator (physical node) of the job graph as the dashboard draws it.

    Attributes:
        id: The node id (its index in the job's metrics).
        name: The operator name.
        kind: The node kind (``"source_sequence"``, ``"window"``, ``"loop_head"``, ...).
        parallelism: How many subtasks it runs.
        inputs: ``(producer id, partitioning, keys)`` of each input edge.
        scope: The loop ids it is nested in, outermost first.
        feedback_from: A loop head's feedback producer (the edge that closes the cycle).
    """

    id: int
    name: str
    kind: str
    parallelism: int
    inputs: tuple[tuple[int, str, tuple[str, ...]], ...]
    scope: tuple[int, ...]
    feedback_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "parallelism": self.parallelism,
            "inputs": [
                {"id": src, "ship_strategy": part.upper(), "keys": list(keys)}
                for src, part, keys in self.inputs
            ],
            "scope": list(self.scope),
            "feedback_from": self.feedback_from,
        }


def graph_nodes(specs: Sequence[Mapping[str, Any]]) -> list[GraphNode]:
    """The dashboard's graph from the node specs a job was started with.

    Example:
        >>> nodes = graph_nodes([
        ...     {"id": 0, "name": "src", "kind": "source_sequence", "parallelism": 1,
        ...      "inputs": [], "scope": []},
        ...     {"id": 1, "name": "out", "kind": "sink_collect", "parallelism": 2,
        ...      "inputs": [{"node": 0, "partition": "rebalance", "keys": []}], "scope": []}])
        >>> nodes[1].inputs
        ((0, 'rebalance', ()),)
    """
    out = []
    for spec in specs:
        feedback = spec.get("feedback_from") if spec.get("kind") == "loop_head" else None
        out.append(
            GraphNode(
                id=int(spec["id"]),
                name=str(spec["name"]),
                kind=str(spec.get("kind", "")),
                parallelism=int(spec["parallelism"]),
                inputs=tuple(
                    (int(e["node"]), str(e["partition"]), tuple(e.get("keys") or ()))
                    for e in spec.get("inputs", ())
                ),
                scope=tuple(int(s) for s in spec.get("scope", ())),
                feedback_from=int(feedback) if feedback is not None else None,
            )
        )
    return out


@dataclass
class Sample:
    """One look at the job, with the rates since the previous one.

    ``operators[i]`` belongs to graph node ``i``: its counters as
    ``client.metrics()`` reported them plus ``records_in_per_s``,
    ``records_out_per_s`` and, per subtask, ``busy_ms_per_s``,
    ``backpressured_ms_per_s`` and ``idle_ms_per_s``.
    """

    time_s: float
    status: str
    wall_time_s: float
    operators: list[dict[str, Any]]
    checkpoints: list[Any]
    failed_checkpoints: int
    checkpoint_failures: list[dict[str, Any]]
    restarts: list[dict[str, Any]]


def _per_s(now: float, before: float, seconds: float) -> float:
    return max(0.0, (now - before) / seconds) if seconds > 0 else 0.0


def _ms_per_s(now: int, before: int, seconds: float) -> float:
    return min(1000.0, _per_s(now, before, seconds) / 1e6)


class JobView:
    """The live model of one job behind a dashboard.

    Args:
        job: The job (a :class:`eddyline.JobClient`).
        nodes: Its graph (:func:`graph_nodes`).
        clock: Monotonic seconds (injectable for tests).
        min_interval_s: Samples younger than this are reused.
    """

    def __init__(
        self,
        job: JobSource,
        nodes: Sequence[GraphNode],
        *,
        clock: Callable[[], float] = time.monotonic,
        min_interval_s: float = 0.5,
    ) -> None:
        self.job = job
        self.nodes = list(nodes)
        self.id = uuid.uuid4().hex
        self.start_time_ms = int(time.time() * 1000)
        self._clock = clock
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._last: Sample | None = None
        self._prev_ops: list[dict[str, Any]] | None = None
        self._prev_time = 0.0

    def sample(self) -> Sample:
        """The current sample (a fresh one unless the last is recent)."""
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last.time_s < self._min_interval_s:
                return self._last
            metrics = self.job.metrics()
            ops = [dict(v) for v in metrics.get("operators", {}).values()]
            prev, seconds = self._prev_ops, now - self._prev_time
            if prev is None:
                # The first sample's rates are averages since the job started
                # (counters from zero over its wall time), not a zero.
                seconds = float(metrics.get("wall_time_s", 0.0))
            for i, op in enumerate(ops):
                before = prev[i] if prev is not None and i < len(prev) else None
                self._rates(op, before, seconds)
            restart_causes = getattr(self.job, "restart_causes", None)
            sample = Sample(
                time_s=now,
                status=self.job.status,
                wall_time_s=float(metrics.get("wall_time_s", 0.0)),
                operators=ops,
                checkpoints=list(self.job.checkpoints),
                failed_checkpoints=int(self.job.failed_checkpoints),
                checkpoint_failures=list(self.job.checkpoint_failures),
                restarts=list(restart_causes()) if restart_causes is not None else [],
            )
            self._prev_ops, self._prev_time, self._last = ops, now, sample
            return sample

    @staticmethod
    def _rates(op: dict[str, Any], before: dict[str, Any] | None, seconds: float) -> None:
        """Adds the rates since ``before`` (``None``: since the start, every
        counter from zero) over ``seconds``."""
        for key in ("records_in", "records_out"):
            was = before.get(key, 0) if before is not None else 0
            op[f"{key}_per_s"] = _per_s(op.get(key, 0), was, seconds)
        subtasks = [dict(s) for s in op.get("subtasks", [])]
        old = before.get("subtasks", []) if before is not None else []
        for i, st in enumerate(subtasks):
            prior = old[i] if i < len(old) else None
            for key in ("records_in", "records_out"):
                was = prior[key] if prior is not None else 0
                st[f"{key}_per_s"] = _per_s(st[key], was, seconds)
            times = {
                key: _ms_per_s(st[f"{key}_ns"], prior[f"{key}_ns"] if prior else 0, seconds)
                for key in ("busy", "backpressured", "idle")
            }
            # A task charges a wait when it ends, so one interval can hold
            # waits begun in the one before: the three shares of a second
            # are scaled to add up to at most 1000 ms (Flink's busy +
            # backpressured + idle time per second).
            total = sum(times.values())
            scale = 1000.0 / total if total > 1000.0 else 1.0
            for key, ms in times.items():
                st[f"{key}_ms_per_s"] = ms * scale
        op["subtasks"] = subtasks

    # -- JSON of /api/v1 --------------------------------------------------

    def _watermarks(self, op: Mapping[str, Any]) -> tuple[int | None, float | None]:
        marks = [s.get("watermark") for s in op.get("subtasks", [])]
        if not marks or any(m is None for m in marks):
            return None, None
        low = min(int(m) for m in marks if m is not None)
        lag = time.time() * 1000 - low if -(2**62) < low < 2**62 else None
        return low, lag

    def vertex(self, node: GraphNode, op: Mapping[str, Any], *, subtasks: bool) -> dict[str, Any]:
        """One operator as ``/api/v1/jobs/<id>/vertices/<vid>`` shows it."""
        subs = op.get("subtasks", [])
        n = max(1, len(subs))
        watermark, lag = self._watermarks(op)
        out: dict[str, Any] = {
            **node.to_json(),
            "metrics": {
                "read-records": op.get("records_in", 0),
                "write-records": op.get("records_out", 0),
                "read-batches": op.get("batches_in", 0),
                "write-batches": op.get("batches_out", 0),
                "read-records-per-second": op.get("records_in_per_s", 0.0),
                "write-records-per-second": op.get("records_out_per_s", 0.0),
                "late-records-dropped": op.get("late_records", 0),
                "busyTimeMsPerSecond": sum(s.get("busy_ms_per_s", 0.0) for s in subs) / n,
                "backPressuredTimeMsPerSecond": sum(
                    s.get("backpressured_ms_per_s", 0.0) for s in subs
                )
                / n,
                "idleTimeMsPerSecond": sum(s.get("idle_ms_per_s", 0.0) for s in subs) / n,
                "currentOutputWatermark": watermark,
                "watermarkLagMs": lag,
                "spilled-bytes": op.get("spilled_bytes", 0),
                "spill-files": op.get("spill_files", 0),
            },
        }
        if node.kind == "loop_head":
            out["loop"] = self.loop_json(node, op)
        if subtasks:
            out["subtasks"] = [
                {
                    "subtask": i,
                    # Flink's subtask states, of those a running attempt has
                    "status": "FINISHED" if s.get("finished") else "RUNNING",
                    "read-records": s.get("records_in", 0),
                    "write-records": s.get("records_out", 0),
                    "read-records-per-second": s.get("records_in_per_s", 0.0),
                    "write-records-per-second": s.get("records_out_per_s", 0.0),
                    "busyTimeMsPerSecond": s.get("busy_ms_per_s", 0.0),
                    "backPressuredTimeMsPerSecond": s.get("backpressured_ms_per_s", 0.0),
                    "idleTimeMsPerSecond": s.get("idle_ms_per_s", 0.0),
                    "busyTimeMs": s.get("busy_ns", 0) // 1_000_000,
                    "backPressuredTimeMs": s.get("backpressured_ns", 0) // 1_000_000,
                    "idleTimeMs": s.get("idle_ns", 0) // 1_000_000,
                    "currentOutputWatermark": s.get("watermark"),
                    **(
                        {
                            "feedbackQueueEvents": s.get("feedback_queue_events", 0),
                            "feedbackQueueBytes": s.get("feedback_queue_bytes", 0),
                            "terminationRound": s.get("termination_round", 0),
                        }
                        if node.kind == "loop_head"
                        else {}
                    ),
                }
                for i, s in enumerate(subs)
            ]
        return out

    @staticmethod
    def loop_json(node: GraphNode, op: Mapping[str, Any]) -> dict[str, Any]:
        """A loop head's loop metrics (its vertex's ``loop``).

        ``termination-rounds`` is the furthest termination round its
        subtasks emitted in this attempt (DESIGN.md "Loops"), the feedback
        queue figures are summed over its subtasks (events on memory and
        disk, bytes in memory), ``spilled-bytes`` counts since the job began.
        """
        return {
            "loop-id": node.scope[-1] if node.scope else None,
            "feedback-from": node.feedback_from,
            "feedback-queue-events": op.get("feedback_queue_events", 0),
            "feedback-queue-bytes": op.get("feedback_queue_bytes", 0),
            "spilled-bytes": op.get("spilled_bytes", 0),
            "spill-files": op.get("spill_files", 0),
            "termination-rounds": op.get("termination_rounds", 0),
        }

    def loops(self, sample: Sample) -> list[dict[str, Any]]:
        """``/api/v1/jobs/<id>/loops``: every loop head with its loop metrics."""
        return [
            {"id": node.id, "name": node.name, **self.loop_json(node, sample.operators[i])}
            for i, node in enumerate(self.nodes)
            if node.kind == "loop_head" and i < len(sample.operators)
        ]

    def vertices(self, sample: Sample, *, subtasks: bool = False) -> list[dict[str, Any]]:
        """Every operator with its metrics, in graph order."""
        return [
            self.vertex(
                node, sample.operators[i] if i < len(sample.operators) else {}, subtasks=subtasks
            )
            for i, node in enumerate(self.nodes)
        ]

    def job_json(self, sample: Sample) -> dict[str, Any]:
        """``/api/v1/jobs/<id>``: the job, its plan and its vertices."""
        return {
            "jid": self.id,
            "name": self.job.name,
            "state": sample.status.upper(),
            "start-time": self.start_time_ms,
            "duration": int(sample.wall_time_s * 1000),
            "restarts": len(sample.restarts),
            "vertices": self.vertices(sample, subtasks=True),
        }

    def checkpoints_json(self, sample: Sample) -> dict[str, Any]:
        """``/api/v1/jobs/<id>/checkpoints``: counts, the latest and the history."""
        history = [
            {
                "id": c.id,
                "status": "COMPLETED",
                "is_savepoint": c.kind == "savepoint",
                "trigger_timestamp": c.trigger_time_ms,
                "end_to_end_duration": c.duration_ms,
                "alignment_duration": c.alignment_ms,
                # Flink's names: the whole state, and what this one wrote
                # (less with incremental checkpoints).
                "state_size": c.state_bytes if c.state_bytes >= 0 else c.bytes,
                "checkpointed_size": c.bytes,
                "external_path": c.path,
                "null_state_checkpoint": c.null_state_checkpoint,
                # What an incremental checkpoint wrote, when it reused sections
                # of earlier ones (None for a full checkpoint).
                "incremental_size": c.bytes if c.state_bytes > c.bytes else None,
                "num_acknowledged_subtasks": sum(o.subtasks for o in c.operators.values()),
            }
            for c in sample.checkpoints
        ]
        failed = [
            {
                "id": f.get("id"),
                "status": "FAILED",
                "is_savepoint": f.get("kind") == "savepoint",
                "failure_message": f.get("reason"),
            }
            for f in sample.checkpoint_failures
        ]
        return {
            "counts": {
                "completed": len(history),
                "failed": sample.failed_checkpoints,
                "restored": 0,
            },
            "latest": {"completed": history[-1] if history else None},
            "history": history[::-1],
            "failures": failed[::-1],
        }

    def exceptions_json(self, sample: Sample) -> dict[str, Any]:
        """``/api/v1/jobs/<id>/exceptions``: every restart with its cause."""
        return {
            "exceptionHistory": {
                "entries": [
                    {
                        "timestamp": r.get("time_ms"),
                        "attempt": r.get("attempt"),
                        "exceptionName": str(r.get("cause", "")).split(":", 1)[0],
                        "stacktrace": r.get("cause"),
                    }
                    for r in sample.restarts[::-1]
                ]
            }
        }
