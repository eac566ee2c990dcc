"""Session windows (``ed.Session(gap)``, API.md "Windows") against a pandas
reference at parallelism 1, 2 and 4 with out-of-order input (hypothesis
over random event sets: a row bridging two sessions merges them), late rows
to the side output, and a savepoint resumed at another parallelism."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eddyline as ed
from eddyline.testing import assert_same_rows, read_parquet_dir
from support.faults import SleepPerBatch, wait_until

SCHEMA = pa.schema([("k", pa.int64()), ("t", pa.int64()), ("v", pa.int64())])


def reference(rows: list[dict[str, int]], gap: int) -> list[dict[str, int]]:
    """Per key: sort by time, a new session where the next row is >= gap later."""
    df = pd.DataFrame(rows, columns=["k", "t", "v"]).sort_values(["k", "t"])
    df["new"] = df.groupby("k")["t"].diff().fillna(gap) >= gap
    df["session"] = df.groupby("k")["new"].cumsum()
    g = df.groupby(["k", "session"]).agg(first=("t", "min"), final=("t", "max"), v=("v", "sum"))
    return [
        {"k": int(k), "window_start": int(first), "window_end": int(final) + gap, "v": int(v)}
        for (k, _), first, final, v in zip(g.index, g["first"], g["final"], g["v"], strict=True)
    ]


def shuffled(rows: list[dict[str, int]], rng: random.Random, bound: int) -> list[dict[str, int]]:
    """``rows`` (sorted by time) out of order by at most ``bound`` ms."""
    out = list(rows)
    for i in range(len(out) - 1):
        if rng.random() < 0.4 and out[i + 1]["t"] - out[i]["t"] <= bound:
            out[i], out[i + 1] = out[i + 1], out[i]
    return out


def sessions_job(
    rows: list[dict[str, int]], gap: int, parallelism: int, bound: int, batch_size: int = 32
) -> list[dict[str, Any]]:
    env = ed.StreamEnvironment(parallelism, batch_size=batch_size)
    s = env.from_collection(rows, schema=SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{bound}ms"
    )
    out = s.key_by("k").window(ed.Session(f"{gap}ms")).sum("v").name("sessions").collect()
    result = env.execute("sessions")
    assert result.metrics["operators"]["sessions"]["late_records"] == 0
    return out.to_pylist()


def generate(rng: random.Random, n: int, keys: int, gap: int) -> list[dict[str, int]]:
    t, rows = 0, []
    for i in range(n):
        # Steps around the gap: sessions of a few rows, some exactly gap apart.
        t += rng.choice([1, gap // 2, gap - 1, gap, gap + 1, 3 * gap])
        rows.append({"k": rng.randrange(keys), "t": t, "v": i})
    return rows


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_session_sums_match_pandas(parallelism: int) -> None:
    rng = random.Random(parallelism)
    rows = generate(rng, 800, 7, 40)
    got = sessions_job(shuffled(rows, rng, 30), 40, parallelism, 30)
    want = reference(rows, 40)
    assert len(want) > 50
    assert_same_rows(got, want)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    gap=st.integers(1, 50),
    parallelism=st.sampled_from([1, 2, 4]),
)
def test_session_random_events_match_pandas(seed: int, gap: int, parallelism: int) -> None:
    rng = random.Random(seed)
    rows = generate(rng, rng.randrange(1, 150), rng.randrange(1, 5), gap)
    got = sessions_job(shuffled(rows, rng, 2 * gap), gap, parallelism, 2 * gap, batch_size=8)
    assert_same_rows(got, reference(rows, gap))


def test_session_count_min_max_and_timestamp_columns() -> None:
    env = ed.StreamEnvironment()
    ts = pa.array([0, 1_000, 20_000, 20_500], pa.timestamp("ms"))
    table = pa.table({"k": ["a", "a", "a", "b"], "t": ts, "v": [1.5, 2.5, 4.0, 8.0]})
    s = env.from_arrow(table).assign_timestamps("t")
    keyed = s.key_by("k").window(ed.Session("10s"))
    counts, highs = keyed.count().collect(), keyed.max("v").collect()
    env.execute("sessions")
    start = pa.array([0, 20_000, 20_500], pa.timestamp("ms")).to_pylist()
    end = pa.array([11_000, 30_000, 30_500], pa.timestamp("ms")).to_pylist()
    assert sorted(counts.to_pylist(), key=lambda r: (r["k"], r["window_start"])) == [
        {"k": "a", "window_start": start[0], "window_end": end[0], "count": 2},
        {"k": "a", "window_start": start[1], "window_end": end[1], "count": 1},
        {"k": "b", "window_start": start[2], "window_end": end[2], "count": 1},
    ]
    assert sorted(r["v"] for r in highs.to_pylist()) == [2.5, 4.0, 8.0]


def test_session_late_rows_go_to_the_side_output() -> None:
    rows = [{"k": 1, "t": t, "v": 1} for t in (0, 5, 100, 200)]
    rows.append({"k": 1, "t": 3, "v": 7})  # late: its session [3, 13) is over
    rows.append({"k": 1, "t": 195, "v": 2})  # not late: joins the open [200, 210)
    env = ed.StreamEnvironment(batch_size=1)
    tag = ed.OutputTag("late")
    s = env.from_collection(rows, schema=SCHEMA).assign_timestamps("t")
    sums = s.key_by("k").window(ed.Session("10ms"), late_output=tag).sum("v").name("sessions")
    out, late = sums.collect(), sums.side_output(tag).collect()
    env.execute("late")
    assert late.to_pylist() == [{"k": 1, "t": 3, "v": 7}]
    assert sorted((r["window_start"], r["window_end"], r["v"]) for r in out.to_pylist()) == [
        (0, 15, 2),
        (100, 110, 1),
        (195, 210, 3),
    ]


@pytest.mark.parametrize("parallelism", [1, 3])
def test_session_reduce_and_apply_match_the_native_sums(parallelism: int) -> None:
    rng = random.Random(17 + parallelism)
    rows = generate(rng, 500, 5, 30)
    env = ed.StreamEnvironment(parallelism, batch_size=16)
    s = env.from_collection(shuffled(rows, rng, 20), schema=SCHEMA).assign_timestamps(
        "t", max_out_of_orderness="20ms"
    )
    windows = s.key_by("k").window(ed.Session("30ms"))
    reduced = windows.reduce(lambda a, b: {**b, "v": a["v"] + b["v"]}).collect()
    applied = windows.apply(
        lambda key, w, rs: [
            {"n": len(rs), "total": sum(r["v"] for r in rs), "span": w.end - w.start}
        ]
    ).collect()
    env.execute("session-python")
    want = reference(rows, 30)
    assert_same_rows(
        [{c: r[c] for c in ("k", "window_start", "window_end", "v")} for r in reduced.to_pylist()],
        want,
    )
    assert_same_rows(
        [
            {
                "k": r["k"],
                "window_start": r["window_start"],
                "window_end": r["window_end"],
                "v": r["total"],
            }
            for r in applied.to_pylist()
        ],
        want,
    )
    assert sum(r["n"] for r in applied.to_pylist()) == len(rows)


def test_session_bad_gap_and_columns_are_clear_errors() -> None:
    env = ed.StreamEnvironment()
    keyed = env.from_collection([{"k": 1, "t": 0, "v": 1}]).assign_timestamps("t").key_by("k")
    with pytest.raises(ValueError, match="session gap"):
        ed.Session(0)
    with pytest.raises(ed.GraphError, match="column 'nope' is not in the input schema"):
        keyed.window(ed.Session("1s")).sum("nope")


N = 20_000


def build(parallelism: int, chk: Path, out: Path, *, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"), batch_size=100
    )
    s = (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .set_parallelism(1)
        .map_batches(SleepPerBatch(sleep), schema=pa.schema([pa.field("value", pa.int64(), False)]))
        .set_parallelism(1)
        .with_columns(k=ed.col("value") % 7, t=ed.col("value") * 3 + ed.col("value") // 500 * 100)
        .set_parallelism(1)
        .assign_timestamps("t", max_out_of_orderness="10ms")
        .uid("ts")
        .set_parallelism(1)
    )
    w = s.key_by("k").window(ed.Session("40ms")).sum("value").name("sessions").uid("sessions")
    w.sink_to(ed.ParquetSink(str(out))).uid("out")
    return env


def test_session_savepoint_resumes_exactly_at_another_parallelism(tmp_path: Path) -> None:
    env = build(2, tmp_path / "chk", tmp_path / "out1", sleep=0.003)
    client = env.execute_async("stopped")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 4,
        timeout=60,
        what="a quarter of the input",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=60)
    build(3, tmp_path / "chk2", tmp_path / "out2", sleep=0.0).execute(
        "resumed", restore_from=savepoint
    )
    got = (
        read_parquet_dir(tmp_path / "out1").to_pylist()
        + read_parquet_dir(tmp_path / "out2").to_pylist()
    )
    rows = [{"k": v % 7, "t": v * 3 + v // 500 * 100, "v": v} for v in range(N)]
    want = [
        {
            "k": r["k"],
            "window_start": r["window_start"],
            "window_end": r["window_end"],
            "value": r["v"],
        }
        for r in reference(rows, 40)
    ]
    assert_same_rows(got, want)
