"""Expression tree building."""

from __future__ import annotations

import numpy as np
import pytest

import eddyline as ed
from eddyline import col, lit


def test_column_and_literal_trees() -> None:
    assert col("a")._tree() == ("col", "a")
    assert lit(1)._tree() == ("lit", 1)
    assert lit(None)._tree() == ("lit", None)
    assert lit("x")._tree() == ("lit", "x")
    assert lit(True)._tree() == ("lit", True)
    assert lit(np.int64(3))._tree() == ("lit", 3)
    assert isinstance(lit(np.float32(0.5))._tree()[1], float)


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
def test_binary_operators_build_bin_nodes(expr: ed.Expr, op: str) -> None:
    tree = expr._tree()
    assert tree[0] == "bin" and tree[1] == op
    assert tree[2] == ("col", "a")


@pytest.mark.parametrize(
    ("expr", "op"),
    [
        (1 + col("a"), "+"),
        (1 - col("a"), "-"),
        (2 * col("a"), "*"),
        (1 / col("a"), "/"),
        (1 // col("a"), "//"),
        (1 % col("a"), "%"),
        (True & col("a"), "&"),
        (False | col("a"), "|"),
    ],
)
def test_reversed_operators_keep_operand_order(expr: ed.Expr, op: str) -> None:
    assert expr._tree() == ("bin", op, ("lit", expr._tree()[2][1]), ("col", "a"))


def test_reflected_comparison_flips_operator() -> None:
    # Python turns `1 < col("a")` into `col("a") > 1`.
    assert (1 < col("a"))._tree()  # noqa: SIM300 == ("bin", ">", ("col", "a"), ("lit", 1))


def test_unary_and_null_checks() -> None:
    assert (~col("f"))._tree() == ("not", ("col", "f"))
    assert (-col("x"))._tree() == ("neg", ("col", "x"))
    assert col("x").is_null()._tree() == ("is_null", ("col", "x"))
    assert col("x").is_not_null()._tree() == ("is_not_null", ("col", "x"))


def test_nested_expression_tree() -> None:
    e = ((col("a") + col("b")) * 2 > 10) & ~col("c").is_null()
    assert e._tree() == (
        "bin",
        "&",
        (
            "bin",
            ">",
            ("bin", "*", ("bin", "+", ("col", "a"), ("col", "b")), ("lit", 2)),
            ("lit", 10),
        ),
        ("not", ("is_null", ("col", "c"))),
    )
    assert e.columns() == ["a", "b", "c"]


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
    assert named._tree() == ("bin", "+", ("col", "a"), ("lit", 1))
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
        e._node = ("col", "b")  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(e)
