"""``ed.read_state`` of the final checkpoint with ``recovery="recompute"``.

Recomputing operators (windows, interval joins, and the stateless operators
and timestamp assigners around them) write no state into checkpoints: a
recovery rebuilds it by replay (FLINK-4120). The final checkpoint of a bounded
job, taken after every task finished (FLIP-147), is the exception: nothing is
left to recompute after it, so it stores their full state too, and
``read_state`` of it equals the job's own final output for every stateful
operator kind (running aggregates, a reduce and a process function with value,
list and map state are persisted anyway; a window and an interval join have
emitted everything by the end, so their state is empty). Intermediate
checkpoints stay as they were (no state of recomputing operators), and a
restore from the final checkpoint loads every state and replays nothing: its
output stays exact, nothing is committed twice (a replay used to run the
input's end again after the final barrier and fire the last windows twice).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.client.cli import main
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 2_000
KEYS = 7
WINDOW_MS = 100
LOWER, UPPER = -2, 2
TIMEOUT_S = 60.0


class Tracker(ed.ProcessFunction):
    """Per key: a count (ValueState), the values divisible by 9 (ListState) and the
    last value per residue mod 3 (MapState); emits the count after every row."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        count = ctx.get_state("count", default=0)
        count.update(count.value() + 1)
        if row["value"] % 9 == 0:
            ctx.get_list_state("nines").add(row["value"])
        ctx.get_map_state("by_mod3").put(row["value"] % 3, row["value"])
        return [{"k": row["k"], "count": count.value()}]


def build(chk: Path, out: Path, *, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(str(chk), interval="1h", recovery="recompute"),
        batch_size=50,
    )
    numbers = env.from_sequence(0, N).name("numbers").uid("numbers").set_parallelism(1)
    slow = numbers.map_batches(SleepPerBatch(sleep)).name("slow").uid("slow").set_parallelism(1)
    rows = slow.with_columns(k=ed.col("value") % KEYS, t=ed.col("value")).set_parallelism(1)
    rows = rows.uid("rows")
    # Persisted in recompute mode too (not recomputable): their state is in every checkpoint.
    sums = rows.key_by("k").sum("value").uid("sums")
    sums.sink_to(ed.ParquetSink(str(out / "sums"))).uid("sums-out")
    reduced = rows.key_by("k").reduce(
        lambda acc, row: {**acc, "value": max(acc["value"], row["value"])}
    )
    reduced.uid("reduced").sink_to(ed.ParquetSink(str(out / "reduced"))).uid("reduced-out")
    tracked = rows.key_by("k").process(Tracker()).uid("tracker")
    tracked.sink_to(ed.ParquetSink(str(out / "tracker"))).uid("tracker-out")
    # Recomputed: a window and an interval join, each read by a recomputed projection,
    # so their recorded replay point lies before the final checkpoint.
    timed = rows.assign_timestamps("t").name("ts").uid("ts").set_parallelism(1)
    win = timed.key_by("k").window(ed.Tumbling(f"{WINDOW_MS}ms")).sum("value").uid("win")
    win.with_columns(twice=ed.col("value") * 2).uid("win-after").sink_to(
        ed.ParquetSink(str(out / "win"))
    ).uid("win-out")
    right = (
        env.from_sequence(0, N)
        .name("payments")
        .uid("payments")
        .set_parallelism(1)
        .with_columns(rk=ed.col("value") * 3 % KEYS, rt=ed.col("value"))
        .set_parallelism(1)
        .select("rk", "rt")
        .set_parallelism(1)
        .assign_timestamps("rt")
        .uid("rts")
        .set_parallelism(1)
    )
    # (the join needs its inputs' schemas before running: not behind the slow map)
    left = (
        numbers.with_columns(k=ed.col("value") % KEYS, t=ed.col("value"))
        .set_parallelism(1)
        .select("k", "t")
        .set_parallelism(1)
        .assign_timestamps("t")
        .uid("lts")
        .set_parallelism(1)
    )
    joined = left.join(right, left_on="k", right_on="rk", within=(LOWER / 1000, UPPER / 1000))
    joined.uid("join").select("k", "t", "rt").uid("join-after").sink_to(
        ed.ParquetSink(str(out / "join"))
    ).uid("join-out")
    return env


def _committed(out: Path, name: str, *cols: str) -> Counter[tuple[Any, ...]]:
    table = read_parquet_dir(out / name)
    return Counter(zip(*(table[c].to_pylist() for c in cols), strict=True))


def _reference_windows() -> Counter[tuple[int, int, int]]:
    sums: Counter[tuple[int, int]] = Counter()
    for v in range(N):
        sums[(v % KEYS, v - v % WINDOW_MS)] += v
    return Counter({(k, s, total): 1 for (k, s), total in sums.items()})


def _reference_join() -> Counter[tuple[int, int, int]]:
    return Counter(
        (t % KEYS, t, r)
        for t in range(N)
        for r in range(max(0, t + LOWER), min(N, t + UPPER + 1))
        if r * 3 % KEYS == t % KEYS
    )


def _reference_tracker() -> dict[int, dict[str, Any]]:
    ref: dict[int, dict[str, Any]] = defaultdict(lambda: {"count": 0, "nines": [], "by_mod3": {}})
    for v in range(N):
        r = ref[v % KEYS]
        r["count"] += 1
        if v % 9 == 0:
            r["nines"].append(v)
        r["by_mod3"][v % 3] = v
    return dict(ref)


