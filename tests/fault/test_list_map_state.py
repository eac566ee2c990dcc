"""ListState and MapState of a keyed ProcessFunction: exact against a
plain-Python reference, with an injected failure and with SIGKILL + restore.

Each row adds its value to a list state and counts its bucket in a map state,
and emits the list's length and the bucket's count after the update. Whatever
order a key's rows arrive in, the lengths a key emits are exactly 1..c (c rows
of that key) and the counts of a (key, bucket) exactly 1..c': a lost, doubled
or stale state after a restore breaks those sequences.
"""

from __future__ import annotations

import os
import random
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import FailOnce, kill_after_checkpoints

KEYS = 7
BUCKETS = 5


class ListAndMap(ed.ProcessFunction):
    """Adds each value to a ListState and counts its bucket in a MapState."""

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        seen = ctx.get_list_state("seen")
        seen.add(row["value"])
        buckets = ctx.get_map_state("buckets")
        bucket = row["value"] % BUCKETS
        buckets.put(bucket, buckets.get(bucket, 0) + 1)
        return [
            {
                "k": ctx.key,
                "value": row["value"],
                "n": len(seen.get()),
                "in_bucket": buckets.get(bucket),
                "buckets": len(buckets.keys()),
            }
        ]


def _check(rows: list[dict[str, Any]], n: int) -> None:
    assert sorted(r["value"] for r in rows) == list(range(n)), "every value exactly once"
    per_key: dict[int, list[int]] = {}
    per_bucket: dict[tuple[int, int], list[int]] = {}
    for r in rows:
        assert r["k"] == r["value"] % KEYS
        per_key.setdefault(r["k"], []).append(r["n"])
        per_bucket.setdefault((r["k"], r["value"] % BUCKETS), []).append(r["in_bucket"])
        assert 1 <= r["buckets"] <= BUCKETS
    sizes = Counter(v % KEYS for v in range(n))
    for k, lengths in per_key.items():
        assert sorted(lengths) == list(range(1, sizes[k] + 1)), f"list state of key {k}"
    bucket_sizes = Counter((v % KEYS, v % BUCKETS) for v in range(n))
    for kb, counts in per_bucket.items():
        assert sorted(counts) == list(range(1, bucket_sizes[kb] + 1)), f"map state of {kb}"


def _job(env: ed.StreamEnvironment, n: int, fail: FailOnce | None) -> ed.DataStream:
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    if fail is not None:
        numbers = numbers.map_batches(fail).name("fail").uid("fail")
    keyed = numbers.with_columns(k=ed.col("value") % KEYS).key_by("k")
    return keyed.process(ListAndMap()).name("state").uid("state")


@pytest.mark.parametrize("parallelism", [1, 2])
def test_list_and_map_state_equal_the_reference(parallelism: int) -> None:
    n = 3000
    env = ed.StreamEnvironment(parallelism, batch_size=100)
    out = _job(env, n, None).collect()
    env.execute("list-map")
    _check(out.to_pylist(), n)


@pytest.mark.parametrize("incremental", [False, True])
def test_list_and_map_state_survive_an_injected_failure_exactly(
    tmp_path: Path, incremental: bool
) -> None:
    n = 20_000
    chk, marker = tmp_path / "chk", tmp_path / "marker"
    marker.mkdir()
    fail = FailOnce(None, marker, column="value", at=n // 2, armed_by=chk)
    env = ed.StreamEnvironment(
        2,
        # Incremental checkpoints of a Python runner's key groups
        # compare their bytes with the last checkpoint's.
        checkpoint=ed.CheckpointConfig(chk, interval="20ms", incremental=incremental),
        restart=ed.RestartStrategy.fixed_delay(2, "10ms"),
        batch_size=100,
    )
    _job(env, n, fail).sink_to(ed.ParquetSink(tmp_path / "out")).name("files")
    result = env.execute("list-map-fail")
    assert fail.fired and result.restarts == 1
    _check(read_parquet_dir(tmp_path / "out").to_pylist(), n)


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch
    from test_list_map_state import ListAndMap, KEYS

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    keyed = slow.with_columns(k=ed.col("value") % KEYS).key_by("k")
    state = keyed.process(ListAndMap()).name("state").uid("state")
    state.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    env.execute("list-map-kill", restore_from="latest")
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(180)
def test_list_and_map_state_after_sigkill_and_restore_are_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 60_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(n)]
    # The job script imports ListAndMap from this module.
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [here, os.getenv("PYTHONPATH")])))
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(16), timeout=90, max_delay=0.25
    )
    assert "finished" in outputs[-1]
    _check(read_parquet_dir(out).to_pylist(), n)


def test_one_state_name_is_one_kind_of_state() -> None:
    class Mixed(ed.ProcessFunction):
        def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
            ctx.get_list_state("x").add(1)
            ctx.get_map_state("x")

    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 3).key_by("value").process(Mixed()).name("mixed").collect()
    with pytest.raises(ed.EddylineError, match=r"'mixed'.*'x' is a list state"):
        env.execute()


def test_list_state_update_and_map_state_views() -> None:
    class Views(ed.ProcessFunction):
        def process_element(
            self, row: dict[str, Any], ctx: ed.ProcessContext
        ) -> list[dict[str, Any]]:
            seen = ctx.get_list_state("seen")
            seen.add_all([row["value"], row["value"]])
            seen.update(seen.get()[-3:])
            m = ctx.get_map_state("m")
            m.put("a", row["value"])
            m.put("b", 1)
            m.remove("b")
            m.remove("missing")
            return [
                {
                    "k": ctx.key,
                    "seen": ",".join(map(str, seen.get())),
                    "items": repr(m.items()),
                    "has_b": m.contains("b"),
                }
            ]

    env = ed.StreamEnvironment(1)
    table = pa.table({"k": [1, 1, 1], "value": [10, 20, 30]})
    out = env.from_arrow(table).key_by("k").process(Views()).collect()
    env.execute()
    assert [r["seen"] for r in out.to_pylist()] == ["10,10", "10,20,20", "20,30,30"]
    assert [r["items"] for r in out.to_pylist()] == ["[('a', 10)]", "[('a', 20)]", "[('a', 30)]"]
    assert not any(r["has_b"] for r in out.to_pylist())
