"""The dashboard's rates from two samples, with an injected clock and a scripted job."""

from __future__ import annotations

from typing import Any

from eddyline import CheckpointStats
from eddyline.client.dashboard import JobView, graph_nodes


class ScriptedJob:
    """A job whose metrics the test sets; everything else is fixed."""

    name = "scripted"
    status = "running"
    failed_checkpoints = 0

    def __init__(self) -> None:
        self.checkpoint_failures: list[dict[str, Any]] = []
        self.ops: dict[str, Any] = {}
        self.checkpoints = [
            CheckpointStats.from_dict(
                {"id": 4, "kind": "checkpoint", "duration_ms": 3.0, "bytes": 9, "path": "/c"}
            )
        ]

    def metrics(self) -> dict[str, Any]:
        return {"wall_time_s": 1.0, "operators": self.ops}

    def restart_causes(self) -> list[dict[str, Any]]:
        return [{"attempt": 0, "time_ms": 5, "cause": "OperatorError: boom"}]


def _op(rows: int, busy_ms: int, bp_ms: int, idle_ms: int, watermark: int | None) -> dict[str, Any]:
    sub = {
        "records_in": rows,
        "records_out": rows,
        "busy_ns": busy_ms * 1_000_000,
        "backpressured_ns": bp_ms * 1_000_000,
        "idle_ns": idle_ms * 1_000_000,
        "watermark": watermark,
    }
    return {"kind": "operator", "records_in": rows, "records_out": rows, "subtasks": [sub]}


def test_rates_are_the_change_between_two_samples_per_second() -> None:
    now = [10.0]
    job = ScriptedJob()
    nodes = graph_nodes(
        [{"id": 0, "name": "op", "kind": "map", "parallelism": 1, "inputs": [], "scope": [1]}]
    )
    view = JobView(job, nodes, clock=lambda: now[0], min_interval_s=0.5)
    job.ops = {"op": _op(100, 0, 0, 0, None)}
    first = view.vertices(view.sample(), subtasks=True)[0]
    assert first["metrics"]["busyTimeMsPerSecond"] == 0.0
    assert first["metrics"]["currentOutputWatermark"] is None
    job.ops = {"op": _op(2100, 400, 1000, 600, 7)}
    now[0] = 10.2
    assert view.sample().operators[0]["records_in"] == 100, "a recent sample is reused"
    now[0] = 12.0
    v = view.vertices(view.sample(), subtasks=True)[0]
    m = v["metrics"]
    assert m["read-records-per-second"] == 1000.0
    assert (m["busyTimeMsPerSecond"], m["backPressuredTimeMsPerSecond"]) == (200.0, 500.0)
    assert m["idleTimeMsPerSecond"] == 300.0
    assert m["currentOutputWatermark"] == 7
    assert v["subtasks"][0]["backPressuredTimeMs"] == 1000
    assert v["scope"] == [1]


def test_first_sample_rates_are_averages_since_the_start() -> None:
    """The first sample has no earlier one: its rates are the counters over
    the job's wall time (1 s in ScriptedJob), not zero."""
    job = ScriptedJob()
    nodes = graph_nodes(
        [{"id": 0, "name": "op", "kind": "map", "parallelism": 1, "inputs": [], "scope": []}]
    )
    view = JobView(job, nodes, clock=lambda: 10.0)
    job.ops = {"op": _op(500, 300, 100, 600, None)}
    v = view.vertices(view.sample(), subtasks=True)[0]
    m = v["metrics"]
    assert m["read-records-per-second"] == 500.0
    assert m["write-records-per-second"] == 500.0
    assert (m["busyTimeMsPerSecond"], m["backPressuredTimeMsPerSecond"]) == (300.0, 100.0)
    assert m["idleTimeMsPerSecond"] == 600.0


def test_busy_backpressured_and_idle_never_exceed_a_second() -> None:
    """A wait is charged when it ends, so an interval can hold more than its
    length of busy + idle time; the shares are scaled to 1000 ms."""
    now = [10.0]
    job = ScriptedJob()
    nodes = graph_nodes(
        [{"id": 0, "name": "op", "kind": "map", "parallelism": 1, "inputs": [], "scope": []}]
    )
    view = JobView(job, nodes, clock=lambda: now[0], min_interval_s=0.0)
    job.ops = {"op": _op(0, 0, 0, 0, None)}
    view.sample()
    job.ops = {"op": _op(10, 900, 0, 600, None)}
    now[0] = 11.0
    m = view.vertices(view.sample(), subtasks=True)[0]["metrics"]
    assert (m["busyTimeMsPerSecond"], m["idleTimeMsPerSecond"]) == (600.0, 400.0)
    assert m["backPressuredTimeMsPerSecond"] == 0.0


def test_checkpoints_and_restarts_json() -> None:
    job = ScriptedJob()
    view = JobView(job, [])
    sample = view.sample()
    checkpoints = view.checkpoints_json(sample)
    assert checkpoints["counts"] == {"completed": 1, "failed": 0, "restored": 0}
    latest = checkpoints["latest"]["completed"]
    assert (latest["id"], latest["state_size"], latest["end_to_end_duration"]) == (4, 9, 3.0)
    entry = view.exceptions_json(sample)["exceptionHistory"]["entries"][0]
    assert (entry["exceptionName"], entry["stacktrace"]) == ("OperatorError", "OperatorError: boom")


def test_an_incremental_checkpoint_shows_what_it_wrote() -> None:
    job = ScriptedJob()
    job.checkpoints.append(
        CheckpointStats.from_dict(
            {"id": 5, "kind": "checkpoint", "bytes": 2, "state_bytes": 9, "path": "/c5"}
        )
    )
    history = JobView(job, []).checkpoints_json(JobView(job, []).sample())["history"]
    sizes = {
        h["id"]: (h["state_size"], h["checkpointed_size"], h["incremental_size"]) for h in history
    }
    assert sizes == {4: (9, 9, None), 5: (9, 2, 2)}