def _assert_output_exact(out: Path) -> None:
    """Every sink committed exactly the reference, each row once."""
    assert _committed(out, "win", "k", "window_start", "value") == _reference_windows()
    assert all(
        twice == 2 * v
        for v, twice in zip(*_committed_cols(out, "win", "value", "twice"), strict=True)
    )
    assert _committed(out, "join", "k", "t", "rt") == _reference_join()


def _everything(out: Path) -> dict[str, Counter[tuple[Any, ...]]]:
    """Every committed row of every sink, counted."""
    return {
        name: Counter(map(tuple, (r.values() for r in read_parquet_dir(out / name).to_pylist())))
        for name in ("sums", "reduced", "tracker", "win", "join")
    }


def _committed_cols(out: Path, name: str, *cols: str) -> list[list[Any]]:
    table = read_parquet_dir(out / name)
    return [table[c].to_pylist() for c in cols]


def _assert_final_state_equals_output(final: str, out: Path) -> None:
    """read_state of the final checkpoint equals the job's own final output."""
    info = inspect_checkpoint(final)
    assert info["final"] is True
    ops = {op["uid"]: op for op in info["operators"]}
    for uid in ("win", "join"):
        # It recomputes and records a replay point before the final checkpoint: before
        # final checkpoints stored its state, read_state refused it.
        assert ops[uid]["recomputes"], ops[uid]
        assert ops[uid]["null_state_checkpoint"] < info["id"], ops[uid]

    expected_sums = {k: sum(v for v in range(N) if v % KEYS == k) for k in range(KEYS)}
    sums = ed.read_state(final, "sums").to_pylist()
    assert {r["k"]: r["value"] for r in sums} == expected_sums
    # the last running sum each key emitted is the stored one
    k_col, v_col = _committed_cols(out, "sums", "k", "value")
    last_sums: dict[int, int] = {}
    for k, v in zip(k_col, v_col, strict=True):
        last_sums[k] = max(last_sums.get(k, v), v)  # running sums only grow
    assert last_sums == expected_sums

    reduced = ed.read_state(final, "reduced").to_pylist()
    expected_max = {k: max(v for v in range(N) if v % KEYS == k) for k in range(KEYS)}
    assert {r["k"]: r["value"] for r in reduced} == expected_max

    state = ed.read_state(final, "tracker")
    assert state.column_names == ["k", "by_mod3", "count", "nines"]
    got = {r.pop("k"): r for r in state.to_pylist()}
    ref = _reference_tracker()
    assert set(got) == set(ref)
    for k, r in ref.items():
        assert got[k]["count"] == r["count"]
        assert got[k]["nines"] == r["nines"]
        assert dict(got[k]["by_mod3"]) == r["by_mod3"]
    k_col, c_col = _committed_cols(out, "tracker", "k", "count")
    emitted: dict[int, int] = {}
    for k, c in zip(k_col, c_col, strict=True):
        emitted[k] = max(emitted.get(k, c), c)
    assert emitted == {k: r["count"] for k, r in ref.items()}

    # Every window fired and every joined row was emitted and expired at the end:
    # the stored final states are empty, and readable.
    win = ed.read_state(final, "win")
    assert win.num_rows == 0
    assert {"k", "window_start", "window_end", "value"} <= set(win.column_names)
    assert ed.read_state(final, "join").num_rows == 0


def test_read_state_of_final_recompute_checkpoint_and_restore_from_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chk, out = tmp_path / "chk", tmp_path / "out"
    client = build(chk, out, sleep=0.01).execute_async("recompute-final")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 500,
        timeout=TIMEOUT_S,
        what="500 rows to be read",
    )
    middle = client.trigger_checkpoint()
    result = client.wait(timeout=TIMEOUT_S)
    final = str(result.checkpoints[-1].path)
    _assert_output_exact(out)
    _assert_final_state_equals_output(final, out)
    committed = _everything(out)
    # The command line reads it too, and says the checkpoint is final.
    capsys.readouterr()
    assert main(["checkpoints", final, "--state", "join"]) == 0
    assert "0 rows" in capsys.readouterr().out.splitlines()[0]
    assert main(["checkpoints", final]) == 0
    assert "final checkpoint" in capsys.readouterr().out

    # An intermediate checkpoint is unchanged: no state of recomputing operators.
    taken = {c.id: c for c in result.checkpoints}[middle]
    assert inspect_checkpoint(str(taken.path))["final"] is False
    assert taken.operators["win"].recomputes and taken.operators["win"].bytes == 0
    assert taken.operators["join"].bytes == 0
    if taken.null_state_checkpoint < middle:
        with pytest.raises(ed.CheckpointError, match=r"'join'.*recomputes its state"):
            ed.read_state(str(taken.path), "join")
    # The final one wrote theirs (the join keeps its key groups' watermark).
    assert result.checkpoints[-1].operators["join"].bytes > 0

    # A restore from the final checkpoint loads every state and replays nothing:
    # no sink commits anything again, and its own final checkpoint holds the same state.
    again = build(chk, out, sleep=0.0).execute("recompute-again", restore_from=final)
    assert again.checkpoints, "the restored run took its own final checkpoint"
    assert again.checkpoints[0].id > result.checkpoints[-1].id
    assert again.metrics["operators"]["numbers"]["records_out"] == 0, "it replayed"
    assert _everything(out) == committed, "a sink committed again after the restore"
    _assert_output_exact(out)
    _assert_final_state_equals_output(str(again.checkpoints[-1].path), out)
