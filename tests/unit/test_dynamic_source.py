"""sources.DynamicReader: splits found while running (a Source with
``discovery_interval``), dealt by id, checkpointed with tombstones for finished
splits, restored by union at another parallelism; checkpoint completion hook."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.sources import DynamicReader, SourceReaderFactory, SourceSubtaskReader

SCHEMA = pa.schema([("split", pa.int64()), ("n", pa.int64())])


class Growing(ed.Source):
    """Split ``i`` has ``sizes[i]`` rows; ``sizes`` may grow (new splits) while reading."""

    discovery_interval = 1.0

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.completed: list[dict[Any, Any]] = []

    def schema(self) -> pa.Schema:
        return SCHEMA

    def splits(self) -> list[int]:
        return list(range(len(self.sizes)))

    def split_id(self, split: int) -> int:
        return split

    def read(self, split: int, offset: int, max_rows: int) -> tuple[pa.RecordBatch, int] | None:
        if offset >= self.sizes[split]:
            return None
        end = min(self.sizes[split], offset + max_rows)
        batch = pa.record_batch(
            [pa.array([split] * (end - offset), pa.int64()), pa.array(range(offset, end))],
            schema=SCHEMA,
        )
        return batch, end

    def checkpoint_complete(self, offsets: dict[Any, Any]) -> None:
        self.completed.append(offsets)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _drain(reader: DynamicReader, rows: list[tuple[int, int]]) -> None:
    while True:
        got = reader.poll()
        if got is None or got[0] is None:  # type: ignore[index]
            return
        batch = got[0]  # type: ignore[index]
        rows += list(zip(batch["split"].to_pylist(), batch["n"].to_pylist(), strict=True))


def test_new_splits_are_found_by_the_clock_and_dealt_by_id() -> None:
    clock = Clock()
    sources = [Growing([3, 3]) for _ in range(2)]
    readers = [DynamicReader(s, "src", i, 2, 2, clock=clock) for i, s in enumerate(sources)]
    assert [r.open_splits() for r in readers] == [[0], [1]]
    rows: list[tuple[int, int]] = []
    for r in readers:
        _drain(r, rows)
    for s in sources:
        s.sizes += [2, 4]  # splits 2 and 3 appear
    for r in readers:
        _drain(r, rows)
    assert sorted(rows) == [(0, i) for i in range(3)] + [(1, i) for i in range(3)]
    clock.now = 1.0  # discovery is due
    for r in readers:
        got = r.poll()
        rows += list(zip(got[0]["split"].to_pylist(), got[0]["n"].to_pylist(), strict=True))  # type: ignore[index]
    assert [r.open_splits() for r in readers] == [[2], [3]]  # 0 and 1 are finished
    for r in readers:
        _drain(r, rows)
    expected = [(s, i) for s, size in enumerate([3, 3, 2, 4]) for i in range(size)]
    assert sorted(rows) == expected


def test_restore_at_another_parallelism_keeps_offsets_and_reads_later_splits_whole() -> None:
    clock = Clock()
    old = [DynamicReader(Growing([4, 4, 4]), "src", i, 2, 1, clock=clock) for i in range(2)]
    for r in old:
        r.poll()  # one row of each split it reads
        r.poll()
    union = [e for r in old for e in r.entries(checkpoint_id=1)]
    assert sorted(pickle.loads(e)[:3] for e in union) == [(0, 0, 1), (1, 1, 2), (2, 2, 1)]
    # Restored at parallelism 3 after split 3 appeared: split i goes to subtask i % 3.
    new = [DynamicReader(Growing([4, 4, 4, 2]), "src", i, 3, 10, clock=clock) for i in range(3)]
    for r in new:
        r.seek_entries(union)
    assert [r.open_splits() for r in new] == [[0, 3], [1], [2]]
    rows: list[tuple[int, int]] = []
    for r in new:
        _drain(r, rows)
    expected = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 1), (2, 2), (2, 3), (3, 0), (3, 1)]
    assert sorted(rows) == expected


def test_a_finished_split_is_not_read_again_after_a_restore() -> None:
    reader = DynamicReader(Growing([1]), "src", 0, 1, 5, clock=Clock())
    rows: list[tuple[int, int]] = []
    _drain(reader, rows)
    entries = reader.entries()
    assert [pickle.loads(e)[3] for e in entries] == [True]  # a tombstone
    again = DynamicReader(Growing([1]), "src", 0, 1, 5, clock=Clock())
    again.seek_entries(entries)
    assert again.open_splits() == []


def test_checkpoint_complete_gets_the_offsets_of_that_checkpoint() -> None:
    source = Growing([5])
    reader = DynamicReader(source, "src", 0, 1, 2, clock=Clock())
    reader.poll()
    reader.entries(checkpoint_id=7)
    reader.poll()
    reader.entries(checkpoint_id=8)
    reader.notify_checkpoint_complete(7)
    assert source.completed == [{0: 2}]
    reader.notify_checkpoint_complete(9)
    assert source.completed == [{0: 2}, {0: 4}]


def test_fixed_split_sources_keep_their_reader_and_older_checkpoints() -> None:
    class Fixed(Growing):
        discovery_interval = None

    assert isinstance(SourceReaderFactory(Fixed([1]), "src")(0, 1, 4), SourceSubtaskReader)
    reader = DynamicReader(Growing([1]), "src", 0, 1, 4)
    with pytest.raises(ed.CheckpointError, match="fixed split list"):
        reader.seek_entries([pickle.dumps((0, 3))])


def test_a_bad_split_id_is_a_schema_error_naming_the_source() -> None:
    class Bad(Growing):
        def split_id(self, split: int) -> int:
            return -1

    with pytest.raises(ed.SchemaError, match="source 'src': split_id"):
        DynamicReader(Bad([1]), "src", 0, 1, 4)


class Capped(Growing):
    """``Growing`` read up to ``stops[split]`` (``None``: unbounded); a split
    without a stop ends at once, as a Kafka partition without a stopping offset."""

    def __init__(self, sizes: list[int], stops: dict[int, int] | None) -> None:
        super().__init__(sizes)
        self.stops = stops
        self.bounded = stops is not None

    def read(self, split: int, offset: int, max_rows: int) -> tuple[pa.RecordBatch, int] | None:
        if self.stops is None:
            got = super().read(split, offset, max_rows)
            return (None, offset) if got is None else got  # unbounded: waits for more
        stop = self.stops.get(split, 0)
        return super().read(split, offset, min(max_rows, stop - offset)) if offset < stop else None


def _run(reader: DynamicReader, rows: list[tuple[int, int]], polls: int = 50) -> bool:
    """Polls ``reader`` ``polls`` times at most; whether it ended."""
    for _ in range(polls):
        got = reader.poll()
        if got is False:
            return True
        if isinstance(got, tuple) and got[0] is not None:
            batch = got[0]
            rows += list(zip(batch["split"].to_pylist(), batch["n"].to_pylist(), strict=True))
    return False


def test_a_bounded_reader_ends_and_lists_splits_only_when_it_starts() -> None:
    clock = Clock()
    source = Capped([5, 5], {0: 3})
    reader = DynamicReader(source, "src", 0, 1, 2, clock=clock)
    source.sizes.append(5)  # a split appearing later is not looked for
    clock.now = 10.0
    rows: list[tuple[int, int]] = []
    assert _run(reader, rows)
    assert sorted(rows) == [(0, 0), (0, 1), (0, 2)]  # split 1 has no stop: nothing read
    ends = {pickle.loads(e)[0]: pickle.loads(e)[2:] for e in reader.entries()}
    assert ends == {0: (3, True), 1: (0, True)}


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_an_unbounded_checkpoint_restored_bounded_reads_to_the_stops_once(
    parallelism: int,
) -> None:
    clock = Clock()
    old = [DynamicReader(Capped([9, 9, 9], None), "src", i, 2, 2, clock=clock) for i in range(2)]
    rows: list[tuple[int, int]] = []
    for r in old:
        assert not _run(r, rows, polls=2)  # two batches: splits 0 and 2 at 2, split 1 at 4
    union = [e for r in old for e in r.entries(checkpoint_id=1)]
    stops = {0: 6, 1: 3, 2: 9}  # split 1 is already past its stop
    new = [
        DynamicReader(Capped([9, 9, 9], stops), "src", i, parallelism, 2, clock=clock)
        for i in range(parallelism)
    ]
    for r in new:
        r.seek_entries(union)
        assert _run(r, rows)
    expected = [(0, n) for n in range(6)] + [(1, n) for n in range(4)]
    assert sorted(rows) == expected + [(2, n) for n in range(9)]


def test_a_bounded_checkpoint_restored_unbounded_or_further_reads_on() -> None:
    clock = Clock()
    bounded = DynamicReader(Capped([8, 8], {0: 3}), "src", 0, 1, 5, clock=clock)
    rows: list[tuple[int, int]] = []
    assert _run(bounded, rows)
    entries = bounded.entries()
    further = DynamicReader(Capped([8, 8], {0: 5, 1: 2}), "src", 0, 1, 5, clock=clock)
    further.seek_entries(entries)
    assert _run(further, rows)
    unbounded = DynamicReader(Capped([8, 8], None), "src", 0, 1, 5, clock=clock)
    unbounded.seek_entries(further.entries())
    assert not _run(unbounded, rows)
    assert sorted(rows) == [(0, n) for n in range(8)] + [(1, n) for n in range(8)]


def test_a_bounded_reader_restores_the_fixed_split_checkpoint_of_older_versions() -> None:
    # (split index, offset) per split left; split 1 had been read to its end.
    old = [pickle.dumps((0, 2)), pickle.dumps((2, 1))]
    stops = {0: 4, 1: 4, 2: 4}
    readers = [DynamicReader(Capped([4] * 3, stops), "src", i, 2, 4) for i in range(2)]
    rows: list[tuple[int, int]] = []
    for r in readers:
        r.seek_entries(old)
        assert _run(r, rows)
    assert sorted(rows) == [(0, 2), (0, 3), (2, 1), (2, 2), (2, 3)]
