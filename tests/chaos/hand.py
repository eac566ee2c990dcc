"""Hand-made rows for the tester's reference tests (tests/chaos): five main
rows whose answers the tests work out by hand, three of a second source, a
case of any stage over them, and the checks of a reference's rows."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import generate as generate_module
from chaos_lib import reference
from chaos_lib.case import Case, Stage
from chaos_lib.check import compare
from chaos_lib.generate import generate

Rows = dict[str, list[int]]

ROWS: Rows = {
    "id": [1, 2, 3, 4, 5],
    "k": [0, 0, 1, 1, 0],
    "ts": [0, 999, 1_000, 2_500, 3_100],
    "v": [1, 6, 5, 8, 2],
}
RIGHT: Rows = {"id": [11, 12, 13], "k": [0, 1, 1], "ts": [500, 900, 2_400], "v": [3, 4, 7]}


@contextlib.contextmanager
def rows_of(case: Case, rows: Rows = ROWS, right: Rows = RIGHT) -> Iterator[None]:
    """The reference reads ``rows`` as the case's main source, ``right`` as any other."""
    frames = {name: pd.DataFrame(right).astype("int64") for name in ("", case.stage.right)}
    frames[case.main] = pd.DataFrame(rows).astype("int64")
    with pytest.MonkeyPatch.context() as m:
        m.setattr(reference, "_frame", lambda _c, name: frames.get(name, frames[""]))
        yield


def hand(
    stage: Stage, rows: Rows = ROWS, *, ansi: bool = False
) -> tuple[Case, dict[str, pd.DataFrame]]:
    """A case of ``stage`` over the hand-made rows (no operators, a Parquet
    sink; ``ansi``: in ANSI mode), and its reference."""
    base = generate(7)
    case = dataclasses.replace(
        base,
        stage=stage,
        ops=[],
        union=[],
        sinks=["parquet"],
        execution=dataclasses.replace(base.execution, ansi=ansi),
    )
    with rows_of(case, rows):
        return case, reference.expected(case)


def cells(df: pd.DataFrame, columns: list[str]) -> list[tuple[int, ...]]:
    """The ``columns`` of ``df``'s rows as sorted tuples of ints, a null as -1."""
    return sorted(tuple(int(x) for x in r) for r in df[columns].fillna(-1).values.tolist())


def checked(case: Case, want: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Asserts that the checker takes the reference's main rows ``want["main"]`` as
    the Parquet sink's output and names one row of them lost; returns those rows."""
    got = want["main"]
    assert compare(case, {"parquet": got}, want) == []
    assert "1 row(s) lost" in compare(case, {"parquet": got.iloc[1:]}, want)[0]
    return got


def _no_draw(*_args: Any, **_kwargs: Any) -> None:
    """A draw's ``widen`` that draws nothing."""


def with_and_without(
    monkeypatch: pytest.MonkeyPatch, draw: Any, later: tuple[Any, ...] = (), seeds: int = 300
) -> Iterator[tuple[int, Case, Case]]:
    """For each of the first ``seeds`` seeds: the seed, its case, and its case
    without the draw of the module ``draw`` (its ``widen`` made a no-op); the draws
    of the modules ``later`` are no-ops on both sides. A test that a draw comes
    after every older one (old seeds keep their cases, docs/CHAOS.md) undoes the
    draw in the first case and compares it with the second. The newest draws
    after ``draw`` (``generate.LAST_DRAWS``; all of them for an older draw) are
    no-ops too."""
    newest = generate_module.LAST_DRAWS
    after = newest[newest.index(draw) + 1 :] if draw in newest else newest
    for module in (*later, *after):
        monkeypatch.setattr(module, "widen", _no_draw)
    drawn = {seed: generate(seed) for seed in range(seeds)}
    monkeypatch.setattr(draw, "widen", _no_draw)
    for seed, case in drawn.items():
        yield seed, case, generate(seed)


def small_case(
    base: Case | None = None,
    *,
    sinks: list[str],
    fault: dict[str, Any],
    execution: dict[str, Any] | None = None,
    **changes: Any,
) -> Case:
    """A case for a real run of a new draw through the tester: ``base`` (by
    default ``generate(472)``: an Arrow source of about 1,200 rows, three
    subtasks) without its other operators and unions, the given sinks and
    fault, the default runner, no ANSI mode or recompute recovery, and batches
    of 50 rows at 0.4 s each, so that the run (about 3 s) outlasts its fault's
    checkpoints even on a loaded machine with checkpoints on S3. ``changes``
    replace the case's other fields (``ops``, ``stage``...); only the main
    source and the stage's second one stay, and no state is read back unless
    ``changes`` say so (the base's ``read_state`` was drawn for its own stage)."""
    base = base if base is not None else generate(472)
    settings = {"workers": 0, "ansi": False, "recompute": False, "sleep_s": 0.4, "batch_size": 50}
    case = dataclasses.replace(
        base,
        **{"ops": [], "union": [], "read_state": False, **changes},
        sinks=sinks,
        execution=dataclasses.replace(base.execution, **{**settings, **(execution or {})}),
        fault=dataclasses.replace(base.fault, **fault),
    )
    case.sources = [s for s in case.sources if s.name in (case.main, case.stage.right)]
    return case


def rescaled(case: Case) -> Case:
    """``case`` restored (after its savepoint or cancel) at another parallelism."""
    ex = case.execution
    case.execution = dataclasses.replace(ex, restore_parallelism=1 + ex.parallelism % 4)
    return case


def run_through(case: Case, workdir: Path) -> dict[str, pd.DataFrame]:
    """Runs ``case`` through the tester in ``workdir``: it matches the
    reference and its fault fired (else the run proves nothing); returns its
    committed outputs."""
    from chaos_lib import driver
    from chaos_lib.execute import _read_outputs

    problems, fired, _ = driver.check_case(case, workdir)
    assert problems == [], problems
    assert fired, "the fault did not fire: the run proves nothing"
    return _read_outputs(case, workdir / "out")
