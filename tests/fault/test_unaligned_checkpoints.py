"""Unaligned checkpoints (FLIP-76; docs/DESIGN.md "Unaligned checkpoints").

* SIGKILL + ``restore_from="latest"`` with ``unaligned=True`` at parallelism 1, 2
  and 4, through a union or a connect and a keyed exchange, under backpressure
  (a slow operator after the exchange): the committed ParquetSink rows are
  exactly the input, and checkpoints really held channel state.
* Under heavy backpressure (a slow sink, one-row batches so every channel holds
  its full count of events) unaligned checkpoints complete far faster than
  aligned ones.
* The same across worker processes (ProcessRunner): a worker SIGKILLed, the
  job restores exactly, barriers overtook the data plane's in-flight data.
* Loops: tests/fault/test_unaligned_loops.py.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import sys
import textwrap
from pathlib import Path

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import (
    SleepPerBatch,
    assert_exact_ids,
    completed_checkpoints,
    kill_after_checkpoints,
    wait_until,
)

N = 6_000
KILLS = 2
RUN_TIMEOUT_S = 60.0

SCRIPT = textwrap.dedent(
    """
    import glob
    import os
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, shape = sys.argv[1], sys.argv[2], sys.argv[5]
    n, p = int(sys.argv[3]), int(sys.argv[4])


    def same(batch):
        return batch


    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=True),
        batch_size=20,
    )
    a = env.from_sequence(0, n).name("a").uid("a")
    b = env.from_sequence(n, 2 * n).name("b").uid("b")
    if shape == "union":
        both = a.union(b)
    else:
        both = a.connect(b).map_batches(same, same).name("both").uid("both")
    # Unique keys: the keyed reduce emits every record once (a keyed exchange).
    unique = both.key_by("value").reduce(lambda x, y: x).name("unique").uid("unique")
    slow = unique.map_batches(SleepPerBatch(0.002)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("unaligned-kill", restore_from="latest")
    print("started", flush=True)
    seen, scanned = set(), set()
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
        for m in glob.glob(os.path.join(chk, "chk-*", "_manifest.json")):
            if m in scanned:
                continue
            scanned.add(m)
            try:
                text = open(m).read()
            except OSError:
                continue  # deleted by retention meanwhile
            if "#channels" in text:
                print(f"channel state in {m}", flush=True)
        if done:
            break
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize(("parallelism", "shape"), [(1, "union"), (2, "connect"), (4, "union")])
def test_unaligned_sigkill_and_restore_latest_is_exact(
    parallelism: int, shape: str, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(N), str(parallelism), shape]
    outputs = kill_after_checkpoints(
        command, chk, kills=KILLS, rng=rng, timeout=RUN_TIMEOUT_S, max_delay=0.25
    )
    assert "finished" in outputs[-1]
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(2 * N), "ParquetSink")
    # Non-vacuity: checkpoints held in-flight data, so restores replayed some.
    assert any(re.search(r"^channel state in ", o, re.M) for o in outputs), outputs


def _durations(tmp_path: Path, unaligned: bool, aligned_timeout: str | None = None) -> list[float]:
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(
            tmp_path / f"chk-{unaligned}-{aligned_timeout}",
            interval="100ms",
            unaligned=unaligned,
            aligned_timeout=aligned_timeout,
        ),
        batch_size=1,
    )
    # Two exchanges (parallelism 1 -> 2 -> 1), every channel full of one-row
    # batches in front of a sink that takes 20 ms per batch.
    hop1 = env.from_sequence(0, 150).map_batches(lambda b: b).set_parallelism(2)
    hop2 = hop1.map_batches(lambda b: b).set_parallelism(1)
    hop2.map_batches(SleepPerBatch(0.02)).collect()
    result = env.execute(f"backpressure-{unaligned}-{aligned_timeout}")
    return [c.duration_ms / 1000 for c in result.checkpoints if c.kind == "checkpoint"]


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


@pytest.mark.timeout(120)
def test_unaligned_checkpoints_complete_fast_under_backpressure(tmp_path: Path) -> None:
    aligned = _durations(tmp_path, False)
    unaligned = _durations(tmp_path, True)
    # Starts aligned, each task switches once the checkpoint is 30 ms old.
    switched = _durations(tmp_path, True, aligned_timeout="30ms")
    assert len(aligned) >= 2 and len(unaligned) >= 3 and len(switched) >= 3
    # Generous slack: an unaligned barrier waits for at most about one batch
    # per hop (20 ms), not for every queued batch (interval: 100 ms) ...
    assert _median(unaligned) < 0.6, f"unaligned durations {unaligned}"
    assert _median(switched) < 0.6, f"aligned_timeout durations {switched}"
    # ... while aligned barriers wait behind full channels.
    assert _median(unaligned) * 3 < _median(aligned), (aligned, unaligned)
    assert _median(switched) * 3 < _median(aligned), (aligned, switched)


def _channel_state_manifests(chk: Path) -> int:
    found = 0
    for m in chk.glob("chk-*/_manifest.json"):
        with contextlib.suppress(OSError):  # deleted by retention meanwhile
            found += "#channels" in m.read_text()
    return found


@pytest.mark.timeout(180)
def test_unaligned_sigkill_of_a_worker_process_restores_exactly(tmp_path: Path) -> None:
    # Remote channels: the barrier overtakes the data plane's in-flight data.
    n = 6_000
    out, chk = tmp_path / "out", tmp_path / "chk"
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", unaligned=True),
        restart=ed.RestartStrategy.fixed_delay(attempts=3, delay="50ms"),
        batch_size=20,
    )
    a = env.from_sequence(0, n).set_parallelism(1)
    b = env.from_sequence(n, 2 * n).set_parallelism(1)
    unique = a.union(b).key_by("value").reduce(lambda x, y: x)
    slow = unique.map_batches(SleepPerBatch(0.006))
    slow.map(lambda r: {"id": r["value"], "pid": os.getpid()}).sink_to(ed.ParquetSink(out))
    runner = ed.ProcessRunner(workers=2)
    client = env.execute_async("unaligned-workers", runner=runner)
    wait_until(
        lambda: _channel_state_manifests(chk) >= 1 and len(completed_checkpoints(chk)) >= 2,
        timeout=60,
        what="2 checkpoints, one with channel state",
    )
    pids = runner.worker_pids()
    assert len(pids) == 2 and client.status == "running"
    os.kill(pids[1], signal.SIGKILL)
    result = client.wait(timeout=RUN_TIMEOUT_S)
    assert result.restarts >= 1
    table = read_parquet_dir(out)
    assert_exact_ids(table["id"].to_pylist(), range(2 * n), "ParquetSink")
    assert len(set(table["pid"].to_pylist())) >= 3, "both attempts' workers wrote rows"
