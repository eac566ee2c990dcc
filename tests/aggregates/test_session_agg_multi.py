"""``keyed.window(ed.Session(gap)).agg(...)`` with ``eddyline.functions``
aggregates: sessions that a late-arriving row bridges merge their
accumulators' states; the output equals a plain-Python sessionization of the
same rows (TESTING.md "Differential oracle") at parallelism 1, 2 and 4, and
late rows go to the side output."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F

GAP_MS = 1_000
SCHEMA = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.float64()), ("u", pa.int64())])


def _rows(n: int, seed: int) -> list[dict[str, Any]]:
    """Rows of five keys (one of them null) whose times arrive out of order
    by up to 4 s: many rows land between two sessions and merge them."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        base = i * 150 + rng.randint(-4_000, 0)
        rows.append(
            {
                "k": rng.choice(["a", "b", "ü", None, "日本"]),
                "t": max(0, base) + (rng.randint(3_000, 9_000) if i % 40 == 0 else 0),
                "v": None if i % 9 == 0 else float(rng.randint(-50, 50)),
                "u": rng.randint(0, 5),
            }
        )
    return rows


def _sessions(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The reference: per key, rows sorted by time, a new session where the
    next row is ``GAP_MS`` or more after the previous one."""
    by_key: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["k"]].append(r)
    out = []
    for k, rs in by_key.items():
        rs.sort(key=lambda r: r["t"])
        current: list[dict[str, Any]] = []
        for r in rs:
            if current and r["t"] - current[-1]["t"] >= GAP_MS:
                out.append(_session(k, current))
                current = []
            current.append(r)
        out.append(_session(k, current))
    return out


def _session(k: Any, rs: list[dict[str, Any]]) -> dict[str, Any]:
    vs = [r["v"] for r in rs if r["v"] is not None]
    return {
        "k": k,
        "window_start": rs[0]["t"],
        "window_end": rs[-1]["t"] + GAP_MS,
        "n": len(rs),
        "sum(v)": sum(vs) if vs else None,
        "avg(v)": sum(vs) / len(vs) if vs else None,
        "min(v)": min(vs) if vs else None,
        "max(v)": max(vs) if vs else None,
        "count(DISTINCT u)": len({r["u"] for r in rs}),
        "collect_list(v)": sorted(vs),
        "stddev(v)": (
            math.sqrt(sum((v - sum(vs) / len(vs)) ** 2 for v in vs) / (len(vs) - 1))
            if len(vs) > 1
            else None
        ),
    }


def _job(env: ed.StreamEnvironment, rows: list[dict[str, Any]]) -> ed.DataStream:
    source = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA))
    stamped = source.assign_timestamps("t", max_out_of_orderness="15s")
    return (
        stamped.key_by("k")
        .window(ed.Session(GAP_MS / 1000))
        .agg(
            F.count("*").alias("n"),
            F.sum("v"),
            F.avg("v"),
            F.min("v"),
            F.max("v"),
            F.count_distinct("u"),
            F.collect_list("v"),
            F.stddev("v"),
        )
        .name("sessions")
        .uid("sessions")
    )


def _normalized(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        r = dict(r)
        # Arrival order depends on the subtasks' interleaving: compared as a multiset.
        r["collect_list(v)"] = sorted(r["collect_list(v)"])
        for name in ("avg(v)", "stddev(v)"):
            if r[name] is not None:
                r[name] = round(r[name], 9)
        out.append(r)
    return sorted(out, key=lambda r: (str(r["k"]), r["window_start"]))


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_session_aggregates_equal_the_reference(parallelism: int) -> None:
    rows = _rows(1_500, seed=parallelism)
    want = _sessions(rows)
    assert len(want) > 20, "the data must make several sessions per key"
    env = ed.StreamEnvironment(parallelism, batch_size=64)
    out = _job(env, rows).collect()
    result = env.execute()
    assert int(result.metrics["operators"]["sessions"]["late_records"]) == 0
    assert out.to_arrow().schema.names == list(want[0])
    assert _normalized(out.to_pylist()) == _normalized(want)


def test_a_bridging_row_merges_sessions_across_batches() -> None:
    env = ed.StreamEnvironment(1, batch_size=1)
    rows = [
        {"k": "a", "t": 0, "v": 1.0, "u": 1},
        {"k": "a", "t": 1_500, "v": 2.0, "u": 2},
        {"k": "a", "t": 3_000, "v": 3.0, "u": 1},
        # Bridges [0, 1000) and [1500, 2500), then [1500, 2500) and [3000, 4000).
        {"k": "a", "t": 700, "v": 4.0, "u": 3},
        {"k": "a", "t": 2_200, "v": None, "u": 3},
    ]
    stamped = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).assign_timestamps(
        "t", max_out_of_orderness="10s"
    )
    out = (
        stamped.key_by("k")
        .window(ed.Session("1s"))
        .agg(F.count("*"), F.sum("v"), F.count_distinct("u"), F.first("v"), F.collect_list("v"))
        .collect()
    )
    env.execute()
    # The merged sessions' rows in order of their start ([0], [1500], then
    # [3000]), each session's before the row that merged it.
    assert out.to_pylist() == [
        {"k": "a", "window_start": 0, "window_end": 4_000, "count(1)": 5, "sum(v)": 10.0,
         "count(DISTINCT u)": 3, "first(v)": 1.0, "collect_list(v)": [1.0, 2.0, 4.0, 3.0]},
    ]  # fmt: skip


def test_late_rows_of_sessions_go_to_the_side_output() -> None:
    env = ed.StreamEnvironment(1, batch_size=1)
    late = ed.OutputTag("late")
    rows = [
        {"k": "a", "t": 0, "v": 1.0, "u": 1},
        {"k": "a", "t": 5_000, "v": 2.0, "u": 1},
        # [200, 1200) is over at watermark 5000 and touches no open session.
        {"k": "a", "t": 200, "v": 3.0, "u": 1},
        # [4500, 5500) touches the open [5000, 6000): on time, merged.
        {"k": "a", "t": 4_500, "v": 4.0, "u": 1},
    ]
    stamped = env.from_arrow(pa.Table.from_pylist(rows, SCHEMA)).assign_timestamps("t")
    result = (
        stamped.key_by("k").window(ed.Session("1s"), late_output=late).agg(F.sum("v").alias("s"))
    )
    out = result.collect()
    late_out = result.side_output(late).collect()
    env.execute()
    assert [(r["window_start"], r["window_end"], r["s"]) for r in out.to_pylist()] == [
        (0, 1_000, 1.0),
        (4_500, 6_000, 6.0),
    ]
    assert late_out.to_pylist() == [{"k": "a", "t": 200, "v": 3.0, "u": 1}]


def test_session_agg_errors_at_graph_build() -> None:
    env = ed.StreamEnvironment(1)
    keyed = (
        env.from_arrow(pa.Table.from_pylist([], SCHEMA))
        .assign_timestamps("t")
        .key_by("k")
        .window(ed.Session("1s"))
    )
    with pytest.raises(ed.SchemaError, match=r"aggregate 'avg'.*'k'"):
        keyed.agg(F.avg("k"))
    with pytest.raises(ed.GraphError, match="window_end"):
        keyed.agg(F.max("t").alias("window_end"))
