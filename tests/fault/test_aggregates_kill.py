"""``keyed.agg(...)`` and window (tumbling, session) ``.agg(...)`` under SIGKILL
and ``restore_from="latest"`` (TESTING.md "Faults to inject"): the
accumulators' states are restored from the latest
checkpoint, at the same or at another parallelism (2 -> 3, 3 -> 1), and the
exactly-once Parquet output holds every key's final values exactly, with no
running row committed twice."""

from __future__ import annotations

import math
import os
import random
import sys
import textwrap
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline.testing import read_parquet_dir
from support.faults import kill_after_checkpoints, wait_until

KEYS = 50


class Columns:
    """``value`` -> key ``k``, a float ``y`` (null every 13th, integral so sums
    are exact) and ``u`` for a distinct count; ``sleep`` seconds per batch."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import time

        v = batch.column("value").to_numpy()
        y = pa.array((v % 97).astype(np.float64), mask=(v % 13 == 0))
        time.sleep(self.sleep)
        return pa.RecordBatch.from_arrays(
            [batch.column("value"), pa.array(v % KEYS), y, pa.array(v % 31)],
            names=["value", "k", "y", "u"],
        )


def aggs_job(env: ed.StreamEnvironment, n: int, sleep: float) -> ed.DataStream:
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    keyed = numbers.map_batches(Columns(sleep)).name("columns").uid("columns").key_by("k")
    return (
        keyed.agg(
            F.sum("value").alias("total"),
            F.count("*"),
            F.count("y"),
            F.avg("y"),
            F.min("y"),
            F.max("value"),
            F.count_distinct("u"),
            F.stddev("y"),
        )
        .name("aggs")
        .uid("aggs")
    )


WINDOW_MS = 1000


def window_job(env: ed.StreamEnvironment, n: int, sleep: float) -> ed.DataStream:
    """Tumbling windows of ``WINDOW_MS`` over event time ``value`` (ms).

    Event time is assigned right after the source, before the Python
    ``map_batches``: restored into fewer subtasks, a source subtask reads
    several ranges of the sequence interleaved, and only an assignment
    chained to its source keeps a watermark per range (DESIGN.md "Event time
    per split"). Behind a Python operator it would keep one for the
    interleaved stream, and the lower ranges' records would be late."""
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    stamped = numbers.assign_timestamps("value").name("stamps").uid("stamps")
    columns = stamped.map_batches(Columns(sleep)).name("columns").uid("columns")
    windowed = columns.key_by("k").window(ed.Tumbling("1s"))
    return (
        windowed.agg(F.count("*"), F.sum("value"), F.max("y"), F.count_distinct("u"))
        .name("window_aggs")
        .uid("window_aggs")
    )


SESSION_GAP_MS = 150


def session_time(value: Any) -> Any:
    """The event time of ``value`` (an int, or an expression of the column):
    blocks of 1000 values, 3 s apart; in a block, the first 500 values are 4 ms
    apart and the next 500 land 100 ms after them, so each key's first rows
    (200 ms apart, further than the gap) open sessions that its later rows
    bridge and merge. Out of order by less than 2 s."""
    j = value % 1000
    if isinstance(value, int):
        return (value - j) * 3 + (4 * j if j < 500 else 4 * (j - 500) + 100)
    return (value - j) * 3 + F.when(j < 500, j * 4).otherwise((j - 500) * 4 + 100)


def session_job(env: ed.StreamEnvironment, n: int, sleep: float) -> ed.DataStream:
    """Session windows of ``SESSION_GAP_MS`` over :func:`session_time`, with
    the event time assigned chained to the source as in :func:`window_job`."""
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    timed = numbers.with_columns(t=session_time(F.col("value"))).name("time").uid("time")
    stamped = timed.assign_timestamps("t", max_out_of_orderness="2s").name("stamps").uid("stamps")
    columns = stamped.map_batches(SessionColumns(sleep)).name("columns").uid("columns")
    sessions = columns.key_by("k").window(ed.Session(SESSION_GAP_MS / 1000))
    return (
        sessions.agg(F.count("*"), F.sum("value"), F.max("y"), F.count_distinct("u"))
        .name("session_aggs")
        .uid("session_aggs")
    )


class SessionColumns(Columns):
    """:class:`Columns`, keeping the event time ``t``."""

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        out = super().__call__(batch)
        return out.append_column("t", batch.column("t"))


def expected_sessions(n: int) -> dict[tuple[int, int], dict[str, Any]]:
    """The reference: per key, rows by time, a new session where the next row
    is ``SESSION_GAP_MS`` or more after the previous one."""
    by_key: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for v in range(n):
        by_key[v % KEYS].append((session_time(v), v))
    out = {}
    for k, rows in by_key.items():
        rows.sort()
        parts: list[list[tuple[int, int]]] = []
        for t, v in rows:
            if not parts or t - parts[-1][-1][0] >= SESSION_GAP_MS:
                parts.append([])
            parts[-1].append((t, v))
        for part in parts:
            vs = [v for _, v in part]
            ys = [float(v % 97) for v in vs if v % 13 != 0]
            out[(k, part[0][0])] = {
                "window_end": part[-1][0] + SESSION_GAP_MS,
                "count(1)": len(vs),
                "sum(value)": sum(vs),
                "max(y)": max(ys) if ys else None,
                "count(DISTINCT u)": len({v % 31 for v in vs}),
            }
    return out


def expected_windows(n: int) -> dict[tuple[int, int], dict[str, Any]]:
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    for v in range(n):
        groups[(v % KEYS, v - v % WINDOW_MS)].append(v)
    out = {}
    for key, vs in groups.items():
        ys = [float(v % 97) for v in vs if v % 13 != 0]
        out[key] = {
            "count(1)": len(vs),
            "sum(value)": sum(vs),
            "max(y)": max(ys) if ys else None,
            "count(DISTINCT u)": len({v % 31 for v in vs}),
        }
    return out


def expected(n: int) -> dict[int, dict[str, Any]]:
    groups: dict[int, list[int]] = defaultdict(list)
    for v in range(n):
        groups[v % KEYS].append(v)
    out = {}
    for k, vs in groups.items():
        ys = [float(v % 97) for v in vs if v % 13 != 0]
        mean = sum(ys) / len(ys)
        out[k] = {
            "total": sum(vs),
            "count(1)": len(vs),
            "count(y)": len(ys),
            "avg(y)": mean,
            "min(y)": min(ys),
            "max(value)": max(vs),
            "count(DISTINCT u)": len({v % 31 for v in vs}),
            "stddev(y)": math.sqrt(sum((y - mean) ** 2 for y in ys) / (len(ys) - 1)),
        }
    return out


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import completed_checkpoints
    from test_aggregates_kill import aggs_job, session_job, window_job

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first, later = int(sys.argv[4]), int(sys.argv[5])
    job = {"window": window_job, "session": session_job}.get(sys.argv[6], aggs_job)
    parallelism = later if completed_checkpoints(chk) else first
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk, interval="80ms", incremental=True),
        batch_size=400,
        max_parallelism=16,
    )
    job(env, n, 0.01).sink_to(ed.ParquetSink(out)).name("files").uid("files")
    result = env.execute("aggs-kill", restore_from="latest")
    print(f"parallelism {parallelism}", flush=True)
    if job is not aggs_job:
        late = result.metrics["operators"][sys.argv[6] + "_aggs"]["late_records"]
        print(f"late records {late}", flush=True)
    print("finished", flush=True)
    """
)


def _run_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, args: list[str]
) -> list[dict[str, Any]]:
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.getenv("PYTHONPATH")])))
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), *args]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(seed), timeout=200, max_delay=0.3
    )
    assert len(outputs) == 3 and "finished" in outputs[-1]
    assert f"parallelism {args[2]}" in outputs[-1]
    if args[3] != "keyed":
        # No record of the last run was late (dropped).
        assert "late records 0" in outputs[-1], outputs[-1]
    rows: list[dict[str, Any]] = read_parquet_dir(out).to_pylist()
    return rows


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("first", "later"), [(2, 3), (3, 1)])
def test_sigkill_and_restore_at_another_parallelism_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, first: int, later: int
) -> None:
    n = 60_000
    rows = _run_killed(tmp_path, monkeypatch, seed, [str(n), str(first), str(later), "keyed"])
    # Exactly once: no running value of a key is committed twice.
    seen = [(r["k"], r["count(1)"]) for r in rows]
    assert len(seen) == len(set(seen))
    final: dict[int, dict[str, Any]] = {}
    for r in rows:
        if r["count(1)"] > final.get(r["k"], {}).get("count(1)", -1):
            final[r["k"]] = r
    want = expected(n)
    assert set(final) == set(want)
    for k, row in final.items():
        for name, value in want[k].items():
            if name == "stddev(y)":
                assert math.isclose(row[name], value, rel_tol=1e-9), (k, name, row[name], value)
            else:
                assert row[name] == value, (k, name, row[name], value)


Reference = Callable[[int], dict[tuple[int, int], dict[str, Any]]]

#: Per window kind: the job, its reference and how many values it reads in
#: the savepoint test (a session job is slower per value).
WINDOW_KINDS: dict[str, tuple[Callable[..., ed.DataStream], Reference, int]] = {
    "window": (window_job, expected_windows, 60_000),
    "session": (session_job, expected_sessions, 30_000),
}


def assert_each_fired_once_exactly(rows: list[dict[str, Any]], kind: str, n: int) -> None:
    """Every window (or session) of ``kind`` over ``n`` values fired once, with
    the reference's values."""
    got = {(r["k"], r["window_start"]): r for r in rows}
    assert len(got) == len(rows), f"a {kind} fired twice"
    want = WINDOW_KINDS[kind][1](n)
    assert len(want) == KEYS * n // 1000, f"one {kind} per key and block of 1000 values"
    assert set(got) == set(want)
    for key, values in want.items():
        assert {name: got[key][name] for name in values} == values, key


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["window", "session"])
@pytest.mark.parametrize(("first", "later"), [(2, 3), (3, 1)])
def test_window_aggregates_after_sigkill_and_rescale_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, first: int, later: int, kind: str
) -> None:
    """Open tumbling windows, and open sessions whose accumulators merge as
    rows bridge them, survive SIGKILL and a restore at another parallelism:
    every one fires once, with exact values."""
    n = 60_000
    rows = _run_killed(tmp_path, monkeypatch, seed, [str(n), str(first), str(later), kind])
    assert_each_fired_once_exactly(rows, kind, n)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["window", "session"])
