"""A keyed process function with event-time timers stopped with a savepoint at
parallelism 1 resumes at parallelism 3 (format v5: the watermark is
checkpointed once per subtask, not in every key group's blob).

Per key and bucket of 100 values the function counts the rows (MapState) and
registers a timer at the bucket's end; the timer emits the count. The rows
committed before the savepoint and after the restore are exactly those of a
plain-Python reference: no timer lost or fired twice, no count off. The
savepoint is written by the current writer (v5) and by the old one (v4: the
watermark in every owned key group's blob, as keyed broadcast functions
wrote it too before; tests/fault/test_keyed_broadcast_rescale.py), so a
checkpoint of an earlier version restores too,
at another parallelism. ``ed.read_state`` reads the savepoints of both
formats: the buckets whose timers were still pending.
"""

from __future__ import annotations

import pickle
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline._exec.process import KeyedProcessRunner
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 6_000
KEYS = 5
TIMEOUT_S = 30.0


class Buckets(ed.ProcessFunction):
    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        bucket = row["value"] // 100
        counts = ctx.get_map_state("counts")
        counts.put(bucket, (counts.get(bucket) or 0) + 1)
        ctx.timer_service.register_event_time_timer(bucket * 100 + 99)

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        counts = ctx.get_map_state("counts")
        bucket = timestamp // 100
        count = counts.get(bucket)
        counts.remove(bucket)
        return [{"k": ctx.key, "bucket": bucket, "count": count}]


def _build(parallelism: int, chk: Path, out: Path, *, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        batch_size=100,
    )
    (
        env.from_sequence(0, N)
        .set_parallelism(1)  # one source subtask: values (event times) in order
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
        .process(Buckets())
        .name("buckets")
        .uid("buckets")
        .sink_to(ed.ParquetSink(str(out)))
        .uid("out")
    )
    return env


def _reference() -> Counter[tuple[int, int]]:
    return Counter((v % KEYS, v // 100) for v in range(N))


@pytest.mark.parametrize("writer", ["v4", "v5"])
def test_timers_restored_at_p1_to_p3_fire_exactly(
    tmp_path: Path, writer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    chk, out = tmp_path / "chk", tmp_path / "out"
    if writer == "v4":
        monkeypatch.setattr(KeyedProcessRunner, "_watermark_per_key_group", True)
        monkeypatch.setattr(KeyedProcessRunner, "union_state", False)
    client = _build(1, chk, out, sleep=0.004).execute_async("buckets")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 4,
        timeout=TIMEOUT_S,
        what="a quarter of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    monkeypatch.undo()
    before = read_parquet_dir(out).to_pylist()
    assert before, "no timer fired before the savepoint"
    fired_before = {(r["k"], r["bucket"]) for r in before}

    # The savepoint's format, and what read_state reads of it: the buckets pending.
    blobs = _process_blobs(Path(str(savepoint)))
    formats = {pickle.loads(b)[0] for b in blobs}
    assert formats == {f"eddyline.keyed_process.{writer}"}
    pending = {
        (row["k"], bucket): count
        for row in ed.read_state(savepoint, "buckets").to_pylist()
        for bucket, count in row["counts"]
    }
    assert pending, "the savepoint holds no pending bucket"

    _build(3, chk, out, sleep=0.0).execute("resumed", restore_from=savepoint)
    rows = read_parquet_dir(out).to_pylist()
    got = Counter({(r["k"], r["bucket"]): r["count"] for r in rows})
    assert len(rows) == len(got), "a timer fired twice"
    assert got == _reference()
    after = {(r["k"], r["bucket"]) for r in rows} - fired_before
    for key_bucket, count in pending.items():
        assert key_bucket in after and 0 < count <= got[key_bucket]


def _process_blobs(savepoint: Path) -> list[bytes]:
    """The key-group blobs of the operator "buckets" in a savepoint, as read_state reads them."""
    from eddyline import _core

    info = _core.read_keyed_state(str(savepoint), "buckets", {})
    return [blob for _, blob in info["blobs"]]


FIXTURE = Path(__file__).parent / "fixtures" / "process_v4_savepoint" / "chk-3"
"""A savepoint written by eddyline before format v5 (main at 4cff1e4, the v4
writer): the job below at parallelism 1 over ``from_sequence(0, 2000)``,
stopped with a savepoint after about 700 rows; its sink (uid "out") was a
``collect()``."""
FIXTURE_N = 2_000


def test_a_savepoint_of_the_old_writer_reads_and_restores_at_p3() -> None:
    blobs = [pickle.loads(b) for b in _process_blobs(FIXTURE)]
    assert {b[0] for b in blobs} == {"eddyline.keyed_process.v4"}
    (watermark,) = {b[1] for b in blobs}  # v4: in every key group's blob
    assert watermark > -(2**63)
    reference = Counter((v % KEYS, v // 100) for v in range(FIXTURE_N))
    pending = {
        (row["k"], bucket): count
        for row in ed.read_state(FIXTURE, "buckets").to_pylist()
        for bucket, count in row["counts"]
    }
    assert pending
    for (k, bucket), count in pending.items():
        assert bucket * 100 + 99 > watermark and 0 < count <= reference[(k, bucket)]

    env = ed.StreamEnvironment(3, batch_size=100)
    out = (
        env.from_sequence(0, FIXTURE_N)
        .set_parallelism(1)
        .name("numbers")
        .uid("numbers")
        .assign_timestamps("value")
        .set_parallelism(1)
        .uid("ts")
        .map_batches(SleepPerBatch(0.0))
        .set_parallelism(1)
        .uid("slow")
        .with_columns(k=ed.col("value") % KEYS)
        .set_parallelism(1)
        .uid("key")
        .key_by("k")
        .process(Buckets())
        .name("buckets")
        .uid("buckets")
        .collect()
        .uid("resumed-out")
    )
    # (The old job's collect sink is not part of this one.)
    env.execute("resumed", restore_from=str(FIXTURE), allow_non_restored_state=True)
    rows = out.to_pylist()
    got = Counter({(r["k"], r["bucket"]): r["count"] for r in rows})
    assert len(rows) == len(got), "a timer fired twice"
    # Every bucket whose timer had not fired fires once, with its whole count:
    # the rows counted before the savepoint (restored state) and after it.
    assert got == Counter({kb: c for kb, c in reference.items() if kb[1] * 100 + 99 > watermark})
