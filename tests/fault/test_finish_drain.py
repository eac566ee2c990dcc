"""(d) Draining fires the pending event-time window; stopping without drain keeps it.

The event time of a record is its id (ms), with no out-of-orderness, so after
the source read ``R`` records the watermark is ``R - 2`` and the window holding
``R - 1`` is still open. ``stop_with_savepoint(drain=True)`` emits the maximum
watermark first, so that window fires with the records read so far;
``drain=False`` leaves it in the savepoint, and resuming from it to the end
fires it exactly once, complete. The same holds for event-time timers of a
keyed process function that counts per window (timers and the counts are
keyed state in the savepoint).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 20_000
WINDOW_MS = 1000
KEYS = 3
TIMEOUT_S = 30.0


class CountPerWindow(ed.ProcessFunction):
    """A tumbling count built from keyed state and event-time timers (one per key and window)."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        assert ctx.timestamp is not None
        start = ctx.timestamp - ctx.timestamp % WINDOW_MS
        count = ctx.get_state(f"n{start}", 0)
        count.update(count.value() + 1)
        ctx.timer_service.register_event_time_timer(start + WINDOW_MS - 1)

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        start = timestamp + 1 - WINDOW_MS
        count = ctx.get_state(f"n{start}", 0)
        row = {"k": ctx.key, "window_start": start, "window_end": start + WINDOW_MS}
        row["count"] = count.value()
        count.clear()
        return [row]


def build(chk: Path, out: Path, *, sleep: float, kind: str) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        1, checkpoint=ed.CheckpointConfig(str(chk), interval="200ms"), batch_size=50
    )
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow")
    stamped = slow.assign_timestamps("value").name("stamps").uid("stamps")
    keyed = stamped.with_columns(k=ed.col("value") % KEYS).name("key").uid("key").key_by("k")
    if kind == "window":
        windows = keyed.window(ed.Tumbling(WINDOW_MS / 1000)).count()
    else:
        windows = keyed.process(CountPerWindow())
    windows.name("win").uid("win").sink_to(ed.ParquetSink(str(out))).name("out").uid("out")
    return env


KINDS = pytest.mark.parametrize("kind", ["window", "timers"])


def expected(values: range) -> Counter[tuple[int, int, int, int]]:
    counts: Counter[tuple[int, int]] = Counter((v % KEYS, v - v % WINDOW_MS) for v in values)
    return Counter({(k, s, s + WINDOW_MS, n): 1 for (k, s), n in counts.items()})


def committed(out: Path) -> Counter[tuple[int, int, int, int]]:
    rows: list[dict[str, Any]] = read_parquet_dir(out).to_pylist()
    return Counter((r["k"], r["window_start"], r["window_end"], r["count"]) for r in rows)


def run_until_stopped(
    chk: Path, out: Path, savepoints: Path, *, drain: bool, kind: str
) -> tuple[int, str]:
    client = build(chk, out, sleep=0.01, kind=kind).execute_async(f"drain={drain}")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 2 * WINDOW_MS + 200,
        timeout=TIMEOUT_S,
        what="two windows' worth of input",
    )
    savepoint = client.stop_with_savepoint(str(savepoints), drain=drain)
    result = client.wait(timeout=TIMEOUT_S)
    read = int(result.metrics["operators"]["numbers"]["records_out"])
    assert 0 < read < N, f"stopped after {read} of {N} records: not mid-run"
    return read, savepoint


@KINDS
def test_finish_drain_fires_the_pending_window(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    read, _ = run_until_stopped(tmp_path / "chk", out, tmp_path / "sp", drain=True, kind=kind)
    pending_start = (read - 1) - (read - 1) % WINDOW_MS
    got = committed(out)
    assert got == expected(range(read))
    assert any(start == pending_start for _, start, _, _ in got), "the open window did not fire"


@KINDS
def test_finish_stop_without_drain_keeps_the_window_until_resumed(
    tmp_path: Path, kind: str
) -> None:
    chk, out = tmp_path / "chk", tmp_path / "out"
    read, savepoint = run_until_stopped(chk, out, tmp_path / "sp", drain=False, kind=kind)
    watermark = read - 2
    fired_windows = range(0, read)
    before = committed(out)
    fired = expected(fired_windows)
    fired = Counter({row: n for row, n in fired.items() if row[2] - 1 <= watermark})
    assert before == fired, "without drain exactly the windows over at the watermark fire"
    pending_start = (read - 1) - (read - 1) % WINDOW_MS
    assert all(start != pending_start for _, start, _, _ in before)

    build(chk, out, sleep=0.0, kind=kind).execute("resumed", restore_from=savepoint)
    after = committed(out)
    assert after == expected(range(N)), "after the resume every window fires once, complete"
