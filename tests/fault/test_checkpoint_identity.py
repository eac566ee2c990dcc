"""What a restore must match, and what a checkpoint id means.

The key columns of a keyed operator are part of its checkpointed identity;
restoring a savepoint into a job that keys the same uid by another column is a
``CheckpointError`` (unless ``allow_non_restored_state``), never wrong sums. So
is the number of key groups (``max_parallelism``). An id that was started is
never given to another checkpoint, also not by a new process restoring
``"latest"``; a checkpoint that fails to begin keeps its cause.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 20_000
TIMEOUT_S = 30.0


def build(
    chk: Path,
    sums: Path,
    *,
    key: str,
    max_parallelism: int = 128,
    sleep: float = 0.0,
) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        batch_size=100,
        max_parallelism=max_parallelism,
    )
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow")
    keyed = slow.with_columns(k=ed.col("value") % 5, g=ed.col("value") % 7).name("key").uid("key")
    totals = keyed.key_by(key).sum("value").name("sum").uid("sum")
    totals.sink_to(ed.ParquetSink(str(sums))).name("sums").uid("sums")
    return env


def savepoint(tmp_path: Path) -> str:
    """A savepoint of the job keyed by ``k``, taken mid-run with keyed state."""
    env = build(tmp_path / "chk", tmp_path / "sums0", key="k", sleep=0.01)
    client = env.execute_async("keyed-by-k")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 10,
        timeout=TIMEOUT_S,
        what="a tenth of the input to be read",
    )
    path = client.stop_with_savepoint(str(tmp_path / "savepoints"))
    first = client.wait(timeout=TIMEOUT_S)
    read = int(first.metrics["operators"]["numbers"]["records_out"])
    assert read < N, "the job ended before the savepoint: nothing is left to restore"
    return path


def test_checkpoint_identity_changed_key_is_refused(tmp_path: Path) -> None:
    path = savepoint(tmp_path)
    sums = tmp_path / "sums-g"
    env = build(tmp_path / "chk", sums, key="g")
    with pytest.raises(ed.CheckpointError, match=r"operator 'sum' \(uid 'sum'\)") as info:
        env.execute("keyed-by-g", restore_from=path)
    assert "keyed by ('k'" in str(info.value) and "keys it by ('g'" in str(info.value)
    assert read_parquet_dir(sums).num_rows == 0, "output was written before the refusal"

    # Opting in drops the old keyed state: sums by g start from zero.
    result = build(tmp_path / "chk", sums, key="g").execute(
        "keyed-by-g", restore_from=path, allow_non_restored_state=True
    )
    read = int(result.metrics["operators"]["numbers"]["records_out"])
    assert 0 < read < N
    final: dict[int, int] = {}
    for row in read_parquet_dir(sums).to_pylist():
        final[row["g"]] = max(final.get(row["g"], 0), row["value"])
    assert sum(final.values()) < sum(range(N)), "the old state was not dropped"


@pytest.mark.parametrize("max_parallelism", [64, 256])
def test_checkpoint_identity_other_max_parallelism_is_refused(
    tmp_path: Path, max_parallelism: int
) -> None:
    path = savepoint(tmp_path)
    env = build(tmp_path / "chk", tmp_path / "sums1", key="k", max_parallelism=max_parallelism)
    with pytest.raises(ed.CheckpointError, match=r"operator 'sum'") as info:
        env.execute("rescaled-key-groups", restore_from=path)
    message = str(info.value)
    assert "max_parallelism 128" in message and f"max_parallelism {max_parallelism}" in message


def test_checkpoint_identity_same_key_restores_exactly(tmp_path: Path) -> None:
    path = savepoint(tmp_path)
    sums = tmp_path / "sums2"
    build(tmp_path / "chk", sums, key="k").execute("resumed", restore_from=path)
    final: dict[int, int] = {}
    for row in read_parquet_dir(sums).to_pylist():
        final[row["k"]] = max(final.get(row["k"], 0), row["value"])
    assert final == {k: sum(range(k, N, 5)) for k in range(5)}


def test_checkpoint_ids_are_not_reused_after_a_failed_start(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    blocker = tmp_path / "a-file"
    blocker.write_text("x")

    def endless() -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            1, checkpoint=ed.CheckpointConfig(str(chk), interval="1h"), batch_size=100
        )
        env.from_sequence(0, 2**62).map_batches(SleepPerBatch(0.001)).key_by("value").count().uid(
            "count"
        ).sink_to(ed.ParquetSink(str(tmp_path / "out"))).uid("out")
        return env

    client = endless().execute_async("first")
    try:
        first = client.trigger_checkpoint()
        with pytest.raises(ed.CheckpointError, match="is a file"):
            client.trigger_savepoint(str(blocker))
        failures = client.checkpoint_failures
        assert [f["id"] for f in failures] == [first + 1], failures
        assert failures[0]["kind"] == "savepoint"
        assert "a-file" in failures[0]["reason"] and "is a file" in failures[0]["reason"]
    finally:
        client.cancel()
        with pytest.raises(ed.JobCancelledError):
            client.wait(timeout=TIMEOUT_S)

    # A new process restoring "latest" continues after the failed savepoint's id.
    client = endless().execute_async("second", restore_from="latest")
    try:
        assert client.trigger_checkpoint() == first + 2
    finally:
        client.cancel()
        with pytest.raises(ed.JobCancelledError):
            client.wait(timeout=TIMEOUT_S)
