"""Checkpoint plumbing of the Python layer, against a fake native job handle."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._exec.keyed import KeyedReduceRunner
from eddyline._exec.two_phase import TwoPhaseCommitRunner
from eddyline.client.cli import main
from eddyline.client.job import JobClient
from eddyline.testing import read_parquet_dir
from support.faults import (
    FailOnce,
    InjectedFailure,
    assert_exact_ids,
    completed_checkpoints,
    id_report,
)
from support.sinks import RecordingTwoPhaseSink

STATS = {
    "id": 4,
    "kind": "checkpoint",
    "trigger_time_ms": 1_700_000_000_000,
    "duration_ms": 12.5,
    "alignment_ms": 1.25,
    "bytes": 300,
    "path": "/c/chk-4",
    "operators": {"sums": {"name": "sum", "bytes": 300, "subtasks": 2}},
}


class FakeHandle:
    """Stands in for ``_core.JobHandle``."""

    status = "finished"

    def __init__(self) -> None:
        self.triggered = 0

    def wait(self, timeout_s: float) -> bool:
        return True

    def result(self) -> dict[str, Any]:
        return {"restarts": 1, "checkpoints": [STATS, {**STATS, "id": 5}], "metrics": {}}

    def checkpoints(self) -> list[dict[str, Any]]:
        return [STATS]

    def failed_checkpoints(self) -> int:
        return 2

    def trigger_checkpoint(self) -> int:
        self.triggered += 1
        return 7

    def collected(self, node: int) -> list[pa.RecordBatch]:
        return []

    def cancel(self) -> None:
        pass

    def metrics(self) -> dict[str, Any]:
        return {}


def test_checkpoint_stats_from_dict_keeps_every_field() -> None:
    stats = ed.CheckpointStats.from_dict(STATS)
    assert (stats.id, stats.kind, stats.duration_ms, stats.alignment_ms) == (
        4,
        "checkpoint",
        12.5,
        1.25,
    )
    assert stats.operators["sums"] == ed.OperatorCheckpointStats("sums", "sum", 300, 2)
    assert stats["path"] == "/c/chk-4"
    with pytest.raises(KeyError):
        stats["nope"]
    with pytest.raises(AttributeError):
        stats.id = 5  # type: ignore[misc]
    assert hash(stats) == hash(ed.CheckpointStats.from_dict(STATS))


def test_job_client_checkpoint_plumbing() -> None:
    handle = FakeHandle()
    client = JobClient(handle, "fake")
    assert client.trigger_checkpoint() == 7
    assert handle.triggered == 1
    assert [c.id for c in client.checkpoints] == [4]
    assert client.failed_checkpoints == 2
    result = client.wait()
    assert result.checkpoint_ids == [4, 5]
    assert all(isinstance(c, ed.CheckpointStats) for c in result.checkpoints)
    assert result.failed_checkpoints == 2
    assert result.restarts == 1


def test_environment_sends_checkpoint_config_and_restore(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(
        checkpoint=ed.CheckpointConfig(tmp_path, interval="50ms", timeout="3s")
    )
    config = env._config("job", "latest")
    assert config.checkpoint is not None
    assert config.checkpoint.timeout == 3.0
    assert config.checkpoint.interval == 0.05
    assert config.restore_from == "latest"
    assert ed.StreamEnvironment()._config("job", None).checkpoint is None


def test_keyed_runner_snapshots_one_blob_per_key_group() -> None:
    runner = KeyedReduceRunner("r", ["k"], lambda a, b: {"k": a["k"], "v": a["v"] + b["v"]})
    batch = pa.record_batch({"k": [1, 2, 1, 3], "v": [10, 20, 30, 40]})
    runner.process(0, batch, pa.array([5, 7, 5, 9], type=pa.uint32()))
    state = runner.snapshot(1)
    assert isinstance(state, dict)
    assert sorted(state) == [5, 7, 9]
    assert all(isinstance(blob, bytes) for blob in state.values())
    # restore at another parallelism: this subtask now owns key groups 5 and 9 only
    other = KeyedReduceRunner("r", ["k"], lambda a, b: {"k": a["k"], "v": a["v"] + b["v"]})
    other.restore({5: state[5], 9: state[9]})
    out = other.process(0, pa.record_batch({"k": [1], "v": [1]}), pa.array([5], pa.uint32()))
    assert out is not None and out.to_pylist() == [{"k": 1, "v": 41}]
    assert sorted(other.snapshot(2) or {}) == [5, 9]


class ListSink(ed.TwoPhaseCommitSink):
    def __init__(self) -> None:
        self.log: list[tuple[str, Any]] = []

    def open(self, ctx: dict[str, Any]) -> None:
        self.log.append(("open", ctx.get("subtask_index")))

    def begin_transaction(self) -> list[int]:
        return []

    def write(self, txn: list[int], batch: pa.RecordBatch) -> None:
        txn.extend(batch.column(0).to_pylist())

    def on_checkpoint(self, txn: list[int], checkpoint_id: int) -> None:
        self.log.append(("on_checkpoint", checkpoint_id))

    def pre_commit(self, txn: list[int]) -> None:
        self.log.append(("pre_commit", list(txn)))

    def commit(self, txn: list[int]) -> None:
        self.log.append(("commit", list(txn)))

    def abort(self, txn: list[int]) -> None:
        self.log.append(("abort", list(txn)))


def test_two_phase_commit_runner_commits_only_completed_checkpoints() -> None:
    sink = ListSink()
    runner = TwoPhaseCommitRunner("sink", sink)
    runner.open({"subtask_index": 0, "attempt": 0})
    runner.process(0, pa.record_batch({"x": [1, 2]}), None)
    state = runner.snapshot(3)
    assert isinstance(state, list) and all(isinstance(e, bytes) for e in state)
    runner.process(0, pa.record_batch({"x": [3]}), None)
    runner.snapshot(4)
    runner.notify_checkpoint_complete(3)
    assert sink.log == [
        ("open", 0),
        ("on_checkpoint", 3),
        ("pre_commit", [1, 2]),
        ("on_checkpoint", 4),
        ("pre_commit", [3]),
        ("commit", [1, 2]),
    ]
    # a restore of checkpoint 3 commits its pending transaction again (idempotent),
    # also when it comes after open
    restored_sink = ListSink()
    restored = TwoPhaseCommitRunner("sink", restored_sink)
    restored.open({"subtask_index": 0, "attempt": 1})
    restored.restore(state)
    assert restored_sink.log == [("open", 0), ("commit", [1, 2])]
    with pytest.raises(TypeError, match="operator state"):
        restored.restore({0: b""})


def test_two_phase_commit_runner_pending_transactions_move_one_to_one_subtask() -> None:
    """FLIP-147 redistribution: the entries (one per pending transaction) dealt
    to several new subtasks are committed once each; the single-blob state of
    older checkpoints still restores. As in the engine, restore comes before
    open, and the sink's open before the commits of the restored transactions."""
    sink = ListSink()
    runner = TwoPhaseCommitRunner("sink", sink)
    runner.open({"subtask_index": 0, "attempt": 0})
    for checkpoint, values in [(3, [1]), (4, [2]), (5, [3])]:
        runner.process(0, pa.record_batch({"x": values}), None)
        state = runner.snapshot(checkpoint)
    assert TwoPhaseCommitRunner.redistributable and len(state) == 3
    sinks = [ListSink(), ListSink()]
    for i, new_sink in enumerate(sinks):
        new = TwoPhaseCommitRunner("sink", new_sink)
        new.restore(state[i::2])
        assert new_sink.log == [], "committed before the sink's open()"
        new.open({"subtask_index": i, "attempt": 1})
        assert new_sink.log[0] == ("open", i)
    commits = sorted(v for s in sinks for kind, v in s.log if kind == "commit")
    assert commits == [[1], [2], [3]]
    legacy_sink = ListSink()
    legacy = TwoPhaseCommitRunner("sink", legacy_sink)
    legacy.restore(pickle.dumps({3: [1], 4: [2]}))
    legacy.open({"subtask_index": 0, "attempt": 1})
    assert legacy_sink.log == [("open", 0), ("commit", [1]), ("commit", [2])]


