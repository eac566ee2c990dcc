"""``a.connect(b).key_by(ka, kb).process(ed.CoProcessFunction)`` (API.md "Keyed
state and timers"): both inputs keyed on their own columns share one state
and one timer service per key; exact against a plain-Python reference at
parallelism 1 and 2, and across an injected failure with a restore."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import assert_same_rows
from support.faults import FailOnce, SleepPerBatch

TIMEOUT_MS = 50


class MatchPayments(ed.CoProcessFunction):
    """Orders wait for their payment; an order unpaid 50 ms after its time is reported."""

    def process_element1(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        paid = ctx.get_state("paid").value()
        if paid is not None and paid[1] <= row["t"] + TIMEOUT_MS:
            return [{"order": row["order"], "status": "paid", "amount": paid[0]}]
        ctx.get_state("order").update((row["order"], row["t"]))
        ctx.timer_service.register_event_time_timer(row["t"] + TIMEOUT_MS)
        return None

    def process_element2(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        pending = ctx.get_state("order").value()
        if pending is None:
            ctx.get_state("paid").update((row["amount"], row["pt"]))
            return None
        order, t = pending
        if row["pt"] > t + TIMEOUT_MS:
            return None  # too late: the timer reports it (its time is event time)
        ctx.get_state("order").clear()
        return [{"order": order, "status": "paid", "amount": row["amount"]}]

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> Any:
        pending = ctx.get_state("order").value()
        if pending is None:
            return None
        ctx.get_state("order").clear()
        return [{"order": pending[0], "status": "unpaid", "amount": None}]


def data(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    orders = [{"order": i, "t": 10 * i} for i in range(400)]
    payments = [
        {"ref": i, "amount": 100 + i, "pt": 10 * i + rng.choice([-5, 5, 20, 200])}
        for i in range(400)
        if i % 4
    ]
    payments.sort(key=lambda p: p["pt"])
    return orders, payments


def reference(orders: list[dict[str, Any]], payments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paid when the payment arrives before the order's timer fires (time + 50 ms)."""
    paid = {p["ref"]: p for p in payments}
    out = []
    for o in orders:
        p = paid.get(o["order"])
        on_time = p is not None and p["pt"] <= o["t"] + TIMEOUT_MS
        if on_time:
            out.append({"order": o["order"], "status": "paid", "amount": p["amount"]})
        else:
            out.append({"order": o["order"], "status": "unpaid", "amount": None})
    return out


def build(env: ed.StreamEnvironment, fail: FailOnce | None = None) -> ed.CollectHandle:
    orders, payments = data(1)
    o = env.from_collection(orders).assign_timestamps("t")
    p = env.from_collection(payments)
    if fail is not None:
        # Slow, so that checkpoints complete before the failure is armed.
        p = p.map_batches(SleepPerBatch(0.01)).map(fail)
    p = p.assign_timestamps("pt")
    return o.connect(p).key_by("order", "ref").process(MatchPayments).name("match").collect()


@pytest.mark.parametrize("parallelism", [1, 2])
def test_co_process_shares_state_and_timers_per_key(parallelism: int) -> None:
    env = ed.StreamEnvironment(parallelism, batch_size=16)
    out = build(env)
    env.execute("co-process")
    assert_same_rows(out.to_pylist(), reference(*data(1)))


def test_co_process_restores_exactly_after_an_injected_failure(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(
        2,
        batch_size=8,
        checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="20ms"),
        restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"),
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    fail = FailOnce(None, markers, column="ref", at=250, armed_by=tmp_path / "chk")
    out = build(env, fail)
    result = env.execute("co-process-failure")
    assert result.restarts == 1, "the injected failure fired once"
    assert_same_rows(out.to_pylist(), reference(*data(1)))


def test_co_process_needs_a_co_process_function_and_matching_keys() -> None:
    env = ed.StreamEnvironment()
    a, b = env.from_collection([{"k": 1}]), env.from_collection([{"j": 1}])
    with pytest.raises(TypeError, match=r"needs an ed\.CoProcessFunction"):
        a.connect(b).key_by("k", "j").process(lambda row, ctx: None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="as many key columns"):
        a.connect(b).key_by(["k"], ["j", "k"])
