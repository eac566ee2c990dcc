"""SIGKILL of the job process at random moments, then ``restore_from="latest"``.

A job script writes ``from_sequence(0, N)`` to a ParquetSink with frequent
checkpoints. The test kills it three times, each time only after a new
checkpoint completed since its start, and lets the fourth run finish: the
committed rows are exactly ``range(N)``.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, killable_script, run_killed, source_records

N = 200_000
KILLS = 3
RUN_TIMEOUT_S = 60.0

SCRIPT = killable_script(
    """
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.005)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("killable", restore_from="latest")
    print("started", flush=True)
    seen = set()
    while True:
        try:
            result = client.wait(timeout=0.02)
            done = True
        except TimeoutError:
            done = False
        for stats in client.checkpoints if not done else result.checkpoints:
            if stats.id not in seen:
                seen.add(stats.id)
                print(f"checkpoint {stats.id} completed", flush=True)
        if done:
            break
    records = result.metrics["operators"]["numbers"]["records_out"]
    print(f"source records {records}", flush=True)
    print("finished", flush=True)
    """
)


def _checkpoint_ids(output: str) -> list[int]:
    return [int(m) for m in re.findall(r"^checkpoint (\d+) completed$", output, re.M)]


@pytest.mark.timeout(120)
def test_checkpoint_sigkill_and_restore_latest_is_exact(seed: int, tmp_path: Path) -> None:
    outputs, out = run_killed(
        SCRIPT, tmp_path, N, kills=KILLS, rng=random.Random(seed), timeout=RUN_TIMEOUT_S
    )
    final = outputs[-1]
    assert "finished" in final

    # exactly once: every id committed once, none missing
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(N), "ParquetSink")

    # the restarted runs resumed: checkpoint ids keep increasing across runs ...
    per_run = [_checkpoint_ids(text) for text in outputs]
    flat = [i for ids in per_run for i in ids]
    assert flat == sorted(set(flat)), f"checkpoint ids per run: {per_run}"
    assert per_run[-1], "the last run completed no checkpoint (not even the final one)"
    # ... and the last run did not start from scratch
    records = source_records(final)
    assert records < N, f"the last run re-read all {N} records: it did not restore"
