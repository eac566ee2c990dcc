"""A keyed broadcast process function with event-time timers restored at another
parallelism (process state format v5 for keyed broadcast functions;
docs/DESIGN.md "Keyed state layer").

Per key and bucket of 100 values the function counts the rows (MapState) and
registers a timer at the bucket's end; the timer emits the count and the
key's rule (a factor) from the broadcast state. Its operator state is an
entry list: from subtask 0 the broadcast state, from every subtask its
watermark (union-redistributed: a subtask of a restore at another
parallelism takes the smallest watermark of the old subtasks whose key
groups it receives), and the key groups' blobs no longer carry the
watermark. A savepoint of the current writer (v5) at parallelism 2 resumes
at 3 and 1 (and across ProcessRunner workers at 3); a savepoint of the old
writer (v4: the broadcast state alone as operator state, the watermark in
every owned key group's blob; the fixture below) resumes at 3. The rows
committed are exactly those of a plain-Python reference: no timer lost or
fired twice, no count off, every rule known (the rules source finished
before the savepoint: only the restored broadcast state knows them). An
advancing watermark alone no longer makes an incremental checkpoint write
the unchanged key groups again.
"""

from __future__ import annotations

import pickle
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.checkpoints import int_key_group
from support.faults import CheckpointGatedSequence, SleepPerBatch, wait_until

KEYS = 5
RULES = [{"k": k, "factor": k + 1} for k in range(KEYS)]
SCHEMA = pa.schema(
    [("k", pa.int64()), ("bucket", pa.int64()), ("count", pa.int64()), ("factor", pa.int64())]
)
TIMEOUT_S = 30.0


class BucketsWithRules(ed.KeyedBroadcastProcessFunction):
    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> None:
        ctx.broadcast_state.put(row["k"], row["factor"])

    def process_element(self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext) -> None:
        bucket = row["value"] // 100
        counts = ctx.get_map_state("counts")
        counts.put(bucket, (counts.get(bucket) or 0) + 1)
        ctx.timer_service.register_event_time_timer(bucket * 100 + 99)

    def on_timer(self, timestamp: int, ctx: ed.KeyedBroadcastContext) -> list[dict[str, Any]]:
        counts = ctx.get_map_state("counts")
        bucket = timestamp // 100
        count = counts.get(bucket)
        counts.remove(bucket)
        factor = ctx.broadcast_state.get(ctx.key)
        return [{"k": ctx.key, "bucket": bucket, "count": count, "factor": factor}]


def _keyed_numbers(env: ed.StreamEnvironment, n: int, sleep: float) -> ed.KeyedStream:
    """``0..n`` with event time ``value`` (one source subtask: in order), slowed by
    ``sleep`` a batch, keyed by ``value % KEYS``; the uids the savepoints and the v4
    fixture were written with."""
    return (
        env.from_sequence(0, n)
        .set_parallelism(1)
        .name("numbers")
        .uid("numbers")
        .assign_timestamps("value")
        .set_parallelism(1)
        .uid("ts")
        .map_batches(SleepPerBatch(sleep))
        .set_parallelism(1)
        .uid("slow")
        .with_columns(k=ed.col("value") % KEYS)
        .set_parallelism(1)
        .uid("key")
        .key_by("k")
    )


def _job(env: ed.StreamEnvironment, n: int, sleep: float) -> ed.DataStream:
    rules = env.from_collection(RULES).set_parallelism(1).name("rules").uid("rules")
    keyed = _keyed_numbers(env, n, sleep)
    out = keyed.connect(rules.broadcast()).process(BucketsWithRules(), schema=SCHEMA)
    return out.name("buckets").uid("buckets")


