"""(b) The final checkpoint: a bounded job commits every row before ``execute`` returns.

With a checkpoint interval far longer than the job, no periodic checkpoint
ever triggers; the only checkpoint is the final one, taken after every task
finished, and the two-phase-commit sinks commit on it (FLIP-147 "the revised
process of finishing").
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, completed_checkpoints
from support.sinks import RecordingTwoPhaseSink

N = 20_000


@pytest.mark.parametrize("parallelism", [1, 3], ids=lambda p: f"p{p}")
def test_finish_bounded_job_commits_everything_on_the_final_checkpoint(
    tmp_path: Path, chk_dir: Path, parallelism: int
) -> None:
    sink_dir = tmp_path / "sink"
    files = tmp_path / "files"
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk_dir), interval="1h"),
        batch_size=500,
    )
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    numbers.sink_to(RecordingTwoPhaseSink(sink_dir)).name("txn").uid("txn")
    numbers.sink_to(ed.ParquetSink(str(files))).name("files").uid("files")
    result = env.execute("bounded")

    # exactly once, visible when execute returns
    assert_exact_ids(
        RecordingTwoPhaseSink.committed(sink_dir)["value"].to_pylist(), range(N), "2PC sink"
    )
    assert_exact_ids(read_parquet_dir(files)["value"].to_pylist(), range(N), "ParquetSink")

    # one checkpoint: the final one, taken after the tasks finished
    assert len(result.checkpoints) == 1, result.checkpoint_ids
    final = result.checkpoints[-1]
    assert completed_checkpoints(chk_dir) == [final.id]
    manifest = inspect_checkpoint(final.path)
    assert all(op["finished"] for op in manifest["operators"]), manifest["operators"]

    # the commit history: every subtask committed once, all on that checkpoint
    log = RecordingTwoPhaseSink.read_log(sink_dir)
    commits = [e for e in log if e["phase"] == "commit"]
    assert {e["checkpoint"] for e in commits} == {final.id}
    assert Counter(e["subtask"] for e in commits) == Counter(range(parallelism))
    assert sum(e["rows"] for e in commits) == N
    assert not [e for e in log if e["checkpoint"] == RecordingTwoPhaseSink.END_OF_JOB]
    assert not [e for e in log if e["phase"] == "recommit"]
