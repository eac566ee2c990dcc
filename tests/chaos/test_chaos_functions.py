"""The generator's function library, explode, F aggregates, with_watermark and
SQL (docs/CHAOS.md): their references on hand-made rows whose answer Spark's
documentation gives, and checks that fail on a wrong output."""

from __future__ import annotations

import dataclasses
import datetime
import random
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import fnlib, sqlgen
from chaos_lib.case import Case, Op, Stage
from chaos_lib.check import compare, compare_partial
from chaos_lib.generate import generate
from chaos_lib.reference import _apply
from chaos_lib.render import render
from chaos_lib.shrink import _smaller

from .hand import ROWS, Rows, hand


def _hand(stage: Stage, rows: Rows = ROWS) -> tuple[Case, dict[str, pd.DataFrame]]:
    return hand(stage, rows)


def _v(expr: list[object], **row: object) -> object:
    return fnlib.value(row, expr)


def test_the_function_references_follow_spark() -> None:
    """Spark's documented semantics, not DuckDB's or Python's defaults."""
    # round is HALF_UP on the decimal spelling (Python's round is half-even)
    assert _v(["round", 0], f=2.5) == 3.0 and _v(["round", 0], f=0.5) == 1.0
    assert _v(["round", 2], f=0.125) == 0.13 and _v(["round", 1], f=0.125) == 0.1
    # substring: 1-based, 0 as 1, negative from the end, clipped
    s = "hello"
    assert [
        _v(["substring", p, n], s=s) for p, n in [(1, 2), (0, 2), (-3, 2), (-10, 8), (4, 9)]
    ] == [
        "he",
        "he",
        "ll",
        "hel",
        "lo",
    ]
    assert _v(["substring", 2, 0], s=s) == "" and _v(["substring", 1, 2], s=None) is None
    # regexp_extract: "" when nothing matches, null for null
    assert _v(["regexp_extract", r"([a-z]+)(\d+)", 2], s="cD 12") == ""
    assert _v(["regexp_extract", r"([a-z]+)(\d+)", 2], s="ab12") == "12"
    assert _v(["regexp_extract", r"\d+", 0], s=None) is None
    # concat is null with a null, concat_ws and greatest/least skip nulls
    assert _v(["concat"], s=None, k=1) is None and _v(["concat"], s="a", k=1) == "a|1"
    assert _v(["concat_ws"], s=None, tstr=None) == "z"
    assert _v(["greatest", 2], vn=None, k=1) == 2 and _v(["least", 9], vn=None, k=4) == 4
    # a cast that does not convert is null; Spark trims a string before the cast
    assert _v(["cast", 2], s=" Ab") is None and _v(["cast", 2], s="cD 12 9z") == 12
    assert _v(["cast", 1], f=1.0) == "1.0" and _v(["cast", 1], f=None) is None
    # like: % and _, the whole string; null in, null out
    assert _v(["like", "_D%"], s="cD 1") is True and _v(["like", "%b%"], s=None) is None
    assert _v(["between", 2, 5], vn=5) is True and _v(["between", 2, 5], vn=None) is None
    # hashes are hex of the UTF-8 bytes; time is UTC
    assert _v(["md5"], s="") == "d41d8cd98f00b204e9800998ecf8427e"
    t = "2020-02-29 23:59:58"
    assert _v(["time_part", "dayofmonth"], tstr=t) == 29
    assert _v(["date_trunc", "month"], tstr=t) == datetime.datetime(2020, 2, 1)
    assert _v(["unix_timestamp"], tstr="1970-01-02 00:00:01") == 86_401
    # to_json leaves null fields out and keeps non-ASCII letters
    assert _v(["to_json"], k=1, s="\u00e9", vn=None) == '{"k":1,"s":"\u00e9"}'
    assert _v(["get_json_object", "vn"], k=1, s="a", vn=None) is None
    assert _v(["get_json_object", "k"], k=1, s="a", vn=None) == "1"


def test_the_base_columns_have_nulls() -> None:
    rows = [fnlib.base({"id": i, "k": i % 3, "ts": i * 1_000, "v": i % 7 + 1}) for i in range(30)]
    for column in ("s", "vn", "f", "tstr"):
        values = [r[column] for r in rows]
        assert None in values and any(v is not None for v in values), column
    assert fnlib.base({"id": 0, "k": 0, "ts": 0, "v": 1})["tstr"] == "2020-09-13 12:26:40"


