"""Broadcast state (API.md "Keyed state and timers": ``stream.connect(rules.broadcast())
.process(ed.BroadcastProcessFunction)``): every subtask sees every broadcast
row and holds the same state; it is written once and restored into every
subtask at parallelism 1 and 3."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 4_000
RULES = [{"word": w, "factor": f} for w, f in (("a", 2), ("b", 3), ("c", 5))]


class ApplyRules(ed.BroadcastProcessFunction):
    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> Any:
        ctx.broadcast_state.put(row["word"], row["factor"])
        return [{"value": -1, "rules": row["word"], "subtask": ctx.subtask_index}]

    def process_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> Any:
        rules = ",".join(sorted(ctx.broadcast_state.keys()))
        return [{"value": row["value"], "rules": rules, "subtask": ctx.subtask_index}]


SCHEMA = pa.schema([("value", pa.int64()), ("rules", pa.string()), ("subtask", pa.int64())])


def build(parallelism: int, out: Path, chk: Path, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism, batch_size=50, checkpoint=ed.CheckpointConfig(str(chk), interval="50ms")
    )
    rules = env.from_collection(RULES).name("rules").uid("rules")
    data = (
        env.from_sequence(0, N)
        .name("data")
        .uid("data")
        .set_parallelism(1)
        .map_batches(SleepPerBatch(sleep))
        .uid("slow")
        .set_parallelism(1)
    )
    applied = data.connect(rules.broadcast()).process(ApplyRules, schema=SCHEMA)
    applied.name("bcast").uid("bcast").sink_to(ed.ParquetSink(str(out))).uid("out")
    return env


def test_every_subtask_gets_every_broadcast_row(tmp_path: Path) -> None:
    build(3, tmp_path / "out", tmp_path / "chk", 0.0).execute("broadcast")
    rows = read_parquet_dir(tmp_path / "out").to_pylist()
    seen = sorted((r["rules"], r["subtask"]) for r in rows if r["value"] == -1)
    assert seen == sorted((w["word"], s) for w in RULES for s in range(3))
    assert sorted(r["value"] for r in rows if r["value"] >= 0) == list(range(N))


@pytest.mark.parametrize("parallelism", [1, 3])
def test_broadcast_state_restores_into_every_subtask_at_another_parallelism(
    tmp_path: Path, parallelism: int
) -> None:
    client = build(2, tmp_path / "out1", tmp_path / "chk1", 0.01).execute_async("first")
    wait_until(
        lambda: client.metrics()["operators"]["data"]["records_out"] >= N // 4,
        timeout=60,
        what="a quarter of the data",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    first = client.wait(timeout=60)
    read = int(first.metrics["operators"]["data"]["records_out"])
    assert read < N
    build(parallelism, tmp_path / "out2", tmp_path / "chk2", 0.0).execute(
        "resumed", restore_from=savepoint
    )
    rows = read_parquet_dir(tmp_path / "out2").to_pylist()
    data_rows = [r for r in rows if r["value"] >= 0]
    assert data_rows, "the resumed run processed data"
    # The rules source had finished: only the restored state knows the rules.
    assert {r["rules"] for r in data_rows} == {"a,b,c"}
    assert {r["subtask"] for r in data_rows} == set(range(parallelism))
    before = read_parquet_dir(tmp_path / "out1").to_pylist()
    values = sorted(r["value"] for r in before + rows if r["value"] >= 0)
    assert values == list(range(N)), "each row exactly once across the savepoint"


def test_broadcast_state_is_read_only_in_process_element() -> None:
    class Writes(ed.BroadcastProcessFunction):
        def process_broadcast_element(self, row: dict[str, Any], ctx: Any) -> None:
            return None

        def process_element(self, row: dict[str, Any], ctx: Any) -> None:
            ctx.broadcast_state.put("x", 1)

    env = ed.StreamEnvironment()
    data, rules = env.from_collection([{"v": 1}]), env.from_collection([{"w": 1}])
    data.connect(rules.broadcast()).process(Writes).name("writes").collect()
    with pytest.raises(ed.JobFailedError, match="read-only in process_element"):
        env.execute("read-only")
    with pytest.raises(TypeError, match="BroadcastProcessFunction"):
        data.connect(rules.broadcast()).process(lambda r, c: None)  # type: ignore[arg-type]
