"""``F.nanvl`` in the tester (tools/chaos_lib/nanvl.py, docs/CHAOS.md): its
reference on hand-made rows holding NaN and nulls; outputs of a broken engine
and a deliberately wrong reference failing the check; the draw comes after every
older draw; a real run under a SIGKILL."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import fnlib, nanvl, newest
from chaos_lib.case import Stage
from chaos_lib.check import compare

from .hand import hand, run_through, small_case, with_and_without

NAN = math.nan


def _values(expr: list[Any]) -> list[Any]:
    """The reference of ``expr`` over hand.ROWS in id order (v 1, 6, 5, 8, 2: f
    is 0.125, null, 0.625, 1.0, 0.25; with r = 1 the first argument is NaN
    for v 1 and 5)."""
    _, want = hand(Stage("fn", exprs=[expr]))
    return want["main"].sort_values("id")["c0"].tolist()


def _same(got: list[Any], want: list[Any]) -> bool:
    def norm(x: Any) -> Any:
        return "NaN" if isinstance(x, float) and math.isnan(x) else x

    return [norm(x) for x in got] == [norm(x) for x in want]


def test_the_reference_is_sparks_nanvl() -> None:
    assert _same(_values(["nanvl", 1, "lit", -1.5, 0]), [-1.5, None, -1.5, 1.0, 0.25])
    assert _same(_values(["nanvl", 1, "col", 0.5, 0]), [0.125, None, 0.625, 1.0, 0.25])
    # sqrt(0.125 - 0.5) is NaN (Java's sqrt of a negative), sqrt(0.625 - 0.5) is not
    assert _same(_values(["nanvl", 1, "sqrt", 0.5, 0]), [NAN, None, math.sqrt(0.125), 1.0, 0.25])
    # F.isnan tells the NaN the comparison reads as null from a null
    assert _values(["nanvl", 1, "nan", 0.5, 1]) == [True, False, True, False, False]
    text = fnlib.dsl(["nanvl", 2, "sqrt", 1.0, 1])
    assert text == (
        'F.isnan(F.nanvl(F.when(F.col("v") % 4 == 2, F.lit(float("nan")))'
        '.otherwise(F.col("f")), F.sqrt(F.col("f") - 1.0)))'
    )


def test_a_broken_engine_and_a_wrong_reference_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    case, want = hand(Stage("fn", exprs=[["nanvl", 1, "lit", -1.5, 0], ["nanvl", 1, "nan", 0, 1]]))
    got = want["main"]
    assert compare(case, {"parquet": got}, want) == []
    # an engine that ignores nanvl (NaN stays), or nulls a NaN: the value is not -1.5
    kept = got.assign(c0=[NAN if x == -1.5 else x for x in got["c0"]])
    assert "lost" in compare(case, {"parquet": kept}, want)[0]
    # an engine whose nanvl gives null for NaN: isnan false where the NaN literal came
    nulled = got.assign(c1=[False] * len(got))
    assert "lost" in compare(case, {"parquet": nulled}, want)[0]
    # a reference that takes the second argument for a null first one too
    real = nanvl._second

    def wrong(row: dict[str, Any], r: int, second: str, c: float, isnan: int) -> Any:
        first = NAN if row["v"] % 4 == r else row["f"]
        out = real(row, second, c) if first is None or math.isnan(first) else first
        return out is not None and math.isnan(out) if isnan else out

    monkeypatch.setitem(newest.TEMPLATES, "nanvl", (nanvl.draw, nanvl.dsl, wrong))
    _, wrong_want = hand(case.stage)
    assert "lost" in compare(case, {"parquet": got}, wrong_want)[0]


def test_the_draw_comes_after_every_older_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with ``nanvl`` is the case without the draw but for it."""
    seen = 0
    for seed, case, before in with_and_without(monkeypatch, nanvl, seeds=1_500):
        drawn = [e for e in case.stage.exprs if e[0] == "nanvl"]
        if drawn:
            seen += 1
            assert case.stage.kind == "fn" and "fn:nanvl" in case.features()
            case.stage.exprs.remove(drawn[0])
        assert case.to_json() == before.to_json(), seed
    assert seen >= 10, seen


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_a_real_nanvl_matches_after_a_sigkill(tmp_path: Path) -> None:
    exprs = [["nanvl", 1, "sqrt", 1.0, 0], ["nanvl", 2, "col", 0.5, 1]]
    exprs.append(["nanvl", 3, "lit", 2.25, 0])
    fault = {"kind": "sigkill", "kills": 1}
    case = small_case(sinks=["parquet", "delta"], fault=fault, stage=Stage("fn", exprs=exprs))
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) == len(outputs["delta"]) > 0
