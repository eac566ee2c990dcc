"""Native expressions: building, printing and pickling."""

from __future__ import annotations

import pickle
from typing import Any

import cloudpickle
import numpy as np
import pytest

import eddyline as ed
from eddyline import _core, col, lit


def test_column_and_literal_expressions() -> None:
    assert repr(col("a")) == "col('a')"
    assert [repr(lit(v)) for v in (1, None, "x", True, 2.5)] == ["1", "None", "'x'", "True", "2.5"]
    assert repr(lit(np.int64(3))) == "3"
    assert repr(lit(np.float32(0.5))) == "0.5"
    assert isinstance(col("a"), _core.Expr) and ed.Expr is _core.Expr


@pytest.mark.parametrize(
    ("expr", "op"),
    [
        (col("a") + 1, "+"),
        (col("a") - 1, "-"),
        (col("a") * 1, "*"),
        (col("a") / 1, "/"),
        (col("a") // 1, "//"),
        (col("a") % 1, "%"),
        (col("a") == 1, "=="),
        (col("a") != 1, "!="),
        (col("a") < 1, "<"),
        (col("a") <= 1, "<="),
        (col("a") > 1, ">"),
        (col("a") >= 1, ">="),
        (col("a") & True, "&"),
        (col("a") | False, "|"),
    ],
)
def test_binary_operators_build_binary_expressions(expr: ed.Expr, op: str) -> None:
    assert repr(expr).startswith(f"(col('a') {op} ")


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (1 + col("a"), "(1 + col('a'))"),
        (1 - col("a"), "(1 - col('a'))"),
        (2 * col("a"), "(2 * col('a'))"),
        (1 / col("a"), "(1 / col('a'))"),
        (1 // col("a"), "(1 // col('a'))"),
        (1 % col("a"), "(1 % col('a'))"),
        (True & col("a"), "(True & col('a'))"),
        (False | col("a"), "(False | col('a'))"),
    ],
)
def test_reversed_operators_keep_operand_order(expr: ed.Expr, text: str) -> None:
    assert repr(expr) == text


def test_reflected_comparison_flips_operator() -> None:
    # Python turns `1 < col("a")` into `col("a") > 1`.
    assert repr(1 < col("a")) == "(col('a') > 1)"  # noqa: SIM300


def test_unary_and_null_checks() -> None:
    assert repr(~col("f")) == "~col('f')"
    assert repr(-col("x")) == "-col('x')"
    assert repr(col("x").is_null()) == "col('x').is_null()"
    assert repr(col("x").is_not_null()) == "col('x').is_not_null()"


def test_nested_expression() -> None:
    e = ((col("a") + col("b")) * 2 > 10) & ~col("c").is_null()
    assert repr(e) == "((((col('a') + col('b')) * 2) > 10) & ~col('c').is_null())"
    assert e.columns() == ["a", "b", "c"]


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps])
def test_expressions_survive_pickling(dumps: Any) -> None:
    """Worker processes receive the plan pickled, expressions included."""
    for e in (
        ((col("a") + col("b")) * 2 > 10) & ~col("c").is_null(),
        (1 - col("a")).alias("b"),
        -col("x") / 2.5,
        lit(None) | (col("s") == "it's"),
    ):
        back = pickle.loads(dumps(e))
        assert repr(back) == repr(e)
        assert back.columns() == e.columns() and back.output_name == e.output_name


def test_bool_raises_type_error_pointing_to_operators() -> None:
    with pytest.raises(TypeError, match=r"use & \(and\), \| \(or\)"):
        bool(col("a") > 1)
    with pytest.raises(TypeError):
        _ = (col("a") > 1) and (col("b") > 2)
    with pytest.raises(TypeError):
        _ = 0 < col("a") < 5


def test_alias_and_output_name() -> None:
    assert col("a").output_name == "a"
    assert (col("a") + 1).output_name is None
    named = (col("a") + 1).alias("b")
    assert named.output_name == "b"
    assert named.columns() == ["a"]
    assert repr(named) == "(col('a') + 1).alias('b')"


def test_bad_literals_and_names_raise_type_error() -> None:
    with pytest.raises(TypeError, match="unsupported literal"):
        lit([1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unsupported literal"):
        col("a") + object()  # type: ignore[operator]
    with pytest.raises(TypeError):
        col("")
    with pytest.raises(TypeError):
        col("a").alias("")


def test_expressions_are_immutable_and_unhashable() -> None:
    e = col("a")
    with pytest.raises(AttributeError):
        e.name = "b"  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        hash(e)
