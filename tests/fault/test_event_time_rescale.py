"""Event-time jobs across a savepoint: rescaled windows and process-function watermarks.

``from_sequence -> assign_timestamps -> key_by -> window`` stopped
with a savepoint at parallelism 2 resumes at parallelism 1, 2 and 4: the
timestamp assigner's state (one largest timestamp per split and per subtask)
is union list state, so every new subtask starts from its splits'
watermarks, never above what the old subtasks had emitted, and the committed
windows equal a failure-free run exactly.

A keyed ProcessFunction's watermark is checkpointed with its
state: right after a restore, ``ctx.timer_service.current_watermark()``
reads the watermark it had, not ``-2**63``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import SleepPerBatch, wait_until

N = 20_000
KEYS = 5
WINDOW_MS = 1_000
TIMEOUT_S = 30.0
MIN_WM = -(2**63)


def build_windows(parallelism: int, chk: Path, out: Path, *, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        batch_size=100,
    )
    stamped = (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .assign_timestamps("value", max_out_of_orderness="0s")
        .name("ts")
        .uid("ts")
    )
    keyed = (
        stamped.map_batches(SleepPerBatch(sleep))
        .name("slow")
        .uid("slow")
        .with_columns(k=ed.col("value") % KEYS)
        .name("key")
        .uid("key")
    )
    windows = keyed.key_by("k").window(ed.Tumbling("1s")).sum("value").name("win").uid("win")
    windows.sink_to(ed.ParquetSink(str(out))).name("out").uid("out")
    return env


def window_rows(directory: Path) -> list[tuple[int, int, int]]:
    table = read_parquet_dir(directory)
    return sorted(
        zip(
            table["k"].to_pylist(),
            table["window_start"].to_pylist(),
            table["value"].to_pylist(),
            strict=True,
        )
    )


def reference_windows() -> list[tuple[int, int, int]]:
    sums: dict[tuple[int, int], int] = {}
    for v in range(N):
        key = (v % KEYS, v // WINDOW_MS * WINDOW_MS)
        sums[key] = sums.get(key, 0) + v
    return sorted((k, start, total) for (k, start), total in sums.items())


@pytest.fixture(scope="module")
def savepoint_at_p2(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A windowed event-time job at parallelism 2, stopped mid-run with a savepoint."""
    base = tmp_path_factory.mktemp("p2")
    env = build_windows(2, base / "chk", base / "out", sleep=0.004)
    client = env.execute_async("stopped")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 5,
        timeout=TIMEOUT_S,
        what="a fifth of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(base / "sp"), drain=False)
    first = client.wait(timeout=TIMEOUT_S)
    read = int(first.metrics["operators"]["numbers"]["records_out"])
    assert 0 < read < N, f"the stop did not happen mid-run ({read} of {N})"
    return {"savepoint": savepoint, "rows": window_rows(base / "out"), "read": read}


def test_event_time_failure_free_windows_match_the_reference(tmp_path: Path) -> None:
    build_windows(2, tmp_path / "chk", tmp_path / "out", sleep=0.0).execute("gold")
    assert window_rows(tmp_path / "out") == reference_windows()


@pytest.mark.parametrize("parallelism", [1, 2, 4], ids=lambda p: f"p{p}")
def test_event_time_windowed_savepoint_restores_exactly_at_another_parallelism(
    tmp_path: Path, savepoint_at_p2: dict[str, Any], parallelism: int
) -> None:
    out = tmp_path / "out"
    resumed = build_windows(parallelism, tmp_path / "chk", out, sleep=0.0).execute(
        "resumed", restore_from=savepoint_at_p2["savepoint"]
    )
    assert (
        int(resumed.metrics["operators"]["numbers"]["records_out"]) == N - savepoint_at_p2["read"]
    )
    assert int(resumed.metrics["operators"]["win"]["late_records"]) == 0
    assert sorted(savepoint_at_p2["rows"] + window_rows(out)) == reference_windows()


class WatermarkProbe(ed.ProcessFunction):
    """Emits, per record, the watermark the function sees."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        return [{"value": row["value"], "wm": ctx.timer_service.current_watermark()}]


def build_probe(chk: Path, out: Path, *, sleep: float) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        1, checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"), batch_size=100
    )
    (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .assign_timestamps("value")
        .uid("ts")
        .map_batches(SleepPerBatch(sleep))
        .uid("slow")
        .with_columns(k=ed.col("value") % KEYS)
        .uid("key")
        .key_by("k")
        .process(WatermarkProbe())
        .name("probe")
        .uid("probe")
        .sink_to(ed.ParquetSink(str(out)))
        .uid("out")
    )
    return env


def test_event_time_process_function_watermark_is_restored(tmp_path: Path) -> None:
    chk, out = tmp_path / "chk", tmp_path / "out"
    client = build_probe(chk, out, sleep=0.004).execute_async("probe")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= N // 5,
        timeout=TIMEOUT_S,
        what="a fifth of the input to be read",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
    client.wait(timeout=TIMEOUT_S)
    before = read_parquet_dir(out).to_pylist()
    assert before, "nothing was committed before the savepoint"
    last_wm = max(r["wm"] for r in before)
    assert last_wm > MIN_WM
    read = len(before)
    build_probe(chk, out, sleep=0.0).execute("resumed", restore_from=savepoint)
    after = [r for r in read_parquet_dir(out).to_pylist() if r["value"] >= read]
    assert len(after) == N - read
    first = min(after, key=lambda r: r["value"])
    # The restored function knows its watermark before any new one arrives.
    assert first["wm"] >= last_wm, (first, last_wm)
    assert all(r["wm"] > MIN_WM for r in after)