def test_the_function_stage_filters_and_compares_typed_values() -> None:
    stage = Stage(
        "fn", exprs=[["filter", ["isin", 0, 9]], ["upper"], ["round", 0], ["date_trunc", "day"]]
    )
    case, want = _hand(stage)
    main = want["main"]
    assert main["id"].tolist() == [1, 2, 5]  # k in (0, 9)
    assert main["c0"].tolist() == [" AB1 9Z", " AB6", " AB2 9Z"]  # odd ids end " 9z"
    assert main["c1"].tolist() == [0, None, 0]  # round(1/8), v 6: null vn, round(2/8)
    assert compare(case, {"parquet": main.copy()}, want) == []
    # what a sink gives back: a timestamp with its zone, an int column with nulls as floats
    back = main.assign(
        c1=main["c1"].astype("float64"),
        c2=pd.to_datetime(main["c2"]).dt.tz_localize("UTC"),
    )
    assert compare(case, {"parquet": back}, want) == []
    wrong = back.assign(c0=back["c0"].where(back["id"] != 5, " Ab2 9z"))
    problems = compare(case, {"parquet": wrong}, want)
    assert len(problems) == 1 and "1 row(s) lost, 1 extra" in problems[0]


def test_the_function_script_compiles_with_every_template(tmp_path: Path) -> None:
    exprs = [[name, *fnlib.TEMPLATES[name][0](random.Random(1))] for name in fnlib.TEMPLATES]
    case = dataclasses.replace(
        generate(7), stage=Stage("fn", exprs=[["filter", ["like", "%b%"]], *exprs])
    )
    text = render(case, tmp_path)
    compile(text, "fn.py", "exec")
    assert ".filter(F.col(\"s\").like('%b%'))" in text and 'F.sha2("s", 256)' in text


def test_the_explode_reference() -> None:
    df = pd.DataFrame({"id": [1, 2], "k": [0, 1], "ts": [5, 6], "v": [3, 4]})
    out = _apply(df, Op("explode", a=3, b=1)).sort_values("id")
    assert out.values.tolist() == [
        [4, 0, 5, 3],
        [5, 0, 5, 4],
        [6, 0, 5, 5],
        [8, 1, 6, 4],
        [9, 1, 6, 5],
        [10, 1, 6, 6],
    ]


def test_the_aggregate_references() -> None:
    stage = Stage(
        "fagg",
        exprs=[["sum"], ["avg"], ["count_distinct"], ["collect_list"], ["stddev"], ["var_pop"]],
    )
    want = _hand(stage)[1]
    rows = sorted(want["main"].values.tolist(), key=lambda r: r[0])
    assert rows[0][:5] == [0, 3, 9, 3.0, 3] and rows[0][5] == [1, 2, 6]
    assert rows[1][:5] == [1, 2, 13, 6.5, 2] and rows[1][7] == 2.25
    stage = Stage("fagg", form="tumbling", size_ms=1_000, exprs=[["first"], ["stddev"]])
    _, want = _hand(stage)
    # a sample deviation of one value is null, as Spark's
    assert sorted(want["main"].values.tolist(), key=lambda r: (r[0], r[1]))[0][:5] == [
        0,
        0,
        1_000,
        2,
        0,
    ]
    assert want["main"]["a_stddev"].isna().sum() == 3


def test_a_running_aggregate_committed_twice_or_wrong_is_a_mismatch() -> None:
    case, want = _hand(Stage("fagg", exprs=[["collect_list"], ["avg"]]))
    final = want["main"]
    early = final.assign(n=1, a_collect_list=[[1], [5]], a_avg=[1.0, 5.0])
    # collect_list is compared sorted (arrival order); a key's last update has most rows
    shuffled = final.assign(a_collect_list=[list(reversed(x)) for x in final["a_collect_list"]])
    updates = pd.concat([early, shuffled])
    assert compare(case, {"parquet": updates}, want) == []
    assert compare_partial(case, {"parquet": updates}, want) == []
    doubled = pd.concat([updates, early.iloc[:1]])
    twice = compare(case, {"parquet": doubled}, want)
    assert len(twice) == 1 and "repeat a key's count" in twice[0]
    assert compare_partial(case, {"parquet": doubled}, want)
    off = final.assign(a_avg=final["a_avg"] + 1e-6)
    assert compare(case, {"upsert": off}, want)
    assert compare(case, {"upsert": final.assign(a_avg=final["a_avg"] + 1e-13)}, want) == []


