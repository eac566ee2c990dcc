"""The native function library (``import eddyline.functions as F``) in the
generator: the expressions of a ``fn`` stage, each as the DSL call a user
writes and as an independent reference in plain Python over one row.

The references follow Spark's documented semantics (pyspark.sql.functions;
docs/API.md "Functions" says which eddyline implements), not eddyline's code:
``round`` is HALF_UP on the double's decimal spelling, ``substring`` is
1-based with negative positions from the end, ``regexp_extract`` gives "" when
nothing matches, ``concat`` is null when any input is, ``concat_ws`` and
``greatest``/``least`` skip nulls, a failed cast is null, time is UTC.

The stage first adds base columns with nulls to the rows (``id, k, ts, v``):

- ``s``: a string (a prefix with spaces, upper and lower case or a non-ASCII
  letter, the digits of ``v``, sometimes " 9z"), null when ``v % 4 == 0``;
- ``vn``: ``v``, null when ``v % 3 == 0``; ``f``: ``vn / 8`` (a double);
- ``tstr``: ``from_unixtime`` of a time in seconds spread over decades,
  ``yyyy-MM-dd HH:mm:ss``, null when ``v % 5 == 0``.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from typing import Any

Row = dict[str, Any]

PREFIXES = (" Ab", "cD ", "\u00e9e-")
EPOCH = datetime.datetime(1970, 1, 1)

BASE = (
    """with_columns(
            s=F.when(F.col("v") % 4 == 0, None).otherwise(
                F.concat(
                    F.when(F.col("k") % 3 == 0, " Ab").when(F.col("k") % 3 == 1, "cD ")
                    .otherwise("\\u00e9e-"),
                    F.col("v").cast("string"),
                    F.when(F.col("id") % 2 == 0, "").otherwise(" 9z"),
                )
            ),
            vn=F.when(F.col("v") % 3 == 0, None).otherwise(F.col("v")),
            tstr=F.when(F.col("v") % 5 == 0, None).otherwise(
                F.from_unixtime(F.col("ts") * 37 + F.col("k") * 31_000_013 + 1_600_000_000)
            ),
        )""",
    'with_columns(f=F.col("vn") / 8)',
)
"""The two ``with_columns`` that add the base columns (``f`` reads ``vn``)."""


def base(row: Row) -> Row:
    """The base columns of one row (the reference of ``BASE``)."""
    v, k = row["v"], row["k"]
    s = None
    if v % 4:
        s = PREFIXES[k % 3] + str(v) + ("" if row["id"] % 2 == 0 else " 9z")
    vn = None if v % 3 == 0 else v
    tstr = None
    if v % 5:
        seconds = row["ts"] * 37 + k * 31_000_013 + 1_600_000_000
        tstr = (EPOCH + datetime.timedelta(seconds=seconds)).strftime("%Y-%m-%d %H:%M:%S")
    return {**row, "s": s, "vn": vn, "tstr": tstr, "f": None if vn is None else vn / 8}


def _null(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Null in, null out (the rule of most of Spark's functions)."""

    def wrapped(x: Any, *rest: Any) -> Any:
        return None if x is None else fn(x, *rest)

    return wrapped


def _substring(s: str, pos: int, length: int) -> str:
    # Spark's UTF8String.substringSQL: 1-based, 0 as 1, negative from the end
    n = len(s)
    start = pos - 1 if pos > 0 else (n + pos if pos < 0 else 0)
    end = start + length
    start = max(start, 0)
    return "" if start >= end else s[start:end]


def _round(x: float, scale: int) -> float:
    q = decimal.Decimal(1).scaleb(-scale)
    return float(decimal.Decimal(repr(x)).quantize(q, rounding=decimal.ROUND_HALF_UP))


def _regexp_extract(s: str, pattern: str, idx: int) -> str:
    m = re.search(pattern, s)
    return "" if m is None or m.group(idx) is None else m.group(idx)


def _like(s: str, pattern: str) -> bool:
    regex = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, s, re.DOTALL) is not None


def _cast_int(s: str) -> int | None:
    # Spark's string to int: surrounding whitespace trimmed, else null
    text = s.strip()
    return int(text) if re.fullmatch(r"[+-]?\d+", text) and abs(int(text)) < 2**31 else None


def _time(tstr: str) -> datetime.datetime:
    return datetime.datetime.strptime(tstr, "%Y-%m-%d %H:%M:%S")


def _trunc(unit: str, t: datetime.datetime) -> datetime.datetime:
    if unit == "year":
        return t.replace(month=1, day=1, hour=0, minute=0, second=0)
    if unit == "month":
        return t.replace(day=1, hour=0, minute=0, second=0)
    if unit == "day":
        return t.replace(hour=0, minute=0, second=0)
    if unit == "hour":
        return t.replace(minute=0, second=0)
    return t.replace(second=0)


