"""A SQL job SIGKILLed at random moments and restored with ``restore_from="latest"``
commits exactly the output of a failure-free computation (tests/fault's pattern)."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import killable_script, run_killed, source_records

N = 60_000
WINDOW_MS = 1_000

SCRIPT = killable_script(
    """
    schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004), schema=schema).uid("slow")
    rows = slow.with_columns(k=ed.col("value") % 5).assign_timestamps("value")
    rows.create_temporary_view("numbers")
    totals = env.sql(
        "SELECT k, window_start, sum(value) AS total "
        "FROM TABLE(TUMBLE(TABLE numbers, DESCRIPTOR(value), INTERVAL '1' SECOND)) "
        "WHERE value % 3 <> 0 GROUP BY k, window_start, window_end"
    )
    totals.sink_to(ed.ParquetSink(out)).uid("files")
    client = env.execute_async("sql-killable", restore_from="latest")
    result = client.wait()
    records = result.metrics["operators"]["numbers"]["records_out"]
    print(f"source records {records}", flush=True)
    print("finished", flush=True)
    """,
    imports=["import pyarrow as pa"],
)


@pytest.mark.timeout(180)
def test_sql_window_job_killed_and_restored_is_exact(seed: int, tmp_path: Path) -> None:
    outputs, out = run_killed(SCRIPT, tmp_path, N, kills=2, rng=random.Random(seed), timeout=90.0)
    assert len(outputs) == 3 and "finished" in outputs[-1]
    # The last run restored a checkpoint: it did not read the whole sequence again.
    records = source_records(outputs[-1])
    assert records < N, f"the last run re-read all {N} records: it did not restore"
    totals: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(N):
        if v % 3 != 0:
            totals[(v % 5, v - v % WINDOW_MS)] += v
    want = [{"k": k, "window_start": s, "total": t} for (k, s), t in totals.items()]
    assert_same_rows(read_parquet_dir(out).to_pylist(), want)
