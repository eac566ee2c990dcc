"""``eddyline.functions`` (``F``) and the Spark Column methods, run natively
through ``select`` / ``with_columns`` / ``filter`` and checked exactly."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline import _core

ROWS = [
    {"id": 0, "s": "Hello World", "x": 5, "d": 2.25},
    {"id": 1, "s": "", "x": -3, "d": -0.5},
    {"id": 2, "s": None, "x": None, "d": None},
    {"id": 3, "s": "  ünï cödé  ", "x": 0, "d": 16.0},
    {"id": 4, "s": "日本語abc", "x": 9223372036854775807, "d": 1.5},
]
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string()), ("x", pa.int64()), ("d", pa.float64())])


def _source(env: ed.StreamEnvironment) -> ed.DataStream:
    return env.from_arrow(pa.Table.from_pylist(ROWS, schema=SCHEMA))


def _select(*exprs: ed.Expr, **named: ed.Expr) -> dict[str, list[Any]]:
    """Each column of ``select("id", *exprs, **named)``, in id order."""
    env = ed.StreamEnvironment()
    cols = [*exprs, *(e.alias(n) for n, e in named.items())]
    out = _source(env).select("id", *cols).collect()
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: r["id"])
    return {name: [r[name] for r in rows] for name in rows[0] if name != "id"}


def _filter_ids(predicate: ed.Expr) -> list[int]:
    env = ed.StreamEnvironment()
    out = _source(env).filter(predicate).collect()
    env.execute()
    return sorted(r["id"] for r in out.to_pylist())


def test_string_functions() -> None:
    got = _select(
        lower=F.lower("s"),
        upper=F.upper(F.col("s")),
        trim=F.trim("s"),
        length=F.length("s"),
        sub=F.substring("s", 2, 3),
        tail=F.substring("s", -3, 2),
        cat=F.concat("s", F.lit("!")),
        ws=F.concat_ws("-", "s", F.lit("z")),
        ext=F.regexp_extract("s", r"(\w)(\w+)", 2),
        rep=F.regexp_replace("s", "[lo]", "_"),
    )
    assert got == {
        "lower": ["hello world", "", None, "  ünï cödé  ", "日本語abc"],
        "upper": ["HELLO WORLD", "", None, "  ÜNÏ CÖDÉ  ", "日本語ABC"],
        "trim": ["Hello World", "", None, "ünï cödé", "日本語abc"],
        "length": [11, 0, None, 12, 6],
        "sub": ["ell", "", None, " ün", "本語a"],
        "tail": ["rl", "", None, "é ", "ab"],
        "cat": ["Hello World!", "!", None, "  ünï cödé  !", "日本語abc!"],
        "ws": ["Hello World-z", "-z", "z", "  ünï cödé  -z", "日本語abc-z"],
        "ext": ["ello", "", None, "nï", "本語abc"],
        "rep": ["He___ W_r_d", "", None, "  ünï cödé  ", "日本語abc"],
    }


def test_math_and_hash_functions() -> None:
    got = _select(
        abs=F.abs("x"),
        round=F.round("d", 1),
        round0=F.round("d"),
        floor=F.floor("d"),
        ceil=F.ceil("d"),
        sqrt=F.sqrt("d"),
        log2=F.log2("d"),
        pow=F.pow("d", 2),
        greatest=F.greatest("d", F.lit(1.0)),
        least=F.least("x", F.lit(1)),
        md5=F.md5(F.lit("abc")),
        sha2=F.sha2(F.lit("abc"), 256),
        isnan=F.isnan(F.sqrt("d")),
    )
    assert got["abs"] == [5, 3, None, 0, 9223372036854775807]
    assert got["round"] == [2.3, -0.5, None, 16.0, 1.5]
    assert got["round0"] == [2.0, -1.0, None, 16.0, 2.0]
    assert got["floor"] == [2, -1, None, 16, 1]
    assert got["ceil"] == [3, 0, None, 16, 2]
    assert got["sqrt"][0] == 1.5 and got["sqrt"][3] == 4.0 and got["sqrt"][2] is None
    assert got["sqrt"][1] != got["sqrt"][1]  # NaN for a negative input, as Spark
    assert got["log2"][3] == 4.0 and got["log2"][1] is None  # null for input <= 0
    assert got["pow"] == [5.0625, 0.25, None, 256.0, 2.25]
    assert got["greatest"] == [2.25, 1.0, 1.0, 16.0, 1.5]
    assert got["least"] == [1, -3, 1, 0, 1]
    # sqrt(-0.5) is NaN; null is not NaN (false, not null, as Spark).
    assert got["isnan"] == [False, True, False, False, False]
    assert got["md5"] == ["900150983cd24fb0d6963f7d28e17f72"] * 5
    assert got["sha2"] == ["ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"] * 5


def test_when_otherwise_coalesce_and_cast() -> None:
    got = _select(
        sign=F.when(F.col("x") > 0, "pos").when(F.col("x") < 0, "neg").otherwise("zero"),
        open_ended=F.when(F.col("x") > 0, F.col("x") - 1),
        safe=F.when(F.col("x") != 0, F.lit(10) // F.col("x")).otherwise(-1),
        first=F.coalesce("s", F.lit("none")),
        as_int=F.col("d").cast("int"),
        as_str=F.col("x").cast("string"),
        narrowed=F.col("x").cast("int"),
        nulls=F.isnull("x"),
        not_nulls=F.isnotnull("s"),
    )
    assert got == {
        "sign": ["pos", "neg", "zero", "zero", "pos"],
        "open_ended": [4, None, None, None, 9223372036854775806],
        "safe": [2, -4, -1, -1, 0],
        "first": ["Hello World", "", "none", "  ünï cödé  ", "日本語abc"],
        "as_int": [2, 0, None, 16, 1],
        "as_str": ["5", "-3", None, "0", "9223372036854775807"],
        "narrowed": [5, -3, None, 0, -1],
        "nulls": [False, False, True, False, False],
        "not_nulls": [True, True, False, True, True],
    }


def test_with_columns_takes_functions() -> None:
    env = ed.StreamEnvironment()
    out = _source(env).with_columns(s=F.upper("s"), n=F.length("s")).collect()
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: r["id"])
    assert [(r["s"], r["n"]) for r in rows] == [
        ("HELLO WORLD", 11),
        ("", 0),
        (None, None),
        ("  ÜNÏ CÖDÉ  ", 12),
        ("日本語ABC", 6),
    ]


@pytest.mark.parametrize(
    ("predicate", "ids"),
    [
        (F.col("x").isin(5, 0), [0, 3]),
        (F.col("x").isin([5, -3]), [0, 1]),
        (F.col("s").isin("", None), [1]),
        (F.col("x").isin(), []),
        (F.col("d").between(1.5, 2.25), [0, 4]),
        (F.col("s").like("%o W%"), [0]),
        (F.col("s").like("_ello%"), [0]),
        (F.col("s").rlike("^日.*c$"), [4]),
        (F.col("s").startswith("He"), [0]),
        (F.col("s").endswith("abc"), [4]),
        (F.col("s").contains("cöd"), [3]),
        (F.col("s").isNull(), [2]),
        (F.col("s").isNotNull() & ~F.col("s").contains(" "), [1, 4]),
    ],
)
def test_column_methods_in_filter(predicate: ed.Expr, ids: list[int]) -> None:
    assert _filter_ids(predicate) == ids


def test_repr_and_pickling_of_function_expressions() -> None:
    e = F.when(F.lower("s").like("a%"), F.substring("s", 1, 2)).otherwise(F.lit(None))
    assert repr(e) == (
        "when(like(lower(col('s')), 'a%'), substring(col('s'), 1, 2)).otherwise(None)"
    )
    assert repr(pickle.loads(pickle.dumps(e))) == repr(e)
    assert repr(F.col("x").cast("int").isin(1, 2)) == (
        "((col('x').cast('int') == 1) | (col('x').cast('int') == 2))"
    )


def test_otherwise_and_when_misuse_name_the_method() -> None:
    case = F.when(F.col("x") > 0, 1)
    done = case.otherwise(0)
    with pytest.raises(ed.GraphError, match=r"otherwise.*given twice") as info:
        done.otherwise(2)
    assert info.value.operator == "otherwise"
    with pytest.raises(ed.GraphError, match=r"otherwise.*only to a CASE") as info:
        F.col("x").otherwise(1)
    assert info.value.operator == "otherwise"
    with pytest.raises(ed.GraphError, match=r"when.*cannot follow otherwise") as info:
        done.when(F.col("x") < 0, 2)
    assert info.value.operator == "when"
    with pytest.raises(ed.GraphError, match=r"when.*only to a CASE"):
        F.lower("s").when(F.col("x") < 0, 2)


def test_wrong_argument_types_name_the_function() -> None:
    with pytest.raises(ed.SchemaError, match="'substring' takes a int") as info:
        F.substring("s", "1", 2)  # type: ignore[arg-type]
    assert info.value.operator == "substring"
    with pytest.raises(ed.SchemaError, match="'lower' takes a column"):
        F.lower(1)  # type: ignore[arg-type]
    with pytest.raises(ed.SchemaError, match="'greatest' needs at least 2"):
        F.greatest("x")
    with pytest.raises(ed.SchemaError, match="'when' takes a boolean expression"):
        F.when("x", 1)  # type: ignore[arg-type]
    with pytest.raises(ed.SchemaError, match=r"'cast'.*'nosuchtype'"):
        F.col("x").cast("nosuchtype")
    with pytest.raises(ed.GraphError, match="unknown function 'nosuchfn'"):
        _core.Expr._call("nosuchfn", [F.col("x")])


@pytest.mark.parametrize("operator", ["select", "with_columns", "filter"])
def test_mistyped_column_fails_at_build_naming_operator_function_and_column(
    operator: str,
) -> None:
    env = ed.StreamEnvironment()
    s = _source(env)
    bad = F.lower("x")
    with pytest.raises(ed.SchemaError) as info:
        if operator == "select":
            s.select(bad.alias("y"))
        elif operator == "with_columns":
            s.with_columns(y=bad)
        else:
            s.filter(F.col("x").like("a%"))
    assert info.value.operator == f"{operator}_1"
    text = str(info.value)
    assert f"operator '{operator}_1'" in text
    assert "function 'lower'" in text or "function 'like'" in text
    assert "column 'x'" in text and "Int64" in text


def test_functions_module_keeps_the_process_function_names() -> None:
    from eddyline.functions import CoProcessFunction, ProcessFunction, ValueState

    assert ProcessFunction is ed.ProcessFunction
    assert CoProcessFunction is ed.CoProcessFunction
    assert ValueState is ed.ValueState
    assert {"lower", "when", "ProcessFunction"} <= set(F.__all__)
