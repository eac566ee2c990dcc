"""SQL joins under SIGKILL and ``restore_from="latest"`` at another parallelism
(TESTING.md "Faults to inject"): an unbounded equi-join and a LEFT interval join
restore their kept rows from the latest checkpoint into 3 or 1 subtasks, and the
exactly-once Parquet output holds every pair (and every unmatched row) once."""

from __future__ import annotations

import os
import random
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import kill_after_checkpoints

N = 20_000

KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import pyarrow as pa

    import eddyline as ed
    from support.faults import SleepPerBatch, completed_checkpoints

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first, later = int(sys.argv[4]), int(sys.argv[5])
    parallelism = later if completed_checkpoints(chk) else first
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk, interval="80ms"),
        batch_size=200,
        max_parallelism=16,
    )
    schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
    for name in ("a", "b"):
        # Event time right after the source: a restored subtask reading several
        # ranges keeps a watermark per range (DESIGN.md "Event time per split").
        numbers = env.from_sequence(0, n).name(name).uid(name).assign_timestamps("value")
        slow = numbers.map_batches(SleepPerBatch(0.03), schema=schema).uid(f"slow_{name}")
        slow.create_temporary_view(name)
    equi = env.sql(
        "SELECT a.value AS l, h.value AS r FROM a "
        "JOIN (SELECT value, floor(value / 2) AS half FROM b) AS h ON a.value = h.half"
    )
    equi.sink_to(ed.ParquetSink(out + "/equi")).uid("equi_files")
    interval = env.sql(
        "SELECT x.value AS l, y.value AS r FROM (SELECT value, value % 2 AS k FROM a) AS x "
        "LEFT JOIN (SELECT value, value % 2 AS k FROM b WHERE value % 3 = 0) AS y "
        "ON x.k = y.k AND y.value BETWEEN x.value - 3 AND x.value + 2"
    )
    interval.sink_to(ed.ParquetSink(out + "/interval")).uid("interval_files")
    result = env.execute("sql-join-kill", restore_from="latest")
    late = sum(
        int(m.get("late_records", 0))
        for name, m in result.metrics["operators"].items()
        if name.startswith("join")
    )
    print(f"parallelism {parallelism}", flush=True)
    print(f"late records {late}", flush=True)
    print("finished", flush=True)
    """
)


def expected(n: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    equi = [{"l": r // 2, "r": r} for r in range(n)]
    interval: list[dict[str, Any]] = []
    for v in range(n):
        matches = [w for w in range(v - 3, v + 3) if 0 <= w < n and w % 3 == 0 and w % 2 == v % 2]
        interval += [{"l": v, "r": w} for w in matches] or [{"l": v, "r": None}]
    return equi, interval


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("first", "later"), [(2, 3), (3, 1)])
def test_sql_joins_after_sigkill_and_rescale_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, first: int, later: int
) -> None:
    tests = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join(filter(None, [tests, os.getenv("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(N), str(first), str(later)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(seed), timeout=200, max_delay=0.3
    )
    assert len(outputs) == 3 and "finished" in outputs[-1]
    assert f"parallelism {later}" in outputs[-1]
    # No row of the last run was late (dropped), so the interval join's output is exact.
    assert "late records 0" in outputs[-1], outputs[-1]
    want_equi, want_interval = expected(N)
    assert any(r["r"] is None for r in want_interval)
    assert_same_rows(read_parquet_dir(out / "equi").to_pylist(), want_equi)
    assert_same_rows(read_parquet_dir(out / "interval").to_pylist(), want_interval)