def _reference(n: int, above: int = -(2**63)) -> Counter[tuple[int, int, int]]:
    """``(k, bucket, factor) -> count`` of the buckets whose timer is above ``above``."""
    return Counter(
        (v % KEYS, v // 100, v % KEYS + 1) for v in range(n) if (v // 100) * 100 + 99 > above
    )


def _fired(rows: list[dict[str, Any]]) -> Counter[tuple[int, int, int]]:
    got = Counter({(r["k"], r["bucket"], r["factor"]): r["count"] for r in rows})
    assert len(rows) == len(got), "a timer fired twice"
    return got


def _blobs(savepoint: Path) -> list[bytes]:
    """The key-group blobs of the operator "buckets", as read_state reads them."""
    from eddyline import _core

    info = _core.read_keyed_state(str(savepoint), "buckets", {})
    return [blob for _, blob in info["blobs"]]


def _savepoint(tmp_path: Path, n: int, parallelism: int, out: Path, workers: int = 0) -> str:
    """Runs the job at ``parallelism`` until a third of the input was read, then
    stops it with a savepoint (the rules source has finished by then)."""
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms"),
        batch_size=100,
    )
    # Worker processes report their metrics every 250 ms: their job is made slow
    # enough (~0.6 s a subtask) to still be running when the driver sees a third read.
    sleep = 0.02 if workers else 0.004
    _job(env, n, sleep=sleep).sink_to(ed.ParquetSink(str(out))).uid("out")
    client = env.execute_async("buckets", runner=ed.ProcessRunner(workers) if workers else None)
    wait_until(
        lambda: (
            client.metrics()["operators"]["numbers"]["records_out"] >= n // 3
            and client.metrics()["operators"]["rules"]["records_out"] >= KEYS
        ),
        timeout=TIMEOUT_S,
        what="a third of the input and every rule to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    return str(savepoint)


@pytest.mark.parametrize(
    ("parallelism", "workers"),
    [(3, 0), (1, 0), (3, 2)],
    ids=["p3", "p1", "p3-process-runner"],
)
def test_v5_savepoint_at_p2_resumes_at_another_parallelism_exactly(
    tmp_path: Path, parallelism: int, workers: int
) -> None:
    n, out = 6_000, tmp_path / "out"
    savepoint = _savepoint(tmp_path, n, 2, out, workers)
    before = read_parquet_dir(out).to_pylist()
    assert before, "no timer fired before the savepoint"
    # Format v5: key groups without the watermark.
    assert {pickle.loads(b)[0] for b in _blobs(Path(savepoint))} == {"eddyline.keyed_process.v5"}

    env = ed.StreamEnvironment(parallelism, batch_size=100)
    _job(env, n, sleep=0.0).sink_to(ed.ParquetSink(str(out))).uid("out")
    runner = ed.ProcessRunner(workers) if workers else None
    env.execute("resumed", restore_from=savepoint, runner=runner)
    assert _fired(read_parquet_dir(out).to_pylist()) == _reference(n)


class WatermarkProbe(ed.KeyedBroadcastProcessFunction):
    """Emits each row with the watermark the function sees when it processes it."""

    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> None:
        ctx.broadcast_state.put(row["k"], row["factor"])

    def process_element(
        self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext
    ) -> list[dict[str, Any]]:
        wm = ctx.timer_service.current_watermark()
        return [{"k": ctx.key, "value": row["value"], "wm": wm}]


def _probe(env: ed.StreamEnvironment, n: int, sleep: float, out: Path) -> None:
    rules = env.from_collection(RULES).set_parallelism(1).name("rules").uid("rules")
    keyed = _keyed_numbers(env, n, sleep)
    schema = pa.schema([("k", pa.int64()), ("value", pa.int64()), ("wm", pa.int64())])
    probe = keyed.connect(rules.broadcast()).process(WatermarkProbe(), schema=schema)
    probe.uid("buckets").sink_to(ed.ParquetSink(str(out))).uid("out")


@pytest.mark.parametrize("parallelism", [3, 1])
def test_every_restored_subtask_gets_the_watermark_of_the_old_ones(
    tmp_path: Path, parallelism: int
) -> None:
    """The watermark entries of ALL old subtasks reach every new one: a row
    processed after the restore, before any new watermark, sees at least the
    watermark the rows before the savepoint saw (an aligned savepoint's
    subtasks hold the same one). Were only subtask 0's entries restored, the
    subtasks receiving old subtask 1's key groups would start at ``-2**63``."""
    n = 6_000
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(str(tmp_path / "chk"), interval="100ms"), batch_size=100
    )
    _probe(env, n, 0.004, tmp_path / "before")
    client = env.execute_async("probe")
    wait_until(
        lambda: (
            client.metrics()["operators"]["numbers"]["records_out"] >= n // 3
            and client.metrics()["operators"]["rules"]["records_out"] >= KEYS
        ),
        timeout=TIMEOUT_S,
        what="a third of the input and every rule to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    before = read_parquet_dir(tmp_path / "before").to_pylist()
    seen = max(r["wm"] for r in before)
    assert seen > -(2**63), "no watermark reached the function before the savepoint"

    env = ed.StreamEnvironment(parallelism, batch_size=100)
    _probe(env, n, 0.0, tmp_path / "after")
    env.execute("probe-resumed", restore_from=str(savepoint))
    after = read_parquet_dir(tmp_path / "after").to_pylist()
    assert sorted(r["value"] for r in before + after) == list(range(n))
    assert min(r["wm"] for r in after) >= seen


FIXTURE = Path(__file__).parent / "fixtures" / "keyed_broadcast_v4_savepoint"
"""A savepoint written by eddyline before keyed broadcast functions moved to
format v5 (branch rescale2 at 25e1f54, the v4 writer), by running this module
(``python tests/fault/test_keyed_broadcast_rescale.py DIR``): the job of
:func:`_job` at parallelism 2 over ``from_sequence(0, 2000)`` into a
``collect()`` sink, stopped with a savepoint after at least a third of the
rows. Its subtask 0 wrote ``(broadcast blob, {key group: v4 blob})``,
subtask 1 the key groups alone."""
FIXTURE_N = 2_000


def test_a_v4_savepoint_restores_at_p3_exactly() -> None:
    (savepoint,) = sorted(FIXTURE.glob("chk-*"))
    blobs = [pickle.loads(b) for b in _blobs(savepoint)]
    assert {b[0] for b in blobs} == {"eddyline.keyed_process.v4"}
    (watermark,) = {b[1] for b in blobs}  # v4: in every owned key group's blob
    assert watermark > -(2**63)

    env = ed.StreamEnvironment(3, batch_size=100)
    out = _job(env, FIXTURE_N, sleep=0.0).collect().uid("resumed-out")
    # (The old job's collect sink is not part of this one.)
    env.execute("resumed", restore_from=str(savepoint), allow_non_restored_state=True)
    # Every bucket whose timer had not fired fires once, with its whole count
    # (rows counted before the savepoint and after it) and its key's rule.
    assert _fired(out.to_pylist()) == _reference(FIXTURE_N, above=watermark)


def _write_fixture(dest: Path) -> None:
    """Writes the savepoint :data:`FIXTURE` holds (see there) under ``dest``."""
    import tempfile

    chk = tempfile.mkdtemp(prefix="keyed-broadcast-fixture-")
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=100
    )
    _job(env, FIXTURE_N, sleep=0.01).collect().uid("out")
    client = env.execute_async("buckets")
    wait_until(
        lambda: (
            client.metrics()["operators"]["numbers"]["records_out"] >= FIXTURE_N // 3
            and client.metrics()["operators"]["rules"]["records_out"] >= KEYS
        ),
        timeout=TIMEOUT_S,
        what="a third of the input and every rule to be read",
    )
    print(client.stop_with_savepoint(str(dest), drain=False))
    client.wait(timeout=TIMEOUT_S)


