"""Per-split event time whatever else reads the source (DESIGN.md "Event time per split").

``assign_timestamps`` right after a source keeps one watermark per split. A
second consumer of the same source (a raw copy into a sink, a keyed
aggregate, a Python map), taken before or after the assignment, must not
turn that into one watermark per subtask: the inputs below have splits that
run through event time at different speeds per batch (a sparse split covers
the hour in few rows, a dense one in many), so a subtask-wide watermark
makes the dense splits' rows late at once, while per split none is late.
Two assignments on one source are refused before the job runs.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir

HOUR_MS = 3_600_000
WINDOW_S = 60
BOUND = "5s"
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def write_files(directory: Path, seed: int) -> list[dict[str, Any]]:
    """Six files over the same hour, the k-th with ``300 * (k + 1)`` rows, each in
    time order up to 3 s of disorder (within the 5 s bound)."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    for f in range(6):
        n = 300 * (f + 1)
        ts = [i * HOUR_MS // n + rng.randrange(0, 3_000) for i in range(n)]
        part = [
            {"id": f * 10_000 + i, "k": i % 3, "ts": t, "v": 1 + i % 5} for i, t in enumerate(ts)
        ]
        pq.write_table(pa.Table.from_pylist(part), directory / f"part-{f}.parquet")
        rows.extend(part)
    return rows


class Speeds(ed.Source):
    """Bounded splits ``0..4``: split ``s`` steps ``(s + 1)`` seconds of event time
    per row, 40 rows a read, until the hour is over."""

    def schema(self) -> pa.Schema:
        return SCHEMA

    def splits(self) -> list[int]:
        return [0, 1, 2, 3]

    def read(self, split: int, offset: int, max_rows: int) -> tuple[pa.RecordBatch, int] | None:
        step = (split + 1) * 1_000
        if offset * step >= HOUR_MS:
            return None
        n = min(40, max_rows, (HOUR_MS - offset * step + step - 1) // step)
        rows = [
            {"id": split * 1_000_000 + i, "k": i % 3, "ts": i * step, "v": 1 + i % 5}
            for i in range(offset, offset + n)
        ]
        return pa.RecordBatch.from_pylist(rows, schema=self.schema()), offset + n

    @staticmethod
    def rows() -> list[dict[str, Any]]:
        out = []
        for split in range(4):
            step = (split + 1) * 1_000
            out.extend(
                {"id": split * 1_000_000 + i, "k": i % 3, "ts": i * step, "v": 1 + i % 5}
                for i in range((HOUR_MS + step - 1) // step)
            )
        return out


def reference(rows: list[dict[str, Any]]) -> dict[tuple[int, int], int]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for row in rows:
        sums[(row["k"], row["ts"] // (WINDOW_S * 1000) * WINDOW_S * 1000)] += row["v"]
    return dict(sums)


def window_sums(table: pa.Table, column: str) -> dict[tuple[int, int], int]:
    keys = zip(table["k"].to_pylist(), table["window_start"].to_pylist(), strict=True)
    return dict(zip(keys, table[column].to_pylist(), strict=True))


def second_consumer(kind: str, src: ed.DataStream, out: Path) -> ed.CollectHandle | None:
    if kind == "raw_copy":
        src.select("id", "ts").sink_to(ed.ParquetSink(str(out / "copy")))
    elif kind == "keyed_sum":
        return src.key_by("k").sum("v").collect()
    elif kind == "python_map":
        return src.map(lambda r: {"id": r["id"]}).collect()
    elif kind == "discard":
        src.select("id").sink_to(ed.DiscardSink())
    return None


@pytest.mark.parametrize("parallelism", [1, 2, 3], ids=lambda p: f"p{p}")
@pytest.mark.parametrize("kind", ["raw_copy", "keyed_sum", "python_map", "discard"])
@pytest.mark.parametrize("source", ["files", "user_source"])
@pytest.mark.parametrize("branch_first", [False, True], ids=["branch_after", "branch_before"])
def test_a_second_consumer_of_the_source_keeps_watermarks_per_split(
    tmp_path: Path, parallelism: int, kind: str, source: str, branch_first: bool
) -> None:
    env = ed.StreamEnvironment(parallelism, batch_size=40)
    if source == "files":
        rows = write_files(tmp_path / "in", seed=parallelism)
        src = env.from_parquet(str(tmp_path / "in")).name("src")
    else:
        rows = Speeds.rows()
        src = env.from_source(Speeds()).name("src")
    other = second_consumer(kind, src, tmp_path) if branch_first else None
    stamped = src.assign_timestamps("ts", max_out_of_orderness=BOUND).name("stamps")
    if not branch_first:
        other = second_consumer(kind, src, tmp_path)
    late = ed.OutputTag("late")
    windows = (
        stamped.key_by("k")
        .window(ed.Tumbling(f"{WINDOW_S}s"), late_output=late)
        .sum("v")
        .name("windows")
    )
    got = windows.collect()
    late_rows = windows.side_output(late).collect()
    env.execute("branches")

    assert late_rows.to_arrow().num_rows == 0, "rows were made late by another split's time"
    assert window_sums(got.to_arrow(), "v") == reference(rows)
    # The other branch still sees every row, once.
    if kind == "raw_copy":
        assert sorted(read_parquet_dir(tmp_path / "copy")["id"].to_pylist()) == sorted(
            r["id"] for r in rows
        )
    elif kind == "python_map":
        assert other is not None
        assert sorted(other.to_arrow()["id"].to_pylist()) == sorted(r["id"] for r in rows)
    elif kind == "keyed_sum":
        assert other is not None
        final: dict[int, int] = {}
        table = other.to_arrow()
        for k, v in zip(table["k"].to_pylist(), table["v"].to_pylist(), strict=True):
            final[k] = v if k not in final else max(final[k], v)
        expected: dict[int, int] = defaultdict(int)
        for r in rows:
            expected[r["k"]] += r["v"]
        assert final == dict(expected)


def test_the_assignment_is_built_right_after_its_source(
    tmp_path: Path,
) -> None:
    """The assignment runs in the source's task: the plan chains it right after
    the source, whatever else reads the source."""
    write_files(tmp_path / "in", seed=1)
    env = ed.StreamEnvironment(2)
    src = env.from_parquet(str(tmp_path / "in")).name("src")
    src.select("id").name("ids").sink_to(ed.DiscardSink())
    stamped = src.assign_timestamps("ts", max_out_of_orderness=BOUND).name("stamps")
    stamped.key_by("k").window(ed.Tumbling("60s")).sum("v").name("windows").collect()
    compiled = env._graph.compile(env._graph.sinks(), complete=True)
    names = [spec.name for spec in compiled.nodes]
    assert names.index("stamps") == names.index("src") + 1
    ids = compiled.nodes[names.index("ids")]
    assert [edge.node for edge in ids.inputs] == [names.index("stamps")]


def test_two_assignments_on_one_source_are_refused_before_the_job_runs() -> None:
    env = ed.StreamEnvironment(2)
    src = env.from_collection([{"ts": 1, "k": 0, "v": 1}]).name("src")
    a = src.assign_timestamps("ts").name("first")
    b = src.assign_timestamps("ts", max_out_of_orderness="1s").name("second")
    a.key_by("k").window(ed.Tumbling("1s")).sum("v").collect()
    b.key_by("k").window(ed.Tumbling("1s")).sum("v").collect()
    with pytest.raises(ed.GraphError) as info:
        env.execute("two")
    message = str(info.value)
    assert "'second'" in message and "'first'" in message, message
    assert "call assign_timestamps once and branch" in message, message


@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
def test_an_assignment_behind_filters_and_projections_keeps_watermarks_per_split(
    tmp_path: Path, parallelism: int
) -> None:
    """Native filters and projections chained between the source and the assigner
    emit one batch per batch at once, so they pass the source's split on."""
    rows = write_files(tmp_path / "in", seed=5)
    env = ed.StreamEnvironment(parallelism, batch_size=40)
    stamped = (
        env.from_parquet(str(tmp_path / "in"))
        .filter(ed.col("v") != 3)
        .with_columns(w=ed.col("v") * 2)
        .select("k", "ts", "w")
        .assign_timestamps("ts", max_out_of_orderness=BOUND)
    )
    late = ed.OutputTag("late")
    windows = stamped.key_by("k").window(ed.Tumbling(f"{WINDOW_S}s"), late_output=late).sum("w")
    got = windows.collect()
    late_rows = windows.side_output(late).collect()
    env.execute("behind-filters")
    assert late_rows.to_arrow().num_rows == 0, "rows were made late by another split's time"
    kept = [{**r, "v": r["v"] * 2} for r in rows if r["v"] != 3]
    assert window_sums(got.to_arrow(), "w") == reference(kept)


def _warnings(env: ed.StreamEnvironment, caplog: pytest.LogCaptureFixture) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="eddyline._graph"):
        env._graph.compile(env._graph.sinks(), complete=True)
    return [r.getMessage() for r in caplog.records if "assign_timestamps" in r.getMessage()]


def test_an_assignment_the_source_task_does_not_run_is_warned_of(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Behind Python operators in the source's task the assignment keeps watermarks
    per split, silently; where a branch or another parallelism takes it out of that
    task it keeps one per subtask, and compiling the job says so, naming the assigner,
    the source and what breaks the chain."""
    write_files(tmp_path / "in", seed=1)
    env = ed.StreamEnvironment(2)
    src = env.from_parquet(str(tmp_path / "in")).name("src")
    mapped = src.map(lambda r: r).name("m").map_batches(lambda b: b).name("mb")
    mapped.assign_timestamps("ts").name("stamps").key_by("k").sum("v").collect()
    assert _warnings(env, caplog) == []

    src.select("id").name("ids").sink_to(ed.DiscardSink())
    [message] = _warnings(env, caplog)
    assert "operator 'stamps' (assign_timestamps)" in message, message
    assert "source 'src' ('src' is read by another operator too)" in message, message
    assert "assign timestamps right after the source" in message, message

    env = ed.StreamEnvironment(2)
    src = env.from_parquet(str(tmp_path / "in")).name("src")
    wide = src.filter(lambda r: r["v"] > 1).name("odd").set_parallelism(3)
    wide.assign_timestamps("ts").name("stamps").key_by("k").sum("v").collect()
    [message] = _warnings(env, caplog)
    assert "('odd' runs at parallelism 3, the source at 2)" in message, message
