"""``ed.DeltaSink`` (API.md "Lakehouse sinks"): one Delta commit per completed
checkpoint with an application transaction, read back with delta-rs; a
re-commit is skipped, a new job on the same table is not; upsert keeps the
newest row per key; SIGKILL + restore is exact."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from support.faults import assert_exact_ids, completed_checkpoints, kill_after_checkpoints

deltalake = pytest.importorskip(
    "deltalake", reason="DeltaSink tests read tables back with deltalake (test extra)"
)


def _rows(uri: str | Path, **options: str) -> pa.Table:
    return deltalake.DeltaTable(str(uri), storage_options=options or None).to_pyarrow_table()


def _job(table: Path, chk: Path, n: int, parallelism: int = 2) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(chk, interval="50ms"), batch_size=500
    )
    env.from_sequence(0, n).sink_to(ed.DeltaSink(table)).name("delta").uid("delta")
    return env


def test_delta_append_exactly_once_one_commit_per_checkpoint(tmp_path: Path) -> None:
    table, n = tmp_path / "t", 40_000
    result = _job(table, tmp_path / "chk", n).execute("delta-append")
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(n), "DeltaSink")
    history = deltalake.DeltaTable(str(table)).history()
    commits = [h for h in history if h.get("operation") == "WRITE"]
    # one commit per checkpoint for both subtasks (one committer), never more
    assert 1 <= len(commits) <= len(result.checkpoints), (len(commits), result)
    assert not any((table / "_eddyline_staging").rglob("*.arrow")), "staged parts left"


def test_delta_recommit_is_skipped_and_a_new_job_is_not(tmp_path: Path) -> None:
    table = tmp_path / "t"
    sink = ed.DeltaSink(table)
    sink.open({"name": "delta", "subtask_index": 0})
    batch = pa.record_batch({"value": pa.array([1, 2, 3], pa.int64())})
    sink._stage("app", "run", 0, 4, [batch])
    sink._commit("app", 4, {"run": 4})
    sink._stage("app", "run", 0, 4, [batch])  # staged again by a restored run
    sink._commit("app", 4, {"run": 4})  # after a failure the same checkpoint commits again
    assert sorted(_rows(table)["value"].to_pylist()) == [1, 2, 3]
    # Two more jobs (their own checkpoint ids from 1) write to the same table
    # with the same operator names: their commits land.
    _job(table, tmp_path / "chk-a", 100, parallelism=1).execute("a")
    _job(table, tmp_path / "chk-b", 100, parallelism=1).execute("b")
    values = _rows(table)["value"].to_pylist()
    assert len(values) == 3 + 200 and values.count(7) == 2, "job b's rows were skipped"


def _writer(table: Path, chk: Path, first: int, n: int) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="20ms"),
        batch_size=300,
        restart=ed.RestartStrategy.fixed_delay(5, "10ms"),
    )
    numbers = env.from_sequence(first, first + n).name("numbers")
    numbers.sink_to(ed.DeltaSink(table)).name("delta")  # the same names in every job
    return env


@pytest.mark.parametrize("writers", [2, 3])
def test_delta_concurrent_jobs_append_every_row_once(tmp_path: Path, writers: int) -> None:
    # Jobs with the same operator names appending to one table at once: each
    # has its own app id, so none skips another's commits as its own, and a
    # commit that loses a race with another job's is retried.
    table, n = tmp_path / "t", 30_000
    clients = [
        _writer(table, tmp_path / f"chk-{w}", w * n, n).execute_async(f"writer-{w}")
        for w in range(writers)
    ]
    results = [c.wait() for c in clients]
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(writers * n), "DeltaSink")
    assert all(r.checkpoints and r.restarts == 0 for r in results), results


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_delta_upsert_keeps_current_values(tmp_path: Path, parallelism: int) -> None:
    table, n, keys = tmp_path / "t", 30_000, 11
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="30ms"),
        batch_size=300,
    )
    numbers = env.from_sequence(0, n)
    sums = numbers.with_columns(k=ed.col("value") % keys).key_by("k").sum("value")
    sums.sink_to(ed.DeltaSink(table, mode="upsert", key="k")).name("current")
    result = env.execute("delta-upsert")
    assert result.restarts == 0, result  # no commit lost a race between subtasks
    got = _rows(table).to_pydict()
    expected = {k: sum(range(k, n, keys)) for k in range(keys)}
    assert dict(zip(got["k"], got["value"], strict=True)) == expected
    assert len(got["k"]) == keys, "one row per key"


def test_delta_sink_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match="mode"):
        ed.DeltaSink("t", mode="merge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="key="):
        ed.DeltaSink("t", mode="upsert")
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.GraphError, match="'nope'"):
        env.from_sequence(0, 3).sink_to(ed.DeltaSink("t", mode="upsert", key="nope"))
    with pytest.raises(ed.StorageError, match="DeltaSink"):
        ed.DeltaSink("hdfs://namenode/t")


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    table, chk, n, interval = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    compact_every = int(sys.argv[5]) or None
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval=interval), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    sink = ed.DeltaSink(table, compact_every=compact_every)
    slow.sink_to(sink).name("delta").uid("delta")
    env.execute("delta-killable", restore_from="latest")
    """
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("interval", "compact_every", "kills", "seed"),
    [("100ms", 0, 2, 5), ("50ms", 2, 3, 11)],
    ids=["plain", "compacting"],
)
def test_delta_sigkill_and_restore_is_exact(
    tmp_path: Path, interval: str, compact_every: int, kills: int, seed: int
) -> None:
    n = 60_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    table, chk = tmp_path / "t", tmp_path / "chk"
    command = [sys.executable, str(script), str(table), str(chk), str(n), interval]
    command.append(str(compact_every))
    kill_after_checkpoints(command, chk, kills=kills, rng=random.Random(seed), timeout=90)
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(n), "DeltaSink")
    if compact_every:
        history = deltalake.DeltaTable(str(table)).history()
        operations = [h["operation"] for h in history]
        assert operations.count("OPTIMIZE") >= 2, operations
        files = len(deltalake.DeltaTable(str(table)).file_uris())
        assert files <= 2 * compact_every + 1 + kills, operations  # + one per kill


