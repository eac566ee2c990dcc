"""ProcessRunner (API.md "Runners"): the same job in N local worker processes.

Checked against plain-Python references and against in-process runs: keyed
sums and per-record functions across processes, event-time windows (watermarks
cross the data plane), a loop, exactly-once collect and Parquet output when a
worker process is SIGKILLed or a task fails once, and the errors a user gets
for bad runners, unpicklable functions and raising functions.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import FailOnce, SleepPerBatch, completed_checkpoints, wait_until
from support.loops import collatz_body, collatz_steps

RUN_TIMEOUT_S = 120.0


def _sums(rows: list[dict[str, int]], key: str = "k", value: str = "v") -> dict[int, int]:
    out: dict[int, int] = {}
    for r in rows:
        out[r[key]] = r[value]
    return out


@pytest.mark.parametrize(("parallelism", "workers"), [(2, 2), (3, 2), (4, 4)])
def test_per_record_map_and_keyed_sum_equal_the_reference(parallelism: int, workers: int) -> None:
    n = 30_000
    env = ed.StreamEnvironment(parallelism, batch_size=1000)
    table = pa.table({"id": list(range(n))})
    out = (
        env.from_arrow(table)
        .map(lambda r: {"k": r["id"] % 17, "v": r["id"] * 3, "pid": os.getpid()})
        .key_by("k")
        .sum("v")
        .collect()
    )
    result = env.execute("sum", runner=ed.ProcessRunner(workers=workers))
    expected: dict[int, int] = {}
    for i in range(n):
        expected[i % 17] = expected.get(i % 17, 0) + 3 * i
    assert _sums(out.to_pylist()) == expected
    ops = result.metrics["operators"]
    assert ops["map_1"]["records_in"] == n, "every worker's metrics reach the driver"
    assert result.restarts == 0


def test_per_record_functions_run_in_several_worker_processes() -> None:
    env = ed.StreamEnvironment(2, batch_size=100)
    out = env.from_sequence(0, 4000).map(lambda r: {"value": r["value"], "pid": os.getpid()})
    handle = out.collect()
    env.execute("pids", runner=ed.ProcessRunner(workers=2))
    rows = handle.to_pylist()
    assert sorted(r["value"] for r in rows) == list(range(4000))
    pids = {r["pid"] for r in rows}
    assert len(pids) == 2 and os.getpid() not in pids


def _windowed(env: ed.StreamEnvironment) -> ed.CollectHandle:
    n = 5000
    rows = [{"t": i * 7 % 50_000, "k": i % 5, "v": 1} for i in range(n)]
    return (
        env.from_collection(rows)
        .assign_timestamps("t", max_out_of_orderness="60s")
        .key_by("k")
        .window(ed.Tumbling("5s"))
        .sum("v")
        .collect()
    )


def test_event_time_windows_match_an_in_process_run() -> None:
    local_env = ed.StreamEnvironment(2, batch_size=256)
    local = _windowed(local_env)
    local_env.execute("local")
    env = ed.StreamEnvironment(2, batch_size=256)
    remote = _windowed(env)
    env.execute("remote", runner=ed.ProcessRunner(workers=2))
    got = Counter(tuple(sorted(r.items())) for r in remote.to_pylist())
    want = Counter(tuple(sorted(r.items())) for r in local.to_pylist())
    assert got == want
    assert sum(r["v"] for r in remote.to_pylist()) == 5000


def test_a_loop_runs_in_worker_processes() -> None:
    env = ed.StreamEnvironment(2, batch_size=64)
    xs = env.from_sequence(1, 3000).with_columns(x=ed.col("value"), steps=ed.lit(0))

    out = xs.iterate(collatz_body).collect()
    env.execute("collatz", runner=ed.ProcessRunner(workers=2))
    got = {r["value"]: r["steps"] for r in out.to_pylist()}
    assert got == {n: collatz_steps(n) for n in range(1, 3000)}


def _ids_job(
    out_dir: Path, chk: Path, n: int, fail: FailOnce | None = None, incremental: bool = False
) -> tuple[ed.StreamEnvironment, ed.CollectHandle]:
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", incremental=incremental),
        restart=ed.RestartStrategy.fixed_delay(attempts=3, delay="50ms"),
        batch_size=50,
    )
    ids = env.from_sequence(0, n).set_parallelism(1)
    slow = ids.map_batches(SleepPerBatch(0.004)).set_parallelism(2)
    if fail is not None:
        slow = slow.map(fail)
    tagged = slow.map(lambda r: {"id": r["value"], "g": r["value"] % 3, "pid": os.getpid()})
    tagged.sink_to(ed.ParquetSink(out_dir))
    counts = tagged.key_by("g").count().collect()
    return env, counts


def _assert_exact_ids(out_dir: Path, n: int) -> None:
    ids = read_parquet_dir(out_dir).column("id").to_pylist()
    counts = Counter(ids)
    dup = [i for i, c in counts.items() if c > 1]
    lost = sorted(set(range(n)) - set(counts))
    assert not dup and not lost, f"duplicated {dup[:10]}, lost {lost[:10]}"


@pytest.mark.parametrize("incremental", [False, True])
def test_sigkill_of_a_worker_restarts_every_worker_from_the_latest_checkpoint(
    tmp_path: Path, incremental: bool
) -> None:
    # incremental: the workers' state reaches the driver as bytes, compared
    # with the last checkpoint's per key group.
    n = 12_000
    out_dir, chk = tmp_path / "out", tmp_path / "chk"
    env, counts = _ids_job(out_dir, chk, n, incremental=incremental)
    runner = ed.ProcessRunner(workers=2)
    client = env.execute_async("kill", runner=runner)
    wait_until(lambda: len(completed_checkpoints(chk)) >= 2, timeout=60, what="2 checkpoints")
    before = runner.worker_pids()
    assert len(before) == 2, "both workers are running before the kill"
    assert client.status == "running", "the job must still run when the worker is killed"
    os.kill(before[1], signal.SIGKILL)
    result = client.wait(timeout=RUN_TIMEOUT_S)
    assert result.restarts >= 1
    _assert_exact_ids(out_dir, n)
    # The collect sink committed exactly once too: its final counts add up.
    final = _sums(counts.to_pylist(), key="g", value="count")
    assert sum(final.values()) == n
    pids = set(read_parquet_dir(out_dir).column("pid").to_pylist())
    assert len(pids) >= 3, "rows were written by the workers of both attempts"


def test_a_task_failing_once_restarts_and_commits_exactly_once(tmp_path: Path) -> None:
    n = 6000
    out_dir, chk, marker = tmp_path / "out", tmp_path / "chk", tmp_path / "marker"
    marker.mkdir()
    fail = FailOnce(None, marker, column="value", at=n // 2, armed_by=chk)
    env, _ = _ids_job(out_dir, chk, n, fail)
    result = env.execute("fail-once", runner=ed.ProcessRunner(workers=2))
    assert fail.fired and fail.fired_info()["armed_after"], "fired after a checkpoint"
    assert result.restarts == 1
    _assert_exact_ids(out_dir, n)


def test_a_raising_function_names_the_operator_and_keeps_the_traceback() -> None:
    env = ed.StreamEnvironment(2, restart=ed.RestartStrategy.none())

    def explode(r: dict[str, int]) -> dict[str, int]:
        if r["value"] == 777:
            raise ValueError("bad record 777")
        return r

    env.from_sequence(0, 2000).map(explode).name("explode").collect()
    with pytest.raises(ed.JobFailedError) as info:
        env.execute("raises", runner=ed.ProcessRunner(workers=2))
    assert info.value.operator == "explode"
    assert "bad record 777" in str(info.value)
    assert "ValueError" in (info.value.user_traceback or "")


def test_an_unpicklable_function_is_a_graph_error_before_anything_runs() -> None:
    env = ed.StreamEnvironment(2)
    lock = threading.Lock()

    def locked(r: dict[str, int]) -> dict[str, int]:
        with lock:
            return r

    env.from_sequence(0, 10).map(locked).name("locked").collect()
    with pytest.raises(ed.GraphError, match=r"worker processes.*locked"):
        env.execute("unpicklable", runner=ed.ProcessRunner(workers=2))


@pytest.mark.parametrize("workers", [0, -1, "2", 1.5, True])
def test_bad_worker_counts_are_rejected(workers: object) -> None:
    with pytest.raises(ValueError, match="workers"):
        ed.ProcessRunner(workers=workers)  # type: ignore[arg-type]


def test_an_unknown_runner_is_a_type_error() -> None:
    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 3).collect()
    with pytest.raises(TypeError, match="runner"):
        env.execute("bad", runner=object())


def test_a_loop_whose_feedback_would_cross_processes_is_refused() -> None:
    env = ed.StreamEnvironment(2)
    xs = env.from_sequence(1, 10).with_columns(x=ed.col("value"))

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        step = s.filter(ed.col("x") > 1).with_columns(x=ed.col("x") - 1).set_parallelism(1)
        return step, s.filter(ed.col("x") <= 1)

    xs.iterate(body).collect()
    with pytest.raises(ed.GraphError, match="cross worker processes"):
        env.execute("loop", runner=ed.ProcessRunner(workers=2))


def test_checkpoints_and_savepoints_are_taken_through_the_workers(tmp_path: Path) -> None:
    n = 8000
    out_dir, chk = tmp_path / "out", tmp_path / "chk"
    env, _ = _ids_job(out_dir, chk, n)
    client = env.execute_async("savepoint", runner=ed.ProcessRunner(workers=2))
    wait_until(lambda: completed_checkpoints(chk), timeout=60, what="a checkpoint")
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    stopped = client.wait(timeout=RUN_TIMEOUT_S)
    assert any(c.kind == "savepoint" for c in stopped.checkpoints)
    committed = len(read_parquet_dir(out_dir)) if out_dir.exists() else 0
    assert committed < n, "the job stopped before its end"
    env2, _ = _ids_job(out_dir, tmp_path / "chk2", n)
    env2.execute("resume", restore_from=savepoint, runner=ed.ProcessRunner(workers=2))
    _assert_exact_ids(out_dir, n)


def test_a_launcher_failure_names_the_launcher_and_keeps_its_cause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eddyline.client.runners import _ProcessLauncher

    def launch(
        self: _ProcessLauncher, attempt: int, workers: int, driver: str, secret: str
    ) -> None:
        raise OSError("no worker slots left")

    monkeypatch.setattr(_ProcessLauncher, "launch", launch)
    env = ed.StreamEnvironment(1, restart=ed.RestartStrategy.none())
    env.from_sequence(0, 10).collect()
    with pytest.raises(ed.JobFailedError, match=r"launch\(\) failed") as info:
        env.execute("no-launch", runner=ed.ProcessRunner(workers=1))
    assert info.value.operator == "ProcessLauncher"
    assert isinstance(info.value.__cause__, OSError)
    assert "no worker slots left" in (info.value.user_traceback or "")


def _table(n: int) -> pa.Table:
    return pa.table({"k": pa.array([i % 13 for i in range(n)]), "v": pa.array(range(n))})


def test_from_arrow_sends_each_batch_s_own_rows_to_the_workers() -> None:
    """A pickled slice of a table carries the whole table's buffers: a 400k-row table
    in 8,192-row batches made a ~313 MB job spec (49 copies of the table), larger
    tables a frame over the 1 GiB limit. The spec now holds each batch's rows once."""
    from eddyline.environment import _job_spec

    table = _table(400_000)
    env = ed.StreamEnvironment(2)
    env.from_arrow(table).collect()
    graph = env._graph
    spec = _job_spec(graph.compile(graph.sinks(), complete=True).nodes, {})
    assert len(spec) < 2 * table.nbytes, f"{len(spec)} bytes for a {table.nbytes}-byte table"


