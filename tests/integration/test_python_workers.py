"""Per-record operators in Python worker processes (``eddyline/_exec/pool.py``).

Every test makes the operators switch to their workers after a few rows
(``START_AFTER_ROWS``, ``START_AFTER_SECONDS``, ``WAIT_FOR_START``) and checks,
through the process id the rows report, that the workers really ran them.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline._exec.pool as pool
from eddyline.testing import read_parquet_dir
from support.faults import completed_checkpoints, wait_until

N = 40_000
KEYS = 37
BATCH = 1_000


@pytest.fixture(autouse=True)
def early_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 2 * BATCH)
    monkeypatch.setattr(pool, "START_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(pool, "WAIT_FOR_START", True)
    monkeypatch.delenv("EDDYLINE_PYTHON_WORKERS", raising=False)


def _batches(n: int = N) -> list[pa.RecordBatch]:
    return [
        pa.record_batch({"value": list(range(i, min(i + BATCH, n)))}) for i in range(0, n, BATCH)
    ]


def _job(env: ed.StreamEnvironment) -> tuple[ed.CollectHandle, ed.CollectHandle]:
    rows = env.from_arrow(_batches())
    chain = (
        rows.map(lambda r: {"value": r["value"], "k": r["value"] % KEYS, "pid": os.getpid()})
        .filter(lambda r: r["value"] % 3 != 0)
        .collect()
    )
    sums = (
        rows.map(lambda r: {"k": r["value"] % KEYS, "value": r["value"]})
        .key_by("k")
        .reduce(lambda acc, r: {"k": acc["k"], "value": acc["value"] + r["value"]})
        .collect()
    )
    return chain, sums


def _worker_pids(handle: ed.CollectHandle) -> set[int]:
    return set(handle.to_arrow()["pid"].to_pylist()) - {os.getpid()}


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_workers_give_the_in_process_output(
    parallelism: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = []
    for setting in ("auto", "0"):
        monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", setting)
        env = ed.StreamEnvironment(parallelism)
        chain, sums = _job(env)
        env.execute(f"workers-{setting}")
        outputs.append((chain.to_arrow(), sums.to_arrow()))
    (chain_w, sums_w), (chain_p, sums_p) = outputs
    pids = set(chain_w["pid"].to_pylist()) - {os.getpid()}
    assert pids, "no row went through a worker process"
    assert set(chain_p["pid"].to_pylist()) == {os.getpid()}
    assert not any(_alive(pid) for pid in pids), "a worker outlived its job"
    if parallelism == 1:  # one input channel: the same rows in the same order
        assert chain_w.drop_columns(["pid"]).equals(chain_p.drop_columns(["pid"]))
    else:
        assert sorted(chain_w["value"].to_pylist()) == sorted(chain_p["value"].to_pylist())
    # The reduce emits a key's running sum once per input batch that touched the key,
    # and a channel may cut a batch into slices (buffer debloating, core/src/channel.rs),
    # more often when its consumer is slow (as in workers): which running sums are
    # emitted depends on the slicing, so the outputs are not compared row for row. Per
    # key, the running sums come in order and end at the true sum; with one input
    # channel each is one of the key's running sums in input order.
    running = {k: set(itertools.accumulate(range(k, N, KEYS))) for k in range(KEYS)}
    for table in (sums_w, sums_p):
        last: dict[int, int] = {}
        for row in table.to_pylist():
            assert row["value"] > last.get(row["k"], -1)
            if parallelism == 1:
                assert row["value"] in running[row["k"]], row
            last[row["k"]] = row["value"]
        assert last == {k: sum(range(k, N, KEYS)) for k in range(KEYS)}


def test_a_raising_function_in_a_worker_names_the_operator_and_keeps_its_traceback() -> None:
    def explode(row: dict[str, Any]) -> dict[str, Any]:
        if row["value"] == N - 5:
            raise ValueError(f"bad value {row['value']}")
        return {"value": row["value"], "pid": os.getpid()}

    env = ed.StreamEnvironment(1, restart=ed.RestartStrategy.none())
    env.from_arrow(_batches()).map(explode).name("explode").collect()
    with pytest.raises(ed.JobFailedError) as info:
        env.execute("raising")
    err = info.value
    assert err.operator == "explode"
    assert f"bad value {N - 5}" in str(err)
    assert err.user_traceback is not None
    assert "in explode" in err.user_traceback and "ValueError" in err.user_traceback


class _PidFile:
    """A map that records the pid of the worker process running it, and slows down.

    With ``gate``, the process running the last batch's first row writes
    ``gate/at-<pid>`` there and waits until ``gate/go`` exists: the job cannot
    end before the test lets it.
    """

    def __init__(self, directory: Path, gate: Path | None = None) -> None:
        self.directory = directory
        self.gate = gate

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if row["value"] % 100 == 0:
            pid = os.getpid()
            (self.directory / str(pid)).touch()
            threading.Event().wait(0.001)
        if self.gate is not None and row["value"] == N - BATCH:
            (self.gate / f"at-{os.getpid()}").touch()
            while not (self.gate / "go").exists():
                threading.Event().wait(0.005)
        return {"value": row["value"]}


def _pids_in(directory: Path) -> Iterator[int]:
    return (int(p.name) for p in directory.iterdir())


@pytest.mark.timeout(120)
def test_sigkill_of_a_worker_restores_the_job_exactly(tmp_path: Path) -> None:
    marks, gate = tmp_path / "pids", tmp_path / "gate"
    marks.mkdir()
    gate.mkdir()
    chk = tmp_path / "chk"
    out = tmp_path / "out"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="50ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
    )
    slow = _PidFile(marks, gate)
    env.from_arrow(_batches()).map(slow).name("slow").sink_to(ed.ParquetSink(out))
    client = env.execute_async("kill-a-worker")
    # The worker to kill holds the job's last batch at the gate, so the job is
    # still running when it dies and its loss is seen (a worker picked from
    # the pid files could belong to a subtask that had already ended on a
    # loaded machine: then nothing restarted). Each subtask reads every other
    # batch, so checkpoints pass the first dozen batches before the gate.
    pid = wait_until(
        lambda: (
            next((int(p.name[3:]) for p in gate.glob("at-*")), None)
            if completed_checkpoints(chk)
            else None
        ),
        timeout=60,
        what="a completed checkpoint and a worker process holding the last batch",
    )
    assert pid != os.getpid(), "the last batch ran in-process, not in a worker"
    os.kill(pid, signal.SIGKILL)
    (gate / "go").touch()
    result = client.wait(timeout=90)
    assert result.restarts >= 1
    causes = " ".join(str(c) for c in client.restart_causes())
    assert f"pid {pid}" in causes, causes
    values = sorted(read_parquet_dir(out)["value"].to_pylist())
    assert values == list(range(N))
    assert not any(_alive(p) for p in _pids_in(marks) if p != os.getpid())


def test_no_worker_outlives_a_failed_or_cancelled_job(tmp_path: Path) -> None:
    marks = tmp_path / "pids"
    marks.mkdir()
    # failed: the user's function raises in a worker
    env = ed.StreamEnvironment(2, restart=ed.RestartStrategy.none())

    def fail_late(row: dict[str, Any]) -> dict[str, Any]:
        (marks / str(os.getpid())).touch()
        if row["value"] == N - 1:
            raise RuntimeError("late failure")
        return row

    env.from_arrow(_batches()).map(fail_late).collect()
    with pytest.raises(ed.JobFailedError):
        env.execute("failing")
    failed = {p for p in _pids_in(marks) if p != os.getpid()}
    assert failed, "no worker ran"
    assert not any(_alive(p) for p in failed)
    # cancelled while the workers run
    for p in list(marks.iterdir()):
        p.unlink()
    env = ed.StreamEnvironment(2)
    env.from_arrow(_batches() * 50).map(_PidFile(marks)).collect()
    client = env.execute_async("cancelled")
    wait_until(lambda: any(p != os.getpid() for p in _pids_in(marks)), timeout=60, what="a worker")
    client.cancel()
    with contextlib.suppress(ed.EddylineError):  # a cancelled job may report it
        client.wait(timeout=60)
    cancelled = {p for p in _pids_in(marks) if p != os.getpid()}
    wait_until(lambda: not any(_alive(p) for p in cancelled), timeout=10, what="the workers to end")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"w": 1}, "returned a row without field 'v'"),
        ({"v": 1, "w": 2}, "returned a row with unexpected field 'w'"),
        ({"v": 2.5}, "returned field 'v' of type float (2.5)"),
        ([1], "returned a list ([1]), expected a dict with fields ['v']"),
    ],
)
@pytest.mark.parametrize("workers", ["0", "auto"])
def test_rows_after_the_first_batch_are_checked_as_before(
    bad: object, message: str, workers: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From the second batch on, output fields go straight to columns: a row of
    another shape is still the SchemaError naming the operator (in-process and in
    a worker)."""
    from collections import OrderedDict

    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", workers)

    def emit(row: dict[str, Any]) -> Any:
        if row["value"] == N - 10:
            return bad
        if row["value"] % 2:
            return OrderedDict(v=row["value"])  # a dict subclass is a row too
        return {"v": row["value"]}

    env = ed.StreamEnvironment(1, restart=ed.RestartStrategy.none())
    env.from_arrow(_batches()).map(emit).name("emit").collect()
    with pytest.raises(ed.SchemaError, match="operator 'emit'") as info:
        env.execute("bad-row")
    assert message in str(info.value)


