"""Event time per split (FLIP-27; DESIGN.md "Event time per split").

A source subtask reads its splits interleaved and keeps one watermark per
split, emitting their minimum, so one file's timestamps never make another
file's rows late; ``assign_timestamps(..., idle_timeout=...)`` lets a split
without data stop holding the watermark back; every split of a user source
makes progress, also when all are unbounded.
"""

from __future__ import annotations

import random
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import wait_until

WINDOW_MS = 1_000
TIMEOUT_S = 30.0


def write_event_files(directory: Path, files: int, rows: int, seed: int) -> list[dict[str, Any]]:
    """``files`` Parquet files, each covering the same hour of event time.

    Each file is one producer: its rows are in time order up to 3 s of
    disorder (the bound the tests use is 5 s), so a subtask that read its
    files one after another would find the second file's rows late.
    """
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    everything: list[dict[str, Any]] = []
    for f in range(files):
        ts = [i * 3_600_000 // rows + rng.randrange(0, 3_000) for i in range(rows)]
        table = pa.table(
            {
                "ts": pa.array(ts, pa.timestamp("ms")),
                "k": [f"key{rng.randrange(3)}" for _ in range(rows)],
                "v": [rng.randrange(100) for _ in range(rows)],
            }
        )
        pq.write_table(table, directory / f"part-{f}.parquet")
        everything.extend(
            {"ts": t, "k": k, "v": v}
            for t, k, v in zip(ts, table["k"].to_pylist(), table["v"].to_pylist(), strict=True)
        )
    return everything


def reference_window_sums(rows: list[dict[str, Any]]) -> dict[tuple[str, int], int]:
    """Plain-Python tumbling-window sums: nothing is late."""
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for row in rows:
        sums[(row["k"], row["ts"] // WINDOW_MS * WINDOW_MS)] += row["v"]
    return dict(sums)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_event_time_files_of_a_subtask_are_read_interleaved_and_lose_no_event(
    tmp_path: Path, parallelism: int
) -> None:
    rows = write_event_files(tmp_path / "events", files=4, rows=2_000, seed=12)
    env = ed.StreamEnvironment(parallelism, batch_size=50)
    # The README's pattern.
    events = env.from_parquet(str(tmp_path / "events")).assign_timestamps(
        "ts", max_out_of_orderness="5s"
    )
    windows = events.key_by("k").window(ed.Tumbling("1s")).sum("v").name("win")
    out = windows.collect()
    result = env.execute("files")
    table = out.to_arrow()
    got = dict(
        zip(
            zip(
                table["k"].to_pylist(),
                table["window_start"].cast(pa.int64()).to_pylist(),
                strict=True,
            ),
            table["v"].to_pylist(),
            strict=True,
        )
    )
    assert len(got) == table.num_rows, "a window fired twice"
    assert result.metrics["operators"]["win"]["late_records"] == 0
    assert got == reference_window_sums(rows)


class Ticks(ed.Source):
    """Unbounded splits: every read of split ``name`` returns one row
    ``{split, n, ts}``; ``quiet`` splits return their rows only up to
    ``quiet_after`` and then have nothing (but never end)."""

    def __init__(self, names: list[str], quiet: frozenset[str] = frozenset(), quiet_after: int = 0):
        self.names = names
        self.quiet = quiet
        self.quiet_after = quiet_after

    def schema(self) -> pa.Schema:
        return pa.schema([("split", pa.string()), ("n", pa.int64()), ("ts", pa.int64())])

    def splits(self) -> list[str]:
        return self.names

    def read(self, split: str, offset: int, max_rows: int) -> tuple[pa.RecordBatch | None, int]:
        if split in self.quiet and offset >= self.quiet_after:
            time.sleep(0.001)  # an idle split is the thing under test
            return None, offset
        time.sleep(0.0005)  # throttle, not a wait: the splits' batches interleave
        batch = pa.record_batch(
            [
                pa.array([split]),
                pa.array([offset], pa.int64()),
                pa.array([offset * 100], pa.int64()),
            ],
            schema=self.schema(),
        )
        return batch, offset + 1


def test_event_time_unbounded_user_source_splits_all_make_progress(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(
        1, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms")
    )
    source = env.from_source(Ticks(["a", "b", "c"])).name("ticks").uid("ticks")
    source.sink_to(ed.ParquetSink(str(tmp_path / "out"))).name("out").uid("out")
    client = env.execute_async("ticks")
    wait_until(
        lambda: client.metrics()["operators"]["ticks"]["records_out"] >= 300,
        timeout=TIMEOUT_S,
        what="300 records read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    rows = read_parquet_dir(tmp_path / "out").to_pylist()
    per_split: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        per_split[row["split"]].append(row["n"])
    # Every split progressed, a batch of each in turn.
    counts = {s: len(ns) for s, ns in per_split.items()}
    assert set(counts) == {"a", "b", "c"}, counts
    assert max(counts.values()) - min(counts.values()) <= 1, counts
    for ns in per_split.values():
        assert sorted(ns) == list(range(len(ns)))
    # The savepoint holds one offset per split: the resumed run goes on
    # with every split exactly where it stopped.
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms")
    )
    source = env.from_source(Ticks(["a", "b", "c"])).name("ticks").uid("ticks")
    source.sink_to(ed.ParquetSink(str(tmp_path / "out"))).name("out").uid("out")
    client = env.execute_async("resumed", restore_from=savepoint)
    wait_until(
        lambda: client.metrics()["operators"]["ticks"]["records_out"] >= 150,
        timeout=TIMEOUT_S,
        what="150 more records read",
    )
    client.stop_with_savepoint(str(tmp_path / "sp2"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    per_split = defaultdict(list)
    for row in read_parquet_dir(tmp_path / "out").to_pylist():
        per_split[row["split"]].append(row["n"])
    for split, ns in per_split.items():
        assert sorted(ns) == list(range(len(ns))), f"split {split} lost or repeated rows"
        assert len(ns) > counts[split], f"split {split} made no progress after the restore"


@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
@pytest.mark.parametrize("idle_timeout", [None, "200ms"])
def test_event_time_idle_timeout_lets_an_idle_split_stop_holding_the_watermark(
    idle_timeout: str | None, parallelism: int
) -> None:
    """Split "quiet" delivers its first row (ts 0) and then nothing, forever;
    split "busy" moves on (100 ms of event time per row). At parallelism 1
    one subtask reads both (an idle split); at parallelism 2 each subtask
    reads one, and the window subtasks combine both (an idle subtask)."""
    env = ed.StreamEnvironment(parallelism)
    stamped = env.from_source(Ticks(["busy", "quiet"], frozenset({"quiet"}), quiet_after=1))
    if idle_timeout is None:
        stamped = stamped.assign_timestamps("ts")
    else:
        stamped = stamped.assign_timestamps("ts", idle_timeout=idle_timeout)
    stamped.key_by("split").window(ed.Tumbling("1s")).count().name("windows").collect()
    client = env.execute_async("idle")
    try:
        if idle_timeout is None:
            # The quiet split holds the watermark at its first row: no window fires.
            # A watermark travels in order with the rows (emitted after each batch),
            # so once 300 rows reached the windows they have taken the watermarks of
            # the busy split's first ~290 rows (29 s of event time): had those not
            # been held back, windows would have fired by then.
            wait_until(
                lambda: client.metrics()["operators"]["windows"]["records_in"] >= 300,
                timeout=TIMEOUT_S,
                what="300 rows to reach the windows",
            )
            assert client.metrics()["operators"]["windows"]["records_out"] == 0
        else:
            wait_until(
                lambda: client.metrics()["operators"]["windows"]["records_out"] >= 3,
                timeout=TIMEOUT_S,
                what="windows of the busy split to fire while the quiet split idles",
            )
    finally:
        client.cancel()


def test_event_time_idle_timeout_is_validated_and_needs_a_source_before_it() -> None:
    env = ed.StreamEnvironment(1)
    s = env.from_collection([{"t": 1}])
    with pytest.raises(ValueError, match="idle_timeout"):
        s.assign_timestamps("t", idle_timeout="0s")
    with pytest.raises(ed.GraphError, match="right after a source"):
        s.map(lambda r: r).assign_timestamps("t", idle_timeout="1s")