@pytest.mark.parametrize(
    ("form", "size", "slide", "want"),
    [
        (
            "tumble",
            1_000,
            0,
            [(0, 0, 1_000, 7), (0, 3_000, 4_000, 2), (1, 1_000, 2_000, 5), (1, 2_000, 3_000, 8)],
        ),
        (
            "hop",
            2_000,
            1_000,
            [
                (0, -1_000, 1_000, 7),
                (0, 0, 2_000, 7),
                (0, 2_000, 4_000, 2),
                (0, 3_000, 5_000, 2),
                (1, 0, 2_000, 5),
                (1, 1_000, 3_000, 13),
                (1, 2_000, 4_000, 8),
            ],
        ),
    ],
)
def test_the_sql_window_reference(
    form: str, size: int, slide: int, want: list[tuple[int, ...]]
) -> None:
    """DuckDB has no TUMBLE/HOP: the reference groups on every window of a
    row, starts on multiples of the slide, as the DSL's windows."""
    stage = Stage("sql", agg="sum", form=form, size_ms=size, slide_ms=slide)
    assert f"{form.upper()}(TABLE t, DESCRIPTOR(ts)" in sqlgen.query(stage)
    got = _hand(stage)[1]["main"]
    rows = sorted(
        tuple(int(x) for x in r) for r in got[["k", "window_start", "window_end", "v"]].values
    )
    assert rows == want


def test_the_sql_select_reference_runs_the_same_text_in_duckdb() -> None:
    stage = Stage(
        "sql", form="select", exprs=[["where", "mod", 2, 0], ["case", 5], ["md5"], ["in", 1, 3]]
    )
    query = sqlgen.query(stage)
    assert query == (
        "SELECT id, CASE WHEN v > 5 THEN 'hi' WHEN k = 0 THEN 'zero' ELSE 'lo' END AS c0, "
        "md5(CAST(k AS STRING)) AS c1, k IN (1, 3) AS c2 FROM t WHERE v % 2 <> 0"
    )
    case, want = _hand(stage)
    got = want["main"].sort_values("id")
    assert got["id"].tolist() == [1, 3]
    assert got["c0"].tolist() == ["zero", "lo"] and got["c2"].tolist() == [False, True]
    assert got["c1"].tolist()[0] == "cfcd208495d565ef66e7dff9f98764da"  # md5("0")
    assert compare(case, {"parquet": got.iloc[1:]}, want)


def test_the_new_features_are_drawn_and_shrink(tmp_path: Path) -> None:
    seen: set[str] = set()
    for seed in range(300):
        case = generate(seed)
        features = case.features()
        seen.update(
            f
            for f in features
            if f.startswith(("stage:fn", "stage:fagg", "stage:sql", "op:explode"))
        )
        seen.update(f for f in features if f == "with_watermark")
        if case.stage.kind in ("fn", "fagg", "sql") and len(case.stage.exprs) > 1:
            smaller = [c for c in _smaller(case) if len(c.stage.exprs) < len(case.stage.exprs)]
            assert len(smaller) == len(case.stage.exprs)
        if any(s.watermark for s in case.sources):
            assert '.with_watermark("ts", "' in render(case, tmp_path)
    assert {
        "stage:fn",
        "stage:fagg:running",
        "stage:fagg:tumbling",
        "stage:fagg:sliding",
        "op:explode",
        "with_watermark",
    } <= seen
    forms = {
        "select",
        "group",
        "tumble",
        "hop",
        "session",
        "union",
        "ijoin",
        "tjoin",
        "wjoin",
        "ujoin",
        "wrjoin",
        "wrijoin",
        "closing",
        "over",
    }
    # every SQL form, among the first seeds (later draws take the place of
    # some forms in some seeds, so the rarest may come after the first 300)
    drawn = {f.split(":")[2] for f in seen if f.startswith("stage:sql")}
    for seed in range(300, 3_000):
        if drawn == forms:
            break
        case = generate(seed)
        if case.stage.kind == "sql":
            drawn.add(case.stage.form)
    assert drawn == forms


def test_a_float_on_a_rounding_boundary_matches_its_neighbour() -> None:
    """Seed 1033408623: a var_pop of 20.80859375 exactly, computed as
    20.808593749999996, rounds to 20.8085938 on one side and 20.8085937 on the
    other; the comparison pairs such rows within the tolerance."""
    case, want = _hand(Stage("fagg", form="tumbling", size_ms=1_000, exprs=[["var_pop"]]))
    main = want["main"]
    exact = main.assign(a_var_pop=[20.80859375] * len(main))
    computed = main.assign(a_var_pop=[20.808593749999996] * len(main))
    assert compare(case, {"parquet": computed}, {"main": exact}) == []
    far = main.assign(a_var_pop=[20.8086] * len(main))
    assert compare(case, {"parquet": far}, {"main": exact})