def test_dict_subclass_rows_and_flat_map_chunks_keep_their_values() -> None:
    from collections import OrderedDict

    env = ed.StreamEnvironment(1, batch_size=700)
    out = (
        env.from_arrow(_batches(5 * BATCH))
        .flat_map(lambda r: [OrderedDict(v=r["value"]), {"v": -r["value"]}])
        .collect()
    )
    env.execute("subclass")
    got = out.to_arrow()["v"].to_pylist()
    assert got == [x for v in range(5 * BATCH) for x in (v, -v)]


def test_the_workers_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "auto")
    assert pool.workers_per_subtask(1) == (0 if cpus < 2 else cpus)
    assert pool.workers_per_subtask(4 * cpus) == (0 if cpus < 2 else 1)
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "3")
    assert pool.workers_per_subtask(2) == 3
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "0")
    assert pool.workers_per_subtask(1) == 0
    for bad in ("-1", "many"):
        monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", bad)
        with pytest.raises(ValueError, match="EDDYLINE_PYTHON_WORKERS must be 'auto' or an int"):
            pool.workers_per_subtask(1)
    # inside ProcessRunner / SparkRunner workers, auto means in-process
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "auto")
    monkeypatch.setattr(pool, "in_worker_process", True)
    assert pool.workers_per_subtask(1) == 0


