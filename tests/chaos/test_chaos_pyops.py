"""Python ``flat_map`` and window ``reduce``/``apply`` in the randomized tester
(tools/chaos_lib/pyops.py): the draws, the rendered job, real runs under a
SIGKILL and a restore at another parallelism, and a check that fails on a
wrong outcome."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import pyops
from chaos_lib.case import Case, Op, Stage
from chaos_lib.check import compare
from chaos_lib.execute import _read_outputs
from chaos_lib.generate import generate
from chaos_lib.reference import expected
from chaos_lib.render import render

from .hand import rescaled, run_through, small_case


def test_the_draws() -> None:
    drawn = [generate(seed) for seed in range(1200)]
    flat = [c for c in drawn if any(o.kind == "explode" and o.b == pyops.FLAT_MAP for o in c.ops)]
    assert len(flat) >= 10
    for case in flat:
        assert "op:explode:flat_map" in case.features()
        if {"spark", "delta2w"} & set(case.sinks):  # their table is made from the schema
            assert all(o.schema for o in case.ops if o.b == pyops.FLAT_MAP)
    spelled = [
        c for c in map(generate, range(3000)) if c.stage.kind in pyops.WINDOWS and c.stage.spelling
    ]
    assert {c.stage.spelling for c in spelled} == {"reduce", "apply", "apply_typed"}
    assert all(c.stage.spelling != "reduce" for c in spelled if c.stage.agg == "count")
    for case in spelled:  # a Spark table or two Delta writers are made from the schema
        if case.stage.spelling.startswith("apply") and {"spark", "delta2w"} & set(case.sinks):
            assert case.stage.spelling == "apply_typed"
    assert all(not c.stage.spelling for c in drawn if c.stage.kind in ("running", "none"))


def test_the_job_script_spells_them(tmp_path: Path) -> None:
    case = _case(Stage("session", "min", gap_ms=1_000, late=True, spelling="reduce"))
    text = render(case, tmp_path)
    assert ".flat_map(FlatCopies(3), schema=SCHEMA)" in text
    assert '.reduce(ReduceV("min"))' in text
    assert 'out.side_output(ed.OutputTag("late"))' in text
    assert text.index("side_output") < text.index('out.select("k", "window_start"')
    case.stage = Stage("tumbling", "count", size_ms=2_000, spelling="apply")
    assert '.apply(ApplyV("count"))' in render(case, tmp_path)
    case.stage.spelling = "apply_typed"
    assert '.apply(ApplyV("count"), schema=APPLY_COUNT)' in render(case, tmp_path)


def _case(stage: Stage, **fault: object) -> Case:
    return small_case(
        sinks=["parquet", "delta"],
        fault=fault,
        ops=[Op("explode", 3, pyops.FLAT_MAP, schema=True)],
        stage=stage,
    )


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_flat_map_and_a_window_reduce_under_a_sigkill(tmp_path: Path) -> None:
    case = _case(Stage("tumbling", "sum", size_ms=2_000, late=True, spelling="reduce"))
    case.fault = dataclasses.replace(case.fault, kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    want = expected(case, set())
    assert len(outputs["parquet"]) > 0
    assert compare(case, outputs, want) == []
    # a window's value one off: the check says so
    wrong = {**want, "main": want["main"].assign(v=want["main"]["v"] + (want["main"].index == 0))}
    assert compare(case, outputs, wrong) != []


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "stage",
    [
        Stage("session", "count", gap_ms=1_000, spelling="apply"),
        Stage("sliding", "max", size_ms=4_000, slide_ms=2_000, spelling="reduce"),
    ],
    ids=["session-apply", "sliding-reduce"],
)
def test_a_python_window_restored_at_another_parallelism(stage: Stage, tmp_path: Path) -> None:
    case = rescaled(_case(stage, kind="cancel"))
    case.ops[0].schema = False  # the flat_map's schema inferred from its first output
    run_through(case, tmp_path)


def test_chained_windows_are_the_longer_windows() -> None:
    from chaos_lib import chained, reference

    from .hand import hand, rows_of

    drawn = [generate(seed) for seed in range(1500)]
    chain = [c for c in drawn if c.stage.kind == "tumbling" and c.stage.a]
    assert len(chain) >= 10
    assert all(not c.stage.late and not any(s.late_rows for s in c.sources) for c in chain)
    # hand rows: k 0 at 0, 999 and 3100, k 1 at 1000 and 2500; 1 s windows, then 2 s
    case, _ = hand(Stage("tumbling", "sum", size_ms=1_000, a=2))
    assert 'window(ed.Tumbling("2000ms")).sum("v").name("win2")' in "\n".join(chained.lines(case))
    with rows_of(case):
        got = reference.expected(case)["main"]
    rows = sorted(tuple(int(x) for x in r) for r in got.values)
    assert rows == [(0, 0, 2_000, 7), (0, 2_000, 4_000, 2), (1, 0, 2_000, 5), (1, 2_000, 4_000, 8)]
    # a first window's result timed at its end, not end - 1, would land [1000, 2000)'s
    # sum of k 1 in [2000, 4000): a different answer, which the comparison shows
    timed_at_end = [(0, 0, 2_000, 7), (0, 2_000, 4_000, 2), (1, 2_000, 4_000, 13)]
    assert rows != timed_at_end


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_chained_windows_under_a_sigkill(tmp_path: Path) -> None:
    case = _case(Stage("tumbling", "count", size_ms=500, a=3), kind="sigkill", kills=1)
    case.ops = []
    run_through(case, tmp_path)
    assert len(_read_outputs(case, tmp_path / "out")["parquet"]) > 0
