"""Corrupt, truncated and incomplete checkpoints are refused with a named error.

One job runs to completion once (module fixture); every test works on its own
copy of the checkpoint directory.
"""

from __future__ import annotations

import random
import re
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline import _core
from eddyline.client.cli import main
from eddyline.testing import last_by_key
from support.faults import CheckpointGatedSequence, completed_checkpoints
from support.sinks import RecordingTwoPhaseSink

N = 30_000
KEYS = 13
EXPECTED_SUMS = dict(
    enumerate(np.bincount(np.arange(N) % KEYS, weights=np.arange(N)).astype(np.int64).tolist())
)
EXPECTED_COUNTS = dict(enumerate(np.bincount(np.arange(N) % KEYS).tolist()))


def _job(
    chk_dir: Path, parquet_dir: Path | None = None, interval: str = "30ms"
) -> tuple[ed.StreamEnvironment, ed.CollectHandle, ed.CollectHandle]:
    """The job of every test. A fresh run completes at least three checkpoints
    whatever the timing: two while its source holds back input (periodic ones,
    or with ``interval="1h"`` the ones the test triggers), then the final one."""
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk_dir, interval=interval, retained=3),
        batch_size=200,
    )
    numbers = env.from_source(CheckpointGatedSequence(chk_dir, N)).name("numbers").uid("numbers")
    keyed = numbers.with_columns(k=ed.col("value") % KEYS).name("tag").uid("tag").key_by("k")
    sums = keyed.sum("value").name("sums").uid("sums").collect()
    counts = keyed.count().name("counts").uid("counts").collect()
    if parquet_dir is not None:
        numbers.sink_to(ed.ParquetSink(str(parquet_dir))).name("files").uid("files")
    return env, sums, counts


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ed.JobResult]:
    chk = tmp_path_factory.mktemp("corruption") / "chk"
    env, _, _ = _job(chk)
    result = env.execute("to_corrupt")
    assert len(result.checkpoint_ids) >= 3, result.checkpoint_ids
    return chk, result


@pytest.fixture
def chk_copy(finished_run: tuple[Path, ed.JobResult], tmp_path: Path) -> Path:
    source, _ = finished_run
    copy = tmp_path / "chk"
    shutil.copytree(source, copy)
    return copy


def _newest(chk: Path) -> Path:
    return chk / f"chk-{completed_checkpoints(chk)[-1]}"


def _state_file(checkpoint: Path, rng: random.Random) -> Path:
    files = sorted(checkpoint.glob("*.state"))
    assert files, f"no .state files in {checkpoint}: {sorted(p.name for p in checkpoint.iterdir())}"
    return rng.choice(files)


def _flip_byte(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    offset = rng.randrange(len(data))
    data[offset] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def _truncate(path: Path, rng: random.Random) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: rng.randrange(len(data))])


def _restore(chk: Path, restore_from: str, parquet_dir: Path | None = None) -> ed.JobResult:
    env, _, _ = _job(chk, parquet_dir)
    return env.execute("restore", restore_from=restore_from)


def test_checkpoint_retained_are_all_listed(finished_run: tuple[Path, ed.JobResult]) -> None:
    chk, result = finished_run
    assert completed_checkpoints(chk) == result.checkpoint_ids[-3:]
    listed = _core.list_checkpoints(str(chk))
    assert [c["id"] for c in listed] == result.checkpoint_ids[-3:][::-1]
    assert all(c["valid"] and c["error"] is None for c in listed)


@pytest.mark.parametrize("damage", [_flip_byte, _truncate], ids=["flipped_byte", "truncated"])
def test_checkpoint_damaged_state_file_is_refused(
    chk_copy: Path, seed: int, damage: Callable[[Path, random.Random], None]
) -> None:
    rng = random.Random(seed)
    newest = _newest(chk_copy)
    victim = _state_file(newest, rng)
    damage(victim, rng)
    with pytest.raises(ed.CheckpointError, match=re.escape(victim.name)):
        _restore(chk_copy, str(newest))


