"""Incremental checkpoints (API.md "Checkpoint options": ``incremental=True``).

The job sums ``value`` per key ``k``: first every one of ``KEYS`` keys once,
then, slowly, only the "hot" keys: those of key group 0 of 128 (about 0.8% of
the keys; their key group is computed here exactly as ``core/src/keygroup.rs``
does). A checkpoint taken in the hot phase writes one key group of the
aggregate's 128 and reuses the others from earlier checkpoints' files.
Checked: the bytes each checkpoint reports writing against its whole state
and against a full checkpoint; SIGKILL + ``restore_from="latest"`` exact at
parallelism 1, and restored at parallelism 4 after runs at 2; a corrupt shared
file is named in the error; ``read_state`` and the checkpoints CLI read
incremental checkpoints.
"""

from __future__ import annotations

import os
import random
import re
import sys
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.checkpoints import int_key_group
from support.faults import CheckpointGatedSequence, kill_after_checkpoints

MAX_PARALLELISM = 128
KEYS = 20_000

HOT = [k for k in range(KEYS) if int_key_group(k, MAX_PARALLELISM) == 0]


class HotKeys:
    """``value`` -> ``k``: values below ``KEYS`` are their own key (each key
    once), later ones go round the hot keys, ``sleep`` seconds per batch."""

    def __init__(self, sleep: float) -> None:
        self.sleep = sleep
        self.hot = np.array(HOT, dtype=np.int64)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        v = batch.column("value").to_numpy()
        k = np.where(v < KEYS, v, self.hot[(v - KEYS) % len(self.hot)])
        if len(v) and v[-1] >= KEYS:
            time.sleep(
                self.sleep
            )  # throttle, not a wait: checkpoints complete while hot keys change
        return batch.append_column("k", pa.array(k, pa.int64()))


def _expected_sums(n: int) -> dict[int, int]:
    sums: dict[int, int] = {}
    for v in range(n):
        k = v if v < KEYS else HOT[(v - KEYS) % len(HOT)]
        sums[k] = sums.get(k, 0) + v
    return sums


def _final_sums(table: pa.Table) -> dict[int, int]:
    """The last running sum of every key (sums only grow: the largest)."""
    last: dict[int, int] = {}
    for k, v in zip(table["k"].to_pylist(), table["value"].to_pylist(), strict=True):
        last[k] = max(last.get(k, v), v)
    return last


