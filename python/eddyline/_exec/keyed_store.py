"""The keyed state of a keyed process function, and its versioned per-key-group codec.

The state is held by column (docs/DESIGN.md "Keyed state layer"):
``cols[name][key]`` is the value (list, map) of state ``name`` for ``key``,
one dict per named state, so that the per-record path finds a key's value in
one dict and no dict per key is spread over memory. ``group_of[key]`` is the
key group of every key that may hold state and ``members[key_group]`` its
keys (in the order they got state), so that a key group's blob ``{key:
{name: value}}`` (format v5, the layout checkpoints keep) is built at a
snapshot and spread back into the columns at a restore.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Iterable
from typing import Any

from ..process_functions import purge_column
from .timer_queue import TimerQueue

KEYED_STATE_FORMAT = "eddyline.keyed_process.v5"
"""A key group's blob: the pickled ``(format, kinds, values, event-time timers,
processing-time timers)`` of the key group, kept between checkpoints while the
key group is unchanged (only changed key groups are re-serialized).
The watermark is not in it: it is the operator state of each subtask
(``WATERMARK_FORMAT`` of ``process.py``), so an advancing watermark leaves the
blobs of clean key groups byte for byte the same (an incremental checkpoint
skips them). Earlier formats, still read: v4 ``(format, watermark, kinds,
inner)`` with ``inner`` the pickled ``(values, timers, processing-time
timers)`` (every owned key group carried the watermark: still written by a
keyed broadcast function, whose operator state is its broadcast state); v3
``(format, values, timers, watermark, kinds, processing-time timers)``; v2 had
no kinds (name -> "value" | "list" | "map", for ``ed.read_state``)."""

V4_FORMAT = "eddyline.keyed_process.v4"


def as_v3(blob: Any) -> Any:
    """A v4 or v5 key-group blob (unpickled) in the v3 shape ``(format, values,
    timers, watermark, kinds, processing-time timers)``, the watermark ``None``
    for v5 (also for ``ed.read_state``); other blobs unchanged."""
    if isinstance(blob, tuple) and blob:
        if blob[0] == KEYED_STATE_FORMAT:
            fmt, kinds, values, timers, ptimers = blob
            return (fmt, values, timers, None, kinds, ptimers)
        if blob[0] == V4_FORMAT:
            fmt, watermark, kinds, inner = blob
            values, timers, ptimers = pickle.loads(inner)
            return (fmt, values, timers, watermark, kinds, ptimers)
    return blob


class KeyedStateStore:
    """Per-key state by column, its keys by key group, and the blobs of its last snapshot."""

    def __init__(self) -> None:
        self.cols: dict[str, dict[Hashable, Any]] = {}
        """name -> {key: value}: the keyed state, shared with the context's state
        handles (``ProcessContext._cols``); columns are cleared, never replaced."""
        self.group_of: dict[Hashable, int] = {}
        """Every key that may hold state -> its key group (one lookup per record:
        only a key new to the operator is registered, by :meth:`bind`)."""
        self.members: dict[int, dict[Hashable, None]] = {}
        """key group -> its keys of ``group_of``, in the order they were registered."""
        self.gone: list[Hashable] = []
        """Keys to check after a batch (new ones, and those whose state lost an
        entry): one left without state is unregistered, so snapshots stay small."""
        self.dirty: set[int] = set()
        """Key groups whose state or timers may have changed since their last snapshot."""
        self.restored_kinds: dict[str, str] = {}
        """The kinds of the named states restored from a checkpoint (name -> kind)."""
        self._inner: dict[int, bytes] = {}
        """Per key group its blob (v5) as of its last snapshot, valid while the key
        group is not in ``dirty`` and the kinds are ``_inner_kinds`` (v4 mode: its
        pickled ``(values, timers, processing-time timers)``)."""
        self._inner_kinds: dict[str, str] = {}
        self._blobs: dict[int, tuple[int, dict[str, str], bytes, bytes]] = {}
        """v4 mode: per key group ``(watermark, kinds, inner, blob)`` of its last
        snapshot: the same blob is returned while all three are unchanged."""
        self.pickled_groups = 0
        """How many key groups' state was pickled by :meth:`snapshot` (a counter for tests)."""

    # ---- keys ------------------------------------------------------------------

    def bind(self, key: Hashable, group: int) -> None:
        """Registers ``key`` (new to the operator) in key group ``group``; it is
        checked by the next :meth:`settle` (unregistered again if it got no state)."""
        self.group_of[key] = group
        members = self.members.get(group)
        if members is None:
            members = self.members[group] = {}
        members[key] = None
        self.gone.append(key)

    def settle(self) -> None:
        """Unregisters the keys to check (``gone``) that hold no state, so that
        snapshots stay small and keys seen once cost nothing later."""
        gone = self.gone
        if not gone:
            return
        columns = [column for column in self.cols.values() if column]
        group_of, members = self.group_of, self.members
        for key in gone:
            if key in group_of and not any(key in column for column in columns):
                group = group_of.pop(key)
                keys = members.get(group)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del members[group]
        gone.clear()

    def purge_expired(self, now: int) -> None:
        """Drops the entries whose ttl expired by processing time ``now``."""
        group_of = self.group_of
        for column in self.cols.values():
            for key in purge_column(column, now):
                self.dirty.add(group_of[key])
                self.gone.append(key)
        self.settle()

    def clear(self) -> None:
        """Drops every key's state (it moved to worker processes)."""
        for column in self.cols.values():
            column.clear()  # (the state handles hold the columns)
        self.group_of.clear()
        self.members.clear()
        self.gone.clear()
        self._inner.clear()
        self._blobs.clear()
        self.dirty.clear()

    def named_values(self, key: Hashable) -> dict[str, Any]:
        """``key``'s states as ``{name: value}`` (the per-key layout of checkpoints)."""
        return {name: column[key] for name, column in self.cols.items() if key in column}

    def state_by_group(self) -> dict[int, dict[Hashable, dict[str, Any]]]:
        """The keyed state in the layout of checkpoints: ``{key_group: {key: {name:
        value}}}``, key groups and keys with state only."""
        out: dict[int, dict[Hashable, dict[str, Any]]] = {}
        for group, keys in self.members.items():
            values = {key: named for key in keys if (named := self.named_values(key))}
            if values:
                out[group] = values
        return out

    def spread(self, group: int, values: dict[Hashable, dict[str, Any]]) -> None:
        """Puts a key group's restored values (``{key: {name: value}}``, the layout
        of checkpoints) into the states' columns and registers their keys."""
        members = self.members.setdefault(group, {})
        group_of, cols = self.group_of, self.cols
        for key, named in values.items():
            if not named:
                continue
            group_of[key] = group
            members[key] = None
            for name, value in named.items():
                column = cols.get(name)
                if column is None:
                    column = cols[name] = {}
                column[key] = value
        if not members:
            del self.members[group]

    # ---- the codec -------------------------------------------------------------

    def snapshot(
        self,
        kinds: dict[str, str],
        timers: TimerQueue,
        ptimers: TimerQueue,
        v4_watermark: int | None = None,
        owned: Iterable[int] = (),
    ) -> dict[int, bytes]:
        """The blob of every key group with values or timers: format v5, or with
        ``v4_watermark`` format v4 carrying that watermark (also for the key
        groups ``owned``, without state). Only the key groups in ``dirty``
        (or all, when the kinds changed) are pickled again; the others return
        the very same bytes."""
        dirty = self.dirty
        groups = {g for g, keys in self.members.items() if keys}
        groups.update(timers.groups())
        groups.update(ptimers.groups())
        v4 = v4_watermark is not None
        groups.update(owned)
        inner_of = self._inner
        if not v4 and kinds != self._inner_kinds:
            inner_of.clear()  # v5 blobs hold the kinds (a state declared later: rare)
            self._inner_kinds = kinds
        out: dict[int, bytes] = {}
        for group in sorted(groups):
            inner = inner_of.get(group)
            if inner is None or group in dirty:
                named = self.named_values
                parts = (
                    # The per-key layout of format v5, built from the columns.
                    {k: v for k in self.members.get(group, ()) if (v := named(k))},
                    timers.of_group(group),
                    ptimers.of_group(group),
                )
                inner = inner_of[group] = pickle.dumps(
                    parts if v4 else (KEYED_STATE_FORMAT, kinds, *parts),
                    protocol=pickle.HIGHEST_PROTOCOL,
                )
                self.pickled_groups += 1
            if v4_watermark is None:
                out[group] = inner
            else:
                out[group] = self._v4_blob(group, v4_watermark, kinds, inner)
        # Key groups left empty hold nothing any more.
        for group in [g for g in inner_of if g not in groups]:
            del inner_of[group]
            self._blobs.pop(group, None)
        dirty.clear()
        return out

    def _v4_blob(self, group: int, watermark: int, kinds: dict[str, str], inner: bytes) -> bytes:
        """Key group ``group``'s v4 blob, the same bytes while its parts are unchanged."""
        cached = self._blobs.get(group)
        if (
            cached is not None
            and cached[2] is inner
            and cached[0] == watermark
            and cached[1] == kinds
        ):
            return cached[3]
        blob = pickle.dumps((V4_FORMAT, watermark, kinds, inner), protocol=pickle.HIGHEST_PROTOCOL)
        self._blobs[group] = (watermark, kinds, inner, blob)
        return blob

    def restore_group(
        self, group: int, blob: bytes, timers: TimerQueue, ptimers: TimerQueue
    ) -> int | None:
        """Restores key group ``group``'s blob (any format) into the columns and the
        timer queues; returns the watermark it carries (v4 and older), if any."""
        restored = as_v3(pickle.loads(blob))
        self.dirty.add(group)
        if isinstance(restored, dict):  # values only
            self.spread(group, restored)
            return None
        _, values, group_timers, *rest = restored
        if len(rest) > 1:
            self.restored_kinds.update(rest[1])
        if values:
            self.spread(group, values)
        timers.restore(group, group_timers)
        if len(rest) > 2:
            ptimers.restore(group, rest[2])
        return int(rest[0]) if rest and rest[0] is not None else None
