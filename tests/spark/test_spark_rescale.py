"""SparkRunner: a job restored at another parallelism (docs/DESIGN.md
"Unaligned checkpoints", "Rescaling").

A keyed running sum runs at parallelism 2 as two Spark barrier tasks of the
local[2] session (``SparkRunner(workers=2)``), with unaligned checkpoints
(channel state of local and remote channels) and with aligned ones. Once the
newest completed checkpoint holds what the mode is about (unaligned: rows in
channel state, some on a channel between the two workers; aligned: a second
checkpoint), the Spark task of a subtask exits: the job fails (no restarts).
The same job is then restored with ``restore_from="latest"`` at another
parallelism: unaligned at 3 (two workers: subtasks 0 and 2 share worker 0),
aligned at 1 (one worker). The source offsets (file, row) are dealt to the
new subtasks, the keyed sums move by key group, the channel state is dealt
to the new channels, the sink's pending transactions are committed once.
The committed Spark table holds exactly the reference sums, no row twice.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.spark import SparkRunner, SparkTableSink
from support.checkpoints import channel_state_rows
from support.faults import completed_checkpoints

KeyedSumInput = Callable[[int], tuple[Any, dict[int, int]]]


def _crash_once(
    chk: str, marker: str, unaligned: bool
) -> Callable[[pa.RecordBatch], pa.RecordBatch]:
    """A slow ``map_batches`` function that ends its process once, the first time
    it runs after the newest completed checkpoint holds channel state
    (``unaligned``) or is the second one; never once ``marker`` exists."""

    def slow(batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(0.01)  # throttle, not a wait: checkpoints complete before the crash
        if os.path.exists(marker):
            return batch
        newest = max(completed_checkpoints(chk), default=0)
        if newest < 2:
            return batch
        if unaligned:
            try:
                with open(os.path.join(chk, f"chk-{newest}", "_manifest.json")) as f:
                    manifest = json.load(f)
            except OSError:
                return batch
            if not any(
                op["name"].endswith(" (channel state)") and any(s["state"] for s in op["subtasks"])
                for op in manifest["operators"]
            ):
                return batch
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return batch
        os.write(fd, json.dumps({"checkpoint": newest}).encode())
        os.close(fd)
        os._exit(1)

    return slow


def _job(
    spark: Any, df: Any, tmp_path: Any, parallelism: int, unaligned: bool, table: str
) -> ed.StreamEnvironment:
    chk, marker = str(tmp_path / "chk"), str(tmp_path / "fired")
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", unaligned=unaligned, retained=1000),
        restart=ed.RestartStrategy.none(),
        batch_size=100,
    )
    rows = env.from_spark(df).uid("rows").select("k", "amount")
    sums = rows.key_by("k").sum("amount").uid("sums")
    slow = sums.map_batches(_crash_once(chk, marker, unaligned), schema=sums.schema)
    sink = SparkTableSink(spark, table, path=str(tmp_path / "table"))
    slow.sink_to(sink).uid("table")
    return env


def _final_sums(rows: list[Any]) -> dict[int, int]:
    out: dict[int, int] = {}
    for row in rows:
        out[row["k"]] = max(out.get(row["k"], 0), row["amount"])
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("unaligned", "after", "workers"),
    [(True, 3, 2), (False, 1, 1)],
    ids=["unaligned-p2-p3", "aligned-p2-p1"],
)
def test_spark_runner_restores_at_another_parallelism_exactly(
    spark: Any,
    tmp_path: Any,
    keyed_sum_input: KeyedSumInput,
    unaligned: bool,
    after: int,
    workers: int,
) -> None:
    df, expected = keyed_sum_input(12_000)
    table = f"sums_spark_rescale_{'unaligned' if unaligned else 'aligned'}"
    chk, marker = tmp_path / "chk", tmp_path / "fired"
    first = _job(spark, df, tmp_path, 2, unaligned, table)
    with pytest.raises(Exception):  # noqa: B017 (the worker's crash, whatever its wording)
        first.execute("spark-rescale-p2", runner=SparkRunner(spark, workers=2))
    assert marker.exists(), "no Spark task was killed"
    fired = json.loads(marker.read_text())["checkpoint"]
    newest = max(completed_checkpoints(chk))
    assert newest >= fired >= 2
    if unaligned:
        # Non-vacuity: the checkpoint restored ("latest") holds rows in flight.
        assert channel_state_rows(chk / f"chk-{newest}"), "no channel state restored"
    committed_before = spark.table(table).count() if spark.catalog.tableExists(table) else 0

    second = _job(spark, df, tmp_path, after, unaligned, table)
    result = second.execute(
        f"spark-rescale-p{after}", runner=SparkRunner(spark, workers=workers), restore_from="latest"
    )
    assert result.restarts == 0
    committed = [r.asDict() for r in spark.table(table).collect()]
    assert len(committed) > committed_before
    assert _final_sums(committed) == expected
    # Running sums of positive amounts grow strictly: a duplicate commit would repeat a row.
    assert len({(r["k"], r["amount"]) for r in committed}) == len(committed)
