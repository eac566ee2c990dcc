"""Recovery by recomputation (FLINK-4120, ``CheckpointConfig(recovery="recompute")``).

Windows (and stateless operators before them) persist no state; a recovery
rewinds the source to the null-state checkpoint, re-injects the later
barriers at their recorded offsets, and the two-phase-commit sink (and any
persisted operator) drops what arrives before the latest barrier. The
checks: window results committed exactly once and equal to the reference
after several SIGKILLs; a persisted running sum next to recomputed windows;
checkpoint sizes against persist mode; retention back to the null-state
checkpoint; a replay that differs is refused.
"""

from __future__ import annotations

import random
import re
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.client.cli import main as cli_main
from eddyline.testing import read_parquet_dir
from support.faults import (
    CheckpointGatedSequence,
    FailOnce,
    SleepPerBatch,
    completed_checkpoints,
    kill_after_checkpoints,
    wait_until,
)

N = 60_000
KEYS = 13
SIZE_MS, SLIDE_MS = 2_000, 500
KILLS = 3
RUN_TIMEOUT_S = 90.0

SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    with_sum, incremental = mode.startswith("sum"), mode.endswith("incremental")
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(
            chk, interval="100ms", retained=1, recovery="recompute", incremental=incremental
        ),
        batch_size=200,
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers").set_parallelism(1)
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow").set_parallelism(1)
    keyed = slow.with_columns(key=ed.col("value") % 13, ts=ed.col("value")).set_parallelism(1)
    timed = keyed.assign_timestamps("ts").name("ts").uid("ts").set_parallelism(1)
    windows = timed.key_by("key").window(ed.Sliding("2s", "500ms")).sum("value")
    windows.name("windows").uid("windows").sink_to(ed.ParquetSink(out + "/windows")).uid("wout")
    if with_sum:
        sums = keyed.key_by("key").sum("value").name("sum").uid("sum")
        sums.sink_to(ed.ParquetSink(out + "/sums")).uid("sout")
    client = env.execute_async("recompute", restore_from="latest")
    print("started", flush=True)
    seen = set()
    while True:
        try:
            result = client.wait(timeout=0.02)
            done = True
        except TimeoutError:
            done = False
        for s in client.checkpoints if not done else result.checkpoints:
            if s.id not in seen:
                seen.add(s.id)
                w = s.operators["windows"]
                print(
                    f"checkpoint {s.id} completed null-state {s.null_state_checkpoint} "
                    f"windows {w.bytes} {w.recomputes}",
                    flush=True,
                )
        if done:
            break
    print(f"source records {result.metrics['operators']['numbers']['records_out']}", flush=True)
    print("finished", flush=True)
    """
)


def reference_windows(n: int) -> Counter[tuple[int, int, int, int]]:
    """(key, window_start, window_end, sum) of sliding 2 s / 500 ms windows over ts = value."""
    sums: Counter[tuple[int, int]] = Counter()
    for v in range(n):
        start = v - v % SLIDE_MS
        while start > v - SIZE_MS:
            sums[(v % KEYS, start)] += v
            start -= SLIDE_MS
    return Counter({(k, s, s + SIZE_MS, total): 1 for (k, s), total in sums.items()})


def committed_windows(directory: Path) -> Counter[tuple[int, int, int, int]]:
    table = read_parquet_dir(directory)
    return Counter(
        zip(
            table["key"].to_pylist(),
            table["window_start"].to_pylist(),
            table["window_end"].to_pylist(),
            table["value"].to_pylist(),
            strict=True,
        )
    )


def run_with_kills(seed: int, tmp_path: Path, mode: str) -> tuple[Path, list[str]]:
    """Runs the job, SIGKILLs it ``KILLS`` times after new checkpoints, then lets it finish."""
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(N), mode]
    # Several checkpoints per run, so that windows span some of them.
    outputs = kill_after_checkpoints(
        command,
        chk,
        kills=KILLS,
        rng=rng,
        timeout=RUN_TIMEOUT_S,
        new_checkpoints=3,
        max_delay=0.2,
    )
    assert "finished" in outputs[-1]
    return out, outputs


def _checkpoint_lines(text: str) -> list[tuple[int, int, int, str]]:
    pattern = r"^checkpoint (\d+) completed null-state (\d+) windows (\d+) (\w+)$"
    return [(int(a), int(b), int(c), d) for a, b, c, d in re.findall(pattern, text, re.M)]


def _assert_recomputed_and_resumed(outputs: list[str]) -> None:
    lines = [line for text in outputs for line in _checkpoint_lines(text)]
    assert lines, "no checkpoint completed"
    ids = [line[0] for line in lines]
    assert ids == sorted(set(ids)), f"checkpoint ids keep increasing across runs: {ids}"
    # (c) the window operator recomputes and writes no state, except into the final
    # checkpoint (the last of a run that finished), which stores it for read_state
    assert all(r == "True" for _, _, _, r in lines), lines
    intermediate = [
        line
        for text in outputs
        for line in _checkpoint_lines(text)[: -1 if "\nfinished" in text else None]
    ]
    assert all(b == 0 for _, _, b, _ in intermediate), lines
    assert any(ns < cid for cid, ns, _, _ in lines), "no checkpoint ever needed a replay"
    records = int(re.search(r"^source records (\d+)$", outputs[-1], re.M).group(1))  # type: ignore[union-attr]
    assert records < N, f"the last run re-read all {N} records: it did not restore"


@pytest.mark.timeout(300)
def test_recompute_sliding_windows_sigkill_restore_latest_commit_every_window_once(
    seed: int, tmp_path: Path
) -> None:
    out, outputs = run_with_kills(seed, tmp_path, "windows")
    got = committed_windows(out / "windows")
    want = reference_windows(N)
    assert got == want, (
        f"{sum((got - want).values())} extra/duplicated, {sum((want - got).values())} missing"
    )
    _assert_recomputed_and_resumed(outputs)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["sum", "sum-incremental"])
def test_recompute_persisted_running_sum_and_recomputed_windows_sigkill_exact(
    seed: int, tmp_path: Path, mode: str
) -> None:
    # With incremental checkpoints too: the running sum's key
    # groups are shared between the checkpoints retention keeps back to the
    # null-state one.
    out, outputs = run_with_kills(seed, tmp_path, mode)
    assert committed_windows(out / "windows") == reference_windows(N)
    sums = read_parquet_dir(out / "sums")
    rows = list(zip(sums["key"].to_pylist(), sums["value"].to_pylist(), strict=True))
    assert len(rows) == len(set(rows)), "a running-sum row was committed twice"
    final: dict[int, int] = {}
    for key, value in rows:
        final[key] = max(final.get(key, 0), value)
    want: dict[int, int] = {}
    for v in range(N):
        want[v % KEYS] = want.get(v % KEYS, 0) + v
    assert final == want
    _assert_recomputed_and_resumed(outputs)
    # read_state of the final checkpoint (the storage root's newest) after the kills
    # equals the job's own final output: the persisted sums, and the recomputed
    # windows' (empty: every window fired) state, stored only in that checkpoint.
    chk = str(tmp_path / "chk")
    newest = max(completed_checkpoints(chk))
    assert inspect_checkpoint(f"{chk}/chk-{newest}")["final"] is True
    stored = ed.read_state(chk, "sum").to_pylist()
    assert {r["key"]: r["value"] for r in stored} == want
    assert ed.read_state(chk, "windows").num_rows == 0


def windowed_env(
    chk: Path, recovery: str, batch_size: int = 100, *, hold: bool = False, **extra: object
) -> tuple:
    """A sliding-window job over ``0..30_000``. Its source waits for checkpoints
    1 to 4 during the input (with the final one, at least five whatever the
    timing); with ``hold`` it stops before the end of its input and runs
    until cancelled (a test that cancels it then never races the end)."""
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(
            chk, interval="20ms", retained=1, recovery=recovery, **extra
        ),
        batch_size=batch_size,
    )
    source = CheckpointGatedSequence(
        chk, 30_000, splits=1, gates=(0.15, 0.3, 0.45, 0.6), hold=0.9 if hold else None
    )
    numbers = env.from_source(source).uid("numbers").set_parallelism(1)
    slow = numbers.map_batches(SleepPerBatch(0.002)).uid("slow").set_parallelism(1)
    keyed = slow.with_columns(key=ed.col("value") % KEYS, ts=ed.col("value")).set_parallelism(1)
    windows = (
        keyed.assign_timestamps("ts")
        .uid("ts")
        .set_parallelism(1)
        .key_by("key")
        .window(ed.Sliding("2s", "500ms"))
        .sum("value")
        .uid("windows")
    )
    return env, windows.collect()


@pytest.mark.timeout(120)
def test_recompute_checkpoints_hold_no_window_state(tmp_path: Path) -> None:
    sizes = {}
    for recovery in ("latest", "recompute"):
        env, out = windowed_env(tmp_path / recovery, recovery)
        result = env.execute(f"windows-{recovery}")
        got = Counter(
            (r["key"], r["window_start"], r["window_end"], r["value"]) for r in out.to_pylist()
        )
        assert got == reference_windows(30_000), recovery
        checkpoints = [c for c in result.checkpoints if c.kind == "checkpoint"]
        assert len(checkpoints) >= 5, f"{recovery}: {len(checkpoints)} checkpoints"
        sizes[recovery] = [c.operators["windows"].bytes for c in checkpoints]
        recomputes = {c.operators["windows"].recomputes for c in checkpoints}
        assert recomputes == {recovery == "recompute"}
        if recovery == "latest":
            assert all(c.null_state_checkpoint == c.id for c in checkpoints)
    assert max(sizes["latest"]) > 1_000, sizes["latest"]
    # (the final checkpoint stores the recomputing windows' final state, for read_state)
    assert sizes["recompute"][:-1] == [0] * (len(sizes["recompute"]) - 1)


@pytest.mark.timeout(120)
def test_recompute_retention_keeps_exactly_the_checkpoints_back_to_the_null_state_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk = tmp_path / "chk"
    env, _ = windowed_env(chk, "recompute", hold=True)
    client = env.execute_async("retention")
    wait_until(lambda: len(client.checkpoints) >= 8, timeout=60, what="8 checkpoints")
    client.cancel()
    with pytest.raises(ed.EddylineError):
        client.wait(timeout=60)
    stats = [c for c in client.checkpoints if c.kind == "checkpoint"]
    newest = stats[-1]
    want = [c.id for c in stats if c.id >= newest.null_state_checkpoint]
    assert sorted(completed_checkpoints(chk)) == want, newest.null_state_checkpoint
    assert len(want) > 1, "the windows span several checkpoints"
    # The command line shows the null-state checkpoint and who recomputes.
    capsys.readouterr()
    assert cli_main(["checkpoints", str(chk)]) == 0
    listing = capsys.readouterr().out
    assert "null-state" in listing
    assert cli_main(["checkpoints", str(chk / f"chk-{newest.id}")]) == 0
    inspected = capsys.readouterr().out
    assert f"null-state checkpoint {newest.null_state_checkpoint}" in inspected
    assert "recomputes from checkpoint" in inspected and "persisted" in inspected


@pytest.mark.timeout(120)
def test_recompute_replay_that_differs_is_refused(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    env, _ = windowed_env(chk, "recompute", hold=True)
    client = env.execute_async("original")
    wait_until(
        lambda: any(c.null_state_checkpoint < c.id for c in client.checkpoints[3:]),
        timeout=60,
        what="a checkpoint whose recovery replays",
    )
    client.cancel()
    with pytest.raises(ed.EddylineError):
        client.wait(timeout=60)
    # Another batch size cuts the input at other offsets: the recorded
    # barriers are not met, so the recomputed state could not be the same.
    env2, _ = windowed_env(chk, "recompute", batch_size=64)
    with pytest.raises(ed.CheckpointError, match="first emitted the barrier of checkpoint"):
        env2.execute("replay", restore_from="latest")


@pytest.mark.timeout(120)
def test_recompute_dedup_with_ttl_after_a_failure_is_exact(tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    n, ttl = 20_000, "300ms"

    def run(recovery: str, fail: bool) -> tuple[list[tuple[int, int]], ed.JobResult]:
        env = ed.StreamEnvironment(
            2,
            checkpoint=ed.CheckpointConfig(
                tmp_path / f"chk-{recovery}-{fail}", interval="20ms", recovery=recovery
            ),
            restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"),
            batch_size=100,
        )
        numbers = env.from_sequence(0, n).uid("numbers").set_parallelism(1)
        fn = FailOnce(
            SleepPerBatch(0.002),
            markers,
            column="value",
            at=n // 2,
            armed_by=tmp_path / f"chk-{recovery}-{fail}",
        )
        slow = (
            numbers.map_batches(fn if fail else SleepPerBatch(0.002)).uid("slow").set_parallelism(1)
        )
        # One channel into each dedup subtask: which record of a key is first
        # must not depend on how two channels interleave (determinism).
        keyed = slow.with_columns(key=ed.col("value") % 7, ts=ed.col("value")).set_parallelism(1)
        timed = keyed.assign_timestamps("ts").uid("ts").set_parallelism(1)
        deduped = timed.key_by("key").dedup(ttl).uid("dedup")
        out = deduped.collect()
        result = env.execute("dedup")
        return sorted((r["key"], r["value"]) for r in out.to_pylist()), result

    want, _ = run("latest", fail=False)
    assert len(want) > 7
    got, result = run("recompute", fail=True)
    assert result.restarts == 1
    assert got == want
    checkpoints = [c for c in result.checkpoints if c.kind == "checkpoint"]
    assert all(c.operators["dedup"].recomputes for c in checkpoints)
    assert any(c.null_state_checkpoint < c.id for c in checkpoints)


def test_a_source_subtask_finished_before_a_checkpoint_replays_its_end_before_it(
    tmp_path: Path,
) -> None:
    """A source subtask that had finished when a checkpoint was taken sent its
    final watermark before that checkpoint (FLIP-147: its channels carried no
    barrier). The recompute replay must re-inject that checkpoint's barrier
    after the final watermark: before it, the windows that fired ahead of the
    checkpoint fire after its barrier in the replay, pass the sink's
    drop-until-barrier, and are committed twice (chaos case seed 6: a session
    window under ProcessRunner lost a worker)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data, chk, out = tmp_path / "in", tmp_path / "chk", tmp_path / "out"
    data.mkdir()
    schema = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64())])
    # file 0: five rows, read and finished at once; file 1: 3000 rows, read slowly
    short = [{"id": i, "k": 0, "ts": i} for i in range(5)]
    long = [{"id": 100 + i, "k": i % 5, "ts": i * 10} for i in range(3_000)]
    for index, rows in enumerate([short, long]):
        pq.write_table(pa.Table.from_pylist(rows, schema=schema), data / f"part-{index}.parquet")
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="50ms", recovery="recompute"),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"),
        batch_size=50,
    )
    fail = FailOnce(None, tmp_path, column="id", at=2_600, armed_by=chk)
    stream = (
        env.from_parquet(data)
        .uid("src")
        .assign_timestamps("ts")
        .uid("ts")
        .map_batches(SleepPerBatch(0.02))
        .uid("slow")
        .map_batches(fail)
        .uid("fail")
    )
    windows = stream.key_by("k").window(ed.Tumbling("1s")).sum("id").uid("windows")
    windows.sink_to(ed.ParquetSink(out)).uid("sink")
    result = env.execute("finished-source")
    assert fail.fired_info() is not None and result.restarts == 1
    got = Counter((r["k"], r["window_start"], r["id"]) for r in read_parquet_dir(out).to_pylist())
    want: Counter[tuple[int, int, int]] = Counter()
    for row in short + long:
        want[(row["k"], row["ts"] - row["ts"] % 1_000)] += row["id"]
    assert got == Counter((k, start, total) for (k, start), total in want.items())
