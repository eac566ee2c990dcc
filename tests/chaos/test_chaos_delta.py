"""``DeltaSink``'s options and two writers of one table in the randomized
tester (tools/chaos_lib/deltaopts.py): the draw, each writer's rows read apart,
the one-table-id check of a table's log, and real runs under a SIGKILL and a
restore at another parallelism (on a disk and on S3)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import deltaopts
from chaos_lib.case import Case
from chaos_lib.generate import generate

from .hand import rescaled, run_through, small_case

deltalake = pytest.importorskip("deltalake", reason="DeltaSink needs deltalake")


def test_the_draw_and_its_options() -> None:
    drawn = [generate(seed) for seed in range(800)]
    two = [c for c in drawn if "delta2w" in c.sinks]
    assert len(two) >= 30
    assert all("upsert" not in c.sinks for c in two)
    with_options = [c for c in drawn if c.delta_options]
    assert with_options
    for case in with_options:
        assert {"delta", "upsert", "delta2w"} & set(case.sinks)
        assert set(case.delta_options) <= {"compact_every", "target_file_size"}
    again = Case.from_json(with_options[0].to_json())
    assert again.delta_options == with_options[0].delta_options
    text = deltaopts.options(dataclasses.replace(again, delta_options={"compact_every": 2}))
    assert text == ", compact_every=2"


def test_each_writers_rows_are_read_apart() -> None:
    table = pd.DataFrame({"id": [1, 2, 1, 3], "writer": [1, 1, 2, 2]})
    parts = deltaopts.split(table)
    assert parts["delta2w:1"]["id"].tolist() == [1, 2]
    assert parts["delta2w:2"]["id"].tolist() == [1, 3]
    assert list(parts["delta2w:1"].columns) == ["id"]
    with pytest.raises(AssertionError, match="rows of no writer"):
        deltaopts.split(pd.DataFrame({"id": [1], "writer": [3]}))


def _log(table: Path, ids: list[str]) -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True)
    for version, table_id in enumerate(ids):
        commit = [{"commitInfo": {"operation": "CREATE TABLE"}}, {"metaData": {"id": table_id}}]
        (log / f"{version:020d}.json").write_text("\n".join(json.dumps(a) for a in commit))


def test_a_second_table_id_in_the_log_is_a_problem(tmp_path: Path) -> None:
    case = dataclasses.replace(generate(472), sinks=["delta", "delta2w"])
    _log(tmp_path / "out" / "delta", ["a"])
    _log(tmp_path / "out" / "delta2w", ["a", "b"])
    problems = deltaopts.log_problems(case, str(tmp_path))
    assert len(problems) == 1 and problems[0].startswith("delta2w: ")


def _case(s3: bool = False, **fault: object) -> Case:
    return small_case(
        sinks=["delta", "delta2w"],
        fault=fault,
        execution={"s3": s3},
        delta_options={"compact_every": 1, "target_file_size": 262_144},
    )


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_two_writers_and_compaction_under_a_sigkill(tmp_path: Path) -> None:
    case = _case(kind="sigkill", kills=1)
    run_through(case, tmp_path)
    table = deltalake.DeltaTable(str(tmp_path / "out" / "delta2w"))
    assert sorted(set(table.to_pandas()["writer"])) == [1, 2]
    assert "OPTIMIZE" in {h["operation"] for h in table.history()}


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_two_writers_on_s3_restored_at_another_parallelism(tmp_path: Path) -> None:
    pytest.importorskip("moto", reason="S3 cases need moto[server] (test extra)")
    case = rescaled(_case(s3=True, kind="cancel"))
    run_through(case, tmp_path)
