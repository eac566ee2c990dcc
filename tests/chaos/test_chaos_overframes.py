"""The newer frames of over windows in the tester (tools/chaos_lib/overframes.py,
docs/CHAOS.md): unbounded ROWS frames, RANGE frames of milliseconds, seconds
or every row so far (rows of one event time are peers with the same values),
and over windows chained after another. Their references on hand-made rows
with a tie of event time; a broken engine's output and a broken reference
failing the check; the draw comes after every older draw; real runs through
the tester under a SIGKILL and restore."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import check, overframes, overs, reference
from chaos_lib.case import Case, Stage

from .hand import hand, rows_of, run_through, small_case, with_and_without
from .test_chaos_overs import TIES

MINE = ("rows", "range", "chain")


def _stage(sql: bool, *frames: list[Any], preceding: int = 1) -> Stage:
    st = Stage("sql", form="over") if sql else Stage("over")
    st.a = preceding
    st.exprs = [["agg", "sum"], ["agg", "count"], *frames]
    return st


def _values(want: pd.DataFrame, *columns: str) -> dict[int, tuple[int, ...]]:
    return {int(r["id"]): tuple(int(r[c]) for c in columns) for _, r in want.iterrows()}


# TIES by key: 0: id 1 (ts 0, v 1), 2 (999, 6), 6 (999, 3), 5 (3100, 2);
# 1: id 3 (1000, 5), 4 (2500, 8)
RANGE_1000 = {1: (1, 1), 2: (10, 3), 6: (10, 3), 5: (2, 1), 3: (5, 1), 4: (8, 1)}
RANGE_0 = {1: (1, 1), 2: (9, 2), 6: (9, 2), 5: (2, 1), 3: (5, 1), 4: (8, 1)}
RANGE_ALL = {1: (1, 1), 2: (10, 3), 6: (10, 3), 5: (12, 4), 3: (5, 1), 4: (13, 2)}
ROWS_ALL = {1: (1, 1), 2: (7, 2), 6: (10, 3), 5: (12, 4), 3: (5, 1), 4: (13, 2)}


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_the_references_of_the_newer_frames_on_rows_with_a_tie(sql: bool) -> None:
    cases = [
        (["range", 1_000, "interval" if sql else "between"], RANGE_1000),
        (["range", 0, "current" if sql else "between"], RANGE_0),
        (["range", None, "default" if sql else "between"], RANGE_ALL),
        (["rows", None, "short"], ROWS_ALL),
    ]
    for frame, values in cases:
        _, want = hand(_stage(sql, frame), TIES)
        assert _values(want["main"], "a_sum", "a_count") == values, frame


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_chained_over_windows_add_their_own_frames(sql: bool) -> None:
    st = _stage(sql, ["chain", "sum", "range", 0], ["chain", "count", "rows", None], preceding=0)
    _, want = hand(st, TIES)
    sums = {i: (v,) for i, v in zip(TIES["id"], TIES["v"], strict=True)}
    assert _values(want["main"], "a_sum") == sums
    assert _values(want["main"], "c0_sum") == {i: (v[0],) for i, v in RANGE_0.items()}
    assert _values(want["main"], "c1_count") == {i: (v[1],) for i, v in ROWS_ALL.items()}


def _output(values: dict[int, tuple[int, ...]]) -> pd.DataFrame:
    rows = zip(TIES["id"], TIES["k"], TIES["ts"], TIES["v"], strict=True)
    return pd.DataFrame(
        [
            {"id": i, "k": k, "ts": t, "v": v, "a_sum": values[i][0], "a_count": values[i][1]}
            for i, k, t, v in rows
            if i in values
        ]
    )


def _checked(case: Case, got: pd.DataFrame, candidates: set[int] | None = None) -> list[str]:
    """The check as the driver does it: candidates no output holds were dropped."""
    with pytest.MonkeyPatch.context() as m, rows_of(case, TIES):
        m.setattr(reference, "candidates", lambda _case: set(candidates or ()))
        dropped = overs.dropped(case, {"parquet": got})
        want = reference.expected(case, dropped)
        return check.compare(case, {"parquet": got}, want)


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_a_broken_engines_range_output_is_a_mismatch(sql: bool) -> None:
    case, _ = hand(_stage(sql, ["range", 1_000, "between"]), TIES)
    assert _checked(case, _output(RANGE_1000)) == []
    # peers ordered as rows: the first of a tie misses the second
    assert "lost" in _checked(case, _output({**RANGE_1000, 2: (7, 2)}))[0]
    # a frame one millisecond short: [t - 999, t] misses row 1 from row 2's
    assert "lost" in _checked(case, _output({**RANGE_1000, 2: (9, 2), 6: (9, 2)}))[0]
    # row 2 dropped as late but still counted in its peer's frame
    kept = {i: v for i, v in RANGE_1000.items() if i != 2}
    assert "lost" in _checked(case, _output(kept), {2})[0]
    # ... and left out of it, as the engine does
    assert _checked(case, _output({**kept, 6: (4, 2)}), {2}) == []
    # a row emitted twice
    doubled = pd.concat([_output(RANGE_1000), _output({1: (1, 1)})])
    assert "extra" in _checked(case, doubled)[0]


def test_a_broken_reference_fails_the_engines_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference that runs DuckDB's RANGE frame as a ROWS frame (peers
    apart) fails the correct output, as does one running a chained window's
    ROWS frame of 0 as an unbounded one; a chained value off by one fails."""
    case, _ = hand(_stage(True, ["range", 1_000, "interval"]), TIES)
    assert _checked(case, _output(RANGE_1000)) == []
    real = overframes._range_duck
    monkeypatch.setattr(overframes, "_range_duck", lambda ms: real(ms).replace("RANGE", "ROWS"))
    assert "lost" in _checked(case, _output(RANGE_1000))[0]
    monkeypatch.undo()
    st = _stage(True, ["chain", "sum", "rows", 0], preceding=0)
    case, want = hand(st, TIES)
    got = want["main"]
    assert _checked(case, got) == []
    assert "lost" in _checked(case, got.assign(c0_sum=got["a_sum"] + 1))[0]
    real_chain = overframes.chain_sql

    def unbounded(stage: Stage, duck: bool) -> list[str]:
        return [s.replace("BETWEEN 0 ", "BETWEEN UNBOUNDED ") for s in real_chain(stage, duck)]

    monkeypatch.setattr(overframes, "chain_sql", unbounded)
    assert "lost" in _checked(case, got)[0]


