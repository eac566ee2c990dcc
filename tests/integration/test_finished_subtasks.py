"""``client.metrics()`` shows which subtasks finished (FLIP-147 finished tasks).

A short sequence and a user source that waits for a marker file are united: the
sequence's subtask shows ``finished`` while the other source still runs (and
not before its rows all went out), in one process and under ProcessRunner, whose
driver learns it from its workers' metric frames. Once the marker lets the
second source end, every subtask shows it; the dashboard's subtasks say
``FINISHED``.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from support.faults import wait_until

SHORT = 300


def _job_json(client: ed.JobClient) -> Any:
    """The dashboard's ``/api/v1/jobs/<id>`` of the client's job."""
    assert client.dashboard_url is not None
    with urllib.request.urlopen(client.dashboard_url + "api/v1/jobs", timeout=10) as r:
        (job,) = json.loads(r.read())["jobs"]
    with urllib.request.urlopen(f"{client.dashboard_url}api/v1/jobs/{job['id']}", timeout=10) as r:
        return json.loads(r.read())


class UntilMarker(ed.Source):
    """One split: ids 1_000_000.. one batch at a time, nothing more until
    ``marker`` exists, then the split ends."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field("value", pa.int64())])

    def splits(self) -> list[int]:
        return [0]

    def read(self, split: int, offset: int, max_rows: int) -> Any:
        if offset >= 10:
            return None if Path(self.marker).exists() else (None, offset)
        batch = pa.record_batch([pa.array([1_000_000 + offset], pa.int64())], schema=self.schema())
        return batch, offset + 1


@pytest.mark.parametrize("runner", [None, "process"])
def test_a_finished_sources_subtask_shows_finished_while_the_job_runs(
    tmp_path: Path, runner: str | None
) -> None:
    marker = tmp_path / "end"
    env = ed.StreamEnvironment(2, batch_size=50)
    short = env.from_sequence(0, SHORT).set_parallelism(1).name("short")
    waiting = env.from_source(UntilMarker(str(marker))).set_parallelism(1).name("waiting")
    out = short.union(waiting).name("both").collect()
    client = env.execute_async(
        "finished", dashboard=0, runner=ed.ProcessRunner(2) if runner else None
    )
    try:
        ops = wait_until(
            lambda: (m := client.metrics()["operators"])["short"]["finished"] and m,
            timeout=60,
            what="the short source to finish",
        )
        assert ops["short"]["subtasks"][0]["finished"]
        assert ops["short"]["records_out"] == SHORT, "finished before its rows all went out"
        assert not ops["waiting"]["finished"]
        assert not any(s["finished"] for s in ops["waiting"]["subtasks"])
        # the union reads from the waiting source: none of its subtasks finished
        assert not any(s["finished"] for s in ops["both"]["subtasks"])
        assert client.status == "running"
        vertices = {v["name"]: v for v in _job_json(client)["vertices"]}
        assert [s["status"] for s in vertices["short"]["subtasks"]] == ["FINISHED"]
        assert [s["status"] for s in vertices["waiting"]["subtasks"]] == ["RUNNING"]
    finally:
        marker.touch()
    client.wait(timeout=60)
    ops = client.metrics()["operators"]
    assert all(op["finished"] for op in ops.values()), ops
    assert all(s["finished"] for op in ops.values() for s in op["subtasks"])
    values = sorted(out.to_arrow()["value"].to_pylist())
    assert values == list(range(SHORT)) + [1_000_000 + i for i in range(10)]
