"""Yet more of the function library in the generator, drawn after every older
draw (generate.py): trimming one side, ``ascii``, ``reverse``, ``repeat``,
``sha1``, ``nullif``, ``endswith``, ``rlike``, ``size`` and ``array_contains``
of a ``split``, and the date parts and formats of a timestamp string. Each as
the DSL text and a plain Python reference to Spark's documented semantics
(checked against PySpark itself on the base columns' kinds of values: a
leading space, an accented letter, an empty string, null).

``size`` of a null array is -1 in Spark's default mode and null in its ANSI
mode (``spark.sql.legacy.sizeOfNull`` applies only without ANSI): the draw
records which mode the case runs in.
"""

from __future__ import annotations

import datetime
import hashlib
import random
import re

from .case import Case
from .fnlib import Template, _null

FORMATS = {"yyyy/MM/dd HH": "%Y/%m/%d %H", "HH:mm": "%H:%M", "MM-dd": "%m-%d"}
"""The ``date_format`` patterns drawn, with their ``strftime`` equals."""


def _when(tstr: str) -> datetime.datetime:
    return datetime.datetime.strptime(tstr, "%Y-%m-%d %H:%M:%S")


def _size(s: str | None, ansi: int) -> int | None:
    if s is None:
        return None if ansi else -1
    return len(s.split(" "))  # Java's split as Spark calls it: every part kept


EXTRA: dict[str, Template] = {
    "ltrim": (
        lambda r: [],
        lambda: 'F.ltrim("s")',
        lambda w: _null(lambda s: s.lstrip(" "))(w["s"]),
    ),
    "rtrim": (
        lambda r: [],
        lambda: 'F.rtrim("s")',
        lambda w: _null(lambda s: s.rstrip(" "))(w["s"]),
    ),
    "ascii": (
        lambda r: [],
        lambda: 'F.ascii("s")',
        lambda w: _null(lambda s: ord(s[0]) if s else 0)(w["s"]),
    ),
    "reverse": (lambda r: [], lambda: 'F.reverse("s")', lambda w: _null(lambda s: s[::-1])(w["s"])),
    "repeat": (
        lambda r: [r.randint(0, 3)],
        lambda n: f'F.repeat("s", {n})',
        lambda w, n: _null(lambda s: s * n)(w["s"]),
    ),
    "sha1": (
        lambda r: [],
        lambda: 'F.sha1(F.col("s"))',
        lambda w: _null(lambda s: hashlib.sha1(s.encode()).hexdigest())(w["s"]),
    ),
    "nullif": (
        lambda r: [r.choice([1, 2, 4])],
        lambda c: f'F.nullif("vn", F.lit({c}))',
        lambda w, c: None if w["vn"] is None or w["vn"] == c else w["vn"],
    ),
    "endswith": (
        lambda r: [r.choice(["9z", "1", "e"])],
        lambda p: f'F.col("s").endswith({p!r})',
        lambda w, p: _null(lambda s: s.endswith(p))(w["s"]),
    ),
    "rlike": (
        lambda r: [r.choice(["[0-9]+$", "^cD", r"\s"])],
        lambda pat: f'F.col("s").rlike({pat!r})',
        lambda w, pat: _null(lambda s: re.search(pat, s) is not None)(w["s"]),
    ),
    "size": (
        lambda r: [0],  # the mode: set by ``widen`` once the case's is known
        lambda ansi: 'F.size(F.split("s", " "))',
        lambda w, ansi: _size(w["s"], ansi),
    ),
    "array_contains": (
        lambda r: [r.choice(["9z", "Ab4", ""])],
        lambda p: f'F.array_contains(F.split("s", " "), {p!r})',
        lambda w, p: _null(lambda s: p in s.split(" "))(w["s"]),
    ),
    "dayofweek": (
        lambda r: [],
        lambda: 'F.dayofweek("tstr")',
        lambda w: _null(lambda t: _when(t).isoweekday() % 7 + 1)(w["tstr"]),
    ),
    "dayofmonth": (
        lambda r: [],
        lambda: 'F.dayofmonth("tstr")',
        lambda w: _null(lambda t: _when(t).day)(w["tstr"]),
    ),
    "dayofyear": (
        lambda r: [],
        lambda: 'F.dayofyear("tstr")',
        lambda w: _null(lambda t: _when(t).timetuple().tm_yday)(w["tstr"]),
    ),
    "quarter": (
        lambda r: [],
        lambda: 'F.quarter("tstr")',
        lambda w: _null(lambda t: (_when(t).month - 1) // 3 + 1)(w["tstr"]),
    ),
    "to_date": (
        lambda r: [],
        lambda: 'F.date_format(F.to_date("tstr"), "yyyy-MM-dd")',
        lambda w: _null(lambda t: t[:10])(w["tstr"]),
    ),
    "date_format": (
        lambda r: [r.choice(sorted(FORMATS))],
        lambda fmt: f'F.date_format("tstr", {fmt!r})',
        lambda w, fmt: _null(lambda t: _when(t).strftime(FORMATS[fmt]))(w["tstr"]),
    ),
}


def widen(rng: random.Random, case: Case) -> None:
    """Adds one or two of these expressions to a ``fn`` stage's (half the stages)."""
    pick = rng.random()
    if case.stage.kind != "fn" or pick >= 0.5:
        return
    exprs = case.stage.exprs
    # before the others (after the filter): render.py puts the first half of the
    # expressions in with_columns, and a generator (explode_outer) drawn before
    # must stay in the select half, where alone it may be
    at = next((i for i, e in enumerate(exprs) if e[0] != "filter"), len(exprs))
    for name in rng.sample(sorted(EXTRA), rng.randint(1, 2)):
        params = EXTRA[name][0](rng)
        if name == "size":
            params = [int(case.execution.ansi)]
        exprs.insert(at, [name, *params])
