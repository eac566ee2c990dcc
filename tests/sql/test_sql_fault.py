"""A SQL job SIGKILLed at random moments and restored with ``restore_from="latest"``
commits exactly the output of a failure-free computation (tests/fault's pattern)."""

from __future__ import annotations

import random
import re
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import kill_after_checkpoints

N = 60_000
WINDOW_MS = 1_000

SCRIPT = textwrap.dedent(
    """
    import sys

    import pyarrow as pa

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3),
        batch_size=200,
    )
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
    """
)


@pytest.mark.timeout(180)
def test_sql_window_job_killed_and_restored_is_exact(seed: int, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(N)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(seed), timeout=90.0, max_delay=0.25
    )
    assert len(outputs) == 3 and "finished" in outputs[-1]
    # The last run restored a checkpoint: it did not read the whole sequence again.
    records = int(re.search(r"^source records (\d+)$", outputs[-1], re.M).group(1))  # type: ignore[union-attr]
    assert records < N, f"the last run re-read all {N} records: it did not restore"
    totals: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(N):
        if v % 3 != 0:
            totals[(v % 5, v - v % WINDOW_MS)] += v
    want = [{"k": k, "window_start": s, "total": t} for (k, s), t in totals.items()]
    assert_same_rows(read_parquet_dir(out).to_pylist(), want)