if __name__ == "__main__":
    _write_fixture(Path(sys.argv[1]))


MAX_PARALLELISM = 128
INCR_KEYS = 3_000
HOT_ROWS = 30_000

HOT = [k for k in range(INCR_KEYS) if int_key_group(k, MAX_PARALLELISM) == 0]


def _hot_key(v: int) -> int:
    return v if v < INCR_KEYS else HOT[(v - INCR_KEYS) % len(HOT)]


def _hot_keys(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``value`` -> ``k``: each key once, then round the keys of key group 0, slowly."""
    import time

    import numpy as np

    v = batch.column("value").to_numpy()
    k = np.where(v < INCR_KEYS, v, np.array(HOT, dtype=np.int64)[(v - INCR_KEYS) % len(HOT)])
    if len(v) and v[-1] >= INCR_KEYS:
        time.sleep(0.01)  # throttle, not a wait: checkpoints complete while hot keys change
    return batch.append_column("k", pa.array(k, pa.int64()))


class CountWithRule(ed.KeyedBroadcastProcessFunction):
    def process_broadcast_element(self, row: dict[str, Any], ctx: ed.BroadcastContext) -> None:
        ctx.broadcast_state.put("step", row["step"])

    def process_element(self, row: dict[str, Any], ctx: ed.KeyedBroadcastContext) -> None:
        ctx.state.update((ctx.state.value() or 0) + (ctx.broadcast_state.get("step") or 1))


def test_a_watermark_alone_does_not_rewrite_key_groups(tmp_path: Path) -> None:
    """Event time advances with every batch; after each key was seen once only the
    keys of key group 0 change: an incremental checkpoint of that phase writes
    key group 0 and reuses the other 127 (with format v4 every one changed with
    the watermark; tests/fault/test_process_incremental.py shows the contrast
    for keyed process functions)."""
    chk, n = tmp_path / "chk", INCR_KEYS + HOT_ROWS
    # Three gates in the hot phase, each waiting for a checkpoint triggered
    # after the source reached it: at least two checkpoints of that phase have
    # hot rows before them, whatever the timing.
    hot_phase = [(INCR_KEYS + i * HOT_ROWS // 4) / n for i in (1, 2, 3)]
    source = CheckpointGatedSequence(chk, n, splits=1, gates=hot_phase, fresh=True)
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(str(chk), interval="40ms", incremental=True, retained=1000),
        batch_size=1000,
        max_parallelism=MAX_PARALLELISM,
    )
    rules = env.from_collection([{"step": 1}]).name("rules").uid("rules")
    (
        env.from_source(source)
        .map_batches(_hot_keys)
        .assign_timestamps("value")
        .key_by("k")
        .connect(rules.broadcast())
        .process(CountWithRule())
        .name("count")
        .uid("count")
        .collect()
    )
    result = env.execute("keyed-broadcast-incremental")

    def subtask(c: ed.CheckpointStats) -> dict[str, Any]:
        inspected = ed._core.inspect_checkpoint(c.path)  # type: ignore[attr-defined]
        (sub,) = next(o for o in inspected["operators"] if o["uid"] == "count")["subtasks"]
        return dict(sub)

    def reused(sub: dict[str, Any]) -> int:
        return sum(e - s for r in sub["reused"] for s, e in r["key_groups"])

    hot = [
        sub
        for c in result.checkpoints[1:]
        if (sub := subtask(c))["file"] is not None
        and sum(e - s for s, e in sub["key_groups"]) == MAX_PARALLELISM
    ]
    assert len(hot) >= 2, [subtask(c) for c in result.checkpoints]
    # Key group 0 written (when a hot batch came), the other 127 reused.
    assert all(reused(sub) >= MAX_PARALLELISM - 1 for sub in hot[1:]), hot

    counts: dict[int, int] = {}
    for v in range(INCR_KEYS + HOT_ROWS):
        counts[_hot_key(v)] = counts.get(_hot_key(v), 0) + 1
    state = ed.read_state(result.checkpoints[-1].path, "count")
    assert dict(zip(state["k"].to_pylist(), state["value"].to_pylist(), strict=True)) == counts
