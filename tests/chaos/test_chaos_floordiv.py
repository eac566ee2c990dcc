"""Spark's ``floor(a / b)`` of integers in the tester (tools/chaos_lib/floordiv.py,
docs/CHAOS.md): the reference's Spark semantics on values where they differ from
an exact integer floor division and from truncation; outputs of a broken engine
and a deliberately wrong reference failing the check; the draw comes after every
older draw; real runs of the SQL item and the ``F.expr`` under a SIGKILL."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import floordiv, fnlib, sqlgen
from chaos_lib.case import Stage
from chaos_lib.check import compare

from .hand import hand, rows_of, run_through, small_case, with_and_without

EXACT = floordiv.EXACT

# id % 1009 and v pick the dividends; the divisor by key: k = 0 gives
# +(0 + d), k = 1 -(1 + d)
ROWS = {"id": [1009, 3, 2018, 4], "k": [0, 1, 1, 0], "ts": [0, 10, 20, 30], "v": [1, 2, 4, 6]}


def test_the_reference_is_sparks_double_division_floored() -> None:
    q = floordiv.spark_floor_quotient
    assert q(-7, 2) == -4 and q(7, -2) == -4 and q(-1, EXACT + 1) == -1  # floor, not truncation
    assert q(EXACT + 1, 1) == EXACT  # the dividend rounds to a double first
    assert q(EXACT + 3, 1) == EXACT + 4  # to even
    assert q(EXACT + 1, 3) == 3002399751580330  # exactly, 2^53 + 1 is 3 * ...331
    assert q(3, EXACT) == 0 and q(-3, EXACT) == -1
    # the fn stage's reference is null for a null vn
    assert floordiv.value({"vn": None, "id": 1, "k": 0}, 0, 1, 1, "key") is None


def _stage(sql: bool, expr: list[Any]) -> Stage:
    if sql:
        return Stage("sql", form="select", exprs=[expr])
    return Stage("fn", exprs=[expr])


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "expr"])
def test_hand_made_rows_and_a_broken_engine(sql: bool) -> None:
    expr = ["floordiv", 0, EXACT + 1, 1, "key"]
    case, want = hand(_stage(sql, expr), ROWS)
    got = want["main"].sort_values("id").reset_index(drop=True)
    # ids 3, 4, 1009, 2018: dividends 2 * m + 3, 6 * m + 4, m, 4 * m (fn: vn
    # is null for v = 6, a multiple of 3); divisors -2, 1, 1, -2
    m = EXACT + 1
    big = [(2 * m + 3, -2), (6 * m + 4, 1), (m, 1), (4 * m, -2)]
    spark = [floordiv.spark_floor_quotient(a, b) for a, b in big]
    if not sql:
        spark[1] = None
    assert [None if pd.isna(x) else int(x) for x in got["c0"]] == spark
    # 2^54 + 5 rounds to 2^54 + 4 (exactly: -(2^53 + 3)); 2^55 + 4 to 2^55
    assert spark[2] == EXACT and spark[0] == -(EXACT + 2) and spark[3] == -(2 * EXACT)
    assert compare(case, {"parquet": got}, want) == []
    # a broken engine: an exact integer floor division, or a truncating one
    with rows_of(case, ROWS):
        quotients = [None if s is None else a // b for (a, b), s in zip(big, spark, strict=True)]
        exact = got.assign(c0=quotients)
        assert "lost" in compare(case, {"parquet": exact}, want)[0]
        small = ["floordiv", 4, 1, 2, "lit"]  # (v - 4 + id % 1009) / 2: -3 / 2 for id 1009
        case2, want2 = hand(_stage(sql, small), ROWS)
        assert -2 in [int(x) for x in want2["main"]["c0"].dropna()]
        truncated = want2["main"].assign(
            c0=[None if pd.isna(x) else (-1 if x == -2 else x) for x in want2["main"]["c0"]]
        )
        assert "lost" in compare(case2, {"parquet": truncated}, want2)[0]


def _replaced(text: str, changes: dict[str, str]) -> str:
    for old, new in changes.items():
        text = text.replace(old, new)
    return text


def test_a_wrong_reference_fails_the_engines_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference that divides exactly (Python's ``//``), as one forgetting
    Spark's double division would, fails the correct output (the ``F.expr``
    reference is Python's; the SQL one DuckDB's: there ``//`` is its integer
    division, without a ``floor``, which would make it a double again)."""
    expr = ["floordiv", 0, EXACT + 1, 1, "key"]
    case, right = hand(_stage(False, expr), ROWS)
    monkeypatch.setattr(floordiv, "spark_floor_quotient", lambda a, b: a // b)
    _, wrong = hand(_stage(False, expr), ROWS)
    with rows_of(case, ROWS):
        assert "lost" in compare(case, {"parquet": right["main"]}, wrong)[0]
    monkeypatch.undo()
    sql_case, sql_right = hand(_stage(True, expr), ROWS)
    real = sqlgen._select_item
    # DuckDB's floor of a bigint is a double again: the integer quotient alone
    exact = {"floor(": "(", ") / (": ") // ("}
    monkeypatch.setattr(sqlgen, "_select_item", lambda e: _replaced(real(e), exact))
    assert " // " in sqlgen.query(sql_case.stage)
    _, sql_wrong = hand(_stage(True, expr), ROWS)
    with rows_of(sql_case, ROWS):
        assert "lost" in compare(sql_case, {"parquet": sql_right["main"]}, sql_wrong)[0]


def test_the_texts() -> None:
    expr = ["floordiv", 4, 7, -9007199254740993, "lit"]
    assert sqlgen.query(Stage("sql", form="select", exprs=[["abs", 3], expr])) == (
        "SELECT id, abs(v - 3) AS c0, "
        "floor(((v - 4) * 7 + id % 1009) / (-9007199254740993)) AS c1 FROM t"
    )
    assert fnlib.dsl(["floordiv", 4, 7, 2, "key"]) == (
        "F.expr('floor(((vn - 4) * 7 + id % 1009) / ((1 - k % 2 * 2) * (k % 4 + 2)))')"
    )


def test_the_draw_comes_after_every_older_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with the quotient is the case without the draw but for it; it
    is drawn in ``fn`` stages and SQL selects and unions, never with a zero
    divisor."""
    seen = {"fn": 0, "select": 0, "union": 0}
    for seed, case, before in with_and_without(monkeypatch, floordiv, seeds=1_500):
        drawn = [e for e in case.stage.exprs if e[0] == "floordiv"]
        if drawn:
            (expr,) = drawn
            seen[case.stage.form if case.stage.kind == "sql" else "fn"] += 1
            assert abs(expr[3]) in floordiv.DIVISORS  # never zero
            case.stage.exprs.remove(expr)
            feature = "fn:floordiv" if case.stage.kind == "fn" else "sql:floordiv"
            assert feature not in case.features()
        assert case.to_json() == before.to_json(), seed
    assert min(seen.values()) >= 3, seen


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sql", [True, False], ids=["sql", "expr"])
def test_a_real_quotient_matches_after_a_sigkill(sql: bool, tmp_path: Path) -> None:
    """The SQL item and the ``F.expr`` (beside a small quotient by a literal)
    over a real run killed and restored from its latest checkpoint."""
    stage = _stage(sql, ["floordiv", 9, 2**51 - 1, EXACT + 1, "key"])
    stage.exprs.append(["floordiv", 12, 3, -7, "lit"])
    fault = {"kind": "sigkill", "kills": 1}
    case = small_case(sinks=["parquet", "delta"], fault=fault, stage=stage)
    feature = "sql:floordiv" if sql else "fn:floordiv"
    assert feature in case.features()
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) == len(outputs["delta"]) > 0
