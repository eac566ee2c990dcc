"""Keyed process functions in Python worker processes
(``eddyline/_exec/process_pool.py``, on ``pool.py``'s pool).

The operators switch to their workers after a few rows (``START_AFTER_ROWS``,
``START_AFTER_SECONDS``, ``WAIT_FOR_START``); the rows report the process id that
ran them, so each test checks that the workers really did.
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline._exec.pool as pool
from eddyline.testing import read_parquet_dir
from support.faults import completed_checkpoints, wait_until

N = 30_000
KEYS = 41
BUCKETS = 5
BATCH = 1_000


@pytest.fixture(autouse=True)
def early_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 2 * BATCH)
    monkeypatch.setattr(pool, "START_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(pool, "WAIT_FOR_START", True)
    monkeypatch.delenv("EDDYLINE_PYTHON_WORKERS", raising=False)


class Tally(ed.ProcessFunction):
    """Value, list and map state (one with a ttl that never expires here) and the
    watermark: per row the key's count, the bucket's count and the list's length."""

    def open(self, ctx: ed.ProcessContext) -> None:
        self.count = ctx.get_state("count", default=0)
        self.seen = ctx.get_list_state("seen", ttl="1h")

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        count = self.count.value() + 1
        self.count.update(count)
        self.seen.add(row["value"])
        buckets = ctx.get_map_state("buckets")
        bucket = row["value"] % BUCKETS
        buckets.put(bucket, buckets.get(bucket, 0) + 1)
        out = {
            "k": ctx.key,
            "value": row["value"],
            "n": count,
            "seen": len(self.seen.get()),
            "in_bucket": buckets.get(bucket),
            "wm": ctx.current_watermark,
            "pid": os.getpid(),
        }
        if ctx.key == 0:  # key 0 emits nothing
            return None
        if row["value"] % 5 == 0:  # two rows (a list)
            return [out, {**out, "n": -count}]
        if row["value"] % 7 == 0:  # one row from a generator
            return (r for r in [out])
        return out


