"""Per-record operators start their worker processes at once when the input is long.

A subtask that knows how many rows are to come (its bounded sources'
row count, ``Runner.input_rows``) starts its workers as soon as a sample of rows
projects enough in-process Python still ahead (``pool.start_due``); without that
knowledge it waits for ``START_AFTER_ROWS`` rows and ``START_AFTER_SECONDS``.
The jobs here set the default rule out of reach and the projection's threshold to
zero, so rows reach a worker process only through the projection.
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
import eddyline._exec.pool as pool
from eddyline._exec.factory import RunnerFactory
from eddyline._specs import PythonSpec

N = 30_000
BATCH = 1_000
KEYS = 23


@pytest.fixture(autouse=True)
def projection_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 10**12)  # the default rule never fires
    monkeypatch.setattr(pool, "START_PROJECTED_SECONDS", 0.0)
    monkeypatch.setattr(pool, "SAMPLE_ROWS", 2 * BATCH)
    monkeypatch.setattr(pool, "WAIT_FOR_START", True)
    monkeypatch.delenv("EDDYLINE_PYTHON_WORKERS", raising=False)


def _write_parquet(directory: str, files: int) -> str:
    os.makedirs(directory)
    per = N // files
    for i in range(files):
        values = list(range(i * per, (i + 1) * per))
        pq.write_table(
            pa.table({"value": values}),
            os.path.join(directory, f"part-{i}.parquet"),
            row_group_size=BATCH,
        )
    return directory


class Ranges(ed.Source):
    """One split of ``N`` rows read ``BATCH`` at a time: a source of unknown size."""

    def schema(self) -> pa.Schema:
        return pa.schema([("value", pa.int64())])

    def splits(self) -> list[int]:
        return [0]

    def initial_offset(self, split: int) -> int:
        return 0

    def read(self, split: int, offset: int, max_rows: int) -> tuple[pa.RecordBatch, int] | None:
        end = min(N, offset + min(max_rows, BATCH))
        if offset >= end:
            return None
        return pa.record_batch({"value": pa.array(range(offset, end), pa.int64())}), end


class Count(ed.ProcessFunction):
    """A per-key count in a value state; emits (key, count, pid)."""

    def open(self, ctx: ed.ProcessContext) -> None:
        self.count = ctx.get_state("count", default=0)

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> list[Any]:
        count = self.count.value() + 1
        self.count.update(count)
        return [{"k": ctx.key, "count": count, "pid": os.getpid()}]


def _job(env: ed.StreamEnvironment, rows: ed.DataStream) -> tuple[ed.CollectHandle, ...]:
    chain = rows.map(lambda r: {"value": r["value"], "pid": os.getpid()}).collect()
    counts = (
        rows.map(lambda r: {"k": r["value"] % KEYS, "value": r["value"]})
        .key_by("k")
        .process(
            Count(),
            schema=pa.schema([("k", pa.int64()), ("count", pa.int64()), ("pid", pa.int64())]),
        )
        .collect()
    )
    return chain, counts


def _check(chain: ed.CollectHandle, counts: ed.CollectHandle) -> tuple[set[int], set[int]]:
    """Checks the exact outputs; returns the pids that ran the chain and the process function."""
    table = chain.to_arrow()
    assert sorted(table["value"].to_pylist()) == list(range(N))
    out = counts.to_arrow()
    last: dict[int, int] = {}
    for k, c in zip(out["k"].to_pylist(), out["count"].to_pylist(), strict=True):
        last[k] = max(last.get(k, 0), c)
    assert out.num_rows == N
    assert last == {k: len(range(k, N, KEYS)) for k in range(KEYS)}
    return set(table["pid"].to_pylist()), set(out["pid"].to_pylist())


@pytest.mark.parametrize("source", ["parquet", "arrow", "sequence"])
def test_a_bounded_input_of_known_size_starts_the_workers(tmp_path: Any, source: str) -> None:
    env = ed.StreamEnvironment(parallelism=2)
    if source == "parquet":
        rows = env.from_parquet(_write_parquet(str(tmp_path / "in"), 2))
    elif source == "arrow":
        rows = env.from_arrow(pa.table({"value": list(range(N))}).to_batches(BATCH))
    else:
        rows = env.from_sequence(0, N)
    chain, counts = _job(env, rows)
    env.execute(f"by-size-{source}")
    chain_pids, process_pids = _check(chain, counts)
    assert chain_pids - {os.getpid()}, "no row of the chain went through a worker"
    assert process_pids - {os.getpid()}, "no row of the process function went through a worker"


def test_an_input_of_unknown_size_waits_for_the_default_rule() -> None:
    env = ed.StreamEnvironment(parallelism=2)
    chain, counts = _job(env, env.from_source(Ranges()))
    env.execute("by-size-unknown")
    assert _check(chain, counts) == ({os.getpid()}, {os.getpid()})


def test_the_graph_gives_each_python_node_its_sources_rows(tmp_path: Any) -> None:
    env = ed.StreamEnvironment(parallelism=2)
    files = env.from_parquet(_write_parquet(str(tmp_path / "in"), 3))
    both = files.union(env.from_sequence(0, 500)).map(lambda r: r)
    unknown = env.from_source(Ranges()).union(files).map(lambda r: r)
    both.collect()
    unknown.collect()
    compiled = env._graph.compile(env._graph.sinks())
    rows = {
        spec.name: spec.op.factory.input_rows
        for spec in compiled.nodes
        if isinstance(spec.op, PythonSpec) and isinstance(spec.op.factory, RunnerFactory)
    }
    assert sorted(rows.values(), key=str) == [N + 500, None], rows


def test_the_projection_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pool, "START_PROJECTED_SECONDS", 1.0)
    monkeypatch.setattr(pool, "SAMPLE_ROWS", 10_000)
    monkeypatch.setattr(pool, "START_AFTER_ROWS", 100_000)
    monkeypatch.setattr(pool, "START_AFTER_SECONDS", 0.5)
    # 1 us a row: 20,000 rows timed, 5 M to come: ~5 s ahead, start now.
    assert pool.start_due(20_000, 0.02, expected=5_000_000)
    # A 700,000-row job on two subtasks at 1 us a row: ~0.33 s ahead, stay in-process.
    assert not pool.start_due(20_000, 0.02, expected=350_000)
    assert not pool.start_due(5_000, 0.05, expected=10**9)  # too few rows timed
    assert not pool.start_due(20_000, 0.02, expected=None)  # size unknown: the default rule
    assert pool.start_due(100_000, 0.5, expected=None)
