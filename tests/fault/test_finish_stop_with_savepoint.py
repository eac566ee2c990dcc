"""(c) Stop with a savepoint mid-run, resume from it: the output equals an uninterrupted run.

The job writes its ids to a ParquetSink and a keyed running sum to another.
Stopping without draining commits exactly what was read before the savepoint
barrier; a new ``execute(restore_from=savepoint)`` reads only the rest. Also:
``trigger_savepoint`` takes a savepoint without disturbing the job.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, assert_exact_ids, wait_until

N = 30_000
KEYS = 5
TIMEOUT_S = 30.0


def build(
    parallelism: int, chk: Path, ids: Path, sums: Path, *, sleep: float
) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk), interval="200ms"),
        batch_size=100,
    )
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(str(ids))).name("ids").uid("ids")
    keyed = slow.with_columns(k=ed.col("value") % KEYS).name("key").uid("key")
    totals = keyed.key_by("k").sum("value").name("sum").uid("sum")
    totals.sink_to(ed.ParquetSink(str(sums))).name("sums").uid("sums")
    return env


def final_sums(directory: Path) -> dict[int, int]:
    """The last running sum per key (sums of non-negative values only grow)."""
    out: dict[int, int] = {}
    for row in read_parquet_dir(directory).to_pylist():
        out[row["k"]] = max(out.get(row["k"], row["value"]), row["value"])
    return out


def committed_ids(directory: Path) -> list[int]:
    table = read_parquet_dir(directory)
    return table["value"].to_pylist() if table.num_columns else []


def source_records(result: ed.JobResult) -> int:
    return int(result.metrics["operators"]["numbers"]["records_out"])


def assert_savepoint(path: str) -> dict[str, Any]:
    assert os.path.isdir(path), f"no savepoint directory {path}"
    assert os.path.isfile(os.path.join(path, "_manifest.json")), os.listdir(path)
    manifest: dict[str, Any] = inspect_checkpoint(path)
    assert manifest["kind"] == "savepoint", manifest["kind"]
    return manifest


@pytest.mark.parametrize("parallelism", [1, 3], ids=lambda p: f"p{p}")
def test_finish_stop_with_savepoint_then_resume_equals_uninterrupted_run(
    tmp_path: Path, parallelism: int
) -> None:
    # the golden output: an uninterrupted run
    gold = tmp_path / "gold"
    build(parallelism, gold / "chk", gold / "ids", gold / "sums", sleep=0.0).execute("gold")
    assert_exact_ids(committed_ids(gold / "ids"), range(N), "uninterrupted ids")
    golden_sums = final_sums(gold / "sums")
    assert golden_sums == {k: sum(range(k, N, KEYS)) for k in range(KEYS)}

    chk, ids, sums = tmp_path / "chk", tmp_path / "ids", tmp_path / "sums"
    env = build(parallelism, chk, ids, sums, sleep=0.003)
    client = env.execute_async("stopped")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 10,
        timeout=TIMEOUT_S,
        what="a tenth of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "savepoints"), drain=False)
    first = client.wait(timeout=TIMEOUT_S)
    assert client.status == "finished"
    manifest = assert_savepoint(savepoint)
    assert not any(op["finished"] for op in manifest["operators"] if op["uid"] == "sum")
    assert first.checkpoints and first.checkpoints[-1].kind == "savepoint"

    # stopped mid-run, and everything read before the savepoint is committed, once
    read_first = source_records(first)
    assert 0 < read_first < N, f"the stop did not happen mid-run ({read_first} of {N})"
    before = committed_ids(ids)
    assert len(before) == read_first
    assert len(set(before)) == len(before), "duplicates committed before the resume"

    resumed = build(parallelism, chk, ids, sums, sleep=0.0).execute(
        "resumed", restore_from=savepoint
    )
    assert source_records(resumed) == N - read_first, (
        "the resumed run did not start at the savepoint"
    )
    assert_exact_ids(committed_ids(ids), range(N), "ids after the resume")
    assert final_sums(sums) == golden_sums


def test_finish_trigger_savepoint_keeps_the_job_running(tmp_path: Path) -> None:
    chk, ids, sums = tmp_path / "chk", tmp_path / "ids", tmp_path / "sums"
    env = build(2, chk, ids, sums, sleep=0.002)
    client = env.execute_async("savepointed")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 10,
        timeout=TIMEOUT_S,
        what="a tenth of the input to be read",
    )
    savepoint = client.trigger_savepoint(str(tmp_path / "savepoints"))
    assert_savepoint(savepoint)
    assert client.status == "running", "trigger_savepoint stopped the job"
    result = client.wait(timeout=TIMEOUT_S)
    assert source_records(result) == N
    kinds = [c.kind for c in result.checkpoints]
    assert "savepoint" in kinds and kinds[-1] == "checkpoint", kinds
    assert_exact_ids(committed_ids(ids), range(N), "ids")
    assert final_sums(sums) == {k: sum(range(k, N, KEYS)) for k in range(KEYS)}


def test_finish_savepoints_need_checkpointing(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(1, batch_size=100)
    env.from_sequence(0, N).map_batches(SleepPerBatch(0.002)).collect()
    client = env.execute_async("no-checkpoints")
    try:
        with pytest.raises(ed.CheckpointError):
            client.trigger_savepoint(str(tmp_path / "sp"))
        with pytest.raises(ed.CheckpointError):
            client.stop_with_savepoint(str(tmp_path / "sp"))
    finally:
        client.cancel()
        with pytest.raises(ed.JobCancelledError):
            client.wait(timeout=TIMEOUT_S)
    assert client.status == "cancelled"