def test_checkpoint_latest_skips_a_damaged_newest_only_without_external_sinks(
    chk_copy: Path, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    newest = _newest(chk_copy)
    older = completed_checkpoints(chk_copy)[-2]
    victim = _state_file(newest, rng)
    _flip_byte(victim, rng)
    # With a sink that commits outside the process, falling back could commit
    # the output after the older checkpoint twice: refused, naming the file.
    with pytest.raises(ed.CheckpointError, match=re.escape(victim.name)) as info:
        _restore(chk_copy, "latest", tmp_path / "files")
    assert "'files'" in str(info.value)
    # A job whose only sinks are in-process (collect) can fall back to the
    # newest *valid* checkpoint: nothing outside the process commits twice.
    result = _restore(chk_copy, "latest")
    assert result.checkpoint_ids, "the fallback run checkpointed"
    assert min(result.checkpoint_ids) > older
    assert not (tmp_path / "files").exists() or not list((tmp_path / "files").glob("part-*"))


def _rows(parquet_dir: Path) -> int:
    return sum(pq.read_metadata(f).num_rows for f in parquet_dir.glob("**/part-*.parquet"))


def _value_counts(parquet_dir: Path) -> Counter[int]:
    return Counter(
        v
        for f in sorted(parquet_dir.glob("**/part-*.parquet"))
        for v in pq.read_table(f, columns=["value"]).column("value").to_pylist()
    )


def test_checkpoint_older_restore_refused_when_later_checkpoints_committed(
    tmp_path: Path, seed: int
) -> None:
    """Restoring an older checkpoint of a directory whose later checkpoints
    committed files would commit those rows again; the refusal of "latest"
    must not advise it, and the explicit restore is refused too, naming the
    later checkpoints and the sink.

    Exactly three checkpoints complete, each with rows after it: two triggered
    while the source holds back the rest of its input, and the final one (a
    periodic interval left it to chance whether the fallback checkpoint came
    after the last row, and the forced restore then duplicated nothing)."""
    rng = random.Random(seed)
    chk, files = tmp_path / "chk", tmp_path / "files"
    client = _job(chk, files, "1h")[0].execute_async("first")
    triggered = [client.trigger_checkpoint(), client.trigger_checkpoint()]
    result = client.wait(timeout=120)
    assert result.checkpoint_ids[:2] == triggered
    assert len(result.checkpoint_ids) == 3, result.checkpoint_ids
    assert _value_counts(files) == Counter(range(N))
    older, *later = completed_checkpoints(chk)
    assert [older, *later] == result.checkpoint_ids
    _truncate(_state_file(_newest(chk), rng), rng)
    with pytest.raises(ed.CheckpointError, match="a second time through sink") as info:
        _job(chk, files, "1h")[0].execute("restore", restore_from="latest")
    advice = str(info.value)
    assert "restore_from='" not in advice, advice
    assert "allow_duplicate_output=True" in advice
    with pytest.raises(ed.CheckpointError) as info:
        _job(chk, files, "1h")[0].execute("restore", restore_from=str(chk / f"chk-{older}"))
    message = str(info.value)
    assert f"checkpoint {older} is not the newest" in message
    assert f"the later checkpoint(s) {later[0]} and {later[1]} completed" in message
    assert "through sink(s) 'files'" in message
    assert _value_counts(files) == Counter(range(N)), "a refused restore commits nothing"
    # Knowingly, both restores run and commit the rows after the restored
    # checkpoint again: "latest" falls back to the second checkpoint (taken
    # before the last third of each split was read), the explicit one is the
    # first (taken before the second third).
    source, per_split = CheckpointGatedSequence(chk, N), N // 2
    for restore_from, held_back in (
        ("latest", source.gate_values(1)),
        (f"chk-{older}", source.gate_values(0)),
    ):
        copy, out = tmp_path / f"chk-{restore_from}", tmp_path / f"files-{restore_from}"
        shutil.copytree(chk, copy)
        shutil.copytree(files, out)
        where = restore_from if restore_from == "latest" else str(copy / restore_from)
        env, _, _ = _job(copy, out, "1h")
        again = env.execute("again", restore_from=where, allow_duplicate_output=True)
        assert min(again.checkpoint_ids) > later[-1]
        counts = _value_counts(out)
        assert set(counts) == set(range(N)) and set(counts.values()) <= {1, 2}, restore_from
        # what is committed twice is a tail of each split, at least the held-back part
        for split in (0, 1):
            start, end = split * per_split, (split + 1) * per_split
            twice = [v for v in range(start, end) if counts[v] == 2]
            assert twice, (restore_from, split)
            assert twice == list(range(twice[0], end)), (restore_from, split)
            assert twice[0] <= held_back[split], (restore_from, split, twice[0])


def test_checkpoint_latest_fallback_refused_with_a_python_two_phase_sink(
    chk_copy: Path, seed: int, tmp_path: Path
) -> None:
    """A user's TwoPhaseCommitSink commits outside the process too: it counts
    as an external sink, so a damaged newest checkpoint is not skipped (it was
    treated as a plain operator, and the fallback went ahead silently)."""
    rng = random.Random(seed)
    newest = _newest(chk_copy)
    _flip_byte(_state_file(newest, rng), rng)
    env, _, _ = _job(chk_copy)
    stream = env.from_sequence(0, 10).name("extra").uid("extra")
    stream.sink_to(RecordingTwoPhaseSink(str(tmp_path / "txns"))).name("txns").uid("txns")
    with pytest.raises(ed.CheckpointError, match="would commit the output") as info:
        env.execute("restore", restore_from="latest", allow_non_restored_state=True)
    assert "'txns'" in str(info.value)


def test_checkpoint_damaged_shows_invalid_in_cli(
    chk_copy: Path, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(seed)
    newest = _newest(chk_copy)
    victim = _state_file(newest, rng)
    _flip_byte(victim, rng)
    assert main(["checkpoints", str(chk_copy)]) == 0
    out = capsys.readouterr().out
    newest_id = int(newest.name.removeprefix("chk-"))
    # (the header "3 checkpoints in ..." starts with a number too)
    rows = [line.split() for line in out.splitlines()]
    row = next(r for r in rows if r[:2] == [str(newest_id), "checkpoint"])
    assert row[-1] == "NO", out
    assert victim.name in out
    assert main(["checkpoints", str(newest)]) == 2
    assert victim.name in capsys.readouterr().err


def test_checkpoint_without_manifest_is_refused(chk_copy: Path) -> None:
    newest = _newest(chk_copy)
    (newest / "_manifest.json").unlink()
    with pytest.raises(ed.CheckpointError, match=re.escape(str(newest))):
        _restore(chk_copy, str(newest))


@pytest.mark.parametrize("what", ["missing", "plain_dir", "file"])
def test_checkpoint_restore_from_non_checkpoint_is_refused(tmp_path: Path, what: str) -> None:
    target = tmp_path / "target"
    if what == "plain_dir":
        target.mkdir()
        (target / "data.txt").write_text("hello")
    elif what == "file":
        target.write_text("hello")
    with pytest.raises(ed.CheckpointError, match=re.escape(str(target))):
        _restore(tmp_path / "chk", str(target))


def test_checkpoint_latest_on_empty_dir_starts_fresh(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    chk.mkdir()
    env, sums, counts = _job(chk)
    result = env.execute("fresh", restore_from="latest")
    assert {k: r["count"] for k, r in last_by_key(counts, "k").items()} == EXPECTED_COUNTS
    assert {k: r["value"] for k, r in last_by_key(sums, "k").items()} == EXPECTED_SUMS
    assert result.checkpoint_ids


def test_checkpoint_every_retained_one_is_a_restart_point(
    finished_run: tuple[Path, ed.JobResult], tmp_path: Path
) -> None:
    source, _ = finished_run
    for checkpoint_id in completed_checkpoints(source):
        chk = tmp_path / f"copy-{checkpoint_id}"
        shutil.copytree(source, chk)
        env, sums, counts = _job(chk)
        restored = env.execute("restart_point", restore_from=str(chk / f"chk-{checkpoint_id}"))
        # state restored + the replayed rest of the input = the golden final values
        final_counts = {k: r["count"] for k, r in last_by_key(counts, "k").items()}
        final_sums = {k: r["value"] for k, r in last_by_key(sums, "k").items()}
        assert final_counts == {k: EXPECTED_COUNTS[k] for k in final_counts}, checkpoint_id
        assert final_sums == {k: EXPECTED_SUMS[k] for k in final_sums}, checkpoint_id
        assert set(final_counts) == set(final_sums)
        # ids continue after the restored one
        assert all(i > checkpoint_id for i in restored.checkpoint_ids), restored.checkpoint_ids
