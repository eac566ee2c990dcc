"""Processing-time timers in the tester (tools/chaos_lib/ptimers.py,
docs/CHAOS.md): the draw comes after every older draw; a function whose
timers move the pending amounts twice fails its case; real cases match
after a SIGKILL or a savepoint restored at another parallelism, and their
processing-time timers fired."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import driver, ptimers
from chaos_lib import generate as generate_module
from chaos_lib.case import Case, Stage
from chaos_lib.generate import generate

import eddyline as ed

from .hand import rescaled, run_through, small_case, with_and_without


def test_processing_time_timers_are_drawn_after_every_older_draw(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A case with the draw is the case without it but for the process
    stage's spelling and delay. The draws after it (late rows before
    group_by, over windows, window_time) are made no-ops on both sides."""
    changed = 0
    for seed, case, before in with_and_without(
        monkeypatch,
        generate_module.ptimers,
        (generate_module.late_groupby, generate_module.overs, generate_module.wtime),
    ):
        if case.stage.spelling == "ptimers":
            changed += 1
            assert case.stage.kind in ("process", "coprocess") and case.stage.b in (0, 5, 50)
            case.stage.spelling, case.stage.b = before.stage.spelling, before.stage.b
        assert case.to_json() == before.to_json(), seed
    assert 5 <= changed <= 60


def _case(kind: str, fault: str, delay: int = 5) -> Case:
    base = generate(472)
    right = ""
    if kind == "coprocess":
        for seed in range(1_000):
            other = generate(seed)
            if len(other.sources) == 2 and other.sources[1].kind in ("arrow", "collection"):
                base = dataclasses.replace(base, sources=[base.sources[0], other.sources[1]])
                right = other.sources[1].name
                break
    stage = Stage(kind, size_ms=2_000, right=right, spelling="ptimers", b=delay)
    case = small_case(base, sinks=["parquet"], fault={"kind": fault, "kills": 1}, stage=stage)
    case.read_state = True
    return rescaled(case) if fault in ("savepoint", "cancel") else case


MOVED_TWICE = ptimers.CLASSES.replace("                pending.clear()\n", "")


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_timers_that_move_the_pending_amounts_twice_fail_the_case(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert MOVED_TWICE != ptimers.CLASSES
    monkeypatch.setattr(ptimers, "CLASSES", MOVED_TWICE)
    problems, _, _ = driver.check_case(_case("process", "none", delay=0), tmp_path)
    assert problems and "parquet" in problems[0] and "lost" in problems[0], problems


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("kind", "fault"), [("process", "sigkill"), ("coprocess", "savepoint"), ("process", "cancel")]
)
def test_a_case_with_processing_time_timers_matches_after_a_fault(
    kind: str, fault: str, tmp_path: Path
) -> None:
    """The windows, and the state read back (``read_state``), match; the
    processing-time timers fired (the keys' ``flushes``)."""
    case = _case(kind, fault)
    run_through(case, tmp_path)
    state = ed.read_state(str(tmp_path / "chk"), kind).to_pylist()
    assert sum(row.get("flushes") or 0 for row in state) > 0, state[:3]
