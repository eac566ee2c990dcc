"""(e) Savepoint compatibility: state is matched by uid; missing operators are an error.

Restoring a savepoint into a graph that lacks one of its stateful operators
raises ``CheckpointError`` naming the operator (name and uid) before any
output; ``allow_non_restored_state=True`` drops that state knowingly.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, assert_exact_ids, wait_until

N = 20_000
TIMEOUT_S = 30.0


def source(env: ed.StreamEnvironment, *, sleep: float) -> ed.DataStream:
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    return numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow")


def env_for(chk: Path) -> ed.StreamEnvironment:
    return ed.StreamEnvironment(
        1, checkpoint=ed.CheckpointConfig(str(chk), interval="200ms"), batch_size=100
    )


def take_savepoint(tmp_path: Path) -> tuple[str, int]:
    """Runs a job with a keyed sum (uid 'running-sum') and stops it with a savepoint."""
    env = env_for(tmp_path / "chk")
    keyed = source(env, sleep=0.003).with_columns(k=ed.col("value") % 3).name("key").uid("key")
    totals = keyed.key_by("k").sum("value").name("total").uid("running-sum")
    totals.sink_to(ed.ParquetSink(str(tmp_path / "sums"))).name("out").uid("out")
    savepoint, result, read = stop_after_some_input(env, "with-sum", tmp_path / "sp")
    assert result.checkpoints[-1].operators["running-sum"].bytes > 0, "the sum had no state"
    return savepoint, read


def stop_after_some_input(
    env: ed.StreamEnvironment, name: str, path: Path
) -> tuple[str, ed.JobResult, int]:
    """Runs ``env`` until 1,000 records were read, then stops it with a savepoint at ``path``."""
    client = env.execute_async(name)
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 1000,
        timeout=TIMEOUT_S,
        what="some input to be read",
    )
    savepoint = client.stop_with_savepoint(str(path))
    result = client.wait(timeout=TIMEOUT_S)
    read = int(result.metrics["operators"]["numbers"]["records_out"])
    assert 0 < read < N
    return savepoint, result, read


def without_sum(tmp_path: Path, out: Path) -> ed.StreamEnvironment:
    env = env_for(tmp_path / "chk2")
    keyed = source(env, sleep=0.0).with_columns(k=ed.col("value") % 3).name("key").uid("key")
    keyed.sink_to(ed.ParquetSink(str(out))).name("out").uid("out")
    return env


def test_finish_savepoint_missing_operator_is_an_error(tmp_path: Path) -> None:
    savepoint, _ = take_savepoint(tmp_path)
    out = tmp_path / "ids"
    with pytest.raises(ed.CheckpointError, match=r"total") as err:
        without_sum(tmp_path, out).execute("lacks-sum", restore_from=savepoint)
    assert "running-sum" in str(err.value)
    assert read_parquet_dir(out).num_rows == 0, "output was written before the error"


def test_finish_allow_non_restored_state_drops_it(tmp_path: Path) -> None:
    savepoint, read = take_savepoint(tmp_path)
    out = tmp_path / "ids"
    result = without_sum(tmp_path, out).execute(
        "drops-sum", restore_from=savepoint, allow_non_restored_state=True
    )
    assert int(result.metrics["operators"]["numbers"]["records_out"]) == N - read
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(read, N), "resumed ids")


def collect_job(tmp_path: Path, chk: str, *, sleep: float, added: bool, uid: bool) -> Any:
    env = env_for(tmp_path / chk)
    stream = source(env, sleep=sleep)
    if added:  # an operator the savepoint does not know, before the sink
        stream = stream.filter(ed.col("value") >= 0).name("added")
    out = stream.collect()
    if uid:
        out = out.uid("out").name("results")
    return env, out


def test_finish_collect_with_uid_restores_after_an_operator_was_added(tmp_path: Path) -> None:
    env, _ = collect_job(tmp_path, "chk", sleep=0.003, added=False, uid=True)
    savepoint, result, read = stop_after_some_input(env, "collect-v1", tmp_path / "sp")
    assert "out" in result.checkpoints[-1].operators, "the collect sink's state has no uid"

    # Without a uid the changed graph cannot place the sink's state ...
    env, _ = collect_job(tmp_path, "chk2", sleep=0.0, added=True, uid=False)
    with pytest.raises(ed.CheckpointError, match="collect"):
        env.execute("collect-v2-no-uid", restore_from=savepoint)
    # ... with it, the restore works and resumes exactly.
    env, out = collect_job(tmp_path, "chk3", sleep=0.0, added=True, uid=True)
    env.execute("collect-v2", restore_from=savepoint)
    assert repr(out).startswith("CollectHandle('results'")
    assert_exact_ids(out.to_arrow()["value"].to_pylist(), range(read, N), "resumed ids")
