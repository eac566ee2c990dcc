"""Joins across failures: an outer interval join written to a ParquetSink,
SIGKILLed twice and restored from the latest checkpoint (persisted and
recomputed state), and stopped with a savepoint at parallelism 2 and resumed
at parallelism 1 and 3; the committed rows always equal the reference
exactly (each pair once, each unmatched row once)."""

from __future__ import annotations

import random
import re
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, kill_after_checkpoints, wait_until

N = 30_000
KEYS = 13
LOWER, UPPER = -3, 3
TIMEOUT_S = 90.0


def build(
    parallelism: int, chk: str, out: str, *, sleep: float, recovery: str = "latest"
) -> ed.StreamEnvironment:
    """Orders ``id = t = i`` with key ``i % 13`` and payments ``t = i`` with key
    ``7i % 13``, outer-joined within [-3, 3] ms, into a ParquetSink."""
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", recovery=recovery),
        batch_size=100,
    )
    left = (
        env.from_sequence(0, N)
        .name("orders")
        .uid("orders")
        .set_parallelism(1)
        .with_columns(id=ed.col("value"), k=ed.col("value") % KEYS, t=ed.col("value"))
        .set_parallelism(1)
        .select("id", "k", "t")
        .set_parallelism(1)
        .assign_timestamps("t")
        .name("lts")
        .uid("lts")
        .set_parallelism(1)
    )
    right = (
        env.from_sequence(0, N)
        .name("payments")
        .uid("payments")
        .set_parallelism(1)
        .with_columns(rid=ed.col("value") + 1_000_000, rk=ed.col("value") * 7 % KEYS)
        .set_parallelism(1)
        .with_columns(t=ed.col("value"))
        .set_parallelism(1)
        .select("rid", "rk", "t")
        .set_parallelism(1)
        .assign_timestamps("t")
        .name("rts")
        .uid("rts")
        .set_parallelism(1)
    )
    within = (LOWER / 1000, UPPER / 1000)
    joined = left.join(right, left_on="k", right_on="rk", how="outer", within=within)
    # Slow after the join, so that the join's inputs replay (recompute mode).
    slow = joined.name("join").uid("join").map_batches(SleepPerBatch(sleep), schema=joined.schema)
    slow.name("slow").uid("slow").sink_to(ed.ParquetSink(out)).name("out").uid("out")
    return env


Row = tuple[Any, Any, Any, Any, Any]


def reference() -> Counter[Row]:
    rows: Counter[Row] = Counter()
    matched_right: set[int] = set()
    for i in range(N):
        hit = False
        for r in range(max(0, i + LOWER), min(N, i + UPPER + 1)):
            if (7 * r) % KEYS == i % KEYS:
                rows[(i % KEYS, i, i, r + 1_000_000, r)] += 1
                matched_right.add(r)
                hit = True
        if not hit:
            rows[(i % KEYS, i, i, None, None)] += 1
    for r in range(N):
        if r not in matched_right:
            rows[((7 * r) % KEYS, None, None, r + 1_000_000, r)] += 1
    return rows


def committed(directory: Path) -> Counter[Row]:
    t = read_parquet_dir(directory)
    cols = [t[c].to_pylist() for c in ("k", "id", "t", "rid", "t_right")]
    return Counter(zip(*cols, strict=True))


SCRIPT = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    from joins.test_join_recovery import build

    out, chk, recovery = sys.argv[1], sys.argv[2], sys.argv[3]
    env = build(2, chk, out, sleep=0.004, recovery=recovery)
    result = env.execute("join-kill", restore_from="latest")
    ops = result.metrics["operators"]
    print("orders read", ops["orders"]["records_out"], flush=True)
    for s in result.checkpoints:
        print("join bytes", s.operators["join"].bytes, flush=True)
        print("checkpoint", s.id, flush=True)
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("recovery", ["latest", "recompute"])
def test_outer_interval_join_sigkill_restore_commits_each_row_once(
    seed: int, tmp_path: Path, recovery: str
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT.format(tests=str(Path(__file__).parents[1])))
    out, chk = tmp_path / "out", tmp_path / "chk"
    outputs = kill_after_checkpoints(
        [sys.executable, str(script), str(out), str(chk), recovery],
        chk,
        kills=2,
        rng=random.Random(seed),
        timeout=TIMEOUT_S,
        new_checkpoints=2,
        max_delay=0.1,
    )
    assert "finished" in outputs[-1]
    # Checkpoint ids go on across restores: the last run's continue the killed runs'.
    ids = [int(i) for i in re.findall(r"^checkpoint (\d+)$", outputs[-1], re.M)]
    assert ids and min(ids) > 2, f"the last run did not restore (its checkpoints: {ids})"
    if recovery == "latest":
        read = int(re.search(r"^orders read (\d+)$", outputs[-1], re.M).group(1))  # type: ignore[union-attr]
        assert read < N, "the last run read everything again: it did not restore"
    # (Recompute mode rewinds the sources to the null-state checkpoint, which may hold
    # the offsets the job started from: reading everything again is then right.)
    got, want = committed(out), reference()
    assert got == want, (
        f"missing {sum((want - got).values())}, duplicated or wrong {sum((got - want).values())}"
    )
    if recovery == "recompute":
        sizes = [int(b) for b in re.findall(r"^join bytes (\d+)$", outputs[-1], re.M)]
        # (but the final checkpoint stores the join's final state, for read_state)
        assert sizes and all(b == 0 for b in sizes[:-1]), f"recompute mode persisted: {sizes}"


@pytest.fixture(scope="module")
def savepoint_at_p2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("join-p2")
    env = build(2, str(base / "chk"), str(base / "out"), sleep=0.004)
    client = env.execute_async("stopped")
    wait_until(
        lambda: client.metrics()["operators"]["orders"]["records_out"] >= N // 4,
        timeout=TIMEOUT_S,
        what="a quarter of the orders to be read",
    )
    savepoint = client.stop_with_savepoint(str(base / "sp"), drain=False)
    first = client.wait(timeout=TIMEOUT_S)
    read = int(first.metrics["operators"]["orders"]["records_out"])
    assert 0 < read < N, f"the stop did not happen mid-run ({read} of {N})"
    return {"savepoint": savepoint, "rows": committed(base / "out")}


@pytest.mark.parametrize("parallelism", [1, 3], ids=lambda p: f"p{p}")
def test_join_savepoint_restores_exactly_at_another_parallelism(
    tmp_path: Path, savepoint_at_p2: dict[str, Any], parallelism: int
) -> None:
    out = tmp_path / "out"
    build(parallelism, str(tmp_path / "chk"), str(out), sleep=0.0).execute(
        "resumed", restore_from=savepoint_at_p2["savepoint"]
    )
    assert savepoint_at_p2["rows"] + committed(out) == reference()
