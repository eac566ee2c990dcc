"""Over windows and Spark's ``window_time`` in the tester
(tools/chaos_lib/overs.py, wtime.py, docs/CHAOS.md): their references on
hand-made rows, including ties of event time and dropped late rows; outputs
of a broken engine and a deliberately wrong reference failing the check; the
draws come after every older draw; real runs through the tester under a
SIGKILL and a savepoint restored at another parallelism."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import check, overs, reference
from chaos_lib import generate as generate_module
from chaos_lib.case import Case, Stage
from chaos_lib.generate import generate

from .hand import hand, rescaled, rows_of, run_through, small_case

# hand.ROWS (id k ts v) and one more row tying row 2's time:
# 1 0 0 1, 2 0 999 6, 6 0 999 3, 3 1 1000 5, 4 1 2500 8, 5 0 3100 2
TIES = {
    "id": [1, 2, 6, 3, 4, 5],
    "k": [0, 0, 0, 1, 1, 0],
    "ts": [0, 999, 999, 1_000, 2_500, 3_100],
    "v": [1, 6, 3, 5, 8, 2],
}


def _stage(sql: bool, order: list[str], preceding: int = 1) -> Stage:
    st = Stage("sql", form="over") if sql else Stage("over")
    st.a = preceding
    st.exprs = [["agg", "sum"], ["agg", "count"], ["agg", "avg"]]
    if order:
        st.exprs.append(["order", *order])
    return st


def _sums(want: dict[str, pd.DataFrame]) -> dict[int, tuple[int, int]]:
    return {int(r.id): (int(r.a_sum), int(r.a_count)) for r in want["main"].itertuples()}


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_ties_of_event_time_are_ordered_by_the_order_columns_then_id(sql: bool) -> None:
    # by ts then id: 1, 2 (v 6), 6 (v 3), 5 for key 0
    _, want = hand(_stage(sql, []), TIES)
    assert _sums(want) == {1: (1, 1), 2: (7, 2), 6: (9, 2), 5: (5, 2), 3: (5, 1), 4: (13, 2)}
    # by ts then v: 1, 6 (v 3), 2 (v 6), 5
    _, want = hand(_stage(sql, ["v"]), TIES)
    assert _sums(want) == {1: (1, 1), 6: (4, 2), 2: (9, 2), 5: (8, 2), 3: (5, 1), 4: (13, 2)}
    # no preceding row: each row alone
    _, want = hand(_stage(sql, [], preceding=0), TIES)
    assert _sums(want) == {i: (v, 1) for i, v in zip(TIES["id"], TIES["v"], strict=True)}


def _checked(case: Case, got: pd.DataFrame, candidates: set[int]) -> list[str]:
    """The check of ``got`` as the driver does it: the candidates no output
    holds were dropped as late."""
    with pytest.MonkeyPatch.context() as m, rows_of(case, TIES):
        m.setattr(reference, "candidates", lambda _case: candidates)
        dropped = overs.dropped(case, {"parquet": got})
        want = reference.expected(case, dropped)
        return check.compare(case, {"parquet": got}, want)


def _output(rows: list[tuple[int, int, int, int, int, int]]) -> pd.DataFrame:
    """(id, k, ts, v, sum, count) rows as the engine writes them (avg = sum / count)."""
    return pd.DataFrame(
        [
            {"id": i, "k": k, "ts": t, "v": v, "a_sum": s, "a_count": n, "a_avg": s / n}
            for i, k, t, v, s, n in rows
        ]
    )


GOOD = [
    (1, 0, 0, 1, 1, 1),
    (2, 0, 999, 6, 7, 2),
    (6, 0, 999, 3, 9, 2),
    (5, 0, 3_100, 2, 5, 2),
    (3, 1, 1_000, 5, 5, 1),
    (4, 1, 2_500, 8, 13, 2),
]
# row 2 dropped as late: row 6's frame is row 1 and itself
DROPPED = [
    (1, 0, 0, 1, 1, 1),
    (6, 0, 999, 3, 4, 2),
    (5, 0, 3_100, 2, 5, 2),
    (3, 1, 1_000, 5, 5, 1),
    (4, 1, 2_500, 8, 13, 2),
]


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_the_checker_takes_the_engines_output_with_or_without_dropped_rows(sql: bool) -> None:
    case, _ = hand(_stage(sql, []), TIES)
    assert _checked(case, _output(GOOD), {2}) == []
    assert _checked(case, _output(DROPPED), {2}) == []


@pytest.mark.parametrize("sql", [True, False], ids=["sql", "dsl"])
def test_a_broken_engines_output_is_a_mismatch(sql: bool) -> None:
    case, _ = hand(_stage(sql, []), TIES)
    # a dropped row still counted in the next row's frame
    kept = [r for r in GOOD if r[0] != 2]
    assert "lost" in _checked(case, _output(kept), {2})[0]
    # a row no candidate is missing (lost, not late)
    assert "1 row(s) lost" in _checked(case, _output(GOOD[:-1]), {2})[0]
    # ties by arrival order (row 6 before row 2) instead of the columns
    swapped = [*GOOD[:1], (2, 0, 999, 6, 9, 2), (6, 0, 999, 3, 4, 2), *GOOD[3:]]
    assert "lost" in _checked(case, _output(swapped), set())[0]
    # a frame one row too long
    long = [*GOOD[:3], (5, 0, 3_100, 2, 11, 3), *GOOD[4:]]
    assert "lost" in _checked(case, _output(long), set())[0]
    # a row emitted twice (after a restore)
    assert "extra" in _checked(case, _output([*GOOD, GOOD[0]]), set())[0]


def test_a_wrong_reference_fails_the_engines_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reference's tie order matters: ordering ties by ``id`` descending
    (as a reference that forgot the engine's tie rule might) fails the
    correct output, so the check sees how ties are ordered."""
    case, _ = hand(_stage(True, []), TIES)
    assert _checked(case, _output(GOOD), set()) == []
    real = overs._window

    def descending(stage: Stage, duck: bool) -> str:
        return real(stage, duck).replace("ORDER BY ts, id", "ORDER BY ts, id DESC")

    monkeypatch.setattr(overs, "_window", descending)
    assert "lost" in _checked(case, _output(GOOD), set())[0]


