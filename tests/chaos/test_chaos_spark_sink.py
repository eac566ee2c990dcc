"""``SparkTableSink`` in the randomized tester (tools/chaos_lib/sparksink.py):
the draw, the reading of a table as Spark reads it (through its
``_spark_metadata`` log only), that a file committed twice is caught, and real
runs under a SIGKILL and a restore at another parallelism."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import generate as generate_module
from chaos_lib import sparksink
from chaos_lib.case import Case
from chaos_lib.check import compare
from chaos_lib.execute import _read_outputs
from chaos_lib.generate import generate
from chaos_lib.reference import expected

from .hand import rescaled, run_through, small_case

pytest.importorskip("pyspark", reason="SparkTableSink needs pyspark (test extra)")


def _batch(log: Path, name: str, files: list[Path]) -> None:
    lines = ["v1"] + [
        json.dumps({"path": f.as_uri(), "size": 1, "isDir": False, "action": "add"}) for f in files
    ]
    log.mkdir(parents=True, exist_ok=True)
    (log / name).write_text("\n".join(lines) + "\n")


def _part(table: Path, name: str, ids: list[int]) -> Path:
    path = table / name
    table.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(ids, pa.int64())}), path)
    return path


def test_the_table_is_read_through_its_log_only(tmp_path: Path) -> None:
    table, log = tmp_path / "t", tmp_path / "t" / "_spark_metadata"
    a, b = _part(table, "a.parquet", [1, 2]), _part(table, "b.parquet", [3])
    _part(table, "unlisted.parquet", [99])  # copied by a commit that died: not read
    assert sparksink.read_table(table).empty  # no log yet
    log.mkdir(parents=True)
    (log / ".eddyline-log").write_text("")  # the marker is no batch
    assert sparksink.read_table(table).empty
    _batch(log, "0", [a])
    _batch(log, "1", [b])
    assert sorted(sparksink.read_table(table)["id"]) == [1, 2, 3]
    # a compaction batch repeats the batches before it: read once
    c = _part(table, "c.parquet", [4])
    _batch(log, "2.compact", [a, b])
    _batch(log, "3", [c])
    assert sorted(sparksink.read_table(table)["id"]) == [1, 2, 3, 4]
    # a file a later batch lists again is read again: a duplicate commit shows
    _batch(log, "4", [b])
    assert sorted(sparksink.read_table(table)["id"]) == [1, 2, 3, 3, 4]


def test_the_draw_needs_a_schema_and_no_worker_kill(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = [generate(seed) for seed in range(1500)]
    with_sink = [c for c in drawn if "spark" in c.sinks]
    assert len(with_sink) >= 20
    for case in with_sink:
        assert case.fault.kind != "wkill"
        assert sparksink.schema_known(case)
    # Every case with a Spark source whose schema is known at the sink's draw
    # gets the sink. A later draw may make a schema known after it (an over
    # window spelled in SQL declares the Python maps' schemas): without them.
    for later in (generate_module.overs, generate_module.wtime):
        monkeypatch.setattr(later, "widen", lambda *_a, **_k: None)
    drawn = [generate(seed) for seed in range(1500)]
    spark_sources = [c for c in drawn if any(s.kind == "spark" for s in c.sources)]
    eligible = [c for c in spark_sources if c.fault.kind != "wkill" and sparksink.schema_known(c)]
    assert eligible and all("spark" in c.sinks for c in eligible)


def _case(**fault: object) -> Case:
    return small_case(sinks=["parquet", "spark"], fault=fault)


@pytest.mark.chaos
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_spark_table_under_a_sigkill_is_exact_and_a_double_commit_is_caught(
    tmp_path: Path,
) -> None:
    case = _case(kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    out = tmp_path / "out"
    assert len(outputs["spark"]) == len(outputs["parquet"]) > 0
    want = expected(case, set())
    assert compare(case, outputs, want) == []
    # one more batch that lists a committed file again: the checker says so
    log = out / "spark" / "_spark_metadata"
    first = sparksink.listed_files(out / "spark")[0]
    latest = max(int(n.name.removesuffix(".compact")) for n in log.iterdir() if n.name[0] != ".")
    _batch(log, str(latest + 1), [Path(first)])
    assert compare(case, _read_outputs(case, out), want) != []


@pytest.mark.chaos
@pytest.mark.spark
@pytest.mark.timeout(300)
def test_a_spark_table_restored_at_another_parallelism_is_exact(tmp_path: Path) -> None:
    case = rescaled(_case(kind="cancel"))
    outputs = run_through(case, tmp_path)
    assert len(outputs["spark"]) > 0
