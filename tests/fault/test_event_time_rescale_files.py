"""Event time across a restore at another parallelism, over Parquet files with several row groups.

The row groups of one file are dealt to several subtasks, each reading its
groups in file order with one watermark per file (DESIGN.md "Event time per
split"). A restore at another parallelism hands the rest of a file to one
subtask, which reads it from the earliest of the old subtasks' places: its
watermark must restart from the smallest of their timestamps, never the
largest (which made the rows just after the savepoint late). Every case
must equal the failure-free result exactly, with no late row: tumbling,
sliding and session windows with a late output, and an interval join, from
a savepoint and from the latest checkpoint after ``cancel()``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.event_time import SCHEMA, write_hour_files
from support.faults import SleepPerBatch, wait_until

FILES = 6
ROWS = 3_000
GROUPS = 4
KEYS = 40
TIMEOUT_S = 60.0


def write_files(directory: Path, seed: int) -> list[dict[str, Any]]:
    """Files over the same hour (the bound is 10 s), of ``GROUPS`` row groups each."""
    return write_hour_files(
        directory, seed, files=FILES, rows=ROWS, keys=KEYS, row_group_size=ROWS // GROUPS
    )


def tumbling(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        sums[(r["k"], r["ts"] // 60_000 * 60_000)] += r["v"]
    return sorted((k, s, v) for (k, s), v in sums.items())


def sliding(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for r in rows:
        last = r["ts"] // 20_000 * 20_000
        for start in (last, last - 20_000, last - 40_000):
            sums[(r["k"], start)] += r["v"]
    return sorted((k, s, v) for (k, s), v in sums.items())


def sessions(rows: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    out = []
    by_key: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_key[r["k"]].append(r)
    for k, items in by_key.items():
        items.sort(key=lambda r: r["ts"])
        start, last, total = items[0]["ts"], items[0]["ts"], 0
        for r in items:
            if r["ts"] - last >= 20_000:
                out.append((k, start, total))
                start, total = r["ts"], 0
            last = r["ts"]
            total += r["v"]
        out.append((k, start, total))
    return sorted(out)


REFERENCES = {"tumbling": tumbling, "sliding": sliding, "session": sessions}


def build(
    parallelism: int, data: Path, chk: Path, out: Path, shape: str, *, sleep: float
) -> ed.StreamEnvironment:
    env = ed.StreamEnvironment(
        parallelism,
        checkpoint=ed.CheckpointConfig(str(chk), interval="100ms"),
        batch_size=100,
    )
    stamped = (
        env.from_parquet(str(data))
        .name("src")
        .uid("src")
        .assign_timestamps("ts", max_out_of_orderness="10s")
        .name("ts")
        .uid("ts")
        .map_batches(SleepPerBatch(sleep), schema=SCHEMA)
        .name("slow")
        .uid("slow")
    )
    late = ed.OutputTag("late")
    if shape == "interval_join":
        other = stamped.select("id", "ts").name("right").uid("right")
        joined = stamped.join(other, on="id", within=("-1s", "1s")).name("join").uid("join")
        joined.select("id").sink_to(ed.ParquetSink(str(out / "main"))).name("o").uid("o")
        return env
    assigner = {
        "tumbling": ed.Tumbling("60s"),
        "sliding": ed.Sliding("60s", "20s"),
        "session": ed.Session("20s"),
    }[shape]
    windows = stamped.key_by("k").window(assigner, late_output=late).sum("v").name("win").uid("win")
    windows.sink_to(ed.ParquetSink(str(out / "main"))).name("o").uid("o")
    windows.side_output(late).sink_to(ed.ParquetSink(str(out / "late"))).name("l").uid("l")
    return env


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    ("shape", "p_from", "p_to", "stop"),
    [
        ("tumbling", 2, 1, "savepoint"),
        ("sliding", 2, 3, "savepoint"),
        ("session", 3, 2, "savepoint"),
        ("tumbling", 2, 3, "cancel"),
        ("interval_join", 2, 1, "savepoint"),
    ],
)
def test_a_restore_at_another_parallelism_makes_no_row_late(
    tmp_path: Path, shape: str, p_from: int, p_to: int, stop: str
) -> None:
    rows = write_files(tmp_path / "in", seed=p_from * 10 + p_to)
    chk, out = tmp_path / "chk", tmp_path / "out"
    client = build(p_from, tmp_path / "in", chk, out, shape, sleep=0.01).execute_async("first")
    wait_until(
        lambda: client.metrics()["operators"]["src"]["records_out"] >= FILES * ROWS // 3,
        timeout=TIMEOUT_S,
        what="a third of the input to be read",
    )
    if stop == "savepoint":
        restore = client.stop_with_savepoint(str(tmp_path / "sp"), drain=False)
        first = client.wait(timeout=TIMEOUT_S)
    else:
        done = len(client.checkpoints)
        wait_until(
            lambda: len(client.checkpoints) > done,
            timeout=TIMEOUT_S,
            what="one more checkpoint",
        )
        read = int(client.metrics()["operators"]["src"]["records_out"])
        client.cancel()
        with pytest.raises(ed.JobCancelledError):
            client.wait(timeout=TIMEOUT_S)
        restore = "latest"
    if stop == "savepoint":
        read = int(first.metrics["operators"]["src"]["records_out"])
    assert 0 < read < FILES * ROWS, f"the stop did not happen mid-run ({read})"

    build(p_to, tmp_path / "in", chk, out, shape, sleep=0.0).execute("second", restore_from=restore)

    main = read_parquet_dir(out / "main")
    if shape == "interval_join":
        assert sorted(main["id"].to_pylist()) == sorted(r["id"] for r in rows)
        return
    late = read_parquet_dir(out / "late").num_rows if (out / "late").exists() else 0
    assert late == 0, f"{late} rows were made late by the restore"
    got = sorted(
        zip(
            main["k"].to_pylist(),
            main["window_start"].to_pylist(),
            main["v"].to_pylist(),
            strict=True,
        )
    )
    assert got == REFERENCES[shape](rows)
