"""env.from_source(ed.Source): splits per subtask, checkpointed offsets, bad output."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import FailOnce, SleepPerBatch, assert_exact_ids

SCHEMA = pa.schema([("id", pa.int64())])


class Ranges(ed.Source):
    """Split ``i`` holds ids ``[i * size, (i + 1) * size)``; the offset is the next id."""

    def __init__(self, splits: int, size: int) -> None:
        self.n_splits, self.size = splits, size

    def schema(self) -> pa.Schema:
        return SCHEMA

    def splits(self) -> list[int]:
        return list(range(self.n_splits))

    def initial_offset(self, split: int) -> int:
        return split * self.size

    def read(self, split: int, offset: int, max_rows: int) -> tuple[pa.RecordBatch, int] | None:
        end = min((split + 1) * self.size, offset + max_rows)
        if offset >= end:
            return None
        return pa.record_batch([pa.array(range(offset, end), pa.int64())], schema=SCHEMA), end


def test_user_source_reads_every_split_once(parallelism: int) -> None:
    env = ed.StreamEnvironment(parallelism, batch_size=7)
    out = env.from_source(Ranges(5, 40)).collect()
    env.execute()
    assert_exact_ids([r["id"] for r in out.to_pylist()], range(200))


def test_user_source_replays_from_checkpointed_offsets(tmp_path: Any) -> None:
    chk = tmp_path / "chk"
    fail = FailOnce(None, tmp_path, column="id", at=3000, armed_by=chk)
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(str(chk), interval="30ms"),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"),
        batch_size=50,
    )
    ids = env.from_source(Ranges(4, 1000)).uid("ranges")
    slow = ids.map_batches(SleepPerBatch(0.002), schema=SCHEMA).map_batches(fail, schema=SCHEMA)
    slow.sink_to(ed.ParquetSink(str(tmp_path / "out")))
    result = env.execute("replay")
    assert fail.fired and fail.fired_info()["armed_after"]
    assert result.restarts == 1
    assert_exact_ids(read_parquet_dir(tmp_path / "out").column("id").to_pylist(), range(4000))


class WrongSchema(Ranges):
    def read(self, split: int, offset: int, max_rows: int) -> Any:
        if offset > 0:
            return None
        return pa.record_batch([pa.array(["x"])], names=["id"]), 1


def test_user_source_batch_of_another_schema_is_a_schema_error() -> None:
    env = ed.StreamEnvironment()
    env.from_source(WrongSchema(1, 1)).collect()
    with pytest.raises(ed.SchemaError, match="source 'from_source'"):
        env.execute()


def test_from_source_needs_a_source() -> None:
    with pytest.raises(TypeError, match=r"ed\.Source"):
        ed.StreamEnvironment().from_source([1, 2])  # type: ignore[arg-type]
