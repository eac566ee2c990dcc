"""Windows on a window's results (docs/API.md "Chaining windows"): a window's
output carries event time, its ``window_end`` minus 1 ms (Flink's timestamp of
a window result), and the watermark passes through, so a second window groups
the first one's results, none of them late, and equals a batch computation."""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import kill_after_checkpoints

MINUTE, HOUR = 60_000, 3_600_000


def _rows(seed: int, n: int = 6_000) -> list[dict[str, Any]]:
    """Event times over three hours, a little out of order (within 2 s)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        t = max(0, i * (3 * HOUR // n) - rng.randrange(2_000))
        rows.append({"k": rng.choice("abc"), "t": t, "v": rng.randrange(-20, 100)})
    return rows


def _hourly_reference(rows: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    frame = pd.DataFrame(rows)
    frame["hour"] = frame["t"] // HOUR * HOUR
    sums = frame.groupby(["k", "hour"])["v"].sum().reset_index()
    return sorted((r.k, int(r.hour), int(r.v)) for r in sums.itertuples())


@pytest.mark.parametrize("parallelism", [1, 2])
@pytest.mark.parametrize("timestamps", [False, True])
def test_minute_sums_into_hourly_sums_equal_pandas(parallelism: int, timestamps: bool) -> None:
    rows = _rows(parallelism)
    data = (
        [{**r, "t": pd.Timestamp(r["t"], unit="ms").to_pydatetime()} for r in rows]
        if timestamps
        else rows
    )
    env = ed.StreamEnvironment(parallelism, batch_size=500)
    late = ed.OutputTag("late")
    minutes = (
        env.from_collection(data)
        .assign_timestamps("t", max_out_of_orderness="2s")
        .key_by("k")
        .window(ed.Tumbling("1min"))
        .sum("v")
    )
    hours = minutes.key_by("k").window(ed.Tumbling("1h"), late_output=late).sum("v")
    out, dropped = hours.collect(), hours.side_output(late).collect()
    env.execute("chained-windows")
    got = [
        (
            r["k"],
            int(pd.Timestamp(r["window_start"]).value // 1_000_000)
            if timestamps
            else r["window_start"],
            r["v"],
        )
        for r in out.to_pylist()
    ]
    assert sorted(got) == _hourly_reference(rows)
    assert dropped.to_pylist() == []
    assert hours.schema is not None and hours.schema.names == [
        "k",
        "window_start",
        "window_end",
        "v",
    ]


def _first_stage(kind: str, keyed: ed.KeyedStream) -> ed.DataStream:
    if kind == "sliding":
        return keyed.window(ed.Sliding("2min", "1min")).sum("v")
    if kind == "session":
        return keyed.window(ed.Session("30s")).sum("v")
    if kind == "reduce":
        return keyed.window(ed.Tumbling("1min")).reduce(
            lambda acc, row: {**acc, "v": acc["v"] + row["v"]}
        )
    assert kind == "apply"
    return keyed.window(ed.Tumbling("1min")).apply(
        lambda key, window, rows: [{"v": sum(r["v"] for r in rows)}],
        schema=pa.schema(
            [
                ("k", pa.string()),
                ("window_start", pa.int64()),
                ("window_end", pa.int64()),
                ("v", pa.int64()),
            ]
        ),
    )


@pytest.mark.parametrize("kind", ["sliding", "session", "reduce", "apply"])
def test_every_window_kind_feeds_a_window_by_its_end_minus_one_ms(kind: str) -> None:
    # The reference: the first stage's own results, grouped by hour of their
    # window_end - 1 ms in pandas.
    rows = _rows(7, n=3_000)

    def first(env: ed.StreamEnvironment) -> ed.DataStream:
        stream = env.from_collection(rows).assign_timestamps("t", max_out_of_orderness="2s")
        return _first_stage(kind, stream.key_by("k"))

    env = ed.StreamEnvironment(2, batch_size=300)
    stage = first(env).collect()
    env.execute("first-stage")
    results = pd.DataFrame(stage.to_pylist())
    assert len(results) > 3 * 6, "each key needs many first-stage results"
    results["hour"] = (results["window_end"] - 1) // HOUR * HOUR
    sums = results.groupby(["k", "hour"])["v"].sum().reset_index()
    expected = sorted((r.k, int(r.hour), int(r.v)) for r in sums.itertuples())

    env = ed.StreamEnvironment(2, batch_size=300)
    late = ed.OutputTag("late")
    hours = first(env).key_by("k").window(ed.Tumbling("1h"), late_output=late).sum("v")
    out, dropped = hours.collect(), hours.side_output(late).collect()
    env.execute("chained")
    assert sorted((r["k"], r["window_start"], r["v"]) for r in out.to_pylist()) == expected
    assert dropped.to_pylist() == []


def test_a_window_result_without_window_end_has_no_event_time() -> None:
    env = ed.StreamEnvironment(1)
    minutes = (
        env.from_collection(_rows(1, n=10))
        .assign_timestamps("t")
        .key_by("k")
        .window(ed.Tumbling("1min"))
        .sum("v")
        .name("minutes")
    )
    dropped = minutes.select("k", "v").name("no_end")
    with pytest.raises(ed.GraphError, match="after 'no_end': the stream has no event time"):
        dropped.key_by("k").window(ed.Tumbling("1h"))


CHAINED_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    rows = numbers.with_columns(
        k=ed.col("value") % 3, t=ed.col("value") * 97, v=ed.col("value") % 11
    ).uid("rows")
    slow = rows.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    minutes = (
        slow.assign_timestamps("t").uid("ts")
        .key_by("k").window(ed.Tumbling("1min")).sum("v").uid("minutes")
    )
    hours = minutes.key_by("k").window(ed.Tumbling("1h")).sum("v").uid("hours")
    hours.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    env.execute("chained-killable", restore_from="latest")
    """
)


@pytest.mark.timeout(240)
def test_chained_windows_killed_and_restored_equal_pandas(tmp_path: Path) -> None:
    n = 60_000
    script = tmp_path / "job.py"
    script.write_text(CHAINED_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(n)]
    outputs = kill_after_checkpoints(command, chk, kills=2, rng=random.Random(5), timeout=120)
    assert len(outputs) == 3
    frame = pd.DataFrame({"value": range(n)})
    frame["k"], frame["t"], frame["v"] = frame.value % 3, frame.value * 97, frame.value % 11
    frame["hour"] = frame.t // HOUR * HOUR
    sums = frame.groupby(["k", "hour"])["v"].sum().reset_index()
    expected = sorted((int(r.k), int(r.hour), int(r.v)) for r in sums.itertuples())
    table = read_parquet_dir(out)
    got = sorted(
        zip(
            table["k"].to_pylist(),
            table["window_start"].to_pylist(),
            table["v"].to_pylist(),
            strict=True,
        )
    )
    assert got == expected
