"""FLIP-147 partially finished operators: restore a savepoint at another parallelism.

A user source at parallelism 2 has short and long splits: subtask 0 reads the
short ones and finishes, subtask 1 is still reading a long one when the job is
stopped with a savepoint (without draining). A second, short source has
finished entirely. The savepoint is restored at parallelism 1 and 3: the
splits left over are dealt to the new subtasks, the finished ones are not read
again, the pending transactions of the sinks are committed once, and the
committed output equals an uninterrupted run exactly. ``assign_timestamps``
state (per-split watermarks) is union list state and restores at another
parallelism too.
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, assert_exact_ids, wait_until
from support.sinks import RecordingTwoPhaseSink

SHORT_ROWS = 200
LONG_ROWS = 4_000
SPLITS = [SHORT_ROWS, LONG_ROWS, SHORT_ROWS, LONG_ROWS]  # dealt: 0, 2 -> subtask 0; 1, 3 -> 1
EXTRA = 500  # the second source's rows
KEYS = 7
TIMEOUT_S = 60.0


class Lanes(ed.Source):
    """Split ``s`` holds ids ``s * 1_000_000 + i``; long splits sleep per batch
    (only while ``delay`` is set) and short ones mark their end in ``markers``."""

    def __init__(self, delay: float, markers: str) -> None:
        self.delay = delay
        self.markers = markers

    def schema(self) -> pa.Schema:
        return pa.schema([pa.field("id", pa.int64(), nullable=False)])

    def splits(self) -> list[int]:
        return list(range(len(SPLITS)))

    def read(self, split: int, offset: int, max_rows: int) -> Any:
        rows = SPLITS[split]
        if offset >= rows:
            if rows == SHORT_ROWS:
                Path(self.markers, f"done-{split}").touch()
            return None
        if rows == LONG_ROWS and self.delay:
            time.sleep(self.delay)  # throttle, not a wait: the long splits outlast the short ones
        end = min(rows, offset + max_rows)
        ids = pa.array(range(split * 1_000_000 + offset, split * 1_000_000 + end), pa.int64())
        return pa.record_batch([ids], schema=self.schema()), end


def all_ids() -> list[int]:
    ids = [s * 1_000_000 + i for s, rows in enumerate(SPLITS) for i in range(rows)]
    return ids + list(range(10_000_000, 10_000_000 + EXTRA))


def build(
    parallelism: int, root: Path, *, delay: float, run: str
) -> tuple[ed.StreamEnvironment, Path, Path, Path]:
    out_ids, out_sums, out_2pc = root / "ids", root / "sums", root / "txn"
    markers = root / f"markers-{run}"
    markers.mkdir(parents=True, exist_ok=True)
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(root / "chk"), interval="100ms"),
        batch_size=50,
    )
    lanes = env.from_source(Lanes(delay, str(markers))).name("lanes").uid("lanes")
    extra = (
        env.from_sequence(10_000_000, 10_000_000 + EXTRA)
        .name("extra")
        .uid("extra")
        .with_columns(id=ed.col("value"))
        .select("id")
        .name("rename")
        .uid("rename")
    )
    ids = lanes.union(extra).name("union").uid("union")
    ids.sink_to(ed.ParquetSink(str(out_ids))).name("ids").uid("ids")
    ids.sink_to(RecordingTwoPhaseSink(str(out_2pc))).name("txn").uid("txn")
    keyed = ids.with_columns(k=ed.col("id") % KEYS).name("key").uid("key")
    keyed.key_by("k").sum("id").name("sum").uid("sum").sink_to(ed.ParquetSink(str(out_sums))).name(
        "sums"
    ).uid("sums")
    return env, out_ids, out_sums, out_2pc


def final_sums(directory: Path) -> dict[int, int]:
    """The last running sum per key (sums of non-negative values only grow)."""
    out: dict[int, int] = {}
    for row in read_parquet_dir(directory).to_pylist():
        out[row["k"]] = max(out.get(row["k"], row["id"]), row["id"])
    return out


def committed_ids(directory: Path) -> list[int]:
    table = read_parquet_dir(directory)
    return table["id"].to_pylist() if table.num_columns else []


@pytest.mark.parametrize("parallelism", [1, 3], ids=lambda p: f"p{p}")
def test_finish_partially_finished_source_restores_at_another_parallelism(
    tmp_path: Path, parallelism: int
) -> None:
    expected = all_ids()
    golden_sums = Counter[int]()
    for i in expected:
        golden_sums[i % KEYS] += i
    # the uninterrupted run gives the same totals
    env, gold_ids, gold_sums, _ = build(2, tmp_path / "gold", delay=0.0, run="gold")
    env.execute("gold")
    assert_exact_ids(committed_ids(gold_ids), expected, "uninterrupted ids")
    assert final_sums(gold_sums) == dict(golden_sums)

    root = tmp_path / "run"
    env, out_ids, out_sums, out_2pc = build(2, root, delay=0.01, run="first")
    client = env.execute_async("stopped")
    markers = root / "markers-first"

    def lanes_0_and_extra_finished() -> bool:
        ops = client.metrics()["operators"]
        return ops["lanes"]["subtasks"][0]["finished"] and ops["extra"]["finished"]

    wait_until(
        lanes_0_and_extra_finished,
        timeout=TIMEOUT_S,
        what="subtask 0 of the source to finish its short splits, and the short source",
    )
    # subtask 0 finished by reading its short splits to their end
    assert (markers / "done-0").exists() and (markers / "done-2").exists()
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoints"), drain=False)
    client.wait(timeout=TIMEOUT_S)

    # Non-vacuity: the source was partially finished at the savepoint.
    manifest = inspect_checkpoint(savepoint)
    ops = {op["uid"]: op for op in manifest["operators"]}
    assert ops["extra"]["finished"], "the short source finished entirely"
    assert not ops["lanes"]["finished"], "the long split was still being read"
    lanes = {s["subtask"]: s["source_offsets"] for s in ops["lanes"]["subtasks"]}
    assert lanes[0] == [("0/done", 0)], f"subtask 0 had splits left: {lanes}"
    assert lanes[1] and lanes[1] != [("1/done", 0)], f"subtask 1 had finished: {lanes}"
    before = committed_ids(out_ids)
    assert 0 < len(before) < len(expected), "the stop did not happen mid-run"
    pre_committed = {
        e["txn"] for e in RecordingTwoPhaseSink.read_log(out_2pc) if e["phase"] == "pre_commit"
    }

    resumed, _, _, _ = build(parallelism, root, delay=0.0, run="resumed")
    resumed.execute("resumed", restore_from=savepoint)

    assert_exact_ids(committed_ids(out_ids), expected, f"ids after the resume at p={parallelism}")
    assert final_sums(out_sums) == dict(golden_sums)
    # Every transaction pre-committed before the stop is committed exactly once.
    log = RecordingTwoPhaseSink.read_log(out_2pc)
    commits = Counter(e["txn"] for e in log if e["phase"] == "commit")
    assert all(commits[t] == 1 for t in pre_committed if t in commits), commits
    assert set(pre_committed) <= set(commits) | {
        e["txn"] for e in log if e["phase"] == "pre_commit" and e["rows"] == 0
    }, "a pending transaction was never committed"
    two_pc = RecordingTwoPhaseSink.committed(out_2pc)
    assert_exact_ids(two_pc["id"].to_pylist(), expected, "two-phase-commit sink")


def test_finish_timestamp_assigner_state_restores_at_another_parallelism(tmp_path: Path) -> None:
    n = 20_000

    def build_stamped(parallelism: int, sleep: float) -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            parallelism,
            checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms"),
            batch_size=100,
        )
        (
            env.from_sequence(0, n)
            .name("numbers")
            .uid("numbers")
            .map_batches(SleepPerBatch(sleep))
            .name("slow")
            .uid("slow")
            .assign_timestamps("value")
            .name("stamp")
            .uid("stamp")
            .sink_to(ed.ParquetSink(str(tmp_path / "out")))
            .name("out")
            .uid("out")
        )
        return env

    client = build_stamped(2, 0.002).execute_async("stamped")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 1_000,
        timeout=TIMEOUT_S,
        what="some input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoints"), drain=False)
    first = client.wait(timeout=TIMEOUT_S)
    assert int(first.metrics["operators"]["numbers"]["records_out"]) < n, "not stopped mid-run"
    build_stamped(1, 0.0).execute("rescaled", restore_from=savepoint)
    ids = read_parquet_dir(tmp_path / "out")["value"].to_pylist()
    assert_exact_ids(ids, range(n), "timestamped ids after the rescale")