def test_the_sql_text_and_the_dsl_calls() -> None:
    st = _stage(True, ["range", 2_000, "interval_short"], ["chain", "max", "rows", None])
    st.exprs.append(["spell", "window"])
    assert overs.query(st) == (
        "SELECT id, k, ts, v, sum(v) OVER w AS a_sum, count(*) OVER w AS a_count, "
        "max(v) OVER (PARTITION BY k ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND "
        "CURRENT ROW) AS c0_max FROM t "
        "WINDOW w AS (PARTITION BY k ORDER BY ts RANGE INTERVAL '2' SECOND PRECEDING)"
    )
    duck = overs.query(st, duck=True)
    assert "ORDER BY ts RANGE BETWEEN 2000 PRECEDING AND CURRENT ROW)" in duck
    assert "ORDER BY ts, id ROWS BETWEEN UNBOUNDED PRECEDING" in duck
    st = _stage(True, ["range", None, "default"])
    assert overs.query(st).endswith("OVER (PARTITION BY k ORDER BY ts) AS a_count FROM t")
    dsl = _stage(False, ["range", 500, "between"], ["chain", "sum", "range", None])
    case, _ = hand(dsl, TIES)
    text = "\n".join(overs.dsl_lines(case))
    assert 'main.key_by("k").over_range(' in text and "preceding='500ms'," in text
    assert 'out.key_by("k").over_range(F.sum("v").alias("c0_sum"), preceding=None)' in text
    assert {"over:range", "over:range:between", "over:chained"} <= set(case.features())


def test_the_newer_frames_are_drawn_after_every_older_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case with the draw is the case without it but for its over stage's
    frame entries (and the tie order a RANGE frame drops)."""
    drawn = {"over:rows_unbounded": 0, "over:range": 0, "over:chained": 0}
    for seed, case, before in with_and_without(monkeypatch, overframes, seeds=1_500):
        for name in drawn:
            drawn[name] += name in case.features()
        if overframes.is_range(case.stage):
            before.stage.exprs = [e for e in before.stage.exprs if e[0] != "order"]
        case.stage.exprs = [e for e in case.stage.exprs if e[0] not in MINE]
        assert case.to_json() == before.to_json(), seed
    assert min(drawn.values()) >= 10, drawn


def _real_case(sql: bool) -> Case:
    frame = ["range", 2_000, "interval" if sql else "between"]
    st = _stage(sql, frame, ["chain", "max", "rows", 2], ["chain", "avg", "range", None])
    st.exprs[1:1] = [["agg", "min"], ["agg", "count_v"]]
    case = small_case(sinks=["parquet", "delta"], fault={"kind": "sigkill", "kills": 1}, stage=st)
    case.sources = [dataclasses.replace(s, late_rows=4) for s in case.sources]
    return case


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_a_real_range_and_chained_over_window_matches_after_a_sigkill(
    sql: bool, tmp_path: Path
) -> None:
    """A RANGE frame and two chained windows with late candidates, killed
    with SIGKILL and restored from the latest checkpoint."""
    case = _real_case(sql)
    assert reference.candidates(case)
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) >= len(reference.main_stream(case)) - len(
        reference.candidates(case)
    )
    assert {"c0_max", "c1_avg", "a_min"} <= set(outputs["parquet"].columns)
