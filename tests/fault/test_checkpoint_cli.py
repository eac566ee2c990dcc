"""``eddyline checkpoints DIR`` lists and inspects the checkpoints of a real job."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import eddyline as ed
from eddyline.client.cli import main
from support.faults import CheckpointGatedSequence, completed_checkpoints


@pytest.fixture
def finished(tmp_path: Path) -> tuple[Path, ed.JobResult]:
    chk = tmp_path / "chk"
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="20ms", retained=3), batch_size=100
    )
    # The source waits for two periodic checkpoints during its input; with the
    # final one, three are retained whatever the timing.
    env.from_source(CheckpointGatedSequence(chk, 10_000)).with_columns(
        k=ed.col("value") % 5
    ).key_by("k").sum("value").name("sums").uid("sums").collect()
    return chk, env.execute("cli")


def test_checkpoint_cli_lists_valid_checkpoints(
    finished: tuple[Path, ed.JobResult], capsys: pytest.CaptureFixture[str]
) -> None:
    chk, result = finished
    assert main(["checkpoints", str(chk)]) == 0
    out = capsys.readouterr().out
    assert f"3 checkpoints in {chk}" in out
    rows = [line.split() for line in out.splitlines()[2:] if line.strip()]
    assert [int(r[0]) for r in rows] == result.checkpoint_ids[-3:][::-1]
    assert all(r[-1] == "yes" for r in rows)
    assert "alignment" in out and "duration" in out


def test_checkpoint_cli_inspects_one(
    finished: tuple[Path, ed.JobResult], capsys: pytest.CaptureFixture[str]
) -> None:
    chk, _ = finished
    newest = completed_checkpoints(chk)[-1]
    assert main(["checkpoints", str(chk), "--id", str(newest)]) == 0
    by_id = capsys.readouterr().out
    assert main(["checkpoints", str(chk / f"chk-{newest}")]) == 0
    by_path = capsys.readouterr().out
    assert by_id == by_path
    assert f"checkpoint {newest} at" in by_id
    assert "sums ('sums'): 2 subtasks" in by_id
    assert re.search(r"key groups", by_id)
    assert re.search(r"\[\d+, \d+\)", by_id), by_id
    assert ".state" in by_id


def test_checkpoint_cli_missing_id_exits_2(
    finished: tuple[Path, ed.JobResult], capsys: pytest.CaptureFixture[str]
) -> None:
    chk, _ = finished
    assert main(["checkpoints", str(chk), "--id", "999999"]) == 2
    assert "chk-999999" in capsys.readouterr().err
