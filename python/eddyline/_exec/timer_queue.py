"""The timers of a keyed process function, per key group and key, in firing order.

One queue per time domain (event time, processing time) of
:class:`~eddyline._exec.process.KeyedProcessRunner`: the timestamps of every
key's timers, kept per key group (the unit a checkpoint stores and a restore
at another parallelism deals out), mirrored in a heap of ``(timestamp, seq,
key_group, key)`` entries so that they fire in timestamp order. A deleted
timer stays in the heap and is skipped when it comes up.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterator, Sequence


class TimerQueue:
    """Timers by key group and key, and the heap they fire from."""

    __slots__ = ("_heap", "_seq", "by_group")

    def __init__(self, seq: Iterator[int]) -> None:
        self.by_group: dict[int, dict[Hashable, set[int]]] = {}
        """key group -> key -> the timestamps of its timers."""
        self._heap: list[tuple[int, int, int, Hashable]] = []
        self._seq = seq
        """Orders the heap's entries of one timestamp (shared by a runner's queues)."""

    def __bool__(self) -> bool:
        """Whether a timer was ever kept (key groups stay once they had one)."""
        return bool(self.by_group)

    def register(self, group: int, key: Hashable, timestamp: int) -> bool:
        """Registers ``key``'s timer at ``timestamp``; False if it was registered."""
        per_key = self.by_group.setdefault(group, {}).setdefault(key, set())
        if timestamp in per_key:
            return False
        per_key.add(timestamp)
        heapq.heappush(self._heap, (timestamp, next(self._seq), group, key))
        return True

    def delete(self, group: int, key: Hashable, timestamp: int) -> bool:
        """Deletes ``key``'s timer at ``timestamp``; False if it had none."""
        keyed = self.by_group.get(group)
        per_key = keyed.get(key) if keyed is not None else None
        if per_key is None or timestamp not in per_key:
            return False
        per_key.discard(timestamp)
        if not per_key:
            del keyed[key]  # type: ignore[union-attr]
        return True

    def pending(self) -> int:
        """How many timers are registered."""
        return sum(len(ts) for keyed in self.by_group.values() for ts in keyed.values())

    def next_timestamp(self) -> int | None:
        """The timestamp of the next live timer (deleted ones are dropped on the way)."""
        heap = self._heap
        while heap:
            timestamp, _, group, key = heap[0]
            per_key = self.by_group.get(group, {}).get(key)
            if per_key is not None and timestamp in per_key:
                return timestamp
            heapq.heappop(heap)  # deleted
        return None

    def due(self, until: int) -> bool:
        """Whether a timer (maybe a deleted one) is at or before ``until``."""
        return bool(self._heap) and self._heap[0][0] <= until

    def pop_due(self, until: int) -> Iterator[tuple[int, int, Hashable]]:
        """Takes the live timers at or before ``until`` in timestamp order, as
        ``(timestamp, key_group, key)``; timers registered while iterating are
        taken too when due."""
        heap, by_group = self._heap, self.by_group
        while heap and heap[0][0] <= until:
            timestamp, _, group, key = heapq.heappop(heap)
            keyed = by_group.get(group)
            per_key = keyed.get(key) if keyed is not None else None
            if per_key is None or timestamp not in per_key:
                continue  # deleted
            per_key.discard(timestamp)
            if not per_key:
                del keyed[key]  # type: ignore[union-attr]
            yield timestamp, group, key

    def groups(self) -> Iterator[int]:
        """The key groups that hold timers."""
        return (group for group, keyed in self.by_group.items() if keyed)

    def of_group(self, group: int) -> dict[Hashable, list[int]]:
        """Key group ``group``'s timers as ``{key: [timestamps]}`` (the layout of checkpoints)."""
        return {key: sorted(ts) for key, ts in self.by_group.get(group, {}).items()}

    def restore(self, group: int, timers: dict[Hashable, Sequence[int]]) -> None:
        """Adds key group ``group``'s restored timers (``{key: [timestamps]}``)."""
        keyed = self.by_group.setdefault(group, {})
        for key, stamps in timers.items():
            keyed.setdefault(key, set()).update(stamps)
            for ts in stamps:
                heapq.heappush(self._heap, (ts, next(self._seq), group, key))