def test_fail_once_fires_once_across_copies(tmp_path: Path) -> None:
    fail = FailOnce(None, tmp_path, column="id", at=5)
    copy = pickle.loads(pickle.dumps(fail))
    batch = pa.record_batch({"id": [3, 4, 5, 6]})
    with pytest.raises(InjectedFailure, match="id=5"):
        fail(batch)
    assert copy(batch) is batch
    assert fail(batch) is batch
    assert fail.fired_info()["id"] == 5


def test_fail_once_waits_for_a_checkpoint(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    fail = FailOnce(None, tmp_path, column="id", at=0, armed_by=chk)
    fail({"id": 1})
    (chk / "chk-3").mkdir(parents=True)
    fail({"id": 2})  # no manifest yet: not a completed checkpoint
    (chk / "chk-3" / "_manifest.json").write_text("{}")
    assert completed_checkpoints(chk) == [3]
    with pytest.raises(InjectedFailure):
        fail({"id": 3})
    assert fail.fired_info() == {"id": 3, "armed_after": [3], "pid": fail.fired_info()["pid"]}


def test_recording_sink_commit_is_idempotent(tmp_path: Path) -> None:
    sink = RecordingTwoPhaseSink(tmp_path)
    sink.open({"subtask_index": 1, "attempt": 0})
    txn = sink.begin_transaction()
    sink.write(txn, pa.record_batch({"value": [1, 2, 3]}))
    sink.on_checkpoint(txn, 9)
    sink.pre_commit(txn)
    again = pickle.loads(pickle.dumps(txn))
    assert RecordingTwoPhaseSink.committed(tmp_path).num_rows == 0
    sink.commit(txn)
    sink.commit(again)
    empty = sink.begin_transaction()
    sink.pre_commit(empty)
    sink.commit(empty)
    assert RecordingTwoPhaseSink.committed(tmp_path)["value"].to_pylist() == [1, 2, 3]
    phases = [(e["phase"], e["checkpoint"], e["rows"]) for e in sink.read_log(tmp_path)]
    assert phases == [
        ("begin", None, 0),
        ("pre_commit", 9, 3),
        ("commit", 9, 3),
        ("recommit", 9, 3),
        ("begin", None, 0),
        ("pre_commit", None, 0),
        ("commit", None, 0),
    ]
    lost = sink.begin_transaction()
    sink.write(lost, pa.record_batch({"value": [4]}))
    with pytest.raises(RuntimeError, match="never pre-committed"):
        sink.commit(lost)


def test_id_report_and_read_parquet_dir(tmp_path: Path) -> None:
    assert id_report([0, 1, 2], range(3))[:2] == (0, 0)
    assert id_report([0, 2, 2, 7], range(3))[:2] == (2, 1)
    with pytest.raises(AssertionError, match="1 lost"):
        assert_exact_ids([0, 2], range(3), "out")
    assert read_parquet_dir(tmp_path / "missing").num_rows == 0
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"value": [1, 2]}), tmp_path / "part-0.parquet")
    pq.write_table(pa.table({"value": [3]}), tmp_path / "_pending.parquet")
    assert read_parquet_dir(tmp_path)["value"].to_pylist() == [1, 2]


def test_cli_checkpoints_on_missing_dir_fails(capsys: pytest.CaptureFixture[str]) -> None:
    # A missing directory is an error, not an empty listing.
    assert main(["checkpoints", "/nonexistent/eddyline/dir"]) == 2
    captured = capsys.readouterr()
    assert "'/nonexistent/eddyline/dir' does not exist" in captured.err
    assert "no checkpoints found" not in captured.out


def test_cli_checkpoints_on_a_file_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = tmp_path / "plain"
    plain.write_text("x")
    assert main(["checkpoints", str(plain)]) == 2
    assert "is a file, not a checkpoint directory" in capsys.readouterr().err
