"""The tester's own failures (tools/chaos.py, docs/CHAOS.md): an output state
it cannot read, or an exception of its own, fails the case with its seed and
reproducer and never ends a run silently; ``--from-case`` reaches one case of
a run without running the ones before it."""

from __future__ import annotations

import dataclasses
import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from chaos_lib import driver, execute
from chaos_lib.case import Stage
from chaos_lib.generate import generate

NO_KAFKA = ["source:kafka", "sink:kafka"]


def _delta_case():
    return dataclasses.replace(generate(7), stage=Stage("none"), sinks=["delta"])


def test_a_delta_log_without_a_commit_reads_as_nothing_committed(tmp_path: Path) -> None:
    """Chaos seed 1153566482: a SIGKILL inside delta-rs's create of the table
    left ``_delta_log`` with no commit (delta-rs makes the folder, writes
    ``...0.json#1``, then links it to ``...0.json``), and the restore was
    refused. No commit is no table: nothing committed, not a tester crash."""
    log = tmp_path / "delta" / "_delta_log"
    log.mkdir(parents=True)
    assert execute._read_outputs(_delta_case(), tmp_path)["delta"].empty
    (log / "00000000000000000000.json#1").write_text('{"protocol"')
    assert execute._read_outputs(_delta_case(), tmp_path)["delta"].empty


def test_a_delta_table_with_a_commit_is_read(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "delta"), pa.table({"id": [1, 2], "v": [3, 4]}))
    got = execute._read_outputs(_delta_case(), tmp_path)["delta"]
    assert sorted(got["id"]) == [1, 2]


def test_a_broken_delta_log_is_still_an_error(tmp_path: Path) -> None:
    """Only a log without any commit is "nothing committed"; a commit delta-rs
    cannot read is the tester's failure, reported, not an empty table."""
    log = tmp_path / "delta" / "_delta_log"
    log.mkdir(parents=True)
    (log / "00000000000000000000.json").write_text("not json\n")
    with pytest.raises(Exception):  # noqa: B017 - whatever delta-rs raises for it
        execute._read_outputs(_delta_case(), tmp_path)


def _raise(*_args: object) -> None:
    raise RuntimeError("reading the outputs broke")


def test_a_tester_exception_fails_the_case_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(driver, "run_case", _raise)
    summary = driver.run(2, 5, None, do_shrink=False, keep=tmp_path, without=NO_KAFKA)
    assert summary["cases"] == 2
    assert summary["mismatches"] == 2
    assert summary["tester_errors"] == summary["mismatch_seeds"]
    err = capsys.readouterr().err
    for seed in summary["mismatch_seeds"]:
        assert f"=== TESTER ERROR seed={seed} " in err
        assert f"--seed {seed} --cases 1" in err
    assert "RuntimeError: reading the outputs broke" in err
    assert "--- reproducer: " in err


def test_from_case_runs_the_case_of_that_index_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "run_case", _raise)
    master = random.Random(5)
    seeds = [master.randrange(2**31) for _ in range(40)]
    usable = [s for s in seeds if not driver._excluded(generate(s), NO_KAFKA)]
    summary = driver.run(1, 5, None, do_shrink=False, keep=tmp_path, without=NO_KAFKA, first=3)
    assert summary["cases"] == 1
    assert summary["mismatch_seeds"] == [usable[3]]


@pytest.mark.parametrize("leftover", [False, True], ids=["empty-log", "uncommitted-json"])
def test_deltasink_creates_its_table_over_a_log_without_a_commit(
    tmp_path: Path, leftover: bool
) -> None:
    """Why the tester reads such a log as nothing committed, not as a
    DeltaSink defect: it is the state of a table whose create was killed, and
    the sink's next commit (a restore's re-commit) creates the table over it."""
    from deltalake import DeltaTable

    import eddyline as ed

    table = tmp_path / "delta"
    log = table / "_delta_log"
    log.mkdir(parents=True)
    if leftover:
        (log / "00000000000000000000.json#1").write_text('{"protocol"')
    chk = ed.CheckpointConfig(str(tmp_path / "chk"), interval="50ms")
    env = ed.StreamEnvironment(2, checkpoint=chk)
    env.from_sequence(0, 100).sink_to(ed.DeltaSink(str(table))).name("sink").uid("sink")
    env.execute("over-an-empty-log")
    got = DeltaTable(str(table)).to_pyarrow_table()
    assert sorted(got.column(got.column_names[0]).to_pylist()) == list(range(100))


