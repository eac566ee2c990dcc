"""The bounded loop's other settings in the randomized tester
(tools/chaos_lib/loops.py): feedback spilled to disk, the adaptive priority
and ``iterate_with_feedback``; the draws, the rendered calls and real runs
under a SIGKILL and a restore at another parallelism."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import loops
from chaos_lib.case import Case, Op, Stage
from chaos_lib.generate import generate
from chaos_lib.render import render

from .hand import rescaled, run_through, small_case


def test_the_draws_and_their_calls(tmp_path: Path) -> None:
    drawn = [generate(seed) for seed in range(1000)]
    variants = {o.variant for c in drawn for o in c.ops if o.kind == "loop"}
    assert variants == {"", *loops.VARIANTS}
    assert all(not o.variant for c in drawn for o in c.ops if o.kind != "loop")
    op = Op("loop", 2, 9, variant="co")
    assert Case.from_json(dataclasses.replace(drawn[0], ops=[op]).to_json()).ops == [op]
    assert "op:loop:co" in dataclasses.replace(drawn[0], ops=[op]).features()
    calls = {v: loops.call(3, dataclasses.replace(op, variant=v)) for v in loops.VARIANTS}
    assert calls["spill"] == 'iterate(LoopUntil(2, 9, "op3"), feedback_memory="1KiB")'
    assert calls["adaptive"] == 'iterate(LoopUntil(2, 9, "op3"), priority="adaptive")'
    assert calls["co"] == (
        'iterate_with_feedback(CoLoopUntil(2, 9, "op3"), feedback_schema=SCHEMA)'
    )
    assert "class CoLoopUntil" in render(dataclasses.replace(drawn[0], ops=[op]), tmp_path)


def _case(variant: str, **fault: object) -> Case:
    return small_case(
        sinks=["parquet", "upsert"],
        fault=fault,
        ops=[Op("loop", 2, 12, variant=variant)],
        stage=Stage("running", "sum"),
    )


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("variant", ["co", "spill"])
def test_a_loop_under_a_sigkill(variant: str, tmp_path: Path) -> None:
    case = _case(variant, kind="sigkill", kills=1)
    run_through(case, tmp_path)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_an_adaptive_loop_restored_at_another_parallelism(tmp_path: Path) -> None:
    case = rescaled(_case("adaptive", kind="savepoint", fraction=0.3))
    run_through(case, tmp_path)
