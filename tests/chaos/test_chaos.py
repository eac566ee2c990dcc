"""The randomized differential tester (tools/chaos.py, docs/CHAOS.md) in CI.

``test_random_cases_match_the_reference`` runs a fixed number of random cases
from a fresh seed each run (printed; ``EDDYLINE_FAULT_SEED`` pins it), so CI
explores; a mismatch fails it with the seed, the reproducer and a shrunk case.
The other tests show the checker and the reference can fail: a tester whose
comparison cannot fail would pass every engine bug unseen.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import driver
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare
from chaos_lib.generate import generate
from chaos_lib.reference import expected, main_stream, retried

CASES = 40
MINUTES = 3.0
REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.json"))


@dataclasses.dataclass(frozen=True)
class OpenDefect:
    """An engine defect the tester found that is not fixed yet: its regression
    cases carry a strict xfail, and the random run skips the feature
    combinations that show it (else CI would fail on it most runs and hide
    everything else). Delete the entry with the fix: the strict xfail fails
    until then, so the two cannot drift apart."""

    reason: str
    cases: tuple[str, ...]
    without: tuple[str, ...]
    test: str = ""
    """A deterministic test (strict xfail) that shows it, where no case JSON
    fails every run (an approximation that lands outside only sometimes)."""


OPEN_DEFECTS: list[OpenDefect] = []


@pytest.mark.chaos
@pytest.mark.timeout(600)
def test_random_cases_match_the_reference(seed: int, tmp_path: Path) -> None:
    without = [combo for defect in OPEN_DEFECTS for combo in defect.without]
    print(f"skipping the combinations of open defects: {without}")
    summary = driver.run(CASES, seed, MINUTES, keep=tmp_path, without=without)
    print(json.dumps(summary, sort_keys=True))
    assert summary["cases"] >= 1
    assert summary["mismatches"] == 0, (
        f"chaos seed {seed}: mismatching case seeds {summary['mismatch_seeds']} "
        f"(rerun one with: python tools/chaos.py --seed <case seed> --cases 1)"
    )


def test_every_open_defect_has_its_regression_cases() -> None:
    stems = {p.stem for p in REGRESSIONS}
    for defect in OPEN_DEFECTS:
        assert (defect.cases or defect.test) and set(defect.cases) <= stems, defect.cases
        if defect.test:
            path, name = defect.test.split("::")
            source = (Path(__file__).parents[2] / path).read_text()
            assert f"def {name}(" in source, defect.test


def _regression(path: Path) -> object:
    reason = next((d.reason for d in OPEN_DEFECTS if path.stem in d.cases), None)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(path, id=path.stem, marks=marks)


@pytest.mark.chaos
@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", [_regression(p) for p in REGRESSIONS])
def test_a_case_that_once_failed_matches_the_reference(path: Path, tmp_path: Path) -> None:
    """Every mismatch the tester found is kept as a case (a shrunk one where
    shrinking worked), rerun here with its fault: a failing seed becomes a
    regression test (docs/TESTING.md, "Seeds")."""
    case = Case.from_json(path.read_text())
    if driver.uses_kafka(case) and not driver.kafka_ready():
        pytest.skip("a Kafka case and no tansu broker (.ci/run builds it)")
    # A fault lands at a moment of the run; on a loaded machine the job may
    # end before it (the run then reports that it was not killed). Such a
    # run proves nothing either way, so it is run again.
    for attempt in range(3):
        problems, fired, _ = driver.check_case(case, tmp_path / f"run-{attempt}")
        if fired:
            break
    assert fired, f"{path.name}: the fault did not fire in 3 runs, the case proves nothing"
    assert problems == [], f"{path.name}: {problems}"


def _case(stage: Stage) -> Case:
    case = generate(7)
    return dataclasses.replace(case, stage=stage, sinks=["parquet"])


@pytest.mark.parametrize(
    "stage",
    [
        Stage("none"),
        Stage("tumbling", "sum", size_ms=2_000),
        Stage("sliding", "count", size_ms=4_000, slide_ms=2_000),
        Stage("session", "max", gap_ms=1_000),
    ],
    ids=lambda s: s.kind,
)
def test_a_lost_or_duplicated_row_is_a_mismatch(stage: Stage) -> None:
    case = _case(stage)
    want = expected(case)
    main = want["main"]
    assert len(main) > 1
    assert compare(case, {"parquet": main.copy()}, want) == []
    lost = compare(case, {"parquet": main.iloc[1:]}, want)
    assert len(lost) == 1 and "1 row(s) lost, 0 extra" in lost[0]
    doubled = compare(case, {"parquet": pd.concat([main, main.iloc[:1]])}, want)
    assert len(doubled) == 1 and "0 row(s) lost, 1 extra" in doubled[0]


def test_a_running_update_committed_twice_is_a_mismatch() -> None:
    case = _case(Stage("running", "count"))
    want = expected(case)
    final = want["main"]
    assert compare(case, {"upsert": final.copy(), "parquet": final.copy()}, want) == []
    twice = pd.concat([final, final.iloc[:1]])
    problems = compare(case, {"parquet": twice}, want)
    assert len(problems) == 1 and "committed twice" in problems[0]
    short = final.assign(count=final["count"] - 1)
    assert len(compare(case, {"upsert": short}, want)) == 1


def test_only_a_late_candidate_may_be_late() -> None:
    """A row the run's late output holds must be a late candidate (placed after
    a far-ahead row of its split) and missing from its window; any other row
    there is a mismatch."""
    case = _case(Stage("tumbling", "sum", size_ms=2_000, late=True))
    source = case.source(case.main)
    source.late_rows = 3
    from chaos_lib.reference import candidates

    late_ids = sorted(candidates(case))
    assert len(late_ids) == 3 * source.files
    on_time = expected(case)
    assert on_time["late"].empty
    chosen = set(late_ids[:2])
    want = expected(case, chosen)
    assert sorted(want["late"]["id"]) == sorted(chosen)
    assert want["main"]["v"].sum() == on_time["main"]["v"].sum() - want["late"]["v"].sum()
    good = {"parquet": want["main"], "late": want["late"]}
    assert compare(case, good, want) == []
    # a late row counted in its window too, or an on-time row sent to the late output
    assert compare(case, {"parquet": on_time["main"], "late": want["late"]}, want) != []
    # id 0, the main source's first row, is on time by construction: never expected late
    first = main_stream(case).iloc[:1]
    assert int(first["id"].iloc[0]) == 0 and 0 not in late_ids
    wrong = expected(case, {0})
    assert wrong["late"].empty
    problems = compare(case, {"parquet": on_time["main"], "late": first}, wrong)
    assert problems == [
        "late: 0 row(s) lost, 1 extra (of 0 expected); lost e.g. [], extra e.g. "
        f"{[tuple(int(x) for x in first[sorted(first.columns)].iloc[0])]}"
    ]


@pytest.mark.parametrize(
    "stage",
    [
        Stage("tumbling", "sum", size_ms=2_000, late=True),
        Stage("session", "sum", gap_ms=1_000, late=True),
    ],
    ids=lambda s: s.kind,
)
def test_an_at_least_once_sink_may_hold_a_failed_attempts_window(stage: Stage) -> None:
    """Chaos seed 1829711827: whether a late candidate is late depends on the
    other splits' watermark, so an attempt that failed may have fired a window
    without it (or with one found late later). Its output is gone from the
    exactly-once sinks but not from KafkaSink (at-least-once, docs/API.md):
    that window's other value is allowed there, and only there; any other
    value is still a mismatch."""
    case = dataclasses.replace(_case(stage), sinks=["parquet", "kafka"])
    case.fault.kind = "exception"
    source = case.source(case.main)
    source.late_rows, source.late_keys = 3, stage.kind == "session"
    from chaos_lib.reference import candidates

    late_ids = sorted(candidates(case))
    want = expected(case, set(late_ids[1:]))  # committed: the first candidate on time
    main = want["main"]
    # the failed attempt: the first candidate late, or the second on time
    seen = 0
    for first in (expected(case, set(late_ids))["main"], expected(case, set(late_ids[2:]))["main"]):
        retried = pd.concat([first, main, main]).drop_duplicates(keep=False)
        seen += len(retried)
        got = pd.concat([retried, main], ignore_index=True)
        assert compare(case, {"kafka": got, "late": want["late"]}, want) == []
        problems = compare(case, {"parquet": got, "late": want["late"]}, want)
        assert problems == [] if retried.empty else problems[0].startswith("parquet: 0 row(s) lost")
    assert seen >= 1
    col = main.columns[-1]
    wrong = main.iloc[:1].assign(**{col: main[col].iloc[0] + 1_000})
    problems = compare(case, {"kafka": pd.concat([main, wrong]), "late": want["late"]}, want)
    assert len(problems) == 1 and problems[0].startswith("kafka: 0 row(s) lost, 1 extra")


def test_the_window_reference_on_a_hand_made_example() -> None:
    """Rows exactly a gap apart start a new session; a sliding window holds a
    row in size/slide windows, starting before 0 too (docs/API.md)."""
    from chaos_lib import reference

    df = pd.DataFrame(
        {"id": [1, 2, 3, 4], "k": [0, 0, 0, 1], "ts": [0, 999, 1_999, 500], "v": [1, 2, 3, 4]}
    )
    sessions = reference._sessions(df, 1_000)
    assert sessions.groupby(["k", "window_start", "window_end"])["v"].sum().to_dict() == {
        (0, 0, 1_999): 3,
        (0, 1_999, 2_999): 3,
        (1, 500, 1_500): 4,
    }
    sliding = reference._windows(df, 2_000, 1_000)
    assert sorted(zip(sliding["id"], sliding["window_start"], strict=True)) == [
        (1, -1_000),
        (1, 0),
        (2, -1_000),
        (2, 0),
        (3, 0),
        (3, 1_000),
        (4, -1_000),
        (4, 0),
    ]
    assert (sliding["window_end"] - sliding["window_start"] == 2_000).all()


def test_a_seed_gives_one_case_whose_script_compiles(tmp_path: Path) -> None:
    """A seed alone reproduces its case (the JSON round trips), and every rendered
    job script is valid Python, whatever was drawn."""
    from chaos_lib.render import render

    kinds, sources = set(), set()
    for seed in range(200):
        case = generate(seed)
        text = case.to_json()
        assert generate(seed).to_json() == text
        assert Case.from_json(text).to_json() == text
        compile(render(case, tmp_path), f"case-{seed}.py", "exec")
        kinds.add(case.stage.kind)
        sources.update(s.kind for s in case.sources)
    assert {"parquet", "kafka", "user"} <= sources
    assert kinds == {
        "none",
        "running",
        "tumbling",
        "sliding",
        "session",
        "ijoin",
        "wjoin",
        "ujoin",
        "process",
        "coprocess",
        "comap",
        "tjoin",
        "fn",
        "fagg",
        "sql",
        "over",
    }


def _hand(stage: Stage, left: dict[str, list[int]], right: dict[str, list[int]] | None = None):
    """The reference of ``stage`` over hand-made rows (no ops, no union)."""
    from chaos_lib import reference

    case = dataclasses.replace(_case(stage), ops=[], union=[])
    frames = {case.main: pd.DataFrame(left), stage.right: pd.DataFrame(right or left)}
    with pytest.MonkeyPatch.context() as m:
        m.setattr(reference, "_frame", lambda _c, name: frames[name].astype("int64"))
        return case, expected(case)["main"]


def _sorted_rows(df: pd.DataFrame, columns: list[str]) -> list[tuple[int, ...]]:
    return sorted(tuple(-1 if pd.isna(x) else int(x) for x in r) for r in df[columns].values)


def test_the_new_references_on_hand_made_examples() -> None:
    """Process-function windows (timers fire per key in time order), a
    temporal join (the newest version at or before, inclusive), an outer
    interval join (unmatched rows with nulls) and a session window join
    (sessions formed from both sides) on rows whose answer is known."""
    left = {"id": [1, 2, 3, 4], "k": [0, 0, 0, 1], "ts": [0, 999, 2_500, 1_000], "v": [1, 2, 3, 4]}
    right = {"id": [11, 12, 13], "k": [0, 0, 1], "ts": [500, 2_500, 5_000], "v": [5, 6, 7]}
    _, got = _hand(Stage("process", size_ms=1_000), left)
    cols = ["k", "window_start", "window_end", "v", "n", "fired"]
    assert _sorted_rows(got, cols) == [
        (0, 0, 1_000, 3, 2, 1),
        (0, 2_000, 3_000, 3, 1, 2),
        (1, 1_000, 2_000, 4, 1, 1),
    ]
    _, got = _hand(Stage("coprocess", size_ms=1_000, right="s9"), left, right)
    assert _sorted_rows(got, cols) == [
        (0, 0, 1_000, 3, 1, 1),
        (0, 2_000, 3_000, 3, 1, 2),
        (1, 1_000, 2_000, 4, 0, 1),
        (1, 5_000, 6_000, 0, 1, 2),
    ]
    joined = ["id", "id_right"]
    _, got = _hand(Stage("tjoin", how="left", right="s9"), left, right)
    assert _sorted_rows(got, joined) == [(1, -1), (2, 11), (3, 12), (4, -1)]
    _, got = _hand(Stage("tjoin", how="inner", right="s9"), left, right)
    assert _sorted_rows(got, joined) == [(2, 11), (3, 12)]
    stage = Stage("ijoin", right="s9", lower_ms=0, upper_ms=500, how="outer")
    _, got = _hand(stage, left, right)
    assert _sorted_rows(got, joined) == [(-1, 13), (1, 11), (2, -1), (3, 12), (4, -1)]
    stage = Stage("wjoin", right="s9", gap_ms=600)
    _, got = _hand(stage, left, right)
    assert _sorted_rows(got, [*joined, "window_start", "window_end"]) == [
        (1, 11, 0, 1_599),
        (2, 11, 0, 1_599),
        (3, 12, 2_500, 3_100),
    ]


def test_a_refused_restore_may_lose_rows_but_not_commit_twice() -> None:
    from chaos_lib.check import compare_partial

    case = _case(Stage("tumbling", "sum", size_ms=2_000))
    want = expected(case)
    main = want["main"]
    assert compare_partial(case, {"parquet": main.iloc[3:]}, want) == []
    twice = compare_partial(case, {"parquet": pd.concat([main, main.iloc[:1]])}, want)
    assert len(twice) == 1 and "1 row(s) committed" in twice[0]


def test_the_loop_reference() -> None:
    from chaos_lib.case import Op
    from chaos_lib.reference import _apply

    df = pd.DataFrame({"id": [1, 2, 3], "k": [0, 0, 0], "ts": [0, 0, 0], "v": [1, 9, 20]})
    assert _apply(df, Op("loop", a=3, b=10))["v"].tolist() == [10, 12, 20]


def test_a_sliding_window_count_outside_its_bounds_is_a_mismatch() -> None:
    """Late candidates before a sliding window: a candidate some of whose
    windows were over counts in its last window at least; a count above
    every row of the window, or a window emitted twice, is a mismatch."""
    case = _case(Stage("sliding", "count", size_ms=4_000, slide_ms=2_000, late=True))
    source = case.source(case.main)
    source.late_rows = 2
    from chaos_lib.reference import candidates

    maybe = sorted(candidates(case))
    want = expected(case, {maybe[0]})
    bounds = want["bounds"]
    assert (bounds["lo"] < bounds["hi"]).any()
    at_hi = bounds.rename(columns={"hi": "count"})[["k", "window_start", "window_end", "count"]]
    at_lo = bounds.rename(columns={"lo": "count"})[["k", "window_start", "window_end", "count"]]
    at_lo = at_lo[at_lo["count"] > 0]
    assert compare(case, {"parquet": at_hi}, want) == []
    assert compare(case, {"parquet": at_lo}, want) == []
    over = at_hi.assign(count=at_hi["count"] + (at_hi.index == 0))
    assert "outside their bounds" in compare(case, {"parquet": over}, want)[0]
    twice = pd.concat([at_hi, at_hi.iloc[:1]])
    assert "emitted twice" in compare(case, {"parquet": twice}, want)[0]
    # the first candidate's last window always counts it: one less is a mismatch
    first = main_stream(case).set_index("id").loc[maybe[1]]
    last = (first["k"], first["ts"] - first["ts"] % 2_000)
    row = (at_lo["k"] == last[0]) & (at_lo["window_start"] == last[1])
    under = at_lo.assign(count=at_lo["count"] - row.astype("int64"))
    assert "outside their bounds" in compare(case, {"parquet": under}, want)[0]


def test_kafka_may_hold_a_failed_attempts_sliding_count() -> None:
    """As for tumbling windows (chaos seed 1829711827): after a failure,
    KafkaSink may hold a sliding window's count from the attempt that failed,
    which found other candidates late; a count no choice of late candidates
    gives, or a repeat in an exactly-once sink, is still a mismatch."""
    case = _case(Stage("sliding", "count", size_ms=4_000, slide_ms=2_000, late=True))
    case.fault.kind = "exception"
    case.source(case.main).late_rows = 2
    from chaos_lib.reference import candidates

    maybe = sorted(candidates(case))
    want = expected(case, set(maybe))  # committed: every candidate late
    bounds = want["bounds"]
    cols = ["k", "window_start", "window_end", "count"]
    committed = bounds.rename(columns={"hi": "count"})[cols]
    committed = committed[committed["count"] > 0]
    # the failed attempt found them on time: the windows that count them
    failed = bounds[bounds["hi_any"] > bounds["hi"]].rename(columns={"hi_any": "count"})[cols]
    assert len(failed) >= 1
    got = pd.concat([committed, failed], ignore_index=True)
    assert compare(case, {"kafka": got}, want) == []
    assert "emitted twice" in compare(case, {"parquet": got}, want)[0]
    over = pd.concat([committed, failed.assign(count=failed["count"] + 1)], ignore_index=True)
    assert compare(case, {"kafka": over}, want) != []


def test_session_late_candidates_have_keys_of_their_own() -> None:
    """Before a session window a late candidate has a key no other row has:
    its session is the candidate alone whether or not it came late, so the
    batch sessions of every row but the late output's are exact (a candidate
    sharing a key could bridge, or miss, a session that had already fired).
    One in the late output must not be in a session too, and an on-time one
    is a session of its own."""
    case = _case(Stage("session", "count", gap_ms=1_000, late=True))
    source = case.source(case.main)
    source.late_rows, source.late_keys = 3, True
    from chaos_lib.reference import candidates

    maybe = candidates(case)
    rows = main_stream(case)
    keys = rows[rows["id"].isin(maybe)]["k"]
    assert len(maybe) == 3 * source.files and keys.is_unique
    assert not rows[~rows["id"].isin(maybe)]["k"].isin(keys).any()
    late = min(maybe)
    want = expected(case, {late})
    assert list(want["late"]["id"]) == [late]
    sessions = want["main"]
    alone = sessions[sessions["k"].isin(keys)]
    assert len(alone) == len(maybe) - 1 and (alone["count"] == 1).all()
    good = {"parquet": sessions, "late": want["late"]}
    assert compare(case, good, want) == []
    # the late candidate counted in a session of its own as well
    both = expected(case)["main"]
    problems = compare(case, {"parquet": both, "late": want["late"]}, want)
    assert problems and "0 row(s) lost, 1 extra" in problems[0]


def test_session_late_candidates_are_drawn() -> None:
    drawn = [generate(seed) for seed in range(400)]
    assert any(
        c.stage.kind == "session" and any(s.late_rows and s.late_keys for s in c.sources)
        for c in drawn
    )
    for case in drawn:
        for source in case.sources:
            session = case.stage.kind == "session" or case.stage.form == "session"
            assert not source.late_keys or session


def test_the_main_event_time_can_be_assigned_behind_python_operators(tmp_path: Path) -> None:
    """``assign_after``: the main source's assignment behind the slow ``map_batches``
    and the first ops (docs/DESIGN.md "Event time per split"); a saved case without the
    field assigns at the source, as before."""
    from chaos_lib.render import render

    case = next(
        c
        for c in map(generate, range(1_000))
        if c.assign_after >= 1 and len(c.ops) > c.assign_after
    )
    lines = render(case, tmp_path).splitlines()
    stamp = next(i for i, line in enumerate(lines) if f'.name("{case.main}_ts")' in line)
    ops = [
        next(i for i, line in enumerate(lines) if f'"op{n}_' in line) for n in range(len(case.ops))
    ]
    slow = next(i for i, line in enumerate(lines) if '.name("slow")' in line)
    assert slow < stamp and all(at < stamp for at in ops[: case.assign_after])
    assert all(at > stamp for at in ops[case.assign_after :])
    raw = json.loads(case.to_json())
    del raw["assign_after"]
    assert Case.from_json(json.dumps(raw)).assign_after == -1


def test_no_retried_windows_when_the_candidates_are_filtered_out() -> None:
    """Seed 1849218164: the late candidates of a session stage with a late output
    were all filtered out before the window, and the reference of what a failed
    attempt may emit (``retried``) failed the case instead of holding no rows."""
    case = generate(1849218164)
    assert case.stage.kind == "session" and case.stage.late
    assert retried(case, set()).empty
