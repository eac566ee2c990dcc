"""``keyed.dedup(ttl)``: event-time deduplication with a time-to-live whose
state can be recomputed instead of persisted (FLINK-4120).

The first record of a key is emitted and starts the key's entry; later
records of the key are dropped while the entry lives. The entry expires when
the watermark reaches the first record's event time plus ``ttl``; the next
record of the key is emitted again and starts a new entry. This is PySpark's
``dropDuplicatesWithinWatermark`` and Flink SQL's keep-first-row
deduplication with an event-time state TTL.

Null-state watermark: an entry began in the epoch after the checkpoint that
was current when its first record arrived. Replaying from a checkpoint ``c``
rebuilds the state exactly only if no entry was alive at barrier ``c``
(otherwise a replayed duplicate of that entry would start a wrong one).
With ``A(k)`` the oldest epoch of an entry alive at barrier ``k`` (``k``
itself when none was), the null-state watermark at ``n`` is the fixpoint
``c = A(n); while A(c) < c: c = A(c)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from ..errors import EddylineError
from ..process_functions import ProcessContext, ProcessFunction, Row

__all__ = ["Deduplicate"]


class Deduplicate(ProcessFunction):
    """Keeps the first record per key and drops the key's records for ``ttl_ms`` of event time.

    Example:
        >>> Deduplicate(1000).ttl_ms
        1000
    """

    def __init__(self, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        # epoch -> number of live entries that began in it
        self._alive: Counter[int] = Counter()
        # checkpoint -> oldest epoch of an entry alive at its barrier
        self._oldest_at: dict[int, int] = {}

    def process_element(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        state = ctx.get_state("dedup")
        if state.value() is not None:
            return None
        if ctx.timestamp is None:
            raise EddylineError(
                f"operator '{ctx.name}': dedup() needs event time: call "
                "assign_timestamps(...) before key_by(...).dedup(...)",
                operator=ctx.name,
            )
        epoch = ctx.current_checkpoint
        state.update((epoch, ctx.timestamp))
        self._alive[epoch] += 1
        ctx.timer_service.register_event_time_timer(ctx.timestamp + self.ttl_ms)
        return [row]

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> Iterable[Row] | None:
        state = ctx.get_state("dedup")
        entry = state.value()
        if entry is not None and entry[1] + self.ttl_ms <= timestamp:
            epoch = entry[0]
            self._alive[epoch] -= 1
            if self._alive[epoch] <= 0:
                del self._alive[epoch]
            state.clear()
        return None

    def _oldest(self, checkpoint_id: int) -> int:
        return min(self._alive) if self._alive else checkpoint_id

    def on_barrier(self, checkpoint_id: int, ctx: ProcessContext) -> None:
        self._oldest_at[checkpoint_id] = self._oldest(checkpoint_id)

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        c = self._oldest(checkpoint_id)
        while c in self._oldest_at and self._oldest_at[c] < c:
            c = self._oldest_at[c]
        for k in [k for k in self._oldest_at if k < c]:
            del self._oldest_at[k]
        return c
