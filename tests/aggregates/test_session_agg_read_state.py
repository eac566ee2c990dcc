"""``ed.read_state`` of window aggregates (docs/read_state.md): a job stopped
with a savepoint mid-stream holds its open windows, and ``read_state`` of the
aggregate's uid shows each as the key, ``window_start`` (and, for sessions,
``window_end``; ms) and every aggregate's current value. The windows emitted
before the stop and the open ones read from the savepoint are exactly the
windows of the rows read, computed in plain Python (TESTING.md "Differential
oracle"), at parallelism 1 and 2 (the key groups spread over two subtasks'
files); restored from the savepoint, the job ends with every window emitted
once. For ``keyed.window(ed.Session(gap)).agg(...)`` and for Spark's
spelling ``group_by("k", F.session_window(...))`` / ``group_by(F.window(...),
"k")``, whose ``.uid(...)`` names the window aggregate under the projection
that builds the ``window`` struct."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
import eddyline.functions as F
from eddyline.testing import read_parquet_dir
from support.faults import CheckpointGatedSequence, wait_until

N = 4_000
HOLD = 0.45  # the source reads rows 0..1800, then waits for the stop
KEYS = 5
GAP_MS = 1_000
BLOCK = 400
TIMEOUT_S = 60.0
AGG_NAMES = ["n", "sum(value)", "min(value)", "max(value)", "collect_list(value)", "avg(value)"]


def _time_ms(v: int) -> int:
    """Rows 10 ms apart, and 5 s apart between blocks of 400: every block is
    one session per key (a key's rows are 50 ms apart, the gap is 1 s)."""
    return v * 10 + (v // BLOCK) * 5_000


def _values(k: int, start: int, values: list[int], end: int | None) -> dict[str, Any]:
    row: dict[str, Any] = {"k": k, "window_start": start}
    if end is not None:
        row["window_end"] = end
    return row | {
        "n": len(values),
        "sum(value)": sum(values),
        "min(value)": min(values),
        "max(value)": max(values),
        "collect_list(value)": values,
        "avg(value)": sum(values) / len(values),
    }


def _sessions(n: int) -> list[dict[str, Any]]:
    """The reference sessions of the rows ``0..n`` (in event-time order per key)."""
    by_key: dict[int, list[int]] = defaultdict(list)
    for v in range(n):
        by_key[v % KEYS].append(v)
    out = []
    for k, values in by_key.items():
        runs: list[list[int]] = [[]]
        for v in values:
            if runs[-1] and _time_ms(v) - _time_ms(runs[-1][-1]) >= GAP_MS:
                runs.append([])
            runs[-1].append(v)
        out += [_values(k, _time_ms(r[0]), r, _time_ms(r[-1]) + GAP_MS) for r in runs]
    return sorted(out, key=_order)


def _minutes(n: int) -> list[dict[str, Any]]:
    """The reference tumbling windows of 1 s of the rows ``0..n``, without
    ``window_end`` (the window aggregates' state has only the start)."""
    by_window: dict[tuple[int, int], list[int]] = defaultdict(list)
    for v in range(n):
        by_window[(v % KEYS, _time_ms(v) // 1000 * 1000)].append(v)
    return sorted((_values(k, s, vs, None) for (k, s), vs in by_window.items()), key=_order)


def _order(row: dict[str, Any]) -> tuple[int, int]:
    return (row["k"], row["window_start"])


AGGS = [
    F.count("*").alias("n"),
    F.sum("value"),
    F.min("value"),
    F.max("value"),
    F.collect_list("value"),
    F.avg("value"),
]


def _sessions_by_window(stream: ed.DataStream) -> ed.DataStream:
    return stream.key_by("k").window(ed.Session(GAP_MS / 1000)).agg(*AGGS)


def _sessions_by_group_by(stream: ed.DataStream) -> ed.DataStream:
    return stream.group_by("k", F.session_window("t", "1 second")).agg(*AGGS)


def _tumbling_by_group_by(stream: ed.DataStream) -> ed.DataStream:
    return stream.group_by(F.window("t", "1 second"), "k").agg(*AGGS)


CASES = [
    pytest.param(_sessions_by_window, _sessions, id="session-window"),
    pytest.param(_sessions_by_group_by, _sessions, id="session-group_by"),
    pytest.param(_tumbling_by_group_by, _minutes, id="tumbling-group_by"),
]


def _flat(row: dict[str, Any], with_end: bool) -> dict[str, Any]:
    """An output row with Spark's ``window`` / ``session_window`` struct as
    ``window_start`` (and ``window_end``), as ``read_state`` shows them."""
    for struct in ("window", "session_window"):
        if struct in row:
            bounds = row.pop(struct)
            row["window_start"] = bounds["start"]
            row["window_end"] = bounds["end"]
    if not with_end:
        row.pop("window_end")
    return row


def _graph(
    env: ed.StreamEnvironment,
    source: CheckpointGatedSequence,
    windows: Callable[[ed.DataStream], ed.DataStream],
    tmp_path: Path,
) -> None:
    # The source and the steps before the grouping run at parallelism 1: the
    # rows read are 0..read, in order.
    stream = (
        env.from_source(source)
        .name("numbers")
        .uid("numbers")
        .set_parallelism(1)
        .with_columns(t=ed.col("value") * 10 + (ed.col("value") // BLOCK) * 5_000)
        .set_parallelism(1)
        .assign_timestamps("t")
        .set_parallelism(1)
        .with_columns(k=ed.col("value") % KEYS)
        .set_parallelism(1)
    )
    windows(stream).uid("aggs").sink_to(ed.ParquetSink(str(tmp_path / "out"))).uid("out")


@pytest.mark.parametrize("parallelism", [1, 2], ids=lambda p: f"p{p}")
@pytest.mark.parametrize(("windows", "reference"), CASES)
def test_read_state_of_a_savepoint_holds_the_open_windows(
    tmp_path: Path,
    parallelism: int,
    windows: Callable[[ed.DataStream], ed.DataStream],
    reference: Callable[[int], list[dict[str, Any]]],
) -> None:
    chk = tmp_path / "chk"
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(str(chk), interval="1h"), batch_size=50
    )
    _graph(env, CheckpointGatedSequence(chk, N, splits=1, gates=(), hold=HOLD), windows, tmp_path)
    client = env.execute_async("windows")
    read = int(HOLD * N)
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= read,
        timeout=TIMEOUT_S,
        what=f"{read} rows to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"))
    client.wait(timeout=TIMEOUT_S)

    state = ed.read_state(savepoint, "aggs")
    sessions = reference is _sessions
    bounds = ["window_start", "window_end"] if sessions else ["window_start"]
    assert state.column_names == ["k", *bounds, *AGG_NAMES]
    for name in bounds:
        assert state.schema.field(name).type == pa.int64()
    assert state.schema.field("n").type == pa.int64()
    assert state.schema.field("collect_list(value)").type == pa.list_(pa.int64())
    pending = sorted(state.to_pylist(), key=_order)
    assert pending, "no window was open at the savepoint"
    out = read_parquet_dir(tmp_path / "out").to_pylist()
    fired = sorted((_flat(r, sessions) for r in out), key=_order)
    assert fired, "no window fired before the savepoint"
    # The fired windows and the open ones are exactly the windows of the rows
    # read, and no window is both.
    assert sorted(fired + pending, key=_order) == reference(read)
    assert not {_order(r) for r in fired} & {_order(r) for r in pending}

    only = ed.read_state(savepoint, "aggs", state="sum(value)")
    assert only.column_names == ["k", *bounds, "sum(value)"]
    assert sorted(only.to_pylist(), key=_order) == [
        {key: r[key] for key in only.column_names} for r in pending
    ]

    # The same graph restored from the savepoint, reading to the end: the open
    # windows are restored under the uid, and both runs' output is every window once.
    env = ed.StreamEnvironment(parallelism, batch_size=50)
    _graph(env, CheckpointGatedSequence(chk, N, splits=1, gates=()), windows, tmp_path)
    env.execute("windows", restore_from=savepoint)
    out = read_parquet_dir(tmp_path / "out").to_pylist()
    assert sorted((_flat(r, sessions) for r in out), key=_order) == reference(N)


def test_uid_of_group_by_is_unique_and_names_the_aggregate() -> None:
    env = ed.StreamEnvironment(1)
    stream = env.from_collection([{"k": 1, "t": 0}]).assign_timestamps("t")
    grouped = stream.group_by("k", F.session_window("t", "1 second")).agg(F.count("*"))
    grouped.uid("aggs")
    uids = {n.display_name: n.uid for n in env._graph.nodes}
    assert uids["session_window"] is None
    assert [name for name, uid in uids.items() if uid == "aggs"] == ["session_agg_2"]
    with pytest.raises(ed.GraphError, match="uid 'aggs' is already used by operator 'session_agg"):
        grouped.select("k").uid("aggs")
