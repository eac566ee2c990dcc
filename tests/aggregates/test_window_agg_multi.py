"""``keyed.window(Tumbling|Sliding).agg(...)`` with ``eddyline.functions``
aggregates: one row per key and window when it fires, exact values, late rows
to the side output, errors at graph build."""

from __future__ import annotations

import pytest

import eddyline as ed
import eddyline.functions as F

ROWS = [
    {"k": "a", "t": 1_000, "v": 1.0},
    {"k": "b", "t": 2_000, "v": None},
    {"k": "a", "t": 12_000, "v": 4.0},
    {"k": "a", "t": 3_000, "v": 2.0},
    {"k": "b", "t": 14_000, "v": 5.0},
]


def _windowed(
    env: ed.StreamEnvironment, assigner: ed.Tumbling | ed.Sliding | ed.Session
) -> ed.WindowedStream:
    stream = env.from_collection(ROWS).assign_timestamps("t", max_out_of_orderness="5s")
    return stream.key_by("k").window(assigner)


def test_tumbling_windows_emit_every_aggregate_per_key_and_window() -> None:
    env = ed.StreamEnvironment(2, batch_size=2)
    out = (
        _windowed(env, ed.Tumbling("10s"))
        .agg(F.count("*").alias("n"), F.avg("v"), F.max("v"), F.collect_list("v"))
        .collect()
    )
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: (r["window_start"], r["k"]))
    # Two source subtasks interleave arrival order, which collect_list keeps.
    for r in rows:
        r["collect_list(v)"].sort()
    assert rows == [
        {"k": "a", "window_start": 0, "window_end": 10_000, "n": 2, "avg(v)": 1.5,
         "max(v)": 2.0, "collect_list(v)": [1.0, 2.0]},
        {"k": "b", "window_start": 0, "window_end": 10_000, "n": 1, "avg(v)": None,
         "max(v)": None, "collect_list(v)": []},
        {"k": "a", "window_start": 10_000, "window_end": 20_000, "n": 1, "avg(v)": 4.0,
         "max(v)": 4.0, "collect_list(v)": [4.0]},
        {"k": "b", "window_start": 10_000, "window_end": 20_000, "n": 1, "avg(v)": 5.0,
         "max(v)": 5.0, "collect_list(v)": [5.0]},
    ]  # fmt: skip


def test_sliding_windows_and_late_rows() -> None:
    env = ed.StreamEnvironment(1, batch_size=1)
    late = ed.OutputTag("late")
    # No out-of-orderness: after t=12s, the rows at 3s and 0.5s are late (their
    # windows [-5s, 5s) and [0s, 10s) are over).
    rows = [*ROWS, {"k": "a", "t": 500, "v": 9.0}]
    stream = env.from_collection(rows).assign_timestamps("t")
    result = (
        stream.key_by("k")
        .window(ed.Sliding("10s", "5s"), late_output=late)
        .agg(F.sum("v").alias("total"))
    )
    out = result.collect()
    late_out = result.side_output(late).collect()
    env.execute()
    got = sorted((r["k"], r["window_start"], r["total"]) for r in out.to_pylist())
    assert got == [
        ("a", -5_000, 1.0),
        ("a", 0, 1.0),
        ("a", 5_000, 4.0),
        ("a", 10_000, 4.0),
        ("b", -5_000, None),
        ("b", 0, None),
        ("b", 5_000, 5.0),
        ("b", 10_000, 5.0),
    ]
    assert late_out.to_pylist() == [
        {"k": "a", "t": 3_000, "v": 2.0},
        {"k": "a", "t": 500, "v": 9.0},
    ]


def test_window_agg_errors_at_graph_build() -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.SchemaError, match=r"aggregate 'avg'.*'k'"):
        _windowed(env, ed.Tumbling("10s")).agg(F.avg("k"))
    with pytest.raises(ed.GraphError, match="window_start"):
        _windowed(env, ed.Tumbling("10s")).agg(F.min("t").alias("window_start"))
