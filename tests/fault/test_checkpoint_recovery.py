"""Recovery from the last completed checkpoint after a user function fails once.

The input is structured (the ids ``0 <= value < N``), the keyed operators keep
exact counters, and every run is compared with a plain-Python reference.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

import eddyline as ed
from eddyline.testing import last_by_key, read_parquet_dir
from support.faults import (
    CheckpointGatedSequence,
    FailOnce,
    SleepPerBatch,
    assert_exact_ids,
    completed_checkpoints,
    id_report,
    wait_until,
)

N = 200_000
KEYS = 61
BATCH = 256
SLOW_S = 0.002

EXPECTED_SUMS = dict(
    enumerate(np.bincount(np.arange(N) % KEYS, weights=np.arange(N)).astype(np.int64).tolist())
)
EXPECTED_COUNTS = dict(enumerate(np.bincount(np.arange(N) % KEYS).tolist()))


def _env(
    parallelism: int,
    chk_dir: Path,
    *,
    mode: str = "exactly_once",
    interval: str = "50ms",
    retained: int = 3,
) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(
            chk_dir,
            interval=interval,
            mode=mode,  # type: ignore[arg-type]
            retained=retained,
        ),
        restart=ed.RestartStrategy.fixed_delay(3, "10ms"),
        batch_size=BATCH,
    )


def _keyed_job(
    env: ed.StreamEnvironment, fn: FailOnce | SleepPerBatch, out_dir: Path
) -> tuple[ed.CollectHandle, ed.CollectHandle, ed.CollectHandle]:
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    slow = numbers.map_batches(fn).name("slow").uid("slow")
    tagged = slow.with_columns(k=ed.col("value") % KEYS).name("tag").uid("tag")
    keyed = tagged.key_by("k")
    sums = keyed.sum("value").name("sums").uid("sums").collect()
    counts = keyed.count().name("counts").uid("counts").collect()
    rows = tagged.collect()
    tagged.sink_to(ed.ParquetSink(out_dir)).name("files").uid("files")
    return sums, counts, rows


def _final(handle: ed.CollectHandle, column: str) -> dict[int, int]:
    return {k: row[column] for k, row in last_by_key(handle, "k").items()}


def _assert_ids_increase(result: ed.JobResult) -> None:
    ids = result.checkpoint_ids
    assert ids == sorted(set(ids)), f"checkpoint ids must strictly increase: {ids}"


@pytest.mark.timeout(60)
def test_checkpoint_recovery_after_user_failure_is_exact(
    parallelism: int, seed: int, tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    rng = random.Random(seed)
    at = rng.randrange(N // 5, 3 * N // 5)
    fail = FailOnce(SleepPerBatch(SLOW_S), marker_dir, column="value", at=at, armed_by=chk_dir)
    env = _env(parallelism, chk_dir)
    sums, counts, rows = _keyed_job(env, fail, tmp_path / "out")

    result = env.execute("recover")

    # non-vacuity: the fault fired once, after a checkpoint had completed
    assert fail.fired, f"the failure never fired (at={at})"
    info = fail.fired_info()
    assert result.restarts == 1, f"restarts {result.restarts}, fired at {info}"
    assert info["armed_after"], f"no checkpoint had completed before the failure: {info}"
    ids = result.checkpoint_ids
    assert set(info["armed_after"]) <= set(ids), (info, ids)
    assert max(ids) > max(info["armed_after"]), f"no checkpoint after the recovery: {ids}"
    _assert_ids_increase(result)

    # exact output: state (sums, counters) and both sinks
    assert _final(counts, "count") == EXPECTED_COUNTS
    assert _final(sums, "value") == EXPECTED_SUMS
    assert_exact_ids(rows.to_arrow()["value"].to_pylist(), range(N), "collect")
    assert_exact_ids(
        read_parquet_dir(tmp_path / "out")["value"].to_pylist(), range(N), "ParquetSink"
    )


@pytest.mark.timeout(60)
def test_checkpoint_at_least_once_loses_nothing(
    seed: int, tmp_path: Path, chk_dir: Path, marker_dir: Path
) -> None:
    rng = random.Random(seed)
    at = rng.randrange(N // 5, 3 * N // 5)
    fail = FailOnce(SleepPerBatch(SLOW_S), marker_dir, column="value", at=at, armed_by=chk_dir)
    env = _env(2, chk_dir, mode="at_least_once")
    sums, counts, rows = _keyed_job(env, fail, tmp_path / "out")

    result = env.execute("at_least_once")

    assert result.restarts == 1
    assert fail.fired_info()["armed_after"], "no checkpoint completed before the failure"
    final_counts = _final(counts, "count")
    final_sums = _final(sums, "value")
    extra = {k: final_counts.get(k, 0) - EXPECTED_COUNTS[k] for k in EXPECTED_COUNTS}
    duplicates = sum(v for v in extra.values() if v > 0)
    reports = {
        "collect": id_report(rows.to_arrow()["value"].to_pylist(), range(N)),
        "ParquetSink": id_report(read_parquet_dir(tmp_path / "out")["value"].to_pylist(), range(N)),
    }
    summary = (
        f"at-least-once: {duplicates} duplicated records counted in keyed state; "
        + "; ".join(f"{name}: {text}" for name, (_, _, text) in reports.items())
    )
    print(summary)
    lost_keys = {k: v for k, v in extra.items() if v < 0}
    assert not lost_keys, f"records lost in keyed state {lost_keys}; {summary}"
    assert all(final_sums.get(k, -1) >= EXPECTED_SUMS[k] for k in EXPECTED_SUMS), summary
    assert all(lost == 0 for lost, _, _ in reports.values()), summary


def test_checkpoint_trigger_returns_completed_id(tmp_path: Path, chk_dir: Path) -> None:
    env = _env(1, chk_dir, interval="1h")
    n = 40_000
    # The source holds its last two thirds back until the triggered checkpoints
    # completed: the job is still running at each trigger, whatever the timing.
    out = (
        env.from_source(CheckpointGatedSequence(chk_dir, n, splits=1))
        .with_columns(k=ed.col("value") % 7)
        .key_by("k")
        .count()
        .collect()
    )
    client = env.execute_async("trigger")
    first = client.trigger_checkpoint()
    assert first in [c.id for c in client.checkpoints]
    assert first in completed_checkpoints(chk_dir)
    second = client.trigger_checkpoint()
    assert second > first
    live = [c.id for c in client.checkpoints]
    assert live[-2:] == [first, second], live
    stats = client.checkpoints[-1]
    assert stats.kind == "checkpoint"
    assert stats.path.endswith(f"chk-{second}")
    assert stats.bytes > 0
    assert stats.duration_ms >= 0
    result = client.wait(timeout=60)
    ids = result.checkpoint_ids
    assert ids[:2] == [first, second], ids
    assert len(ids) == 3, f"expected the two triggered and the final checkpoint: {ids}"
    assert result.failed_checkpoints == 0
    assert sum(_final(out, "count").values()) == n


def test_checkpoint_retained_keeps_the_newest(tmp_path: Path, chk_dir: Path) -> None:
    env = _env(2, chk_dir, interval="20ms", retained=2)
    # Two periodic checkpoints complete during the input (the source waits for
    # them), then the final one: three, one more than are retained.
    env.from_source(CheckpointGatedSequence(chk_dir, 20_000)).with_columns(
        k=ed.col("value") % 5
    ).key_by("k").sum("value").collect()
    result = env.execute("retained")
    ids = result.checkpoint_ids
    assert len(ids) >= 3, f"too few checkpoints to test retention: {ids}"
    _assert_ids_increase(result)
    assert completed_checkpoints(chk_dir) == ids[-2:]
    assert sorted(p.name for p in chk_dir.glob("chk-*")) == sorted(f"chk-{i}" for i in ids[-2:])
    assert result.checkpoints[-1].path.endswith(f"chk-{ids[-1]}")


def test_checkpoint_stats_describe_operators(chk_dir: Path) -> None:
    env = _env(2, chk_dir, interval="20ms")
    env.from_sequence(0, 5_000).map_batches(SleepPerBatch(0.001)).with_columns(
        k=ed.col("value") % 5
    ).key_by("k").sum("value").uid("sums").collect()
    client = env.execute_async("stats")
    wait_until(lambda: client.checkpoints, timeout=30, what="a first checkpoint")
    result = client.wait(timeout=60)
    final = result.checkpoints[-1]
    assert isinstance(final, ed.CheckpointStats)
    assert final.operators["sums"].subtasks == 2
    assert final.operators["sums"].bytes > 0
    assert final["id"] == final.id
    assert final.bytes >= sum(op.bytes for op in final.operators.values())
    assert all(c.trigger_time_ms > 0 for c in result.checkpoints)


def test_checkpoint_retention_failure_is_reported_and_the_job_goes_on(
    chk_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A deletion the store refuses (checkpoint 1's manifest replaced by a non-empty
    directory, which a file deletion refuses, as root too) fails no checkpoint and not
    the job, but is named with its path in the stats of the checkpoint whose retention
    it was, counted in the metrics and logged to stderr."""
    env = _env(1, chk_dir, interval="1h", retained=1)
    env.from_sequence(0, 40_000).name("numbers").map_batches(SleepPerBatch(0.005)).with_columns(
        k=ed.col("value") % 5
    ).key_by("k").sum("value").uid("sums").collect()
    client = env.execute_async("retention")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] > 0,
        timeout=30,
        what="the first rows",
    )
    first = client.trigger_checkpoint()
    stuck = chk_dir / f"chk-{first}"
    (stuck / "_manifest.json").unlink()
    (stuck / "_manifest.json" / "keep").mkdir(parents=True)
    second = client.trigger_checkpoint()
    assert client.metrics()["checkpoint_retention_failures"] == 1
    result = client.wait(timeout=60)

    by_id = {c.id: c for c in result.checkpoints}
    assert by_id[first].retention_errors == ()
    (error,) = by_id[second].retention_errors
    assert str(stuck) in error and "cannot delete" in error, error
    # the final checkpoint's retention deleted the second one and tried again
    (again,) = result.checkpoints[-1].retention_errors
    assert str(stuck) in again, again
    assert result.metrics["checkpoint_retention_failures"] == 2
    assert result.metrics["checkpoint_retention_errors"] == [error, again]
    assert sorted(p.name for p in chk_dir.glob("chk-*")) == sorted(
        [stuck.name, f"chk-{result.checkpoints[-1].id}"]
    )
    assert result.failed_checkpoints == 0
    assert [c.id for c in result.checkpoints][-1] > second
    assert str(stuck) in capfd.readouterr().err
