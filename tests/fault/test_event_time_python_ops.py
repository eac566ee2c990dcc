"""Event time assigned behind Python operators, across a restore at a lower parallelism.

``from_parquet -> map_batches / map / filter / flat_map (Python) -> assign_timestamps
-> key_by -> window``: the Python operators emit each batch's rows at once and in
order, in-process and in Python worker processes alike, so they pass the source's
progress on and the assigner keeps one watermark per file (DESIGN.md "Event time per
split"), as behind native operators. Each subtask reads several files over the same
hour; with one watermark per subtask a file read after another (interleaved batch by
batch, or in turn after a restore that hands one subtask the files of three) would
find its rows late. Every case must equal the batch computation exactly: nothing
late, nothing lost, nothing twice.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline._exec.pool as pool
import eddyline.functions as F
from eddyline.testing import read_parquet_dir
from support.event_time import SCHEMA, write_hour_files
from support.faults import SleepPerBatch, wait_until

FILES = 6
ROWS = 2_000
WINDOW_MS = 60_000
KEYS = 20
BATCH = 100
TIMEOUT_S = 60.0


def write_files(directory: Path, seed: int) -> list[dict[str, Any]]:
    """Files over the same hour (the bound is 10 s): a batch of one file spans 3
    minutes, so the next file's batch is behind it."""
    return write_hour_files(directory, seed, files=FILES, rows=ROWS, keys=KEYS)


class AddV:
    """A per-record ``map``: ``v + 1``. In a Python worker process it leaves a file
    named by its process id in ``pids``, so the test can tell the workers ran it."""

    def __init__(self, pids: Path) -> None:
        self.pids = pids
        self.seen: int | None = None

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        if self.seen != os.getpid():
            self.seen = os.getpid()
            (self.pids / str(self.seen)).touch()
        return {**row, "v": row["v"] + 1}


def odd_id(row: dict[str, Any]) -> bool:
    return row["id"] % 2 == 1


def twice_if_even(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [row, row] if row["k"] % 2 == 0 else [row]


def expected(rows: list[dict[str, Any]], ops: str) -> list[tuple[int, int, int]]:
    """The windows as a batch computation over what the Python operators emit."""
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        if "filter" in ops and not odd_id(r):
            continue
        v = r["v"] + 1 if "map" in ops.split("+") else r["v"]
        copies = len(twice_if_even(r)) if "flat_map" in ops else 1
        sums[(r["k"], r["ts"] // WINDOW_MS * WINDOW_MS)] += v * copies
    return sorted((k, s, v) for (k, s), v in sums.items())


def build(
    parallelism: int, data: Path, chk: Path, out: Path, ops: str, *, sleep: float, agg: bool
) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        batch_size=BATCH,
    )
    stream = (
        env.from_parquet(str(data))
        .name("src")
        .uid("src")
        .map_batches(SleepPerBatch(sleep), schema=SCHEMA)
        .name("slow")
        .uid("slow")
    )
    for op in ops.split("+"):
        if op == "map":
            stream = stream.map(AddV(out / "pids"), schema=SCHEMA).name("add").uid("add")
        elif op == "filter":
            stream = stream.filter(odd_id).name("odd").uid("odd")
        elif op == "flat_map":
            stream = stream.flat_map(twice_if_even, schema=SCHEMA).name("twice").uid("twice")
    stamped = stream.assign_timestamps("ts", max_out_of_orderness="10s").name("ts").uid("ts")
    late = ed.OutputTag("late")
    keyed = stamped.key_by("k").window(ed.Tumbling("60s"), late_output=late)
    windows = (keyed.agg(F.sum("v").alias("v")) if agg else keyed.sum("v")).name("win").uid("win")
    windows.sink_to(ed.ParquetSink(str(out / "main"))).name("o").uid("o")
    windows.side_output(late).sink_to(ed.ParquetSink(str(out / "late"))).name("l").uid("l")
    return env


def committed(out: Path) -> list[tuple[int, int, int]]:
    main = read_parquet_dir(out / "main")
    starts = main["window_start"].cast(pa.int64()).to_pylist()
    return sorted(zip(main["k"].to_pylist(), starts, main["v"].to_pylist(), strict=True))


def late_rows(out: Path) -> int:
    return read_parquet_dir(out / "late").num_rows if (out / "late").exists() else 0


@pytest.fixture
def workers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Python worker processes for the per-record operators (after two batches) or none."""
    on: bool = request.param
    monkeypatch.setenv("EDDYLINE_PYTHON_WORKERS", "1" if on else "0")
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 2 * BATCH)
    monkeypatch.setattr(pool, "START_AFTER_SECONDS", 0.0)
    monkeypatch.setattr(pool, "WAIT_FOR_START", True)
    return on


@pytest.mark.parametrize("workers", [False], indirect=True)
@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
def test_python_operators_before_the_assigner_keep_a_watermark_per_file(
    tmp_path: Path, parallelism: int, workers: bool
) -> None:
    rows = write_files(tmp_path / "in", seed=parallelism)
    out = tmp_path / "out"
    (out / "pids").mkdir(parents=True)
    env = build(parallelism, tmp_path / "in", tmp_path / "chk", out, "map", sleep=0.0, agg=False)
    result = env.execute("failure-free")
    assert int(result.metrics["operators"]["win"]["late_records"]) == 0
    assert late_rows(out) == 0
    assert committed(out) == expected(rows, "map")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("ops", "agg", "workers"),
    [
        ("batches", False, False),
        ("map", False, False),
        ("map+filter", True, True),
        ("flat_map", False, False),
    ],
    indirect=["workers"],
)
def test_python_operators_before_the_assigner_restore_exactly_at_a_lower_parallelism(
    tmp_path: Path, ops: str, agg: bool, workers: bool
) -> None:
    rows = write_files(tmp_path / "in", seed=len(ops))
    chk, out = tmp_path / "chk", tmp_path / "out"
    (out / "pids").mkdir(parents=True)
    client = build(3, tmp_path / "in", chk, out, ops, sleep=0.01, agg=agg).execute_async("first")
    wait_until(
        lambda: client.metrics()["operators"]["src"]["records_out"] >= FILES * ROWS // 3,
        timeout=TIMEOUT_S,
        what="a third of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    first = client.wait(timeout=TIMEOUT_S)
    read = int(first.metrics["operators"]["src"]["records_out"])
    assert 0 < read < FILES * ROWS, f"the stop did not happen mid-run ({read})"
    before = committed(out)
    assert before, "no window was committed before the savepoint"

    second = build(1, tmp_path / "in", chk, out, ops, sleep=0.0, agg=agg).execute(
        "second", restore_from=savepoint
    )

    assert int(second.metrics["operators"]["src"]["records_out"]) == FILES * ROWS - read
    late = int(first.metrics["operators"]["win"]["late_records"]) + int(
        second.metrics["operators"]["win"]["late_records"]
    )
    assert late == 0 and late_rows(out) == 0, f"{late} rows were made late"
    got = committed(out)
    assert len(set((k, s) for k, s, _ in got)) == len(got), "a window was committed twice"
    assert got == expected(rows, ops)
    if workers:
        pids = {int(p.name) for p in (out / "pids").iterdir()}
        assert pids - {os.getpid()}, "the per-record map never ran in a worker process"
