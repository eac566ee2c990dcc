"""A SQL job killed and restored at another parallelism (TESTING.md "Faults to
inject"), for the SQL fault tests: the job script's common parts, and the run
with two SIGKILLs and ``restore_from="latest"``.

The script reads sequences as views (``view(name, rows)``: event time right
after the source, so a restored subtask reading several ranges keeps a
watermark per range, DESIGN.md "Event time per split"; slowed so the kills land
mid-run), runs a test's SQL and sinks (``body``, which sees ``env``, ``n``,
``out``, ``view`` and ``sink(name, query)``: a query's rows as Parquet files in
``out/name``), and prints what the checks read: the parallelism, the records
dropped as late anywhere, and how many the sources read."""

from __future__ import annotations

import os
import random
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import kill_after_checkpoints

PRELUDE = """
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
sources = []


def view(name, rows):
    numbers = env.from_sequence(0, rows).name(name).uid(name).assign_timestamps("value")
    slow = numbers.map_batches(SleepPerBatch(0.03), schema=schema).uid(f"slow_{name}")
    slow.create_temporary_view(name)
    sources.append(name)


def sink(name, query):
    env.sql(query).sink_to(ed.ParquetSink(f"{out}/{name}")).uid(f"{name}_files")

"""

EPILOGUE = """
result = env.execute("sql-kill", restore_from="latest")
operators = result.metrics["operators"]
late = sum(int(m.get("late_records", 0)) for m in operators.values())
read = sum(int(operators[name]["records_out"]) for name in sources)
print(f"parallelism {parallelism}", flush=True)
print(f"late records {late}", flush=True)
print(f"source records {read}", flush=True)
print("finished", flush=True)
"""


Killed = Callable[[str, int], tuple[Path, str]]
"""The ``killed`` fixture (conftest.py): :func:`run_killed` of a job body over
sequences of ``n``, at the test's seed and parallelisms."""


def run_killed(
    body: str,
    n: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    seed: int,
    first: int,
    later: int,
) -> tuple[Path, str]:
    """Runs the job of ``body`` over sequences of ``n`` at parallelism ``first``,
    SIGKILLs it twice after new checkpoints and restores it at ``later``.
    Checks that the last run finished at ``later`` and dropped no row as late
    (so the output must be exact); returns the output directory and the last
    run's stdout."""
    tests = str(Path(__file__).resolve().parents[1])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [tests, os.getenv("PYTHONPATH")]))
    )
    script = tmp_path / "job.py"
    script.write_text(PRELUDE + textwrap.dedent(body) + EPILOGUE)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(n), str(first), str(later)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(seed), timeout=200, max_delay=0.3
    )
    assert len(outputs) == 3 and "finished" in outputs[-1]
    assert f"parallelism {later}" in outputs[-1]
    assert "late records 0" in outputs[-1], outputs[-1]
    return out, outputs[-1]


def assert_restored_exact(out: Path, stdout: str, n: int, **want: list[dict[str, Any]]) -> None:
    """Checks the :func:`run_killed` run over ``n`` records that wrote ``out`` and
    printed ``stdout``: the last run restored a checkpoint (its sources read fewer
    than the ``n`` records: it did not read them all again), and each sink ``name``
    holds exactly the rows ``want[name]``."""
    read = int(stdout.split("source records ")[1].split()[0])
    assert read < n, f"the last run re-read all {n} records: it did not restore"
    for name, rows in want.items():
        assert_same_rows(read_parquet_dir(out / name).to_pylist(), rows)
