"""User sources in the tester (tools/chaos_lib/usersrc.py, docs/CHAOS.md): the
job script's ``ed.Source`` reads each file's rows in order from the offsets it
reports (and asks again after "nothing yet"); the draw comes after every older
draw; a source that skips a row fails its case; real cases with each
variant match after a SIGKILL or a savepoint restored at another parallelism."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import driver, usersrc
from chaos_lib import generate as generate_module
from chaos_lib.case import Case, Stage
from chaos_lib.data import SCHEMA, splits_of, write_inputs

import eddyline as ed

from .hand import rescaled, run_through, small_case, with_and_without


def _user(variant: str, files: int = 3, late_rows: int = 0) -> Case:
    """A small case whose main source is a user source of ``files`` splits."""
    case = small_case(sinks=["parquet"], fault={"kind": "none"})
    source = case.source(case.main)
    source.kind, source.variant, source.files, source.late_rows = "user", variant, files, late_rows
    return case


def _source_class(variant: str, folder: Path) -> Any:
    """The job script's ``FileRows`` (usersrc.CLASSES), made over ``folder``."""
    scope: dict[str, Any] = {"ed": ed, "os": __import__("os"), "pa": pa, "pq": pq}
    scope["SCHEMA"] = SCHEMA
    exec(usersrc.CLASSES, scope)
    return scope["FileRows"](str(folder), variant)


@pytest.mark.parametrize("variant", usersrc.VARIANTS)
def test_the_source_reads_each_file_in_order_from_its_offsets(variant: str, tmp_path: Path) -> None:
    """Read through the ``ed.Source`` methods the engine calls, 7 rows at a
    time: each split gives its file's rows in order, a stall keeps the offset."""
    case = _user(variant)
    write_inputs(case, tmp_path)
    source = _source_class(variant, tmp_path / case.main)
    splits = source.splits()
    assert len(splits) == 3
    if variant.startswith("discovery"):
        assert source.bounded and source.discovery_interval
        assert [source.split_id(s) for s in splits] == [0, 1, 2]
    stalls = 0
    for split, want in zip(splits, splits_of(case.source(case.main)), strict=True):
        offset, rows = source.initial_offset(split), []
        while (answer := source.read(split, offset, 7)) is not None:
            batch, after = answer
            if batch is None:
                assert after == offset
                stalls += 1
                continue
            assert batch.schema == SCHEMA and 0 < batch.num_rows <= 7
            rows += batch.to_pylist()
            offset = after
        assert rows == want
    assert (stalls > 0) == variant.endswith(":stall")


def test_user_sources_are_drawn_after_every_older_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with the draw is the case without it but for Parquet sources
    turned into user sources (the same files and rows). The draws after it
    (processing-time timers, late rows before group_by, over windows,
    window_time) are made no-ops on both sides."""
    users = 0
    for seed, case, before in with_and_without(
        monkeypatch,
        generate_module.usersrc,
        (
            generate_module.ptimers,
            generate_module.late_groupby,
            generate_module.overs,
            generate_module.wtime,
        ),
    ):
        for source, old in zip(case.sources, before.sources, strict=True):
            if source.kind == "user":
                users += 1
                assert old.kind == "parquet" and source.variant in usersrc.VARIANTS
                source.kind, source.variant = old.kind, old.variant
        assert case.to_json() == before.to_json(), seed
    assert 20 <= users <= 150


SKIPPING = usersrc.CLASSES.replace(
    "end = at + batch.num_rows", "end = at + batch.num_rows + (1 if at == 0 else 0)"
)


@pytest.mark.chaos
@pytest.mark.timeout(300)
def test_a_source_that_skips_a_row_fails_its_case(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A broken FileRows whose first offset skips a row of each split: the
    tester reports the rows lost."""
    assert SKIPPING != usersrc.CLASSES
    monkeypatch.setattr(usersrc, "CLASSES", SKIPPING)
    case = _user("fixed")
    case.stage = Stage("none")
    problems, _, _ = driver.check_case(case, tmp_path)
    assert problems and "3 row(s) lost" in problems[0], problems


REAL = {
    "fixed-stall-sigkill": ("fixed:stall", "sigkill", Stage("tumbling", "sum", size_ms=2_000)),
    "discovery-savepoint": ("discovery", "savepoint", Stage("session", "max", gap_ms=1_000)),
    "discovery-stall-savepoint-late": (
        "discovery:stall",
        "savepoint",
        Stage("tumbling", "count", size_ms=2_000, late=True),
    ),
    "fixed-cancel": ("fixed", "cancel", Stage("running", "sum")),
}


@pytest.mark.chaos
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", sorted(REAL))
def test_a_user_source_case_matches_after_a_fault(name: str, tmp_path: Path) -> None:
    """A user source of three splits under a SIGKILL and a restore, or a
    savepoint or cancel restored at another parallelism: the windows (exact
    only when every split keeps its own watermark: no row is late) and the
    late output match the reference."""
    variant, fault, stage = REAL[name]
    case = _user(variant, late_rows=2 if stage.late else 0)
    case.stage = stage
    case.fault = dataclasses.replace(case.fault, kind=fault, kills=1, fraction=0.4)
    if fault in ("savepoint", "cancel"):
        case = rescaled(case)
    outputs = run_through(case, tmp_path)
    assert len(outputs["parquet"]) > 0
    if stage.late:
        late = outputs["late"]
        ids = set() if late.empty else set(pc.unique(pa.array(late["id"])).to_pylist())
        assert len(ids) == len(late)  # each candidate once at most