def test_rows_compare_nulls_as_minus_one_and_floats_as_ints() -> None:
    """An outer join's missing side comes back as NaN (float columns) from
    Parquet and as None from Kafka's JSON; both are -1 (no generated value
    is negative), and 3.0 is the row's 3."""
    import pandas as pd
    from chaos_lib.check import _rows

    parquet = pd.DataFrame({"id": [1, 2], "id_right": [float("nan"), 3.0]})
    kafka = pd.DataFrame({"id": [2, 1], "id_right": [3, None]})
    assert _rows(parquet, ["id", "id_right"]) == _rows(kafka, ["id", "id_right"])
    assert sorted(_rows(parquet, ["id", "id_right"])) == [(1, -1), (2, 3)]


def test_an_interrupted_run_still_prints_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C (or SIGTERM, which the CLI turns into the same) ends a long run
    cleanly: the finished cases are counted, the one in progress is not."""
    calls: list[int] = []

    def second_interrupts(case: object, workdir: Path) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        raise RuntimeError("a tester error, to finish the first case fast")

    monkeypatch.setattr(driver, "run_case", second_interrupts)
    summary = driver.run(5, 5, None, do_shrink=False, keep=tmp_path, without=NO_KAFKA)
    assert summary["interrupted"] is True
    assert summary["cases"] == 1 and len(summary["mismatch_seeds"]) == 1


def test_a_topic_is_read_to_the_end_of_every_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KafkaSink output is read until each partition reports its end (an empty
    one too), not until a quiet second passes: every message, no waiting."""
    import json

    from support.kafka_broker import new_topic, produce_each, tansu_broker, tansu_path

    if not tansu_path().exists():
        pytest.skip(f"no tansu broker at {tansu_path()} (.ci/run builds it)")
    with tansu_broker(tmp_path / "broker.log") as broker:
        monkeypatch.setenv("CHAOS_KAFKA", broker)
        new_topic(broker, 2, "half")
        produce_each(broker, "half", [(0, None, json.dumps({"id": i}).encode()) for i in range(50)])
        got = execute._read_topic("half")
        assert sorted(got["id"]) == list(range(50))
        new_topic(broker, 2, "empty")
        assert execute._read_topic("empty").empty


@pytest.mark.parametrize("form", ["tumbling", "session"])
def test_a_stopped_run_may_have_fired_a_window_without_an_uncommitted_late_row(
    form: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose restore was refused (a damaged checkpoint) committed a
    window that fired without a late candidate, whose late output came in a
    checkpoint that never completed: a consistent prefix, not a wrong row
    (found as chaos seed 327959985, an ``fagg`` tumbling window)."""
    from chaos_lib import reference
    from chaos_lib.check import compare, compare_partial

    from .hand import hand, rows_of

    stage = Stage("fagg", form=form, size_ms=1_000, gap_ms=1_500, late=True, exprs=[["max"]])
    case, _ = hand(stage)
    with rows_of(case):
        monkeypatch.setattr(reference, "candidates", lambda _case: {2})
        want = reference.expected(case, set())  # row 2 (k 0, ts 999) on time
        without = reference.expected(case, {2}, retry=False)["main"]  # its window without it
    assert not without.equals(want["main"])
    committed = {"parquet": without}
    assert compare_partial(case, committed, want) == []
    # a run that went to its end committed the late output too: exact, as before
    assert compare(case, committed, want) != []
    wrong = without.assign(a_max=without["a_max"] + 1)
    assert compare_partial(case, {"parquet": wrong}, want) != []


def test_the_retried_windows_of_list_aggregates_are_computed() -> None:
    """Chaos seed 500016: an ``fagg`` tumbling window with a late output, late
    candidates and ``collect_set`` (a list per window): the windows a failed
    attempt may have emitted are told apart with their lists, which pandas
    cannot hash (the tester failed with ``unhashable type: 'list'``)."""
    from chaos_lib.reference import expected

    case = generate(500016)
    assert case.stage.kind == "fagg" and case.stage.late and ["collect_set"] in case.stage.exprs
    retried = expected(case, set())["retried"]
    cells = retried["a_collect_set"].tolist()
    assert cells and all(isinstance(c, list) for c in cells)
    keys = [tuple(map(repr, row)) for row in retried.itertuples(index=False)]
    assert len(keys) == len(set(keys))  # each outcome once
