"""``ed.read_state``: an operator's keyed state in a checkpoint or savepoint equals what
the job computed (API.md "Reading state from checkpoints and savepoints").

The final checkpoint of a bounded job keeps every operator's final state
(FLIP-147), so ``read_state`` of it equals the job's own final output: running
keyed aggregates (single and multi-column keys), a ``reduce`` and a process
function with value, list and map state (one with a ttl), at parallelism 1 and
2 (the key groups spread over two subtasks' files). A windowed job stopped with
a savepoint holds its pending windows with their accumulators: they and the
windows emitted before the stop are exactly the windows of the rows read.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.client.cli import main
from eddyline.testing import ManualClock, read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 3_000
KEYS = 7
TIMEOUT_S = 30.0

parallelisms = pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")


def _final(result: ed.JobResult) -> str:
    return str(result.checkpoints[-1].path)


def _rows(table: pa.Table, *keys: str) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=lambda r: tuple(r[k] for k in keys))


def _last_by_key(rows: list[dict[str, Any]], *keys: str) -> dict[Any, dict[str, Any]]:
    """The last row of each key in emission order (one subtask emits a key's rows in order)."""
    last: dict[Any, dict[str, Any]] = {}
    for row in rows:
        last[tuple(row[k] for k in keys)] = row
    return last


@parallelisms
def test_read_state_of_final_checkpoint_equals_final_aggregates(
    tmp_path: Path, parallelism: int
) -> None:
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")), batch_size=97
    )
    rows = (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .with_columns(k=ed.col("value") % KEYS, j=ed.col("value") % 2)
    )
    sums = rows.key_by("k").sum("value").uid("sums").collect()
    counts = rows.key_by(["k", "j"]).count().uid("counts").collect()
    maxes = rows.key_by("j").max("value").uid("maxes").collect()
    reduced = (
        rows.key_by("k")
        .reduce(lambda acc, row: {**acc, "value": acc["value"] + row["value"]})
        .uid("reduced")
        .collect()
    )
    result = env.execute("aggregates")
    final = _final(result)

    ops = {op["uid"]: op for op in inspect_checkpoint(final)["operators"]}
    assert all(op["finished"] for op in ops.values()), ops
    if parallelism == 2:  # the key groups lie in two subtasks' files
        assert sum(1 for s in ops["sums"]["subtasks"] if s["key_groups"]) == 2

    expected_sums = {k: sum(v for v in range(N) if v % KEYS == k) for k in range(KEYS)}
    state = ed.read_state(final, "sums")
    assert state.column_names == ["k", "value"]
    assert state.schema.field("k").type == pa.int64()
    assert {r["k"]: r["value"] for r in state.to_pylist()} == expected_sums
    last = _last_by_key(sums.to_pylist(), "k")
    assert {k[0]: r["value"] for k, r in last.items()} == expected_sums

    state = ed.read_state(final, "counts")
    assert state.column_names == ["k", "j", "count"]
    last = _last_by_key(counts.to_pylist(), "k", "j")
    assert _rows(state, "k", "j") == [last[key] for key in sorted(last)]
    assert sum(r["count"] for r in state.to_pylist()) == N

    state = ed.read_state(final, "maxes")
    assert _rows(state, "j") == [{"j": 0, "value": N - 2}, {"j": 1, "value": N - 1}]
    assert _rows(state, "j") == [r for _, r in sorted(_last_by_key(maxes.to_pylist(), "j").items())]

    state = ed.read_state(final, "reduced")
    last = _last_by_key(reduced.to_pylist(), "k")
    assert {r["k"]: r["value"] for r in state.to_pylist()} == expected_sums
    assert _rows(state, "k") == [last[key] for key in sorted(last)]


