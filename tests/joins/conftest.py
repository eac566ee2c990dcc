"""Shared data and references of the join suites: orders (left) and payments
(right) with unique ids, out-of-order event times within the watermark bound,
and a pandas reference of every join kind."""

from __future__ import annotations

import random
from typing import Any

import pandas as pd
import pyarrow as pa

# These suites need the native extension: a missing build must fail, never skip.
import eddyline._core  # noqa: F401

BOUND_MS = 50
"""max_out_of_orderness of both inputs: every generated row is within it."""

LEFT_SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("t", pa.int64())])
RIGHT_SCHEMA = pa.schema([("rid", pa.int64()), ("rk", pa.int64()), ("t", pa.int64())])


def events(
    rng: random.Random, n: int, keys: int, first_id: int, step_ms: int = 7
) -> list[dict[str, int]]:
    """``n`` rows with unique ids, keys in ``range(keys)`` (some None-free) and
    times increasing by ``step_ms`` on average, shuffled within ``BOUND_MS``."""
    rows = []
    for i in range(n):
        t = i * step_ms + rng.randrange(0, BOUND_MS // 2)
        rows.append({"id": first_id + i, "k": rng.randrange(keys), "t": t})
    # Out of order, but never by more than the bound: swap neighbours.
    for i in range(0, n - 1, 2):
        if rng.random() < 0.5 and abs(rows[i]["t"] - rows[i + 1]["t"]) < BOUND_MS:
            rows[i], rows[i + 1] = rows[i + 1], rows[i]
    return rows


def as_right(rows: list[dict[str, int]]) -> list[dict[str, int]]:
    return [{"rid": r["id"], "rk": r["k"], "t": r["t"]} for r in rows]


def reference(
    left: list[dict[str, Any]],
    right: list[dict[str, Any]],
    *,
    how: str,
    within: tuple[int, int] | None,
) -> list[dict[str, Any]]:
    """The join in pandas: keys once (left names), left's columns, right's
    (``t`` of the right as ``t_right``); outer rows padded with None."""
    lf = pd.DataFrame(left, columns=["id", "k", "t"])
    rf = pd.DataFrame(right, columns=["rid", "rk", "t"]).rename(columns={"t": "t_right"})
    m = lf.merge(rf, left_on="k", right_on="rk", how="inner")
    if within is not None:
        lo, hi = within
        m = m[(m["t"] + lo <= m["t_right"]) & (m["t_right"] <= m["t"] + hi)]
    rows = [
        {"k": r.k, "id": r.id, "t": r.t, "rid": r.rid, "t_right": r.t_right}
        for r in m.astype(int).itertuples()
    ]
    if how in ("left", "outer"):
        hit = set(m["id"])
        rows += [
            {"k": r["k"], "id": r["id"], "t": r["t"], "rid": None, "t_right": None}
            for r in left
            if r["id"] not in hit
        ]
    if how in ("right", "outer"):
        hit = set(m["rid"])
        rows += [
            {"k": r["rk"], "id": None, "t": None, "rid": r["rid"], "t_right": r["t"]}
            for r in right
            if r["rid"] not in hit
        ]
    return rows
