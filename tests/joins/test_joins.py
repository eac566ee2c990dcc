"""Native joins (API.md "Joins") against a pandas reference: interval joins
of every kind and the unbounded join, at parallelism 1, 2 and 4, with
out-of-order input; late rows; null keys; build-time errors."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eddyline as ed
from eddyline.testing import assert_same_rows

from .conftest import BOUND_MS, LEFT_SCHEMA, RIGHT_SCHEMA, as_right, events, reference


def join_job(
    left: list[dict[str, Any]],
    right: list[dict[str, Any]],
    *,
    parallelism: int,
    how: str = "inner",
    within: tuple[Any, Any] | None = (-20, 30),
    state_ttl: Any = None,
    timed: bool = True,
    batch_size: int = 64,
) -> tuple[list[dict[str, Any]], ed.JobResult]:
    env = ed.StreamEnvironment(parallelism, batch_size=batch_size)
    ls = env.from_collection(left, schema=LEFT_SCHEMA).name("orders")
    rs = env.from_collection(right, schema=RIGHT_SCHEMA).name("payments")
    if timed:
        ls = ls.assign_timestamps("t", max_out_of_orderness=f"{BOUND_MS}ms")
        rs = rs.assign_timestamps("t", max_out_of_orderness=f"{BOUND_MS}ms")
    joined = ls.join(
        rs, left_on="k", right_on="rk", how=how, within=within, state_ttl=state_ttl
    ).name("join")
    out = joined.collect()
    result = env.execute("join")
    return out.to_pylist(), result


def ms(pair: tuple[Any, Any] | None) -> tuple[int, int] | None:
    """The reference's bounds in ms (the tests give seconds as numbers)."""
    if pair is None:
        return None
    return round(pair[0] * 1000), round(pair[1] * 1000)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("how", ["inner", "left", "right", "outer"])
def test_interval_join_matches_pandas(parallelism: int, how: str) -> None:
    rng = random.Random(parallelism * 10 + len(how))
    left = events(rng, 600, 17, 0)
    right = as_right(events(rng, 500, 17, 10_000))
    within = (-0.02, 0.03)
    rows, result = join_job(left, right, parallelism=parallelism, how=how, within=within)
    want = reference(left, right, how=how, within=ms(within))
    assert len(want) > 100, "the data must pair up"
    assert_same_rows(rows, want)
    assert result.metrics["operators"]["join"]["late_records"] == 0


@pytest.mark.parametrize("parallelism", [1, 3])
def test_unbounded_join_emits_every_pair_once_without_timestamps(parallelism: int) -> None:
    rng = random.Random(7)
    left = events(rng, 300, 40, 0, step_ms=1000)
    right = as_right(events(rng, 200, 40, 10_000, step_ms=1000))
    rows, _ = join_job(left, right, parallelism=parallelism, within=None, timed=False)
    assert_same_rows(rows, reference(left, right, how="inner", within=None))


def test_unbounded_join_with_state_ttl_keeps_pairs_within_the_ttl() -> None:
    rng = random.Random(11)
    left = events(rng, 400, 5, 0)
    right = as_right(events(rng, 400, 5, 10_000))
    ttl_ms = 200
    rows, _ = join_job(left, right, parallelism=2, within=None, state_ttl=f"{ttl_ms}ms")
    got = {(r["id"], r["rid"]) for r in rows}
    assert len(got) == len(rows), "each pair once"
    every = reference(left, right, how="inner", within=None)
    near = {(r["id"], r["rid"]) for r in every if abs(r["t"] - r["t_right"]) <= ttl_ms}
    assert near <= got, f"{len(near - got)} pairs within the ttl are missing"
    assert got <= {(r["id"], r["rid"]) for r in every}
    assert len(got) < len(every), "the ttl must have dropped rows"


def test_join_keys_once_columns_left_then_right_and_null_keys_never_match() -> None:
    env = ed.StreamEnvironment()
    left = env.from_collection(
        [{"k": 1, "v": "a"}, {"k": None, "v": "n"}],
        schema=pa.schema([("k", pa.int64()), ("v", pa.string())]),
    )
    right = env.from_collection(
        [{"k": 1, "v": "x", "w": 2.5}, {"k": None, "v": "m", "w": 0.0}],
        schema=pa.schema([("k", pa.int64()), ("v", pa.string()), ("w", pa.float64())]),
    )
    joined = left.join(right, on="k")
    assert joined.schema.names == ["k", "v", "v_right", "w"]
    out = joined.collect()
    env.execute("join")
    assert out.to_pylist() == [{"k": 1, "v": "a", "v_right": "x", "w": 2.5}]


def test_left_interval_join_emits_null_keyed_rows_once_with_nulls() -> None:
    left = [{"id": 1, "k": None, "t": 5}, {"id": 2, "k": 3, "t": 6}]
    right = [{"rid": 9, "rk": None, "t": 5}]
    rows, _ = join_job(left, right, parallelism=2, how="left", within=(-1, 1))
    assert_same_rows(
        rows,
        [
            {"k": None, "id": 1, "t": 5, "rid": None, "t_right": None},
            {"k": 3, "id": 2, "t": 6, "rid": None, "t_right": None},
        ],
    )


