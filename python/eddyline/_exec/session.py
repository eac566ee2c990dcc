"""The executor of Python functions over session windows:
``keyed.window(ed.Session(gap)).reduce(fn)`` and ``.apply(fn)``.

Sessions are formed exactly like the native session operator
(``core/src/operator/session``): per key, a row at ``t`` opens
``[t, t + gap)``; sessions of one key that overlap merge, so a row that
bridges two merges them; rows exactly ``gap`` apart start a new session. A
session fires when the watermark reaches ``end - 1``. A row whose own
session is over and that touches no open session of its key is late (counted,
dropped or sent to the late output, as :class:`PythonWindowRunner` does).

Merging: ``reduce`` folds the merged sessions' rows in start order
(``fn(fn(acc_earlier, acc_later), row)``); ``apply`` sees the merged
sessions' rows in start order, then the new row.

State: ``self._state[key_group][key]`` is the key's open sessions, each
``[start, end, accumulator]``; blobs as :class:`PythonWindowRunner`'s, tagged
``eddyline.session.v1``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, cast

import pyarrow as pa

from ..process_functions import Row
from .base import RunnerOutput
from .user_code import UserCode, short
from .window import Fired, PythonWindowRunner, WindowMode

__all__ = ["PythonSessionRunner"]

Session = list[Any]
"""``[start, end, accumulator]`` of one open session."""


class PythonSessionRunner(PythonWindowRunner):
    """Keyed session windows evaluated by a Python function (see the module docs)."""

    state_format = "eddyline.session.v1"

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        gap_ms: int,
        time_column: str,
        mode: WindowMode,
        fn: Callable[..., Any],
        schema: pa.Schema | None,
        late_output: bool = False,
    ) -> None:
        # size/slide are the gap: the snapshot records them for read_state.
        super().__init__(node, keys, gap_ms, gap_ms, time_column, mode, fn, schema, late_output)
        self._gap = gap_ms

    def _merge(self, sessions: list[Session], row: Row, t: int) -> Session:
        """The session of ``row`` merged with the overlapping ``sessions`` (start order)."""
        sessions.sort(key=lambda s: s[0])
        start = min([t, *(s[0] for s in sessions)])
        end = max([t + self._gap, *(s[1] for s in sessions)])
        if self._mode == "apply":
            rows: list[Row] = [r for s in sessions for r in s[2]]
            rows.append(row)
            return [start, end, rows]
        acc: Row | None = None
        for s in sessions:
            acc = s[2] if acc is None else self._fn(acc, s[2])
        return [start, end, dict(row) if acc is None else self._fn(acc, row)]

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        times, rows, keys, groups = self._prepare(batch, key_groups)
        gap = self._gap
        state = self._state
        late_rows: list[int] = []
        row: Row | None = None
        key: Hashable = None
        t = 0
        with UserCode(
            self.name,
            detail=lambda v: f"key {short(v['key'])}, time {v['t']}, row: {short(v['row'])}",
        ):
            for i, (row, key, group, t) in enumerate(zip(rows, keys, groups, times, strict=True)):
                watermark = self._watermark_of(group)
                by_key = state.get(group)
                if by_key is None:
                    by_key = state[group] = {}
                open_ = by_key.get(key, [])
                touched = [s for s in open_ if s[0] < t + gap and t < s[1]]
                if not touched and t + gap - 1 <= watermark:
                    late_rows.append(i)
                    continue
                kept = [s for s in open_ if not (s[0] < t + gap and t < s[1])]
                kept.append(self._merge(touched, row, t))
                by_key[key] = kept
        return self._late(batch, late_rows)

    def on_watermark(self, watermark: int) -> RunnerOutput:
        """Fires every session that is over at ``watermark`` (``end - 1 <= watermark``)."""
        if watermark <= self._watermark:
            return None
        self._watermark = watermark
        fired: list[Fired] = []
        for group_state in self._state.values():
            by_key = cast(dict[Hashable, list[Session]], group_state)
            for key in list(by_key):
                sessions = by_key[key]
                due = [s for s in sessions if s[1] - 1 <= watermark]
                if not due:
                    continue
                fired.extend((s[0], s[1], key, s[2]) for s in due)
                left = [s for s in sessions if s[1] - 1 > watermark]
                if left:
                    by_key[key] = left
                else:
                    del by_key[key]
        if not fired:
            return None
        fired.sort(key=lambda item: (item[1], item[0]))
        return self._emit(fired)
