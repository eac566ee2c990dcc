"""Per-split event time of a Kafka source that a second branch also reads
(DESIGN.md "Event time per split"; tests/integration/test_event_time_branches.py
has the files and user-source cases).

Four partitions run through the same minutes at different speeds per message
(partition ``p`` steps ``p + 1`` seconds, up to 2 s out of order), so in one
batch a fast partition gets far ahead of a slow one read by the same subtask:
one watermark per subtask would make the slow partitions' rows late at once,
one per partition makes none late. The second branch, a raw copy of the
source into a ParquetSink, is taken before or after ``assign_timestamps``.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.kafka_broker import new_topic, produce_each

pytestmark = pytest.mark.kafka

PARTITIONS = 4
SPAN_S = 240
WINDOW_S = 30
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def _rows() -> list[dict[str, int]]:
    rng = random.Random(37)
    rows = []
    for p in range(PARTITIONS):
        step = (p + 1) * 1_000
        for i in range(SPAN_S * 1_000 // step):
            ts = i * step + rng.randrange(0, 2_000)  # within the 3 s bound
            rows.append({"id": p * 100_000 + i, "k": i % 3, "ts": ts, "v": 1 + i % 7})
    return rows


@pytest.fixture(scope="module")
def speeds_topic(broker: str) -> tuple[str, dict[tuple[str, int], int]]:
    topic = new_topic(broker, PARTITIONS)
    rows = _rows()
    produce_each(broker, topic, [(r["id"] // 100_000, None, json.dumps(r).encode()) for r in rows])
    ends: dict[tuple[str, int], int] = defaultdict(int)
    for r in rows:
        ends[(topic, r["id"] // 100_000)] += 1
    return topic, dict(ends)


def _reference(rows: list[dict[str, int]]) -> dict[tuple[int, int], int]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        sums[(r["k"], r["ts"] // (WINDOW_S * 1_000) * WINDOW_S * 1_000)] += r["v"]
    return dict(sums)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("parallelism", [1, 2, 3], ids=lambda p: f"p{p}")
@pytest.mark.parametrize("branch_first", [False, True], ids=["branch_after", "branch_before"])
def test_a_second_branch_keeps_one_watermark_per_partition(
    broker: str,
    speeds_topic: tuple[str, dict[tuple[str, int], int]],
    tmp_path: Path,
    parallelism: int,
    branch_first: bool,
) -> None:
    topic, ends = speeds_topic
    env = ed.StreamEnvironment(parallelism, batch_size=20)
    src = env.from_kafka(broker, topic, schema=SCHEMA, stopping_offsets=ends).name("kafka")

    def branch() -> None:
        src.select("id", "_partition").sink_to(ed.ParquetSink(str(tmp_path / "copy")))

    if branch_first:
        branch()
    stamped = src.assign_timestamps("ts", max_out_of_orderness="3s").name("stamps")
    if not branch_first:
        branch()
    late = ed.OutputTag("late")
    windows = (
        stamped.key_by("k")
        .window(ed.Tumbling(f"{WINDOW_S}s"), late_output=late)
        .sum("v")
        .name("windows")
    )
    got = windows.collect()
    late_rows = windows.side_output(late).collect()
    result = env.execute("kafka-branches")

    rows = _rows()
    assert late_rows.to_arrow().num_rows == 0, "rows made late by another partition's time"
    assert result.metrics["operators"]["windows"]["late_records"] == 0
    table = got.to_arrow()
    starts = table["window_start"].cast(pa.int64()).to_pylist()
    keys = list(zip(table["k"].to_pylist(), starts, strict=True))
    assert len(keys) == len(set(keys)), "a window fired twice"
    assert dict(zip(keys, table["v"].to_pylist(), strict=True)) == _reference(rows)
    copy: Any = read_parquet_dir(tmp_path / "copy")
    assert sorted(copy["id"].to_pylist()) == sorted(r["id"] for r in rows)
    assert sorted(set(copy["_partition"].to_pylist())) == list(range(PARTITIONS))