def test_window_aggregates_savepoint_from_three_subtasks_into_one_are_exact(
    tmp_path: Path, kind: str
) -> None:
    """Deterministically what the SIGKILL test does at random: a savepoint of
    three subtasks mid-run, holding open windows or sessions, restored into
    one, which merges key groups restored at three watermarks and reads the
    three ranges left interleaved; no record is late and every window fires
    once, exactly."""
    job, _, n = WINDOW_KINDS[kind]

    def build(parallelism: int, sleep: float) -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            parallelism,
            checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="80ms"),
            batch_size=400,
            max_parallelism=16,
        )
        job(env, n, sleep).sink_to(ed.ParquetSink(str(tmp_path / "out"))).name("files").uid("files")
        return env

    client = build(3, 0.03).execute_async("three")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= n // 3,
        timeout=60,
        what="a third of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    first = client.wait(timeout=60)
    read = int(first.metrics["operators"]["numbers"]["records_out"])
    assert 0 < read < n, f"the stop did not happen mid-run ({read} of {n})"
    resumed = build(1, 0.0).execute("one", restore_from=savepoint)
    assert int(resumed.metrics["operators"][f"{kind}_aggs"]["late_records"]) == 0
    assert_each_fired_once_exactly(read_parquet_dir(tmp_path / "out").to_pylist(), kind, n)
