"""State TTL of keyed ProcessFunctions: processing time since the last
write, on an injected clock (``eddyline.testing.ManualClock``: no sleeps).

An expired value, list element or map entry is never returned (checked against a
plain-Python reference), is not part of a checkpoint (its bytes are absent from
the checkpoint's files), and stays expired when a job restores a checkpoint
after its time passed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import ManualClock
from support.faults import SleepPerBatch, wait_until

CLOCK = ManualClock(0)
"""The clock of the test running; a row's ``now`` sets it (this module is
imported by reference when the job pickles the function, so all share it)."""


@pytest.fixture(autouse=True)
def clock() -> Iterator[ManualClock]:
    """A fresh clock at 0 for each test (a clock never goes back)."""
    global CLOCK
    CLOCK = ManualClock(0)
    with CLOCK:
        yield CLOCK


TTL_MS = 10_000


class WithTtl(ed.ProcessFunction):
    """Reads, then writes, a value, a list and a map state with a 10 s ttl."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        CLOCK.set(row["now"])
        value = ctx.get_state("last", ttl="10s")
        seen = ctx.get_list_state("seen", ttl=10)
        latest = ctx.get_map_state("latest", ttl=10.0)
        before = value.value()
        value.update(row["v"])
        seen.add(row["v"])
        latest.put(row["v"] % 3, row["v"])
        return [
            {
                "k": ctx.key,
                "now": row["now"],
                "before": before,
                "seen": ",".join(map(str, seen.get())),
                "latest": ",".join(f"{b}={v}" for b, v in sorted(latest.items())),
                "clock": ctx.timer_service.current_processing_time(),
            }
        ]


def _reference(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same in plain Python: an entry written at t lives while now < t + ttl."""
    value: dict[int, tuple[int, int]] = {}
    seen: dict[int, list[tuple[int, int]]] = {}
    latest: dict[int, dict[int, tuple[int, int]]] = {}
    out = []
    for r in rows:
        k, now, v = r["k"], r["now"], r["v"]
        held = value.get(k)
        before = held[0] if held is not None and now < held[1] + TTL_MS else None
        value[k] = (v, now)
        seen[k] = [(x, t) for x, t in seen.get(k, []) if now < t + TTL_MS] + [(v, now)]
        m = {b: (x, t) for b, (x, t) in latest.get(k, {}).items() if now < t + TTL_MS}
        m[v % 3] = (v, now)
        latest[k] = m
        out.append(
            {
                "k": k,
                "now": now,
                "before": before,
                "seen": ",".join(str(x) for x, _ in seen[k]),
                "latest": ",".join(f"{b}={x}" for b, (x, _) in sorted(m.items())),
                "clock": now,
            }
        )
    return out


def _rows(n: int) -> list[dict[str, Any]]:
    # Irregular gaps around the ttl, three keys, time never going back.
    rows, now = [], 0
    for i in range(n):
        now += (i * 7919) % 6_000
        rows.append({"k": i % 3, "now": now, "v": i})
    return rows


def test_expired_values_list_elements_and_map_entries_are_never_returned() -> None:
    rows = _rows(400)
    env = ed.StreamEnvironment(1, batch_size=17)
    out = env.from_arrow(pa.Table.from_pylist(rows)).key_by("k").process(WithTtl()).collect()
    env.execute("ttl")
    assert out.to_pylist() == _reference(rows)


def _job(env: ed.StreamEnvironment, rows: list[dict[str, Any]], source: str) -> ed.CollectHandle:
    table = pa.Table.from_pylist(rows)
    stream = env.from_arrow(table).name(source).uid(source)
    return stream.key_by("k").process(WithTtl()).name("state").uid("state").collect()


def test_a_checkpoint_holds_no_expired_entry(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    rows = [
        {"k": 1, "now": 0, "v": 111_111_111},
        {"k": 2, "now": 5_000, "v": 222_222_222},
        {"k": 2, "now": 12_000, "v": 333_333_333},
    ]
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(chk, interval="1h"))
    _job(env, rows, "rows")
    result = env.execute("ttl-checkpoint")
    final = max(result.checkpoints, key=lambda c: c.id)
    # The process function's state files (the source's state holds its input rows).
    blobs = b"".join(p.read_bytes() for p in Path(final.path).glob("state-*.state"))
    assert blobs, "no state file of the process function"
    # Key 1's entries (written at 0) expired at 10 s; the final checkpoint is at 12 s.
    assert (111_111_111).to_bytes(4, "little") not in blobs
    assert (333_333_333).to_bytes(4, "little") in blobs, "the live value is in the checkpoint"


def _endless(env: ed.StreamEnvironment, now: int) -> ed.CollectHandle:
    """One key's rows, all at processing time ``now``, until stopped."""
    numbers = env.from_sequence(0, 10**9).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.002)).name("slow").uid("slow")
    rows = slow.select(ed.lit(1).alias("k"), ed.lit(now).alias("now"), ed.col("value").alias("v"))
    return rows.key_by("k").process(WithTtl()).name("state").uid("state").collect()


def _run_until_rows(
    env: ed.StreamEnvironment, out: ed.CollectHandle, savepoint: Path, **kw: Any
) -> str:
    client = env.execute_async("ttl-run", **kw)
    wait_until(
        lambda: client.metrics()["operators"]["state"]["records_out"] > 0,
        timeout=30,
        what="a row through the process function",
    )
    path = client.stop_with_savepoint(savepoint)
    client.wait(timeout=30)
    return path


@pytest.mark.parametrize(("later", "expired"), [(9_999, False), (10_000, True)])
def test_a_restored_entry_whose_time_passed_while_the_job_was_down_is_expired(
    tmp_path: Path, later: int, expired: bool
) -> None:
    chk = ed.CheckpointConfig(tmp_path / "chk", interval="1h")
    env = ed.StreamEnvironment(1, checkpoint=chk, batch_size=10)
    first = _endless(env, 0)
    savepoint = _run_until_rows(env, first, tmp_path / "sp1")
    last = int(first.to_pylist()[-1]["seen"].split(",")[-1])
    env = ed.StreamEnvironment(1, checkpoint=chk, batch_size=10)
    second = _endless(env, later)
    _run_until_rows(env, second, tmp_path / "sp2", restore_from=savepoint)
    row = second.to_pylist()[0]
    assert row["before"] == (None if expired else last)
    seen = [int(v) for v in row["seen"].split(",")]
    assert seen == ([last + 1] if expired else list(range(last + 2)))
    assert row["latest"].count("=") == (1 if expired else 3)


def test_a_bad_ttl_names_the_operator_and_the_state() -> None:
    class BadTtl(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.get_map_state("m", ttl="-5s")

    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 3).key_by("value").process(BadTtl()).name("bad-ttl").collect()
    with pytest.raises(ed.EddylineError, match=r"'bad-ttl'.*'m'"):
        env.execute()