def _batches(n: int = N) -> list[pa.RecordBatch]:
    return [
        pa.record_batch(
            {
                "value": list(range(i, min(i + BATCH, n))),
                "k": [v % KEYS for v in range(i, min(i + BATCH, n))],
                "ts": [v // 10 for v in range(i, min(i + BATCH, n))],
            }
        )
        for i in range(0, n, BATCH)
    ]


def _job(env: ed.StreamEnvironment, source: ed.DataStream | None = None) -> ed.DataStream:
    rows = source if source is not None else env.from_arrow(_batches())
    timed = rows.assign_timestamps("ts")
    return timed.key_by("k").process(Tally()).name("tally").uid("tally")


def _check(rows: list[dict[str, Any]], n: int = N) -> None:
    """Every input row's output exactly once; each key's counts exactly 1..c."""
    kept = [r for r in rows if r["n"] > 0]
    assert sorted(r["value"] for r in kept) == [v for v in range(n) if v % KEYS], "each row once"
    doubled = sorted(r["value"] for r in rows if r["n"] < 0)
    assert doubled == [v for v in range(n) if v % KEYS and v % 5 == 0]
    per_key: dict[int, list[int]] = {}
    for r in kept:
        assert r["k"] == r["value"] % KEYS and r["seen"] == r["n"]
        per_key.setdefault(r["k"], []).append(r["n"])
    sizes = Counter(v % KEYS for v in range(n))
    assert set(per_key) == set(range(1, KEYS))
    for k, counts in per_key.items():
        assert sorted(counts) == list(range(1, sizes[k] + 1)), f"value state of key {k}"


def _alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_workers_give_the_in_process_output(
    parallelism: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    outputs = {}
    for setting in ("0", "auto", "3"):
        monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", setting)
        env = ed.StreamEnvironment(parallelism)
        out = _job(env).collect()
        env.execute(f"process-workers-{setting}")
        outputs[setting] = out.to_arrow()
    in_process = outputs.pop("0")
    assert set(in_process["pid"].to_pylist()) == {os.getpid()}
    _check(in_process.to_pylist())
    for setting, table in outputs.items():
        pids = set(table["pid"].to_pylist()) - {os.getpid()}
        assert len(pids) >= (2 if setting == "3" else 1), f"{setting}: no worker ran rows"
        assert not any(_alive(pid) for pid in pids), "a worker outlived its job"
        _check(table.to_pylist())
        if parallelism == 1:  # one input channel: the very same rows in the same order
            assert table.drop_columns(["pid"]).equals(in_process.drop_columns(["pid"])), setting
    # The watermark reaches the workers: with parallelism 1 the tables above are equal
    # in their "wm" column (ctx.current_watermark), which does advance.
    assert max(in_process["wm"].to_pylist()) > min(in_process["wm"].to_pylist())


def test_a_raising_function_in_a_worker_names_the_operator_key_and_row() -> None:
    class Explode(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
            if row["value"] == N - 5:
                raise ValueError(f"bad value {row['value']}")
            return {"value": row["value"], "pid": os.getpid()}

    env = ed.StreamEnvironment(1, restart=ed.RestartStrategy.none())
    env.from_arrow(_batches()).key_by("k").process(Explode()).name("explode").collect()
    with pytest.raises(ed.JobFailedError) as info:
        env.execute("raising")
    err = info.value
    assert err.operator == "explode"
    assert f"bad value {N - 5}" in str(err)
    assert f"key {(N - 5) % KEYS}" in str(err) and f"'value': {N - 5}" in str(err)
    assert err.user_traceback is not None
    assert "in process_element" in err.user_traceback and "ValueError" in err.user_traceback


def test_functions_with_timers_or_side_outputs_stay_in_process() -> None:
    class WithTimer(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
            return {"value": row["value"], "pid": os.getpid()}

        def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> None:
            return None

    tag = ed.OutputTag("odd")

    class WithSide(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
            if row["value"] % 2:
                ctx.output(tag, {"value": row["value"]})
            return {"value": row["value"], "pid": os.getpid()}

    env = ed.StreamEnvironment(1)
    keyed = env.from_arrow(_batches()).key_by("k")
    timers = keyed.process(WithTimer()).collect()
    sided = keyed.process(WithSide())
    main = sided.collect()
    odd = sided.side_output(tag).collect()
    env.execute("in-process")
    assert set(timers.to_arrow()["pid"].to_pylist()) == {os.getpid()}
    assert set(main.to_arrow()["pid"].to_pylist()) == {os.getpid()}
    assert sorted(odd.to_arrow()["value"].to_pylist()) == list(range(1, N, 2))


KILL_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    from pathlib import Path

    import eddyline as ed
    import eddyline._exec.pool as pool
    from support.faults import SleepPerBatch
    from test_process_workers import Tally, KEYS

    pool.START_AFTER_ROWS = 2000
    pool.START_AFTER_SECONDS = 0.0
    out, chk, marks, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    class Marked(Tally):
        # Leaves the pid of each process that runs its rows in ``marks``.
        def process_element(self, row, ctx):
            if not getattr(self, "marked", False):
                Path(marks, str(os.getpid())).touch()
                self.marked = True
            return super().process_element(row, ctx)

    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms"),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=500,
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.02)).name("slow").uid("slow")
    rows = slow.with_columns(k=ed.col("value") % KEYS, ts=ed.col("value") // 10)
    state = rows.assign_timestamps("ts").key_by("k").process(Marked()).name("tally").uid("tally")
    state.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("process-workers-kill", restore_from="latest")
    result = client.wait(timeout=120)
    causes = " ".join(str(c) for c in client.restart_causes())
    print(f"finished restarts={result.restarts} causes={causes}", flush=True)
    """
)


@pytest.mark.timeout(180)
def test_sigkill_of_a_worker_restores_the_state_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker holding key groups' state is killed mid-run: the job fails over to its
    last checkpoint (the state the workers returned at it) and its output is exact."""
    import subprocess

    n = 100_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk, marks = tmp_path / "out", tmp_path / "chk", tmp_path / "marks"
    marks.mkdir()
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.getenv("PYTHONPATH")])))
    # Two workers per subtask: a checkpoint merges the key groups of both, and the
    # outputs of the two are put back in input order.
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "2")
    with subprocess.Popen(
        [sys.executable, str(script), str(out), str(chk), str(marks), str(n)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as job:

        def serving_worker() -> int | None:
            """A worker process that ran rows (its pid marked), once a checkpoint completed."""
            if not completed_checkpoints(chk):
                return None
            return next((int(p.name) for p in marks.iterdir() if int(p.name) != job.pid), None)

        try:
            worker = wait_until(serving_worker, timeout=60, what="a worker that ran rows")
            assert worker is not None
            os.kill(worker, signal.SIGKILL)
            stdout, stderr = job.communicate(timeout=120)
        finally:
            if job.poll() is None:
                job.kill()
                job.wait()
    assert job.returncode == 0, stderr
    assert "finished restarts=1 " in stdout, stdout
    assert f"pid {worker}" in stdout, stdout
    _check(read_parquet_dir(out).to_pylist(), n)
    pids = [int(p.name) for p in marks.iterdir() if int(p.name) != job.pid]
    assert len(pids) >= 3, "the restarted job ran its rows in new workers"
    wait_until(lambda: not any(_alive(p) for p in pids), timeout=10, what="the workers to end")
