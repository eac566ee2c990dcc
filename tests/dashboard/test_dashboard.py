"""The dashboard's JSON and Prometheus metrics against the job's own metrics.

Real jobs, a real HTTP server on a free port: what ``/api/v1`` and
``/metrics`` report agrees with ``client.metrics()`` once the job ended (the
counters are then frozen; the dashboard serves until ``wait()`` returns),
also under ProcessRunner, whose driver adds up its workers' metrics. A
deliberately slow sink makes the operator before it backpressured.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import eddyline as ed


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        body = r.read()
        return json.loads(body) if r.headers["Content-Type"] == "application/json" else body


def _api(client: ed.JobClient, path: str = "") -> Any:
    assert client.dashboard_url is not None
    jobs = _get(client.dashboard_url + "api/v1/jobs")["jobs"]
    assert len(jobs) == 1
    return _get(f"{client.dashboard_url}api/v1/jobs/{jobs[0]['id']}{path}")


def _ended(client: ed.JobClient) -> None:
    """Blocks until the job ended, without fetching its result (the dashboard then still serves)."""
    assert client._inner.wait(60.0), "the job did not end"


def _finite_job(tmp_path: Any) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        2, batch_size=500, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="50ms")
    )
    numbers = env.from_sequence(0, 20_000).set_parallelism(1).name("numbers")
    keyed = numbers.with_columns(k=ed.col("value") % 5).name("keys")
    keyed.key_by("k").sum("value").name("sums").collect()
    return env


@pytest.mark.parametrize("runner", [None, "process"])
def test_api_and_prometheus_agree_with_the_jobs_metrics(tmp_path: Any, runner: str | None) -> None:
    env = _finite_job(tmp_path)
    client = env.execute_async("agree", dashboard=0, runner=ed.ProcessRunner(2) if runner else None)
    assert client.dashboard_url is not None
    assert client.dashboard_url.startswith("http://127.0.0.1:")
    _ended(client)
    own = client.metrics()["operators"]
    job = _api(client)
    assert job["name"] == "agree" and job["state"] == "FINISHED"
    by_name = {v["name"]: v for v in job["vertices"]}
    assert set(by_name) == set(own)
    for name, vertex in by_name.items():
        m = vertex["metrics"]
        assert (m["read-records"], m["write-records"]) == (
            own[name]["records_in"],
            own[name]["records_out"],
        ), name
        subs = vertex["subtasks"]
        assert len(subs) == vertex["parallelism"]
        # The subtasks add up to the operator (the driver aggregated them under ProcessRunner).
        assert sum(s["read-records"] for s in subs) == m["read-records"]
        assert sum(s["write-records"] for s in subs) == m["write-records"]
        for s in subs:
            assert s["busyTimeMs"] + s["idleTimeMs"] > 0, f"{name}: no time measured"
    assert by_name["numbers"]["metrics"]["write-records"] == 20_000
    assert by_name["sums"]["metrics"]["read-records"] == 20_000
    # Watermarks: the ended sources sent the maximum watermark.
    assert by_name["numbers"]["subtasks"][0]["currentOutputWatermark"] is not None
    edges = by_name["sums"]["inputs"]
    assert edges == [{"id": by_name["keys"]["id"], "ship_strategy": "HASH", "keys": ["k"]}]

    checkpoints = _api(client, "/checkpoints")
    ids = [c.id for c in client.checkpoints]
    assert ids and [h["id"] for h in checkpoints["history"]] == ids[::-1]
    assert checkpoints["counts"]["completed"] == len(ids)
    assert all(h["status"] == "COMPLETED" for h in checkpoints["history"])

    text = _get(client.dashboard_url + "metrics").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for key in ("records_in", "records_out"):
        got = {
            s.labels["operator"]: s.value
            for s in families[f"eddyline_operator_{key}"].samples
            if s.name.endswith("_total")
        }
        assert got == {name: float(op[key]) for name, op in own.items()}
    done = families["eddyline_checkpoints_completed"].samples[0]
    assert done.value == len(ids)

    url = client.dashboard_url
    client.wait()
    with pytest.raises(urllib.error.URLError):
        _get(url + "api/v1/jobs")


class SlowSink(ed.TwoPhaseCommitSink):
    """Takes 5 ms per batch: far slower than the operators before it."""

    def begin_transaction(self) -> list[int]:
        return []

    def write(self, txn: list[int], batch: pa.RecordBatch) -> None:
        time.sleep(0.005)  # the deliberate slowness under test, not a wait

    def pre_commit(self, txn: list[int]) -> None:
        pass

    def commit(self, txn: list[int]) -> None:
        pass

    def abort(self, txn: list[int]) -> None:
        pass


def test_backpressure_is_high_before_a_slow_sink_and_low_in_it() -> None:
    env = ed.StreamEnvironment(2, batch_size=64)
    numbers = env.from_sequence(0, 10**12).set_parallelism(1).name("numbers")
    prepared = numbers.with_columns(k=ed.col("value") % 7).name("prepare")
    prepared.sink_to(SlowSink()).name("slow-sink").set_parallelism(1)
    client = env.execute_async("backpressure", dashboard=0)
    try:
        deadline = time.monotonic() + 30
        while True:
            vertices = {v["name"]: v["metrics"] for v in _api(client, "/vertices")["vertices"]}
            before, sink = vertices["prepare"], vertices["slow-sink"]
            if before["backPressuredTimeMsPerSecond"] > 500 and sink["busyTimeMsPerSecond"] > 500:
                break
            assert time.monotonic() < deadline, f"no backpressure measured: {vertices}"
            time.sleep(0.2)  # the next sample of the rates
        assert sink["backPressuredTimeMsPerSecond"] < 100, sink
        assert sink["idleTimeMsPerSecond"] < 300, sink
        assert before["busyTimeMsPerSecond"] < 300, before
    finally:
        client.cancel()
        with pytest.raises(ed.EddylineError):
            client.wait(30)


def test_a_taken_port_is_a_dashboard_error_and_the_job_is_cancelled(tmp_path: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = _finite_job(tmp_path)
        with pytest.raises(ed.DashboardError, match=f"127.0.0.1:{port}"):
            env.execute("busy-port", dashboard=port)


@pytest.mark.parametrize("bad", [-1, 70000, "8081", 1.5])
def test_bad_dashboard_values_are_refused(tmp_path: Any, bad: object) -> None:
    env = _finite_job(tmp_path)
    with pytest.raises(TypeError, match="dashboard"):
        env.execute_async("bad", dashboard=bad)  # type: ignore[arg-type]


def test_unknown_paths_are_json_404(tmp_path: Any) -> None:
    client = _finite_job(tmp_path).execute_async("404", dashboard=0)
    try:
        assert client.dashboard_url is not None
        with pytest.raises(urllib.error.HTTPError) as info:
            _get(client.dashboard_url + "api/v1/nope")
        assert info.value.code == 404
        assert json.loads(info.value.read())["errors"] == ["no such resource: /api/v1/nope"]
        page = _get(client.dashboard_url).decode()
        assert "dashboard.js" in page
    finally:
        client.wait()
    assert client.dashboard_url is not None  # the address stays readable after the end


def test_eddyline_run_dashboard_serves_the_scripts_jobs(tmp_path: Any) -> None:
    from eddyline.cli import main

    script = tmp_path / "job.py"
    script.write_text(
        "import sys\n"
        "import eddyline as ed\n"
        "env = ed.StreamEnvironment(1)\n"
        "env.from_sequence(0, 10).collect()\n"
        "client = env.execute_async('cli')\n"
        "with open(sys.argv[1], 'w') as f:\n"
        "    f.write(str(client.dashboard_url))\n"
        "client.wait()\n"
    )
    out = tmp_path / "url.txt"
    assert main(["run", "--dashboard-port", "0", str(script), str(out)]) == 0
    assert out.read_text().startswith("http://127.0.0.1:")
    assert main(["run", str(script), str(out)]) == 0
    assert out.read_text() == "None", "no dashboard unless asked"


def test_a_restart_is_listed_with_its_cause(tmp_path: Any) -> None:
    from eddyline.testing import FailOnce

    env = ed.StreamEnvironment(
        1, batch_size=100, restart=ed.RestartStrategy.fixed_delay(attempts=1, delay="10ms")
    )
    numbers = env.from_sequence(0, 1_000).name("numbers")
    fail = FailOnce(None, str(tmp_path), column="value", at=500)
    numbers.map(fail).name("fails-once").collect()
    client = env.execute_async("restart", dashboard=0)
    _ended(client)
    causes = client.restart_causes()
    assert [c["attempt"] for c in causes] == [0]
    assert "fails-once" in causes[0]["cause"]
    entries = _api(client, "/exceptions")["exceptionHistory"]["entries"]
    assert [e["stacktrace"] for e in entries] == [causes[0]["cause"]]
    assert _api(client)["restarts"] == 1
    assert client.wait().restarts == 1