def test_late_rows_are_dropped_counted_and_never_pair_wrongly() -> None:
    rng = random.Random(5)
    left = events(rng, 400, 3, 0)
    right = as_right(events(rng, 400, 3, 10_000))
    # Rows far behind the watermark at the end of each input: late, unless
    # the other input's watermark still lags when they arrive; keys no other
    # row has, so that either way they pair with nothing.
    late_left = [{"id": 90_000 + i, "k": 100 + i, "t": 10 + i} for i in range(5)]
    late_right = [{"rid": 95_000 + i, "rk": 200 + i, "t": 12 + i} for i in range(5)]
    rows, result = join_job(
        left + late_left, right + late_right, parallelism=1, how="outer", within=(-0.02, 0.03)
    )
    want = reference(left, right, how="outer", within=(-20, 30))
    late_ids = {r["id"] for r in late_left} | {r["rid"] for r in late_right}
    kept = [r for r in rows if r["id"] not in late_ids and r["rid"] not in late_ids]
    assert_same_rows(kept, want)
    dropped = result.metrics["operators"]["join"]["late_records"]
    emitted = len(rows) - len(kept)
    # A late row is either recognised (dropped, counted) or emitted unmatched, once.
    assert dropped > 0
    assert dropped + emitted == len(late_ids)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    how=st.sampled_from(["inner", "left", "right", "outer"]),
    lower=st.integers(-60, 20),
    width=st.integers(0, 80),
    parallelism=st.sampled_from([1, 2, 4]),
)
def test_interval_join_random_events_match_pandas(
    seed: int, how: str, lower: int, width: int, parallelism: int
) -> None:
    rng = random.Random(seed)

    def side(first_id: int) -> list[dict[str, int]]:
        n, keys, step = rng.randrange(1, 120), rng.randrange(1, 6), rng.randrange(1, 20)
        return events(rng, n, keys, first_id, step_ms=step)

    left, right = side(0), as_right(side(10_000))
    within = (lower / 1000, (lower + width) / 1000)
    rows, _ = join_job(left, right, parallelism=parallelism, how=how, within=within, batch_size=16)
    assert_same_rows(rows, reference(left, right, how=how, within=(lower, lower + width)))


def test_join_build_errors_name_the_operator_and_cause() -> None:
    env = ed.StreamEnvironment()
    a = env.from_collection([{"k": 1, "t": 0}])
    b = env.from_collection([{"k": "x", "t": 0}])
    with pytest.raises(ed.SchemaError, match=r"join_\d+.*key types must match"):
        a.join(b, on="k")
    with pytest.raises(ed.GraphError, match="column 'nope' does not exist"):
        a.join(a, left_on="nope", right_on="k")
    with pytest.raises(ed.GraphError, match="needs within="):
        a.join(a, on="k", how="left")
    with pytest.raises(ed.GraphError, match="assign_timestamps"):
        a.join(a, on="k", within=(-1, 1))
    with pytest.raises(ed.GraphError, match="how must be one of"):
        a.join(a, on="k", how="cross")
    with pytest.raises(ed.GraphError, match="lower <= upper"):
        ta = a.assign_timestamps("t")
        ta.join(ta, on="k", within=("1s", "-1s"))
    untyped = a.map(lambda r: r)
    with pytest.raises(ed.GraphError, match="schema of the right input"):
        a.join(untyped, on="k")


def temporal_reference(
    orders: list[dict[str, Any]], rates: list[dict[str, Any]], how: str
) -> list[dict[str, Any]]:
    """Each order with the newest rate of its currency at or before its time
    (rates are an upsert stream: at equal times the later one wins)."""
    latest: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rates:
        latest[(r["cur"], r["t"])] = r
    out = []
    for o in orders:
        known = [r for (c, t), r in latest.items() if c == o["cur"] and t <= o["t"]]
        if known:
            best = max(known, key=lambda r: r["t"])
            out.append({**o, "rate": best["rate"], "t_right": best["t"]})
        elif how == "left":
            out.append({**o, "rate": None, "t_right": None})
    return out


@pytest.mark.parametrize("parallelism", [1, 2, 4])
@pytest.mark.parametrize("how", ["inner", "left"])
def test_temporal_join_takes_the_rate_in_force_at_each_order(parallelism: int, how: str) -> None:
    rng = random.Random(parallelism)
    curs = ["eur", "usd", "gbp", "chf"]
    rates = sorted(
        ({"cur": rng.choice(curs), "t": rng.randrange(0, 5_000), "rate": i} for i in range(300)),
        key=lambda r: r["t"],
    )
    orders = sorted(
        ({"id": i, "cur": rng.choice(curs), "t": rng.randrange(0, 5_000)} for i in range(500)),
        key=lambda r: r["t"],
    )
    env = ed.StreamEnvironment(parallelism, batch_size=32)
    o = env.from_collection(orders).assign_timestamps("t")
    r = env.from_collection(rates).assign_timestamps("t")
    out = o.temporal_join(r, on="cur", how=how).name("fx").collect()
    result = env.execute("fx")
    assert result.metrics["operators"]["fx"]["late_records"] == 0
    want = temporal_reference(orders, rates, how)
    assert len(want) > 400
    assert_same_rows(out.to_pylist(), want)