def _hot_gated(chk: Path, n: int) -> CheckpointGatedSequence:
    """``0..n`` in one split; three gates in the hot phase each wait for a
    checkpoint triggered after the source reached it, so at least three
    checkpoints fall inside the hot phase with hot rows before each."""
    hot = [(KEYS + i * (n - KEYS) // 4) / n for i in (1, 2, 3)]
    return CheckpointGatedSequence(chk, n, splits=1, gates=hot, fresh=True)


def _sums_job(
    env: ed.StreamEnvironment, n: int, sleep: float, source: ed.Source | None = None
) -> ed.DataStream:
    numbers = env.from_sequence(0, n) if source is None else env.from_source(source)
    keyed = (
        numbers.name("numbers")
        .uid("numbers")
        .map_batches(HotKeys(sleep))
        .name("keys")
        .uid("keys")
        .key_by("k")
    )
    return keyed.sum("value").name("sum").uid("sum")


def _run(
    chk: Path, n: int, *, incremental: bool, retained: int = 3
) -> tuple[ed.JobResult, dict[int, int]]:
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(
            chk, interval="40ms", incremental=incremental, retained=retained
        ),
        batch_size=1000,
        max_parallelism=MAX_PARALLELISM,
    )
    handle = _sums_job(env, n, 0.01, _hot_gated(chk, n)).collect()
    result = env.execute("incremental" if incremental else "full")
    return result, _final_sums(handle.to_arrow())


def test_hot_key_checkpoints_write_about_one_percent_of_the_state(tmp_path: Path) -> None:
    n = KEYS + 60_000
    result, sums = _run(tmp_path / "inc", n, incremental=True, retained=1000)
    assert sums == _expected_sums(n)
    full, full_sums = _run(tmp_path / "full", n, incremental=False)
    assert full_sums == sums
    whole = max(c.state_bytes for c in full.checkpoints)
    assert all(c.state_bytes == c.bytes for c in full.checkpoints), "full ones reuse nothing"

    checkpoints = result.checkpoints
    assert checkpoints[0].bytes == checkpoints[0].state_bytes, "the first one is full"
    # Checkpoints of the hot phase: the whole state is there, ~1% written.
    hot = [c for c in checkpoints[1:] if c.state_bytes >= 0.9 * whole]
    small = [c for c in hot if c.bytes <= 0.03 * c.state_bytes]
    assert len(small) >= 2, [(c.id, c.bytes, c.state_bytes) for c in checkpoints]
    for c in hot:
        # Its whole state is what a full checkpoint writes (same keys, sums).
        assert 0.8 * whole <= c.state_bytes <= 1.2 * whole, (c.id, c.state_bytes, whole)

    # The newest manifest: the aggregate wrote key group 0 only, and reuses
    # the other 127 from earlier files under shared/.
    def sum_subtask(c: ed.CheckpointStats) -> dict[str, Any]:
        inspected = ed._core.inspect_checkpoint(c.path)  # type: ignore[attr-defined]
        assert inspected["bytes"] == c.state_bytes
        assert inspected["written_bytes"] == c.bytes
        (sub,) = next(o for o in inspected["operators"] if o["uid"] == "sum")["subtasks"]
        return dict(sub)

    # (A checkpoint of an interval without a hot batch writes nothing of it.)
    wrote = [(c, sub) for c in small if (sub := sum_subtask(c))["file"] is not None]
    assert wrote, [sum_subtask(c) for c in small]
    latest, sub = wrote[-1]
    own = sub["file"]
    assert sub["shared"] and own.startswith(f"{latest.id}-"), sub
    reused = [g for r in sub["reused"] for g in r["key_groups"]]
    assert (0, 1) not in reused, "the hot key group was written, not reused"
    groups = sorted(g for start, end in sub["key_groups"] for g in range(start, end))
    assert groups == list(range(MAX_PARALLELISM)), "every key group restored"
    assert sum(e - s for s, e in reused) == MAX_PARALLELISM - 1, sub

    # read_state reads the shared files too, and agrees with the output.
    table = ed.read_state(latest.path, "sum")
    state = dict(zip(table["k"].to_pylist(), table["value"].to_pylist(), strict=True))
    assert state == _expected_sums(n)


def test_retention_deletes_only_unreferenced_shared_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from eddyline.client.cli import main

    chk = tmp_path / "chk"
    result, _ = _run(chk, KEYS + 30_000, incremental=True)
    listed = ed._core.list_checkpoints(str(chk))  # type: ignore[attr-defined]
    assert len(listed) == 3 and all(c["valid"] for c in listed), listed
    referenced: set[str] = set()
    for c in listed:
        for op in ed._core.inspect_checkpoint(c["path"])["operators"]:  # type: ignore[attr-defined]
            for sub in op["subtasks"]:
                if sub["shared"]:
                    referenced.add(sub["file"])
                referenced.update(r["file"] for r in sub["reused"])
    on_disk = {p.name for p in (chk / "shared").iterdir()}
    assert on_disk == referenced, (sorted(on_disk - referenced), sorted(referenced - on_disk))
    assert len(result.checkpoints) > 3
    # The checkpoints CLI lists them valid and shows what each one shares.
    assert main(["checkpoints", str(chk)]) == 0
    listing = capsys.readouterr().out
    assert "invalid" not in listing, listing
    newest = result.checkpoints[-1]
    assert main(["checkpoints", str(chk), "--id", str(newest.id)]) == 0
    inspected = capsys.readouterr().out
    assert "shared with earlier checkpoints" in inspected, inspected
    assert re.search(r"shared/\S+ \+ \d+ reused|- \+ \d+ reused", inspected), inspected


def test_a_corrupt_shared_file_is_named_when_restoring(tmp_path: Path) -> None:
    chk, n = tmp_path / "chk", KEYS + 30_000
    result, _ = _run(chk, n, incremental=True)
    latest = result.checkpoints[-1]
    inspected = ed._core.inspect_checkpoint(latest.path)  # type: ignore[attr-defined]
    (sub,) = next(o for o in inspected["operators"] if o["uid"] == "sum")["subtasks"]
    victim = sub["reused"][0]["file"]
    path = chk / "shared" / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

    env = ed.StreamEnvironment(1, max_parallelism=MAX_PARALLELISM)
    _sums_job(env, n, 0.0, _hot_gated(chk, n)).collect()
    with pytest.raises(ed.CheckpointError) as info:
        env.execute("restore-corrupt", restore_from=latest.path)
    assert victim in str(info.value) and "xxh3" in str(info.value), info.value
    with pytest.raises(ed.CheckpointError, match=re.escape(victim)):
        ed.read_state(latest.path, "sum")
    listed = {c["id"]: c for c in ed._core.list_checkpoints(str(chk))}  # type: ignore[attr-defined]
    assert not listed[latest.id]["valid"] and victim in listed[latest.id]["error"]


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import completed_checkpoints
    from test_incremental_checkpoints import MAX_PARALLELISM, _sums_job

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    first, later = int(sys.argv[4]), int(sys.argv[5])
    # A restarted run (it finds checkpoints) runs at the other parallelism.
    parallelism = later if completed_checkpoints(chk) else first
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk, interval="60ms", incremental=True),
        batch_size=500,
        max_parallelism=MAX_PARALLELISM,
    )
    _sums_job(env, n, 0.006).sink_to(ed.ParquetSink(out)).name("files").uid("files")
    result = env.execute("incremental-kill", restore_from="latest")
    for c in result.checkpoints:
        print(f"checkpoint {c.id} wrote {c.bytes} of {c.state_bytes}", flush=True)
    print(f"parallelism {parallelism}", flush=True)
    print("finished", flush=True)
    """
)


def _run_killed(tmp_path: Path, n: int, parallelisms: Sequence[int], seed: int) -> list[str]:
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(n), *map(str, parallelisms)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(seed), timeout=120, max_delay=0.25
    )
    assert "finished" in outputs[-1]
    assert _final_sums(read_parquet_dir(out)) == _expected_sums(n)
    return outputs


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("first", "later"), [(1, 1), (2, 4)])
def test_sigkill_and_restore_of_incremental_checkpoints_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, first: int, later: int
) -> None:
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.getenv("PYTHONPATH")])))
    n = KEYS + 120_000
    outputs = _run_killed(tmp_path, n, (first, later), seed)
    final = outputs[-1]
    assert f"parallelism {later}" in final
    pattern = r"^checkpoint \d+ wrote (\d+) of (\d+)$"
    written = [(int(w), int(s)) for w, s in re.findall(pattern, final, re.M)]
    # The restored run took incremental checkpoints too (the first is full).
    assert any(w * 5 < s for w, s in written), written