def _json(row: Row) -> str:
    # to_json(struct(k, s, vn)): null fields left out, compact, non-ASCII kept
    fields = {c: row[c] for c in ("k", "s", "vn") if row[c] is not None}
    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)


def _json_get(row: Row, field: str) -> str | None:
    value = json.loads(_json(row)).get(field)
    return None if value is None else str(value)


def _nonnull(*values: Any) -> list[Any]:
    return [x for x in values if x is not None]


STRUCT = 'F.to_json(F.struct("k", "s", "vn"))'

# name -> (draw params, DSL text from params, reference from row and params)
Template = tuple[
    Callable[[random.Random], list[Any]],
    Callable[..., str],
    Callable[..., Any],
]

TEMPLATES: dict[str, Template] = {
    "lower": (lambda r: [], lambda: 'F.lower("s")', lambda w: _null(str.lower)(w["s"])),
    "upper": (lambda r: [], lambda: 'F.upper("s")', lambda w: _null(str.upper)(w["s"])),
    "trim": (lambda r: [], lambda: 'F.trim("s")', lambda w: _null(lambda s: s.strip(" "))(w["s"])),
    "length": (lambda r: [], lambda: 'F.length("s")', lambda w: _null(len)(w["s"])),
    "substring": (
        lambda r: [r.randint(-5, 5), r.randint(0, 4)],
        lambda p, n: f'F.substring("s", {p}, {n})',
        lambda w, p, n: _null(_substring)(w["s"], p, n),
    ),
    "concat": (
        lambda r: [],
        lambda: 'F.concat("s", F.lit("|"), F.col("k").cast("string"))',
        lambda w: None if w["s"] is None else f"{w['s']}|{w['k']}",
    ),
    "concat_ws": (
        lambda r: [],
        lambda: 'F.concat_ws("-", "s", F.lit("z"), "tstr")',
        lambda w: "-".join(_nonnull(w["s"], "z", w["tstr"])),
    ),
    "regexp_extract": (
        lambda r: r.choice(
            [[r"([a-z]+)(\d+)", r.randint(0, 2)], [r"\d+", 0], [r"([A-Z])([a-z]*)", 2]]
        ),
        lambda pat, i: f"F.regexp_extract({'s'!r}, {pat!r}, {i})",
        lambda w, pat, i: _null(_regexp_extract)(w["s"], pat, i),
    ),
    "regexp_replace": (
        lambda r: [r.choice([r"\d", "[aeiou]", r"\s+"]), r.choice(["#", ""])],
        lambda pat, rep: f"F.regexp_replace({'s'!r}, {pat!r}, {rep!r})",
        lambda w, pat, rep: _null(lambda s: re.sub(pat, rep, s))(w["s"]),
    ),
    "like": (
        lambda r: [r.choice(["%b%", "_D%", "%9z", "%\u00e9%"])],
        lambda p: f'F.col("s").like({p!r})',
        lambda w, p: _null(_like)(w["s"], p),
    ),
    "startswith": (
        lambda r: [r.choice(["cD", " A", "\u00e9"])],
        lambda p: f'F.col("s").startswith({p!r})',
        lambda w, p: _null(lambda s: s.startswith(p))(w["s"]),
    ),
    "contains": (
        lambda r: [r.choice(["9", "b1", " "])],
        lambda p: f'F.col("s").contains({p!r})',
        lambda w, p: _null(lambda s: p in s)(w["s"]),
    ),
    "abs": (
        lambda r: [r.choice([3, 10])],
        lambda c: f'F.abs(F.col("vn") - {c})',
        lambda w, c: _null(lambda x: abs(x - c))(w["vn"]),
    ),
    "round": (
        lambda r: [r.randint(0, 2)],
        lambda n: f'F.round("f", {n})',
        lambda w, n: _null(_round)(w["f"], n),
    ),
    "floor": (lambda r: [], lambda: 'F.floor("f")', lambda w: _null(math.floor)(w["f"])),
    "ceil": (lambda r: [], lambda: 'F.ceil("f")', lambda w: _null(math.ceil)(w["f"])),
    "greatest": (
        lambda r: [r.choice([2, 9])],
        lambda c: f'F.greatest("vn", "k", F.lit({c}))',
        lambda w, c: max(_nonnull(w["vn"], w["k"], c)),
    ),
    "least": (
        lambda r: [r.choice([2, 9])],
        lambda c: f'F.least("vn", "k", F.lit({c}))',
        lambda w, c: min(_nonnull(w["vn"], w["k"], c)),
    ),
    "when": (
        lambda r: [r.randint(2, 12)],
        lambda c: (
            f'F.when(F.col("v") > {c}, "hi").when(F.col("vn").isNull(), "none")'
            '.otherwise(F.col("s"))'
        ),
        lambda w, c: "hi" if w["v"] > c else "none" if w["vn"] is None else w["s"],
    ),
    "coalesce": (
        lambda r: [],
        lambda: 'F.coalesce("vn", F.col("k") * 100, F.lit(-1))',
        lambda w: w["vn"] if w["vn"] is not None else w["k"] * 100,
    ),
    "cast": (
        lambda r: [r.randint(0, 2)],
        lambda i: [
            'F.col("v").cast("string")',
            'F.col("f").cast("string")',
            'F.regexp_extract("s", "\\\\d+", 0).cast("int")',
        ][i],
        lambda w, i: [
            lambda: str(w["v"]),
            lambda: _null(repr)(w["f"]),
            lambda: _null(lambda s: _cast_int(_regexp_extract(s, r"\d+", 0)))(w["s"]),
        ][i](),
    ),
    "isin": (
        lambda r: sorted(r.sample(range(10), 2)),
        lambda a, b: f'F.col("k").isin({a}, {b})',
        lambda w, a, b: w["k"] in (a, b),
    ),
    "between": (
        lambda r: sorted(r.sample(range(1, 20), 2)),
        lambda lo, hi: f'F.col("vn").between({lo}, {hi})',
        lambda w, lo, hi: _null(lambda x: lo <= x <= hi)(w["vn"]),
    ),
    "md5": (
        lambda r: [],
        lambda: 'F.md5("s")',
        lambda w: _null(lambda s: hashlib.md5(s.encode()).hexdigest())(w["s"]),
    ),
    "sha2": (
        lambda r: [],
        lambda: 'F.sha2("s", 256)',
        lambda w: _null(lambda s: hashlib.sha256(s.encode()).hexdigest())(w["s"]),
    ),
    "time_part": (
        lambda r: [r.choice(["year", "month", "dayofmonth", "hour", "minute", "second"])],
        lambda part: f'F.{part}("tstr")',
        lambda w, part: _null(lambda t: getattr(_time(t), PARTS[part]))(w["tstr"]),
    ),
    "date_trunc": (
        lambda r: [r.choice(["year", "month", "day", "hour", "minute"])],
        lambda unit: f'F.date_trunc("{unit}", "tstr")',
        lambda w, unit: _null(lambda t: _trunc(unit, _time(t)))(w["tstr"]),
    ),
    "to_timestamp": (
        lambda r: [],
        lambda: 'F.to_timestamp("tstr")',
        lambda w: _null(_time)(w["tstr"]),
    ),
    "unix_timestamp": (
        lambda r: [],
        lambda: 'F.unix_timestamp("tstr")',
        lambda w: _null(lambda t: int((_time(t) - EPOCH).total_seconds()))(w["tstr"]),
    ),
    "to_json": (lambda r: [], lambda: STRUCT, _json),
    "get_json_object": (
        lambda r: [r.choice(["k", "s", "vn"])],
        lambda field: f'F.get_json_object({STRUCT}, "$.{field}")',
        lambda w, field: _json_get(w, field),
    ),
}

