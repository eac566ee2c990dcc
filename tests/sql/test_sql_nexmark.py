"""The Nexmark queries written in SQL (benches/nexmark/sql/) equal DuckDB's result
at parallelism 1 to 3 (``run.py --frontend sql --check``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parents[2] / "benches" / "nexmark" / "run.py"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The harness's cache of generated events, shared by its runs here."""
    return tmp_path_factory.mktemp("nexmark-data")


@pytest.mark.parametrize("parallelism", [1, 2, 3])
@pytest.mark.parametrize("query", ["q0", "q1", "q2", "q3", "q11"])
def test_nexmark_sql_equals_duckdb(data_dir: Path, query: str, parallelism: int) -> None:
    command = [sys.executable, str(RUN), "--query", query, "--events", "20000", "--check"]
    command += ["--frontend", "sql", "--parallelism", str(parallelism)]
    command += ["--data-dir", str(data_dir)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    line = json.loads(done.stdout.strip().splitlines()[-1])
    assert line["frontend"] == "sql"
    assert line["rows_out"] > 0
    assert line["check"] == "ok"


def test_frontend_sql_refuses_a_query_not_written_in_sql(data_dir: Path) -> None:
    command = [sys.executable, str(RUN), "--query", "q8", "--frontend", "sql"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "--frontend sql runs eddyline on the queries in sql/" in done.stderr
