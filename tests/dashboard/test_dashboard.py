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
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import eddyline as ed
from support.faults import wait_until


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
            assert s["status"] == "FINISHED", name
        assert own[name]["finished"] and all(s["finished"] for s in own[name]["subtasks"])
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

        def backpressured() -> dict[str, Any] | None:
            vertices = {v["name"]: v["metrics"] for v in _api(client, "/vertices")["vertices"]}
            before, sink = vertices["prepare"], vertices["slow-sink"]
            high = before["backPressuredTimeMsPerSecond"] > 500
            return vertices if high and sink["busyTimeMsPerSecond"] > 500 else None

        # every 0.2 s: the next sample of the rates
        vertices = wait_until(backpressured, timeout=30, what="backpressure", interval=0.2)
        before, sink = vertices["prepare"], vertices["slow-sink"]
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
    from eddyline.client.cli import main

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
    from support.faults import FailOnce

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


def _amplifying_loop(tmp_path: Any, workers: int) -> tuple[ed.StreamEnvironment, Any]:
    """W4-like: every row goes round the loop twice per level until level 9, its padding
    making the feedback far larger than the loop head's 16 KiB of feedback memory."""
    env = ed.StreamEnvironment(workers, batch_size=256)
    seeds = env.from_sequence(0, 4).set_parallelism(1).name("seeds")
    rows = seeds.with_columns(depth=ed.lit(0), pad=ed.lit("x" * 200)).name("pad")

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        twice = s.union(s).with_columns(depth=ed.col("depth") + 1).name("double")
        return twice.filter(ed.col("depth") < 9), twice.filter(ed.col("depth") >= 9)

    leaves = rows.iterate(body, feedback_memory="16KiB", spill_dir=tmp_path / "spill")
    return env, leaves.name("leaves").collect()


@pytest.mark.parametrize("runner", [None, "process"])
def test_loop_metrics_agree_with_the_jobs_metrics(tmp_path: Any, runner: str | None) -> None:
    env, out = _amplifying_loop(tmp_path, 2)
    client = env.execute_async("loop", dashboard=0, runner=ed.ProcessRunner(2) if runner else None)
    _ended(client)
    own = client.metrics()["operators"]
    heads = [v for v in _api(client)["vertices"] if v["kind"] == "loop_head"]
    assert len(heads) == 1
    head = heads[0]
    mine = own[head["name"]]
    # The loop spilled (16 KiB of memory for ~1.6 MB of feedback) and terminated after rounds.
    assert mine["spilled_bytes"] > 0 and mine["spill_files"] > 0
    assert mine["termination_rounds"] >= 2
    assert mine["termination_rounds"] == max(s["termination_round"] for s in mine["subtasks"])
    assert mine["feedback_queue_events"] == 0, "the ended loop left nothing queued"
    loops = _api(client, "/loops")["loops"]
    assert loops == [
        {
            "id": head["id"],
            "name": head["name"],
            "loop-id": head["scope"][-1],
            "feedback-from": head["feedback_from"],
            "feedback-queue-events": 0,
            "feedback-queue-bytes": 0,
            "spilled-bytes": mine["spilled_bytes"],
            "spill-files": mine["spill_files"],
            "termination-rounds": mine["termination_rounds"],
        }
    ]
    assert head["loop"] == {k: v for k, v in loops[0].items() if k not in ("id", "name")}
    assert [s["terminationRound"] for s in head["subtasks"]] == [
        s["termination_round"] for s in mine["subtasks"]
    ]
    assert client.dashboard_url is not None
    text = _get(client.dashboard_url + "metrics").decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    rounds = {
        s.labels["subtask"]: s.value for s in families["eddyline_loop_termination_round"].samples
    }
    assert rounds == {str(i): float(s["termination_round"]) for i, s in enumerate(mine["subtasks"])}
    spilled = [
        s.value
        for s in families["eddyline_operator_spilled_bytes"].samples
        if s.labels["operator"] == head["name"] and s.name.endswith("_total")
    ]
    assert spilled == [float(mine["spilled_bytes"])]
    result = client.wait()
    assert result.metrics["operators"][head["name"]]["spilled_bytes"] == mine["spilled_bytes"]
    assert len(out) == 4 * 2**9


def test_the_page_loads_its_graph_libraries_from_the_xstatic_packages(tmp_path: Any) -> None:
    import xstatic.pkg.d3
    import xstatic.pkg.dagre_d3

    client = _finite_job(tmp_path).execute_async("vendor", dashboard=0)
    try:
        url = client.dashboard_url
        assert url is not None
        page = _get(url).decode()
        for lib, pkg, file in (
            ("d3", xstatic.pkg.d3, "d3.js"),
            ("dagre_d3", xstatic.pkg.dagre_d3, "dagre-d3.min.js"),
        ):
            assert f'src="vendor/{lib}/{file}"' in page
            with urllib.request.urlopen(f"{url}vendor/{lib}/{file}", timeout=10) as r:
                assert r.read() == (Path(pkg.BASE_DIR) / file).read_bytes()
        for bad in ("vendor/d3/../__init__.py", "vendor/d3/nope.js", "vendor/jquery/x.js"):
            with pytest.raises(urllib.error.HTTPError) as info:
                _get(url + bad)
            assert info.value.code == 404, bad
            info.value.close()
    finally:
        client.wait()


def test_a_running_loop_shows_its_queue_and_spilled_bytes_live(tmp_path: Any) -> None:
    from support.loops import collatz_body

    env = ed.StreamEnvironment(2, batch_size=256)
    numbers = env.from_sequence(1, 10**12).set_parallelism(1).name("numbers")
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0)).name("prepare")
    start.iterate(collatz_body, feedback_memory="16KiB", spill_dir=tmp_path).name("out").collect()
    client = env.execute_async("live-loop", dashboard=0)
    try:

        def live() -> dict[str, Any] | None:
            (loop,) = _api(client, "/loops")["loops"]
            busy = loop["spilled-bytes"] > 0 and loop["feedback-queue-events"] > 0
            return loop if busy else None

        # 0.2 s: the dashboard samples its metrics at most every 0.5 s.
        loop = wait_until(live, timeout=30, what="live loop metrics", interval=0.2)
        own = client.metrics()["operators"][loop["name"]]
        # Taken after the sample: the counter only grows.
        assert own["spilled_bytes"] >= loop["spilled-bytes"]
        assert loop["termination-rounds"] == 0, "the input never ends: no round started"
    finally:
        client.cancel()
        with pytest.raises(ed.EddylineError):
            client.wait(30)
