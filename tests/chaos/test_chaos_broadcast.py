"""Broadcast state in the randomized tester (tools/chaos_lib/bcast.py): a
temporal join as a keyed broadcast process function, checked against the
temporal join's reference; the draw, and real runs under a SIGKILL and a
savepoint restored at another parallelism, and a check that fails on a
wrong version."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib.case import Case
from chaos_lib.check import compare
from chaos_lib.generate import generate
from chaos_lib.reference import expected
from chaos_lib.render import render

from .hand import rescaled, run_through, small_case


def _tjoin_case() -> Case:
    return next(c for c in map(generate, range(2000)) if c.stage.kind == "tjoin")


def test_the_draw(tmp_path: Path) -> None:
    drawn = [generate(seed) for seed in range(1500)]
    joins = [c for c in drawn if c.stage.kind == "tjoin"]
    spelled = [c for c in joins if c.stage.spelling == "broadcast"]
    assert 0 < len(spelled) < len(joins)
    assert all(not c.stage.spelling for c in drawn if c.stage.kind in ("ijoin", "ujoin"))
    case = spelled[0]
    assert f"stage:tjoin{':left' * (case.stage.how == 'left')}:broadcast" in case.features()
    text = render(case, tmp_path)
    assert f".connect({case.stage.right}.broadcast())" in text
    assert "class BroadcastTemporal(ed.KeyedBroadcastProcessFunction)" in text


def _case(how: str, **fault: object) -> Case:
    base = _tjoin_case()
    stage = dataclasses.replace(base.stage, spelling="broadcast", how=how)
    return small_case(
        base, sinks=["parquet", "delta"], fault=fault, execution={"sleep_s": 0.2}, stage=stage
    )


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_broadcast_join_under_a_sigkill(tmp_path: Path) -> None:
    case = _case("left", kind="sigkill", kills=1)
    outputs = run_through(case, tmp_path)
    assert outputs["parquet"]["id_right"].notna().any()
    want = expected(case, set())
    # every row with the version before its newest: the check says so
    wrong = want["main"].assign(v_right=want["main"]["v_right"] + 1)
    assert compare(case, outputs, {**want, "main": wrong}) != []


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_broadcast_join_restored_at_another_parallelism(tmp_path: Path) -> None:
    case = rescaled(_case("inner", kind="savepoint", fraction=0.3))
    run_through(case, tmp_path)