def test_the_sql_text_and_the_dsl_call() -> None:
    st = _stage(True, ["v"], preceding=2)
    st.exprs += [["spell", "window"], ["frame", "short"], ["where", "mod", 3, 0]]
    assert overs.query(st) == (
        "SELECT id, k, ts, v, sum(v) OVER w AS a_sum, count(*) OVER w AS a_count, "
        "avg(v) OVER w AS a_avg FROM t WHERE v % 3 <> 0 "
        "WINDOW w AS (PARTITION BY k ORDER BY ts, v ROWS 2 PRECEDING)"
    )
    assert "ORDER BY ts, v, id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW" in overs.query(st, True)
    case, _ = hand(_stage(False, ["v"]), TIES)
    text = "\n".join(overs.dsl_lines(case))
    assert "preceding=1, order_by=('v',)" in text and 'F.avg("v").alias("a_avg")' in text


def test_window_time_references_are_the_windows_end_minus_one() -> None:
    sql = Stage("sql", "sum", size_ms=1_000, form="tumble", spelling="spark", wtime=True)
    _, want = hand(sql)
    want = want["main"]
    assert "window_time(window) AS wt" in generate_module.sqlgen.query(sql)
    assert (want["wt"] == want["window_end"] - 1).all() and len(want) == 4
    session = Stage("sql", "count", gap_ms=1_000, form="session", spelling="spark", wtime=True)
    assert "window_time(session_window) AS wt" in generate_module.sqlgen.query(session)
    fagg = Stage("fagg", form="tumbling", size_ms=1_000, spelling="group_by", exprs=[["sum"]])
    fagg.wtime = True
    case, ref = hand(fagg)
    want = ref["main"]
    assert list(want.columns)[-1] == "wt"
    assert (want["wt"] == want["window_end"] - 1).all()
    # a wrong window_time (the end itself) is a mismatch
    got = want.assign(wt=want["window_end"]).drop(columns=["window_start", "window_end"])
    bounds = zip(want["window_start"], want["window_end"], strict=True)
    got.insert(1, "window", [{"start": s, "end": e} for s, e in bounds])
    with rows_of(case):
        problems = check.compare(case, {"parquet": got}, {"main": want})
    assert "lost" in problems[0]