class Tracker(ed.ProcessFunction):
    """Per key: a count (ValueState), the values divisible by 5 (ListState), the last
    value per residue mod 3 (MapState) and the last value with a 1s ttl."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        count = ctx.get_state("count", default=0)
        count.update(count.value() + 1)
        if row["value"] % 5 == 0:
            ctx.get_list_state("fives").add(row["value"])
        ctx.get_map_state("by_mod3").put(row["value"] % 3, row["value"])
        ctx.get_state("recent", ttl="1s").update(row["value"])
        return [{"k": row["k"], "count": count.value()}]


def _reference(n: int) -> dict[int, dict[str, Any]]:
    ref: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"count": 0, "fives": [], "by_mod3": {}, "recent": None}
    )
    for v in range(n):
        r = ref[v % KEYS]
        r["count"] += 1
        if v % 5 == 0:
            r["fives"].append(v)
        r["by_mod3"][v % 3] = v
        r["recent"] = v
    return ref


@parallelisms
def test_read_state_of_process_function_states(tmp_path: Path, parallelism: int) -> None:
    with ManualClock(1_000_000) as clock:
        env = ed.StreamEnvironment(
            parallelism, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")), batch_size=50
        )
        # one source subtask: each key's rows arrive in order at any parallelism
        source = env.from_sequence(0, 500).set_parallelism(1)
        rows = source.with_columns(k=ed.col("value") % KEYS).set_parallelism(1)
        out = rows.key_by("k").process(Tracker()).uid("tracker").collect()
        final = _final(env.execute("process"))
        ref = _reference(500)

        state = ed.read_state(final, "tracker")
        assert state.column_names == ["k", "by_mod3", "count", "fives", "recent"]
        assert pa.types.is_map(state.schema.field("by_mod3").type)
        assert pa.types.is_list(state.schema.field("fives").type)
        got = {r.pop("k"): r for r in state.to_pylist()}
        assert set(got) == set(ref)
        for k, r in ref.items():
            assert got[k]["count"] == r["count"]
            assert got[k]["fives"] == r["fives"]  # in the order added
            assert dict(got[k]["by_mod3"]) == r["by_mod3"]
            assert got[k]["recent"] == r["recent"]
        last = _last_by_key(out.to_pylist(), "k")
        assert {k[0]: r["count"] for k, r in last.items()} == {
            k: r["count"] for k, r in ref.items()
        }

        # state= selects one named state; an expired ttl value is never returned
        only = ed.read_state(final, "tracker", state="fives")
        assert only.column_names == ["k", "fives"]
        clock.advance(1_001)
        expired = ed.read_state(final, "tracker")
        assert expired["recent"].null_count == expired.num_rows == KEYS
        assert expired["count"].to_pylist() == state["count"].to_pylist()


def _slow_keyed_numbers(env: ed.StreamEnvironment) -> ed.KeyedStream:
    """``0..N`` timed by their value, 10 ms a batch, keyed by ``value % KEYS``, all
    at parallelism 1 up to the key_by."""
    return (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .set_parallelism(1)
        .assign_timestamps("value")
        .set_parallelism(1)
        .map_batches(SleepPerBatch(0.01))
        .set_parallelism(1)
        .with_columns(k=ed.col("value") % KEYS)
        .set_parallelism(1)
        .key_by("k")
    )


def _savepoint_env(parallelism: int, chk: Path) -> ed.StreamEnvironment:
    """An environment whose only checkpoints are the savepoints a test takes."""
    return ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(str(chk), interval="1h"), batch_size=50
    )


def _stop_mid_run(env: ed.StreamEnvironment, name: str, path: Path) -> tuple[str, int]:
    """Runs the job, stops it with a savepoint at ``path`` once 1200 of the N numbers
    were read; returns the savepoint and how many numbers were read, checked to be
    fewer than N (the stop came mid-run)."""
    client = env.execute_async(name)
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 1_200,
        timeout=TIMEOUT_S,
        what="1200 rows to be read",
    )
    savepoint = client.stop_with_savepoint(str(path))
    read = int(client.wait(timeout=TIMEOUT_S).metrics["operators"]["numbers"]["records_out"])
    assert 1_200 <= read < N, f"the stop did not happen mid-run ({read} of {N})"
    return savepoint, read


def _windows(parallelism: int, chk: Path, out: Path) -> ed.StreamEnvironment:
    env = _savepoint_env(parallelism, chk)
    keyed = _slow_keyed_numbers(env)
    windows = keyed.window(ed.Tumbling("1s")).sum("value").uid("win")
    windows.sink_to(ed.ParquetSink(str(out))).uid("out")
    # the same windows evaluated by a Python reduce
    keyed.window(ed.Tumbling("1s")).reduce(
        lambda acc, row: {**acc, "value": acc["value"] + row["value"]}
    ).uid("pywin").collect()
    # and by a Python apply, whose state is the window's rows
    keyed.window(ed.Tumbling("1s")).apply(lambda key, window, rows: [{"n": len(rows)}]).uid(
        "pyapply"
    ).collect()
    return env


def _window_reference(n: int) -> list[tuple[int, int, int]]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for v in range(n):
        sums[(v % KEYS, v // 1000 * 1000)] += v
    return sorted((k, start, total) for (k, start), total in sums.items())


@parallelisms
def test_read_state_of_savepoint_holds_pending_windows(tmp_path: Path, parallelism: int) -> None:
    env = _windows(parallelism, tmp_path / "chk", tmp_path / "out")
    savepoint, read = _stop_mid_run(env, "windows", tmp_path / "sp")

    state = ed.read_state(savepoint, "win")
    assert state.column_names == ["k", "window_start", "window_end", "value"]
    pending = [(r["k"], r["window_start"], r["value"]) for r in state.to_pylist()]
    assert pending, "no window was pending at the savepoint"
    assert all(r["window_end"] == r["window_start"] + 1000 for r in state.to_pylist())
    emitted = read_parquet_dir(tmp_path / "out").to_pylist()
    fired = [(r["k"], r["window_start"], r["value"]) for r in emitted]
    # the fired windows and the pending ones are exactly the windows of the rows read
    assert sorted(fired + pending) == _window_reference(read)
    assert not set((k, s) for k, s, _ in fired) & set((k, s) for k, s, _ in pending)

    py_state = ed.read_state(savepoint, "pywin")
    assert py_state.column_names == ["k", "window_start", "window_end", "value"]
    assert _rows(py_state, "k", "window_start") == _rows(state, "k", "window_start")

    applied = ed.read_state(savepoint, "pyapply", state="rows")
    assert applied.column_names == ["k", "window_start", "window_end", "rows"]
    sums = {
        (r["k"], r["window_start"]): sum(x["value"] for x in r["rows"]) for r in applied.to_pylist()
    }
    assert sums == {(k, s): v for k, s, v in pending}


@parallelisms
def test_read_state_of_python_session_windows(tmp_path: Path, parallelism: int) -> None:
    """A Python ``reduce`` and ``apply`` over session windows (their own state
    format) read as the other windows: one row per open session. The rows come
    1 ms apart with a gap of 1 s, so each key has one open session at the
    savepoint, from its first row to its last row read plus the gap."""
    env = _savepoint_env(parallelism, tmp_path / "chk")
    keyed = _slow_keyed_numbers(env)
    sessions = keyed.window(ed.Session("1s"))
    sessions.reduce(lambda acc, row: {**acc, "value": acc["value"] + row["value"]}).uid(
        "pyreduce"
    ).collect()
    sessions.apply(lambda key, window, rows: [{"n": len(rows)}]).uid("pyapply").collect()
    savepoint, read = _stop_mid_run(env, "sessions", tmp_path / "sp")

    by_key: dict[int, list[int]] = defaultdict(list)
    for v in range(read):
        by_key[v % KEYS].append(v)
    want = [(k, vs[0], vs[-1] + 1_000, sum(vs)) for k, vs in sorted(by_key.items())]
    reduced = ed.read_state(savepoint, "pyreduce")
    assert reduced.column_names == ["k", "window_start", "window_end", "value"]
    got = [(r["k"], r["window_start"], r["window_end"], r["value"]) for r in reduced.to_pylist()]
    assert sorted(got) == want
    applied = ed.read_state(savepoint, "pyapply")
    assert applied.column_names == ["k", "window_start", "window_end", "rows"]
    rows = {r["k"]: sorted(x["value"] for x in r["rows"]) for r in applied.to_pylist()}
    assert rows == dict(by_key)


def test_read_state_errors_name_the_problem(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
    rows = env.from_sequence(0, 10).uid("numbers").with_columns(k=ed.col("value") % 2)
    rows.key_by("k").sum("value").uid("sums").collect()
    final = _final(env.execute("errors"))

    with pytest.raises(ed.CheckpointError, match=r"no operator with uid 'nope'.*numbers.*sums"):
        ed.read_state(final, "nope")
    with pytest.raises(ed.CheckpointError, match=r"'numbers'.*has no keyed state"):
        ed.read_state(final, "numbers")
    with pytest.raises(ed.CheckpointError, match=r"has no state 'other'; its states: 'value'"):
        ed.read_state(final, "sums", state="other")
    with pytest.raises(ed.CheckpointError, match="is not a checkpoint"):
        ed.read_state(tmp_path / "missing", "sums")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ed.CheckpointError, match="is not a completed checkpoint"):
        ed.read_state(tmp_path / "empty", "sums")
    with pytest.raises(TypeError, match="uid"):
        ed.read_state(final, "")
    # a storage root reads its newest checkpoint
    assert ed.read_state(tmp_path / "chk", "sums").sort_by("k").to_pylist() == [
        {"k": 0, "value": 20},
        {"k": 1, "value": 25},
    ]


def test_cli_prints_state(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
    rows = env.from_sequence(0, 10).uid("numbers").with_columns(k=ed.col("value") % 2)
    rows.key_by("k").sum("value").uid("sums").collect()
    result = env.execute("cli")

    assert main(["checkpoints", str(tmp_path / "chk"), "--state", "sums"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert f"in checkpoint {result.checkpoints[-1].id}" in lines[0], out
    assert "2 rows" in lines[0], out
    cells = [line.split() for line in lines[1:]]
    assert cells[0] == ["k", "value"], out
    assert sorted(tuple(c) for c in cells[1:]) == [("0", "20"), ("1", "25")], out

    assert main(["checkpoints", str(tmp_path / "chk"), "--state", "nope"]) == 2
    assert "no operator with uid 'nope'" in capsys.readouterr().err
    assert main(["checkpoints", str(tmp_path / "chk"), "--state-name", "value"]) == 2
    assert "--state-name NAME needs --state UID" in capsys.readouterr().err
    chk = f"chk-{result.checkpoints[-1].id}"
    args = ["checkpoints", str(tmp_path / "chk" / chk), "--state", "sums", "--state-name", "value"]
    assert main(args) == 0
    assert capsys.readouterr().out.splitlines()[1].split() == ["k", "value"]


def test_read_state_of_recomputed_windows(tmp_path: Path) -> None:
    """With recovery="recompute" a window stores no state: a savepoint (which always
    holds full state) has its pending windows, a checkpoint taken while windows are
    open refuses to show them (they are rebuilt by replay), and the final checkpoint
    of the bounded job holds its (empty) final state."""
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="1h", recovery="recompute"),
        batch_size=50,
    )
    keyed = (
        env.from_sequence(0, N)
        .name("numbers")
        .assign_timestamps("value")
        .map_batches(SleepPerBatch(0.01))
        .with_columns(k=ed.col("value") % KEYS)
        .key_by("k")
    )
    keyed.window(ed.Tumbling("1s")).sum("value").uid("win").collect()
    client = env.execute_async("recompute")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 500,
        timeout=TIMEOUT_S,
        what="500 rows to be read",
    )
    savepoint = client.trigger_savepoint(str(tmp_path / "sp"))
    checkpoint_id = client.trigger_checkpoint()
    result = client.wait(timeout=TIMEOUT_S)
    assert ed.read_state(savepoint, "win").num_rows > 0
    taken = {c.id: c for c in result.checkpoints}[checkpoint_id]
    assert taken.null_state_checkpoint < checkpoint_id  # a window was open
    with pytest.raises(ed.CheckpointError, match=r"'win'.*recomputes its state"):
        ed.read_state(taken.path, "win")
    final = ed.read_state(_final(result), "win")
    assert final.num_rows == 0


def test_read_state_drops_expired_list_and_map_entries_under_a_composite_key(
    tmp_path: Path,
) -> None:
    with ManualClock(5_000) as clock:

        class Recent(ed.ProcessFunction):
            def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
                clock.advance(1)  # row v is written at 5_001 + v and lives 5 ms
                ctx.get_list_state("seen", ttl=0.005).add(row["value"])
                ctx.get_map_state("tens", ttl=0.005).put(row["value"], row["value"] * 10)
                return None

        env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
        rows = env.from_sequence(0, 10).with_columns(a=ed.col("value") % 2, b=ed.col("value") % 3)
        rows.key_by(["a", "b"]).process(Recent()).uid("recent").collect()
        final = _final(env.execute("ttl"))
        assert clock.now() == 5_010
        state = ed.read_state(final, "recent")
        # later, entries the checkpoint holds expire at the read too
        clock.advance(2)
        later = ed.read_state(final, "recent")
    assert sorted(v for r in later.to_pylist() for v in r["seen"]) == [7, 8, 9]
    assert sorted(k for r in later.to_pylist() for k, _ in r["tens"]) == [7, 8, 9]
    assert state.column_names == ["a", "b", "seen", "tens"]
    got = {(r["a"], r["b"]): (r["seen"], dict(r["tens"])) for r in state.to_pylist()}
    # alive at 5_010: the rows v > 4; key (0, 1) held only v = 4 and is gone
    assert got == {
        (1, 2): ([5], {5: 50}),
        (0, 0): ([6], {6: 60}),
        (1, 1): ([7], {7: 70}),
        (0, 2): ([8], {8: 80}),
        (1, 0): ([9], {9: 90}),
    }


class Complex(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> Any:
        ctx.get_state("odd").update(complex(row["value"], 1))
        ctx.get_state("count", default=0).update(ctx.get_state("count", default=0).value() + 1)
        return None


def test_read_state_names_a_state_arrow_cannot_hold_and_reads_the_others(tmp_path: Path) -> None:
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk")))
    rows = env.from_sequence(0, 6).with_columns(k=ed.col("value") % 2)
    rows.key_by("k").process(Complex()).uid("complex").collect()
    final = _final(env.execute("complex"))
    with pytest.raises(ed.CheckpointError, match=r"'complex'.*value state 'odd'.*state="):
        ed.read_state(final, "complex")
    counts = ed.read_state(final, "complex", state="count")
    assert counts.sort_by("k").to_pylist() == [{"k": 0, "count": 3}, {"k": 1, "count": 3}]
