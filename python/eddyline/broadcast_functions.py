"""The broadcast process functions and their contexts (Flink's broadcast state
pattern): ``stream.connect(rules.broadcast()).process(fn)``. Re-exported by
:mod:`eddyline.process_functions`; executed by ``_exec/broadcast.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from .errors import EddylineError
from .process_functions import MapState, ProcessContext, Row

__all__ = [
    "BroadcastContext",
    "BroadcastProcessFunction",
    "KeyedBroadcastContext",
    "KeyedBroadcastProcessFunction",
]


class _BroadcastMapState(MapState):
    """The broadcast state: a :class:`MapState` kept in its context's ``_values``
    (``{"broadcast": map}``), not in a keyed column."""

    __slots__ = ()

    def __init__(self, ctx: Any, name: str) -> None:
        self._ctx = ctx
        self.name = name
        self._ttl = None
        self._col = {}

    def _slot(self) -> tuple[dict[Hashable, Any], Hashable]:
        ctx: Any = self._ctx  # (a BroadcastContext)
        return ctx._values, self.name

    def _emptied(self, key: Hashable) -> None:
        pass


class _ReadOnlyMapState(_BroadcastMapState):
    """The broadcast state as :meth:`BroadcastProcessFunction.process_element` sees it."""

    __slots__ = ()

    def put(self, key: Hashable, value: Any) -> None:
        raise TypeError(
            f"operator '{self._ctx.name}': the broadcast state is read-only in "
            "process_element (and on_timer): write it in process_broadcast_element, so that "
            "every subtask holds the same state"
        )

    def remove(self, key: Hashable) -> None:
        self.put(key, None)

    def clear(self) -> None:
        self.put(None, None)


class BroadcastContext:
    """What a :class:`BroadcastProcessFunction` sees: ``broadcast_state`` (a
    :class:`MapState`, read-only in ``process_element``), ``name``,
    ``subtask_index`` and ``parallelism``.

    On a keyed stream (``keyed.connect(rules.broadcast())``) the context of
    ``process_broadcast_element`` also offers :meth:`apply_to_keyed_state`.
    """

    def __init__(self, name: str, subtask_index: int, parallelism: int, read_only: bool) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self._values: dict[str, Any] = {}
        self._ttl_seen = False
        self._apply: Callable[[Callable[..., Any], str | None], None] | None = None
        cls = _ReadOnlyMapState if read_only else _BroadcastMapState
        self.broadcast_state: MapState = cls(self, "broadcast")

    def apply_to_keyed_state(
        self,
        fn: Callable[[Hashable, ProcessContext], Iterable[Row] | None],
        state: str | None = None,
    ) -> None:
        """Calls ``fn(key, ctx)`` for every key of this subtask that holds keyed state
        (Flink's ``applyToKeyedState``); only on a keyed stream, in
        ``process_broadcast_element``.

        ``ctx`` is the :class:`ProcessContext` bound to ``key``: ``fn`` may read,
        change or clear any of the key's states and register timers. Rows it
        returns are emitted. Keys are visited by key group, then in the order
        they first got state.

        Args:
            fn: The function to call per key.
            state: Only the keys holding the state of this name.

        Raises:
            EddylineError: Not on a keyed stream.
        """
        if self._apply is None:
            raise EddylineError(
                f"operator '{self.name}': apply_to_keyed_state() needs a keyed stream "
                "(keyed.connect(rules.broadcast()).process(fn))",
                operator=self.name,
            )
        if not callable(fn):
            raise TypeError(
                f"operator '{self.name}': apply_to_keyed_state() needs a function "
                f"fn(key, ctx), got {fn!r}"
            )
        self._apply(fn, state)


class KeyedBroadcastContext(ProcessContext):
    """What :meth:`BroadcastProcessFunction.process_element` and
    :meth:`KeyedBroadcastProcessFunction.on_timer` see on a keyed stream: a
    :class:`ProcessContext` (``ctx.key``, keyed state, timers, side outputs)
    with ``broadcast_state``, read-only."""

    __slots__ = ("broadcast_state",)

    def __init__(
        self, name: str, subtask_index: int, parallelism: int, attempt: int, broadcast: MapState
    ) -> None:
        super().__init__(name, subtask_index, parallelism, attempt)
        self.broadcast_state = broadcast


class BroadcastProcessFunction:
    """A function over a stream connected with a broadcast stream
    (``stream.connect(rules.broadcast()).process(fn)``; Flink's broadcast
    state pattern).

    :meth:`process_broadcast_element` sees every row of the broadcast input
    in every parallel subtask and may write ``ctx.broadcast_state``;
    :meth:`process_element` sees the other input's rows and reads it. Every
    subtask therefore holds the same broadcast state; every subtask checkpoints
    its copy and a restore, at any parallelism, gives each subtask the copy of
    one old subtask together with the broadcast rows that subtask had in
    flight, so no broadcast row is processed twice or skipped. Rows of the two
    inputs interleave in no fixed order: a row may be processed before a
    broadcast row that was produced earlier.
    """

    def open(self, ctx: BroadcastContext) -> None:
        """Called once per parallel instance before any row."""

    def process_element(self, row: Row, ctx: BroadcastContext) -> Iterable[Row] | None:
        """Handles a row of the (non-broadcast) input; returns rows to emit."""
        raise NotImplementedError("BroadcastProcessFunction subclasses must implement it")

    def process_broadcast_element(self, row: Row, ctx: BroadcastContext) -> Iterable[Row] | None:
        """Handles a row of the broadcast input (in every subtask); returns rows to emit."""
        raise NotImplementedError("BroadcastProcessFunction subclasses must implement it")

    def close(self) -> None:
        """Called once per parallel instance at the end, also after failures."""


class KeyedBroadcastProcessFunction(BroadcastProcessFunction):
    """A :class:`BroadcastProcessFunction` on a keyed stream with timers
    (``keyed.connect(rules.broadcast()).process(fn)``; Flink's
    KeyedBroadcastProcessFunction).

    :meth:`process_element` sees a :class:`KeyedBroadcastContext`: the key's
    state and timers and the read-only broadcast state;
    :meth:`process_broadcast_element` writes the broadcast state and may
    visit every key's state with ``ctx.apply_to_keyed_state(fn)``. A plain
    :class:`BroadcastProcessFunction` runs on a keyed stream too; this class
    adds :meth:`on_timer`.
    """

    def on_timer(self, timestamp: int, ctx: KeyedBroadcastContext) -> Iterable[Row] | None:
        """Called when a timer of ``ctx.key`` fires (``ctx.time_domain`` says which
        kind); returns records to emit. The broadcast state is read-only here."""
        return None
