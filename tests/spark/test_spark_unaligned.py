"""SparkRunner with unaligned checkpoints (FLIP-76; docs/DESIGN.md "Unaligned checkpoints").

Two workers as Spark barrier tasks of the local[2] session; a keyed exchange
between them (half its channels cross the data plane) in front of a slow stage,
so barriers overtake full channels and checkpoints capture channel state. Once
the newest completed checkpoint holds channel state, the Spark task of a keyed
subtask exits (its Python worker crashes); the job restarts from the latest
checkpoint, replays the in-flight rows and commits exactly the reference sums.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import eddyline as ed
from eddyline.spark import SparkRunner, SparkTableSink
from support.checkpoints import channel_state_rows
from support.faults import completed_checkpoints

KeyedSumInput = Callable[[int], tuple[Any, dict[int, int]]]


def _crash_after_channel_state(chk: str, marker: str) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A slow ``map_batches`` function that ends its process once, the first
    time it runs after the newest completed checkpoint holds channel state."""

    def slow(batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(0.01)  # throttle, not a wait: checkpoints complete before the crash
        if os.path.exists(marker):
            return batch
        newest = max(completed_checkpoints(chk), default=0)
        try:
            with open(os.path.join(chk, f"chk-{newest}", "_manifest.json")) as f:
                manifest = json.load(f)
        except OSError:
            return batch
        held = any(
            op["name"].endswith(" (channel state)") and any(s["state"] for s in op["subtasks"])
            for op in manifest["operators"]
        )
        if held:
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return batch
            os.write(fd, json.dumps({"checkpoint": newest, "pid": os.getpid()}).encode())
            os.close(fd)
            os._exit(1)
        return batch

    return slow


def _final_sums(rows: list[Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in rows:
        out[row["k"]] = max(out.get(row["k"], 0), row["amount"])
    return out


def test_spark_runner_unaligned_remote_channel_state_restores_exactly(
    spark: Any, tmp_path: Any, keyed_sum_input: KeyedSumInput
) -> None:
    df, expected = keyed_sum_input(20_000)
    chk, marker = str(tmp_path / "chk"), str(tmp_path / "fired")
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", unaligned=True, retained=1000),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="100ms"),
        batch_size=100,
    )
    rows = env.from_spark(df).select("k", "amount")
    sums = rows.key_by("k").sum("amount")
    slow = sums.map_batches(_crash_after_channel_state(chk, marker), schema=sums.schema)
    slow.sink_to(SparkTableSink(spark, "sums_spark_unaligned", path=str(tmp_path / "sums")))
    result = env.execute("spark-unaligned-kill", runner=SparkRunner(spark, workers=2))

    assert os.path.exists(marker), "no Spark task was killed"
    with open(marker) as f:
        fired = json.load(f)
    assert result.restarts >= 1
    # The checkpoint the job restarted from held rows in flight, some of them
    # on channels between the two workers (producer subtask != consumer
    # subtask: subtask s runs in worker s % 2).
    held = channel_state_rows(os.path.join(chk, f"chk-{fired['checkpoint']}"))
    assert held, "the checkpoint holds no channel state"
    assert any(channel != subtask for (_, subtask, channel) in held), held
    committed = [r.asDict() for r in spark.table("sums_spark_unaligned").collect()]
    assert _final_sums(committed) == expected
    # Running sums of positive amounts grow strictly: a duplicate commit would repeat a row.
    assert len({(r["k"], r["amount"]) for r in committed}) == len(committed)