def test_functions_that_cannot_be_pickled_run_in_process() -> None:
    lock = threading.Lock()

    def with_lock(row: dict[str, Any]) -> dict[str, Any]:
        with lock:
            return {"value": row["value"], "pid": os.getpid()}

    env = ed.StreamEnvironment(1)
    out = env.from_arrow(_batches()).map(with_lock).collect()
    env.execute("unpicklable")
    assert _worker_pids(out) == set()
    assert out.to_arrow()["value"].to_pylist() == list(range(N))


def test_workers_still_starting_when_the_job_ends_are_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pool, "WAIT_FOR_START", False)
    pools: list[pool.WorkerPool] = []
    init = pool.WorkerPool.__init__

    def spy(self: pool.WorkerPool, *args: Any) -> None:
        init(self, *args)
        pools.append(self)

    monkeypatch.setattr(pool.WorkerPool, "__init__", spy)
    env = ed.StreamEnvironment(1)
    out = env.from_arrow(_batches(3 * BATCH)).map(lambda r: {"pid": os.getpid()}).collect()
    env.execute("short")
    assert len(out.to_arrow()) == 3 * BATCH
    pids = [pid for p in pools for pid in p.pids]
    assert pids, "no worker was started"
    assert not any(_alive(pid) for pid in pids)


_CTRL_C_JOB = """
import os, sys, threading
import pyarrow as pa
import eddyline as ed
import eddyline._exec.pool as pool

pool.START_AFTER_ROWS = 2000
pool.START_AFTER_SECONDS = 0.0
marks = sys.argv[1]

def slow(row):
    if row["value"] % 100 == 0:
        open(os.path.join(marks, str(os.getpid())), "w").close()
        threading.Event().wait(0.001)
    return {"value": row["value"]}

batches = [pa.record_batch({"value": list(range(i, i + 1000))}) for i in range(0, 2 * 10**6, 1000)]
env = ed.StreamEnvironment(2)
env.from_arrow(batches).map(slow).collect()
env.execute("ctrl-c")
"""


@pytest.mark.timeout(120)
def test_ctrl_c_of_the_driver_leaves_no_worker(tmp_path: Path) -> None:
    import subprocess
    import sys

    marks = tmp_path / "pids"
    marks.mkdir()
    script = tmp_path / "job.py"
    script.write_text(_CTRL_C_JOB)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(marks)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: any(p != proc.pid for p in _pids_in(marks)),
            timeout=60,
            what="a worker process",
        )
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    workers = {p for p in _pids_in(marks) if p != proc.pid}
    assert workers
    wait_until(lambda: not any(_alive(p) for p in workers), timeout=10, what="the workers to end")


def test_workers_start_once_the_output_schema_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chain with no output yet stays in-process; its workers start with the schema
    its first output gave (ints and floats in one field: float64, as in-process)."""
    size = 4096  # two slices of 2048 rows: one per worker

    def late(row: dict[str, Any]) -> list[dict[str, Any]]:
        v = row["value"]
        if v < 3 * size:
            return []
        x = v if v % size < size // 2 else float(v)  # the second slice as floats
        return [{"x": x, "pid": os.getpid()}]

    batches = [
        pa.record_batch({"value": list(range(i, i + size))}) for i in range(0, 8 * size, size)
    ]
    tables = []
    for setting in ("auto", "0"):
        monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", setting)
        env = ed.StreamEnvironment(1)
        out = env.from_arrow(batches).flat_map(late).collect()
        env.execute(f"late-{setting}")
        tables.append(out.to_arrow())
    workers, in_process = tables
    assert set(workers["pid"].to_pylist()) - {os.getpid()}, "no row went through a worker"
    assert workers.schema.field("x").type == pa.float64()
    assert workers["x"].to_pylist() == in_process["x"].to_pylist()


def test_workers_start_only_after_enough_rows_and_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 100_000)
    monkeypatch.setattr(pool, "START_AFTER_SECONDS", 1.0)
    assert not pool.start_due(99_999, 5.0)  # a short job never pays a worker's start
    assert not pool.start_due(10**7, 0.5)  # cheap functions: in-process keeps up
    assert pool.start_due(100_000, 1.0)
