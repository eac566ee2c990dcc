"""Processing-time timers (API.md "Keyed state and timers"): registered per key,
fired by the task's own wake-up once the processing time reaches them (an
injected ManualClock: no sleeps), seen with ``ctx.time_domain ==
"processing_time"``, checkpointed, and a timer whose time passed while the
job was down fires right after the restore."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa

import eddyline as ed
from eddyline.testing import ManualClock
from support.faults import wait_until

START = 1_000_000
DELAY = 40
KEYS = 6
FIRED: set[int] = set()
"""The keys whose timer fired (on_timer adds them): the source ends once all did, so
that no subtask's input ends before its timers fired (pending processing-time timers
do not fire at the end of the input)."""
REGISTERED: set[int] = set()
"""The keys that registered their timer (the test advances the clock only then)."""
LOCK = threading.Lock()


def all_fired() -> bool:
    with LOCK:
        return len(FIRED) == KEYS


class UntilFired(ed.Source):
    """One batch of keyed rows, then nothing until a timer fired."""

    def schema(self) -> pa.Schema:
        return pa.schema([("k", pa.int64())])

    def read(self, split: Any, offset: Any, max_rows: int) -> Any:
        if offset == 0:
            return pa.record_batch([pa.array(range(KEYS), pa.int64())], names=["k"]), 1
        if all_fired():
            return None
        return None, offset


class Timeout(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        now = ctx.timer_service.current_processing_time()
        ctx.timer_service.register_processing_time_timer(now + DELAY)
        # A deleted timer never fires.
        ctx.timer_service.register_processing_time_timer(now + DELAY + 1)
        ctx.timer_service.delete_processing_time_timer(now + DELAY + 1)
        with LOCK:
            REGISTERED.add(ctx.key)
        return None

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> Any:
        with LOCK:
            FIRED.add(ctx.key)
        return [{"k": ctx.key, "at": timestamp, "domain": ctx.time_domain}]


def job(parallelism: int, tmp: Path) -> tuple[ed.StreamEnvironment, ed.CollectHandle]:
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(str(tmp / "chk"), interval="20ms")
    )
    out = env.from_source(UntilFired()).key_by("k").process(Timeout).name("timeout").collect()
    return env, out


def test_processing_time_timers_fire_when_the_clock_reaches_them(tmp_path: Path) -> None:
    FIRED.clear()
    REGISTERED.clear()
    with ManualClock(START) as clock:
        env, out = job(2, tmp_path)
        client = env.execute_async("timers")
        wait_until(
            lambda: len(REGISTERED) == KEYS, timeout=30, what="every key to register its timer"
        )
        assert not FIRED, "no timer fires before the clock reaches it"
        clock.advance(DELAY)
        client.wait(timeout=30)
    rows = sorted(out.to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": k, "at": START + DELAY, "domain": "processing_time"} for k in range(KEYS)]


def test_a_processing_time_timer_due_while_the_job_was_down_fires_after_the_restore(
    tmp_path: Path,
) -> None:
    FIRED.clear()
    REGISTERED.clear()
    with ManualClock(START) as clock:
        env, _ = job(2, tmp_path)
        client = env.execute_async("first")
        wait_until(
            lambda: len(REGISTERED) == KEYS, timeout=30, what="every key to register its timer"
        )
        savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
        client.wait(timeout=30)
        assert not FIRED
        clock.advance(10 * DELAY)  # the job is down meanwhile
        env2, out2 = job(3, tmp_path / "second")
        env2.execute("restored", restore_from=savepoint)
    rows = sorted(out2.to_pylist(), key=lambda r: r["k"])
    assert rows == [{"k": k, "at": START + DELAY, "domain": "processing_time"} for k in range(KEYS)]
