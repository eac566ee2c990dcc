"""(a) Checkpoints after tasks finished: two sources of very different lengths, SIGKILL, restore.

A short source and a long, slow one feed a union, a ParquetSink of the ids
and a keyed sum into a second ParquetSink. The test waits until a checkpoint
completed in which the short source is marked finished while the rest of the
job still runs (the coordinator kept checkpointing after the short source's
tasks finished, triggering the running tasks whose predecessors finished),
kills the job process with SIGKILL, and restores with
``restore_from="latest"``: the committed output is exact, and the restored
run skips the fully finished source (it reads nothing from it).
"""

from __future__ import annotations

import random
import re
import subprocess
import sys
import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, completed_checkpoints, sigkill_when

N_SHORT = 2_000
N_LONG = 200_000
RUN_TIMEOUT_S = 60.0

SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    ids, sums, chk = sys.argv[1], sys.argv[2], sys.argv[3]
    n_short, n_long = int(sys.argv[4]), int(sys.argv[5])
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=20),
        batch_size=200,
    )
    short = env.from_sequence(0, n_short).name("short").uid("short")
    long = env.from_sequence(n_short, n_short + n_long).name("long").uid("long")
    slow = long.map_batches(SleepPerBatch(0.005)).name("slow").uid("slow")
    both = short.union(slow).name("union").uid("union")
    both.sink_to(ed.ParquetSink(ids)).name("ids").uid("ids")
    keyed = both.with_columns(k=ed.col("value") % 7).name("key").uid("key")
    totals = keyed.key_by("k").sum("value").name("sum").uid("sum")
    totals.sink_to(ed.ParquetSink(sums)).name("sums").uid("sums")
    result = env.execute("partial-sources", restore_from="latest")
    ops = result.metrics["operators"]
    short_out = ops.get("short", {}).get("records_out", 0)
    long_out = ops.get("long", {}).get("records_out", 0)
    print(f"source records short {short_out} long {long_out}", flush=True)
    print(f"checkpoints {result.checkpoint_ids}", flush=True)
    print("finished", flush=True)
    """
)


def _finished_flags(path: str) -> dict[str, bool]:
    manifest = inspect_checkpoint(path)
    return {op["uid"]: bool(op["finished"]) for op in manifest["operators"]}


def _checkpoint_with_short_finished(chk: Path) -> tuple[int, dict[str, bool]] | None:
    for checkpoint in reversed(completed_checkpoints(chk)):
        try:
            flags = _finished_flags(str(chk / f"chk-{checkpoint}"))
        except Exception:  # retained checkpoints may be deleted while we read
            continue
        if flags.get("short") and not flags.get("long"):
            return checkpoint, flags
    return None


def _expected_sums() -> dict[int, int]:
    totals: dict[int, int] = defaultdict(int)
    for value in range(N_SHORT + N_LONG):
        totals[value % 7] += value
    return dict(totals)


@pytest.mark.timeout(120)
def test_finish_short_source_finished_then_sigkill_restores_exactly(
    seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    ids, sums, chk = tmp_path / "ids", tmp_path / "sums", tmp_path / "chk"
    command = [sys.executable, str(script), str(ids), str(sums), str(chk)]
    command += [str(N_SHORT), str(N_LONG)]

    killed = sigkill_when(
        command,
        lambda: _checkpoint_with_short_finished(chk),
        timeout=RUN_TIMEOUT_S,
        what="a completed checkpoint with the short source finished",
        delay=rng.uniform(0.0, 0.2),  # the kill moment, from the seed
    )
    assert killed is not None
    found = killed.ready
    assert isinstance(found, tuple)
    finished_at, flags = found
    # checkpoints completed after the short source finished: it is marked fully finished
    # while the long source, the union and the sinks still ran
    assert flags["short"] and not flags["long"] and not flags["ids"], flags
    before_restore = completed_checkpoints(chk)
    assert before_restore and max(before_restore) >= finished_at
    partial = read_parquet_dir(ids)
    committed_before = partial.num_rows if partial.num_columns else 0
    assert committed_before < N_SHORT + N_LONG, "everything was committed before the kill"

    final = subprocess.run(
        command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert final.returncode == 0, final.stderr
    assert "finished" in final.stdout

    # exactly once over both runs
    assert_exact_ids(read_parquet_dir(ids)["value"].to_pylist(), range(N_SHORT + N_LONG), "ids")
    rows: list[dict[str, Any]] = read_parquet_dir(sums).to_pylist()
    maxima: dict[int, int] = {}
    for row in rows:
        maxima[row["k"]] = max(maxima.get(row["k"], row["value"]), row["value"])
    assert maxima == _expected_sums()

    # the restored run resumed: the finished source was skipped, the long one resumed
    match = re.search(r"^source records short (\d+) long (\d+)$", final.stdout, re.M)
    assert match is not None, final.stdout
    short_out, long_out = int(match.group(1)), int(match.group(2))
    assert short_out == 0, f"the fully finished short source was re-run ({short_out} records)"
    assert 0 < long_out < N_LONG, f"the long source read {long_out} records after the restore"
    listed = re.search(r"^checkpoints \[([\d, ]*)\]$", final.stdout, re.M)
    assert listed is not None, final.stdout
    restored_ids = [int(i) for i in listed.group(1).split(",") if i.strip()]
    assert restored_ids and min(restored_ids) > max(before_restore), restored_ids