def test_from_arrow_of_a_large_table_runs_in_worker_processes() -> None:
    """10 M rows (400 k rows once made a START frame over the 1 GiB limit)."""
    n = 10_000_000
    keys = np.arange(n, dtype=np.int64) % 13
    table = pa.table({"k": keys, "v": np.arange(n, dtype=np.int64)})
    env = ed.StreamEnvironment(2)
    out = env.from_arrow(table).key_by("k").sum("v").collect()
    env.execute("arrow", runner=ed.ProcessRunner(workers=2))
    expected = np.bincount(keys, weights=np.arange(n, dtype=np.float64)).astype(np.int64)
    assert _sums(out.to_pylist()) == {k: int(v) for k, v in enumerate(expected)}


def _keyed_sum_across_workers(
    restart: ed.RestartStrategy | None = None,
) -> tuple[ed.StreamEnvironment, ed.CollectHandle]:
    n = 20_000
    env = ed.StreamEnvironment(2, batch_size=1000, restart=restart)
    out = (
        env.from_arrow(pa.table({"k": [i % 11 for i in range(n)], "v": list(range(n))}))
        .key_by("k")
        .sum("v")
        .collect()
    )
    return env, out


@pytest.mark.parametrize(
    ("bind", "advertise"),
    [("127.0.0.3", None), ("0.0.0.0", "127.0.0.4"), ("0.0.0.0", None)],
)
def test_workers_bind_and_advertise_the_addresses_their_host_names(
    monkeypatch: pytest.MonkeyPatch, bind: str, advertise: str | None
) -> None:
    """A multi-homed host binds one address and advertises another:
    the peers reach each worker's data port at the advertised address (any of
    127.0.0.0/8 reaches a listener on 0.0.0.0; only 127.0.0.3 one bound there)."""
    monkeypatch.setenv("EDDYLINE_BIND_HOST", bind)
    if advertise is None:
        monkeypatch.delenv("EDDYLINE_ADVERTISE_HOST", raising=False)
    else:
        monkeypatch.setenv("EDDYLINE_ADVERTISE_HOST", advertise)
    env, out = _keyed_sum_across_workers()
    env.execute("addresses", runner=ed.ProcessRunner(workers=2))
    expected: dict[int, int] = {}
    for i in range(20_000):
        expected[i % 11] = expected.get(i % 11, 0) + i
    assert _sums(out.to_pylist()) == expected