def test_a_running_sql_group_by_gets_no_kafka_sink() -> None:
    """Seed 293228250: KafkaSink is at-least-once, so after a SIGKILL a
    running update may come twice, which the running check reads as committed
    twice; like the DSL's running aggregates, a running GROUP BY gets none."""
    groups = 0
    for seed in range(400):
        case = generate(seed)
        groups += (case.stage.kind, case.stage.form) == ("sql", "group")
        if case.stage.kind in ("running", "fagg", "fn") or case.stage.form in ("group", "select"):
            assert "kafka" not in case.sinks, seed
    assert groups, "the seeds drew no running SQL GROUP BY"


def test_the_further_function_references_follow_spark() -> None:
    """``fnmore``: Spark's Murmur3 is the standard x86_32 on whole words (the
    published vectors), with each trailing byte a word of its own; a null
    hashes to the seed; the rest on rows whose answer Spark's docs give."""
    from chaos_lib import fnmore

    assert fnmore.murmur3_bytes(b"test", 0) == 0xBA6BD213 - (1 << 32)
    assert fnmore.murmur3_bytes(b"", 1) == 0x514E28B7
    assert fnmore.murmur3_bytes(b"", 0) == 0

    def more(expr: list[object], **row: object) -> object:
        return fnmore.MORE[str(expr[0])][2](row, *expr[1:])

    assert more(["hash", "s"], s=None) == 42
    assert more(["initcap"], s="cD 12 aBC") == "Cd 12 Abc"
    assert more(["lpad", 7, "xy"], s="ab") == "xyxyxab"
    assert more(["lpad", 1, "xy"], s="ab") == "a"
    assert more(["rpad", 4, "*"], s="\u00e9e") == "\u00e9e**"
    assert more(["element_at", 1], s=" Ab1 9z") == ""
    assert more(["element_at", -1], s=" Ab1 9z") == "9z"
    assert more(["element_at", 3], s="cD 1") is None
    assert more(["math", "log2"], f=0.5) == -1.0
    assert more(["math", "cbrt"], f=None) is None
    assert more(["expr", 1], vn=None) == "none"
    case = dataclasses.replace(
        generate(7), stage=Stage("fn", exprs=[["hash", "k"], ["element_at", 2]])
    )
    script = render(case, Path("/tmp/x"))
    assert 'F.hash("k")' in script and 'F.element_at(F.split("s", " "), 2)' in script


def test_explode_outer_from_json_and_ansi_mode() -> None:
    """explode_outer keeps a null array as one row with a null element; a
    ``fn`` stage in ANSI mode holds no expression that may fail its job."""
    from chaos_lib import ansi as chaos_ansi
    from chaos_lib import fnmore

    case, want = _hand(Stage("fn", exprs=[["explode_outer"], ["from_json", "vn"]]))
    rows = want["main"].values.tolist()
    # ROWS' v: 1, 6, 5, 8, 2 -> s is null for v = 8 (v % 4 == 0), vn for v = 6
    by_id: dict[int, list[object]] = {}
    for r in rows:
        by_id.setdefault(r[0], []).append(r[1:])
    assert by_id[4] == [[None, 8]]  # s null: one row, a null element; vn = 8
    assert [c0 for c0, _ in by_id[3]] == ["cD", "5", "9z"]  # "cD 5 9z" split on spaces
    assert [c0 for c0, _ in by_id[1]] == ["", "Ab1", "9z"]  # a leading empty string kept
    assert {c1 for _, c1 in by_id[3]} == {5} and by_id[2] == [["", None], ["Ab6", None]]
    assert compare(case, {"parquet": want["main"].iloc[1:]}, want)
    assert fnmore.ansi_safe([["lower"], ["filter", ["like", "%b%"]], ["cast", 0]])
    assert not fnmore.ansi_safe([["cast", 2]]) and not fnmore.ansi_safe([["element_at", 1]])
    ansi = [generate(seed) for seed in range(600)]
    ansi = [c for c in ansi if c.execution.ansi]
    # ANSI mode: a fn stage that cannot fail, or one drawn to fail (test_chaos_ansi.py)
    assert ansi and all(
        (c.stage.kind == "fn" and fnmore.ansi_safe(c.stage.exprs)) or chaos_ansi.marker(c)
        for c in ansi
    )
    assert "        ansi=True," in render(ansi[0], Path("/tmp/x"))