def test_temporal_join_errors() -> None:
    env = ed.StreamEnvironment()
    a = env.from_collection([{"k": 1, "t": 0}]).assign_timestamps("t")
    untimed = env.from_collection([{"k": 1, "v": 0}])
    with pytest.raises(ed.GraphError, match="how must be one of"):
        a.temporal_join(a, on="k", how="outer")
    with pytest.raises(ed.GraphError, match="need event time"):
        a.temporal_join(untimed, on="k")


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_window_join_pairs_rows_of_each_tumbling_window(parallelism: int) -> None:
    rng = random.Random(parallelism + 40)
    left = events(rng, 400, 9, 0)
    right = as_right(events(rng, 300, 9, 10_000))
    env = ed.StreamEnvironment(parallelism, batch_size=32)
    ls = env.from_collection(left, schema=LEFT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    rs = env.from_collection(right, schema=RIGHT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    joined = ls.window_join(rs, left_on="k", right_on="rk", window=ed.Tumbling("100ms"))
    out = joined.name("wjoin").collect()
    result = env.execute("window-join")
    assert result.metrics["operators"]["wjoin"]["late_records"] == 0
    want = [
        {**r, "window_start": r["t"] // 100 * 100, "window_end": r["t"] // 100 * 100 + 100}
        for r in reference(left, right, how="inner", within=None)
        if r["t"] // 100 == r["t_right"] // 100
    ]
    assert len(want) > 100
    assert_same_rows(out.to_pylist(), want)
    with pytest.raises(ed.GraphError, match=r"must be ed\.Tumbling"):
        ls.window_join(rs, left_on="k", right_on="rk", window="1s")


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_session_window_join_forms_sessions_from_both_sides(parallelism: int) -> None:
    rng = random.Random(parallelism + 90)
    left = events(rng, 200, 5, 0, step_ms=30)
    right = as_right(events(rng, 200, 5, 10_000, step_ms=30))
    env = ed.StreamEnvironment(parallelism, batch_size=16)
    ls = env.from_collection(left, schema=LEFT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    rs = env.from_collection(right, schema=RIGHT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    gap = 60
    out = ls.window_join(rs, left_on="k", right_on="rk", window=ed.Session(f"{gap}ms"))
    rows = out.collect()
    env.execute("session-join")
    # Per key, both sides' rows in time order, a new session where the next is >= gap later.
    want = []
    for k in {r["k"] for r in left} | {r["rk"] for r in right}:
        times = sorted(
            [(r["t"], 0, r) for r in left if r["k"] == k]
            + [(r["t"], 1, r) for r in right if r["rk"] == k],
            key=lambda x: (x[0], x[1]),
        )
        sessions: list[list[Any]] = []
        for item in times:
            if sessions and item[0] - sessions[-1][-1][0] < gap:
                sessions[-1].append(item)
            else:
                sessions.append([item])
        for s in sessions:
            start, end = s[0][0], s[-1][0] + gap
            for _, _, lr in (x for x in s if x[1] == 0):
                for _, _, rr in (x for x in s if x[1] == 1):
                    want.append(
                        {
                            "k": k,
                            "window_start": start,
                            "window_end": end,
                            "id": lr["id"],
                            "t": lr["t"],
                            "rid": rr["rid"],
                            "t_right": rr["t"],
                        }
                    )
    assert len(want) > 50
    assert_same_rows(rows.to_pylist(), want)


@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_sliding_window_join_emits_a_pair_once_per_shared_window(parallelism: int) -> None:
    rng = random.Random(parallelism + 80)
    left = events(rng, 300, 7, 0)
    right = as_right(events(rng, 300, 7, 10_000))
    env = ed.StreamEnvironment(parallelism, batch_size=32)
    ls = env.from_collection(left, schema=LEFT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    rs = env.from_collection(right, schema=RIGHT_SCHEMA).assign_timestamps(
        "t", max_out_of_orderness=f"{BOUND_MS}ms"
    )
    window = ed.Sliding("300ms", "100ms")
    out = ls.window_join(rs, left_on="k", right_on="rk", window=window).collect()
    env.execute("sliding-join")
    want = []
    for r in reference(left, right, how="inner", within=None):
        start = r["t"] // 100 * 100
        while start > r["t"] - 300:
            if start <= r["t_right"] < start + 300:
                want.append({**r, "window_start": start, "window_end": start + 300})
            start -= 100
    assert len(want) > 100
    assert_same_rows(out.to_pylist(), want)