def test_an_advertised_address_nobody_listens_at_fails_the_job_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EDDYLINE_BIND_HOST", "127.0.0.3")
    monkeypatch.setenv("EDDYLINE_ADVERTISE_HOST", "127.0.0.5")
    monkeypatch.setenv("EDDYLINE_WORKER_QUIET", "1")
    env, _ = _keyed_sum_across_workers(ed.RestartStrategy.none())
    with pytest.raises(ed.EddylineError, match=r"127\.0\.0\.5"):
        env.execute("bad-address", runner=ed.ProcessRunner(workers=2))


def test_data_addresses_follow_the_host_environment() -> None:
    from eddyline._exec.worker import data_addresses

    assert data_addresses("10.1.2.3", {}) == ("10.1.2.3", "10.1.2.3")
    assert data_addresses("10.1.2.3", {"SPARK_LOCAL_IP": "10.9.9.9"}) == ("10.9.9.9", "10.9.9.9")
    env = {"EDDYLINE_BIND_HOST": "0.0.0.0", "SPARK_LOCAL_IP": "10.9.9.9"}
    assert data_addresses("10.1.2.3", env) == ("0.0.0.0", "10.1.2.3")
    env["EDDYLINE_ADVERTISE_HOST"] = "203.0.113.7"
    assert data_addresses("10.1.2.3", env) == ("0.0.0.0", "203.0.113.7")


def test_the_row_groups_of_one_parquet_file_are_read_by_every_worker(tmp_path: Path) -> None:
    """Row groups are the Parquet source's splits: one large file is shared."""
    import pyarrow.parquet as pq

    n = 40_000
    pq.write_table(pa.table({"id": list(range(n))}), tmp_path / "one.parquet", row_group_size=4_000)
    env = ed.StreamEnvironment(2, batch_size=1000)
    out = env.from_parquet(tmp_path).map(lambda r: {"id": r["id"], "pid": os.getpid()}).collect()
    env.execute("one-file", runner=ed.ProcessRunner(workers=2))
    rows = out.to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(n))
    per_worker = Counter(r["pid"] for r in rows)
    assert sorted(per_worker.values()) == [n // 2, n // 2], per_worker