def test_window_results_windowed_again_on_window_time() -> None:
    """Spark's ``GROUP BY window(window_time(window), ...)``: each 1 s window's
    sum lands in the 2 s window holding its end - 1 (hand.ROWS: 999 and 1999
    in [0, 2000), 2999 and 3999 in [2000, 4000))."""
    st = Stage("sql", "sum", size_ms=1_000, form="tumble", spelling="spark", wtime=True)
    st.exprs = [["regroup", "sum"], ["wtime", 2_000]]
    assert "GROUP BY window(window_time(window), '2 seconds')" in generate_module.sqlgen.query(st)
    case, want = hand(st)
    assert "window_time:chained" in case.features()
    rows = sorted(tuple(int(x) for x in r) for r in want["main"].values)
    assert rows == [(0, 2_000, 12, 2), (2_000, 4_000, 10, 2)]


def _without(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> dict[int, Case]:
    # the draws after these are no-ops on both sides (hand.with_and_without)
    newest = generate_module.LAST_DRAWS
    for module in newest[max(newest.index(m) for m in modules) + 1 :]:
        monkeypatch.setattr(module, "widen", lambda *_a, **_k: None)
    drawn = {seed: generate(seed) for seed in range(1_000)}
    for module in modules:
        monkeypatch.setattr(module, "widen", lambda *_a, **_k: None)
    return drawn


def test_over_windows_and_window_time_are_drawn_after_every_older_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case with the draws is the case without them but for the over
    stage (its sinks, state read and late candidates) and ``wtime``."""
    drawn = _without(monkeypatch, generate_module.overs, generate_module.wtime)
    over = wt = 0
    for seed, case in drawn.items():
        before = generate(seed)
        if overs.is_over(case.stage):
            over += 1
            assert not overs.is_over(before.stage)
            assert before.stage.kind in ("running", "none", "sql")
            case.stage, case.sinks, case.read_state = before.stage, before.sinks, before.read_state
            case.ops = before.ops  # a SQL view's operators get schemas
            for source, old in zip(case.sources, before.sources, strict=True):
                source.late_rows, source.late_keys = old.late_rows, old.late_keys
        if case.stage.wtime:
            wt += 1
            case.stage.wtime = False
        assert case.to_json() == before.to_json(), seed
    assert over >= 30 and wt >= 5, (over, wt)


def _over_case(sql: bool, fault: str) -> Case:
    st = _stage(sql, ["v"] if sql else [], preceding=3)
    st.exprs[1:1] = [["agg", "min"], ["agg", "max"], ["agg", "count_v"]]
    case = small_case(sinks=["parquet", "delta"], fault={"kind": fault, "kills": 1}, stage=st)
    case.sources = [dataclasses.replace(s, late_rows=4) for s in case.sources]
    return case


@pytest.mark.chaos
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("sql", "fault"), [(True, "sigkill"), (False, "sigkill"), (False, "savepoint")]
)
def test_a_real_over_window_matches_after_its_fault(sql: bool, fault: str, tmp_path: Path) -> None:
    """SQL's and the DSL's over windows with late candidates under a SIGKILL
    and restore, and a savepoint restored at another parallelism."""
    case = _over_case(sql, fault)
    case = rescaled(case) if fault == "savepoint" else case
    assert reference.candidates(case)
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) >= len(reference.main_stream(case)) - len(
        reference.candidates(case)
    )


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_a_one_subtask_run_drops_its_candidates_and_the_check_follows(tmp_path: Path) -> None:
    """At parallelism 1 the far-ahead row comes before the candidates of the
    one split: every candidate is late, dropped, and left out of the frames."""
    case = _over_case(False, "sigkill")
    case.execution = dataclasses.replace(case.execution, parallelism=1, restore_parallelism=1)
    outputs = run_through(case, tmp_path)
    assert overs.dropped(case, outputs) == reference.candidates(case)