KILL_AFTER_COMMIT_SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    table, chk, n, marker = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]


    class KillAfterCommit(ed.DeltaSink):
        # SIGKILLs the job right after its first Delta commit landed: before the
        # committer forgets the checkpoint and before its staged parts are removed.
        def _write(self, table, data, app_id, version):
            super()._write(table, data, app_id, version)
            if not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)


    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="50ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    slow.sink_to(KillAfterCommit(table)).name("delta").uid("delta")
    env.execute("delta-kill-after-commit", restore_from="latest")
    """
)


@pytest.mark.timeout(120)
def test_delta_sigkill_right_after_the_commit_is_not_duplicated(tmp_path: Path) -> None:
    n = 20_000
    script = tmp_path / "job.py"
    script.write_text(KILL_AFTER_COMMIT_SCRIPT)
    table, chk, marker = tmp_path / "t", tmp_path / "chk", tmp_path / "killed"
    command = [sys.executable, str(script), str(table), str(chk), str(n), str(marker)]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    committed = deltalake.DeltaTable(str(table)).to_pyarrow_table().num_rows
    assert 0 < committed < n, committed  # the kill fell inside the run, after a commit
    assert completed_checkpoints(chk), "no checkpoint completed before the kill"
    final = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert final.returncode == 0, final.stderr
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(n), "DeltaSink")


RESTORE_RACE_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed

    table, chk = sys.argv[1], sys.argv[2]
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(chk, interval="50ms"))
    env.from_sequence(0, 72).sink_to(ed.DeltaSink(table)).name("sink").uid("sink")
    env.execute("delta-restore-race", restore_from="latest")
    """
)


@pytest.mark.timeout(120)
def test_delta_restored_subtasks_do_not_both_create_the_table(tmp_path: Path) -> None:
    """Killed once its first checkpoint exists, before its commit: on restore
    both subtasks re-commit the staged rows into a table that does not exist
    yet. A commit that creates a table is checked against no concurrent one,
    so both landed (144 rows of 72) until the table was created empty first
    (found by tools/chaos.py)."""
    script = tmp_path / "job.py"
    script.write_text(RESTORE_RACE_SCRIPT)
    table, chk = tmp_path / "t", tmp_path / "chk"
    command = [sys.executable, str(script), str(table), str(chk)]
    kill_after_checkpoints(command, chk, kills=1, rng=random.Random(0), timeout=60, max_delay=0.0)
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(72), "DeltaSink")


def _metadata_actions(table: Path) -> int:
    """How many commits of the table's log set its metadata (its id and schema)."""
    return sum(
        '"metaData"' in line
        for commit in (table / "_delta_log").glob("*.json")
        for line in commit.read_text().splitlines()
    )


def _create_at(
    sink: ed.DeltaSink, schema: pa.Schema, start: Any, errors: list[BaseException]
) -> None:
    start.wait()
    try:
        sink._create(schema)
    except BaseException as exc:  # reported by the test, never dropped
        errors.append(exc)


def test_tables_created_by_two_sinks_at_once_keep_one_id(tmp_path: Path) -> None:
    """Two sinks that both find no table create it at the same moment: one
    create wins version 0 and the other must not land as version 1, with a
    metadata of its own (a second table id and schema). It did in most tries
    (found by tools/chaos.py, two DeltaSinks on one table)."""
    import threading

    schema = pa.schema([("value", pa.int64())])
    for trial in range(12):
        table = tmp_path / f"t{trial}"
        sinks = [ed.DeltaSink(table) for _ in range(2)]
        start = threading.Barrier(len(sinks))
        errors: list[BaseException] = []
        threads = [
            threading.Thread(target=_create_at, args=(s, schema, start, errors)) for s in sinks
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert _metadata_actions(table) == 1, f"try {trial}: a second create landed"


def test_jobs_without_checkpoints_create_one_table(tmp_path: Path) -> None:
    """Subtasks without checkpoints write at once into a table none of them
    found: every row lands once and the table has one id."""
    table = tmp_path / "t"
    env = ed.StreamEnvironment(4, batch_size=50)
    env.from_sequence(0, 400).sink_to(ed.DeltaSink(table)).name("delta")
    env.execute("unchecked")
    assert_exact_ids(_rows(table)["value"].to_pylist(), range(400), "DeltaSink")
    assert _metadata_actions(table) == 1