PARTS = {
    "year": "year",
    "month": "month",
    "dayofmonth": "day",
    "hour": "hour",
    "minute": "minute",
    "second": "second",
}

# boolean expressions, usable as the stage's filter (a null drops the row, as in Spark)
FILTERS = ["like", "startswith", "contains", "isin", "between"]


def draw(rng: random.Random) -> list[list[Any]]:
    """The expressions of a ``fn`` stage, and sometimes its filter as
    ``["filter", expression]`` (first)."""
    names = rng.sample(sorted(TEMPLATES), rng.randint(3, 6))
    exprs: list[list[Any]] = [[n, *TEMPLATES[n][0](rng)] for n in names]
    if rng.random() < 0.6:
        name = rng.choice(FILTERS)
        exprs.insert(0, ["filter", [name, *TEMPLATES[name][0](rng)]])
    return exprs


def split(exprs: list[list[Any]]) -> tuple[list[Any] | None, list[list[Any]]]:
    """A stage's filter (None: none) and its output expressions."""
    where = next((e[1] for e in exprs if e[0] == "filter"), None)
    return where, [e for e in exprs if e[0] != "filter"]


def dsl(expr: list[Any]) -> str:
    """The DSL text of one expression."""
    return _template(expr[0])[1](*expr[1:])


def value(row: Row, expr: list[Any]) -> Any:
    """The reference value of one expression on a row with its base columns."""
    return _template(expr[0])[2](row, *expr[1:])


def _template(name: str) -> Template:
    from .ansi import TEMPLATES as ANSI  # drawn after these (ansi.py)
    from .fnextra import EXTRA  # drawn after those (fnextra.py)
    from .fnmore import MORE  # drawn after these (fnmore.py)
    from .newest import TEMPLATES as NEWEST  # drawn after every other (newest.py)

    if name in NEWEST:
        return NEWEST[name]
    if name in ANSI:
        return ANSI[name]
    if name in EXTRA:
        return EXTRA[name]
    return TEMPLATES[name] if name in TEMPLATES else MORE[name]
