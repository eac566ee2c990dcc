"""User function base classes and keyed state for ``KeyedStream.process``.

Example:
    >>> import eddyline as ed
    >>> class RunningCount(ed.ProcessFunction):
    ...     def process_element(self, row, ctx):
    ...         n = (ctx.state.value() or 0) + 1
    ...         ctx.state.update(n)
    ...         return [{"key": ctx.key, "n": n}]

Event-time timers (the stream needs ``assign_timestamps`` upstream):

    >>> class EmitAfterIdle(ed.ProcessFunction):
    ...     def process_element(self, row, ctx):
    ...         ctx.state.update((ctx.state.value() or 0) + 1)
    ...         ctx.timer_service.register_event_time_timer(ctx.timestamp + 1000)
    ...     def on_timer(self, timestamp, ctx):
    ...         return [{"key": ctx.key, "count": ctx.state.value(), "at": timestamp}]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Protocol, TypeVar, cast

from .config import Duration, parse_duration
from .errors import EddylineError
from .user_api import OutputTag

__all__ = [
    "CoProcessFunction",
    "ListState",
    "MapState",
    "ProcessContext",
    "ProcessFunction",
    "Row",
    "TimerService",
    "ValueState",
]

MIN_WATERMARK = -(2**63)
"""The watermark before any was received (``Long.MIN_VALUE`` in Flink)."""
MAX_WATERMARK = 2**63 - 1
"""The end of event time: a bounded input ends with it, and it fires every timer and window."""

Row = dict[str, Any]
"""A record as seen by per-record functions: column name to Python value."""


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


_clock: Callable[[], int] = _wall_clock_ms
"""The processing-time clock (ms since the epoch) of state TTL and
``current_processing_time``; ``eddyline.testing.ManualClock`` replaces it."""


def processing_time() -> int:
    """The current processing time in milliseconds since the epoch."""
    return _clock()


class _Expiring:
    """A value (or list element, or map value) of state with a TTL: when it expires.

    The expiry (processing time, ms) is written with the value, so a checkpoint
    drops expired entries without knowing the states' TTLs (see :func:`purge_expired`).
    """

    __slots__ = ("expires_at", "value")

    def __init__(self, value: Any, expires_at: int) -> None:
        self.value = value
        self.expires_at = expires_at

    def __reduce__(self) -> tuple[Any, ...]:
        return (_Expiring, (self.value, self.expires_at))

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, _Expiring)
            and self.value == other.value
            and self.expires_at == other.expires_at
        )

    __hash__ = None  # type: ignore[assignment]


def _live(entry: Any, now: int) -> bool:
    return type(entry) is not _Expiring or entry.expires_at > now


def _plain(entry: Any) -> Any:
    return entry.value if type(entry) is _Expiring else entry


def purge_column(column: dict[Hashable, Any], now: int) -> list[Hashable]:
    """Drops the expired entries of one named state's column (``key -> value``, list
    or dict as the state keeps it); a key whose value, list or map is left empty
    loses its entry. Returns the keys whose entry changed."""
    changed: list[Hashable] = []
    for key, held in list(column.items()):
        if type(held) is _Expiring:
            if held.expires_at <= now:
                del column[key]
                changed.append(key)
        elif type(held) is list:
            live = [e for e in held if _live(e, now)]
            if len(live) != len(held):
                if live:
                    column[key] = live
                else:
                    del column[key]
                changed.append(key)
        elif type(held) is dict:
            expired = [k for k, e in held.items() if not _live(e, now)]
            for k in expired:
                del held[k]
            if expired:
                if not held:
                    del column[key]
                changed.append(key)
    return changed


def _ttl_ms(ttl: Duration | None, operator: str, name: str) -> int | None:
    if ttl is None:
        return None
    try:
        seconds = parse_duration(ttl, what=f"ttl of state {name!r}")
    except ValueError as exc:
        raise EddylineError(f"operator '{operator}': {exc}", operator=operator) from None
    ms = round(seconds * 1000)
    if ms <= 0:
        raise EddylineError(
            f"operator '{operator}': the ttl of state {name!r} must be positive, got {ttl!r}",
            operator=operator,
        )
    return ms


_MISSING = object()


class ValueState:
    """One named value of keyed state, scoped to the key being processed.

    Obtain it from :attr:`ProcessContext.state` (the state named ``"value"``)
    or :meth:`ProcessContext.get_state`. Values must be picklable; they are
    part of checkpoints.
    """

    __slots__ = ("_col", "_ctx", "_default", "_ttl", "name")

    def __init__(
        self, ctx: ProcessContext, name: str, default: Any = None, ttl: int | None = None
    ) -> None:
        self._ctx = ctx
        self.name = name
        self._default = default
        self._ttl = ttl
        self._col: dict[Hashable, Any] = ctx._column(name)
        """The state's column, ``key -> value``, shared with the runner."""

    def value(self) -> Any:
        """Returns the value for the current key, or the default (``None``) if unset
        (or, with a ttl, written longer ago than the ttl)."""
        ctx = self._ctx
        if not ctx._bound:
            ctx._require_key()  # raises: no key is bound
        held = self._col.get(ctx.key, _MISSING)
        if held is _MISSING:
            return self._default
        # (_ttl_seen: a ttl declared or restored, the only ways to _Expiring values.)
        if ctx._ttl_seen and type(held) is _Expiring:
            if held.expires_at <= _clock():
                del self._col[ctx.key]
                ctx._gone.append(ctx.key)
                return self._default
            return held.value
        return held

    def update(self, value: Any) -> None:
        """Sets the value for the current key (with a ttl: for the ttl from now)."""
        ctx = self._ctx
        if not ctx._bound:
            ctx._require_key()  # raises: no key is bound
        ttl = self._ttl
        self._col[ctx.key] = value if ttl is None else _Expiring(value, _clock() + ttl)

    def clear(self) -> None:
        """Removes the value for the current key."""
        ctx = self._ctx
        ctx._require_key()
        if self._col.pop(ctx.key, _MISSING) is not _MISSING:
            ctx._gone.append(ctx.key)

    def __repr__(self) -> str:
        return f"ValueState({self.name!r})"


class ListState:
    """A list of values of keyed state, scoped to the key being processed.

    Obtain it from :meth:`ProcessContext.get_list_state`. The elements must be
    picklable; they are part of checkpoints. An empty list holds no state.
    """

    __slots__ = ("_col", "_ctx", "_ttl", "name")

    def __init__(self, ctx: ProcessContext, name: str, ttl: int | None = None) -> None:
        self._ctx = ctx
        self.name = name
        self._ttl = ttl
        self._col: dict[Hashable, list[Any]] = ctx._column(name)

    def _wrap(self, items: list[Any]) -> list[Any]:
        ttl = self._ttl
        if ttl is None:
            return items
        expires = _clock() + ttl
        return [_Expiring(v, expires) for v in items]

    def _key(self) -> Hashable:
        ctx = self._ctx
        ctx._require_key()
        return ctx.key

    def _drop(self, key: Hashable) -> None:
        if self._col.pop(key, _MISSING) is not _MISSING:
            self._ctx._gone.append(key)

    def get(self) -> list[Any]:
        """The current key's elements in the order added (a new list; empty when unset).
        With a ttl, each element lives for the ttl from when it was added."""
        key = self._key()
        held = self._col.get(key)
        if not held:
            return []
        if not self._ctx._ttl_seen:
            return list(held)
        now = _clock()
        live = [e for e in held if _live(e, now)]
        if len(live) != len(held):
            if live:
                self._col[key] = live
            else:
                self._drop(key)
        return [_plain(e) for e in live]

    def _extend(self, items: list[Any]) -> None:
        key = self._key()
        held = self._col.get(key)
        if held is None:
            self._col[key] = self._wrap(list(items))
        else:
            held.extend(self._wrap(items))

    def add(self, value: Any) -> None:
        """Appends ``value`` to the current key's list."""
        self._extend([value])

    def add_all(self, values: Iterable[Any]) -> None:
        """Appends every element of ``values``, in order."""
        items = _as_list(values, self._ctx.name, f"ListState({self.name!r}).add_all")
        if items:
            self._extend(items)

    def update(self, values: Iterable[Any]) -> None:
        """Replaces the current key's list with the elements of ``values``."""
        items = _as_list(values, self._ctx.name, f"ListState({self.name!r}).update")
        key = self._key()
        if items:
            self._col[key] = self._wrap(items)
        else:
            self._drop(key)

    def clear(self) -> None:
        """Removes the current key's list."""
        self._drop(self._key())

    def __repr__(self) -> str:
        return f"ListState({self.name!r})"


_D = TypeVar("_D")


class MapState:
    """A map of keyed state (user key to value), scoped to the key being processed.

    Obtain it from :meth:`ProcessContext.get_map_state`. User keys must be
    hashable, keys and values picklable; they are part of checkpoints. An
    empty map holds no state.
    """

    __slots__ = ("_col", "_ctx", "_ttl", "name")

    def __init__(self, ctx: ProcessContext, name: str, ttl: int | None = None) -> None:
        self._ctx = ctx
        self.name = name
        self._ttl = ttl
        self._col: dict[Hashable, Any] = ctx._column(name)

    def _slot(self) -> tuple[dict[Hashable, Any], Hashable]:
        """Where the current key's map is: its state's column and the key."""
        ctx = self._ctx
        ctx._require_key()
        return self._col, ctx.key

    def _emptied(self, key: Hashable) -> None:
        """The map of ``key`` was removed (the runner drops a key without state)."""
        self._ctx._gone.append(key)

    def _map(self) -> dict[Any, Any]:
        """The current key's map, its expired entries dropped, values still wrapped."""
        col, key = self._slot()
        held: dict[Any, Any] | None = col.get(key)
        if not held:
            return {}
        if self._ctx._ttl_seen:
            now = _clock()
            expired = [k for k, e in held.items() if not _live(e, now)]
            for k in expired:
                del held[k]
            if not held:
                del col[key]
                self._emptied(key)
        return held

    def get(self, key: Hashable, default: _D | None = None) -> Any | _D | None:
        """The value of ``key`` for the current key, or ``default`` when absent."""
        held = self._map().get(key, _MISSING)
        return default if held is _MISSING else _plain(held)

    def put(self, key: Hashable, value: Any) -> None:
        """Sets ``key`` to ``value`` for the current key."""
        try:
            hash(key)
        except TypeError:
            raise TypeError(
                f"operator '{self._ctx.name}': MapState({self.name!r}) keys must be hashable, "
                f"got {type(key).__name__}"
            ) from None
        ttl = self._ttl
        col, slot = self._slot()
        held = col.get(slot)
        if held is None:
            held = col[slot] = {}
        held[key] = value if ttl is None else _Expiring(value, _clock() + ttl)

    def remove(self, key: Hashable) -> None:
        """Removes ``key`` (a no-op when absent)."""
        col, slot = self._slot()
        entries = col.get(slot)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                del col[slot]
                self._emptied(slot)

    def contains(self, key: Hashable) -> bool:
        """Whether ``key`` is set for the current key."""
        return key in self._map()

    def keys(self) -> list[Any]:
        """The current key's user keys, in insertion order (a new list)."""
        return list(self._map().keys())

    def values(self) -> list[Any]:
        """The current key's values, in insertion order (a new list)."""
        return [_plain(e) for e in self._map().values()]

    def items(self) -> list[tuple[Any, Any]]:
        """The current key's ``(key, value)`` pairs, in insertion order (a new list)."""
        return [(k, _plain(e)) for k, e in self._map().items()]

    def clear(self) -> None:
        """Removes the current key's map."""
        col, slot = self._slot()
        if col.pop(slot, _MISSING) is not _MISSING:
            self._emptied(slot)

    def __repr__(self) -> str:
        return f"MapState({self.name!r})"


def _as_list(values: Iterable[Any], operator: str, what: str) -> list[Any]:
    if isinstance(values, str | bytes | dict) or not isinstance(values, Iterable):
        raise TypeError(
            f"operator '{operator}': {what}() needs an iterable of elements (a list, a "
            f"tuple, ...), got {type(values).__name__}"
        )
    return list(values)


class _TimerBackend(Protocol):
    """What a runner offers a :class:`TimerService` (timers of the current key)."""

    watermark: int

    def register_timer(self, timestamp: int) -> None: ...

    def delete_timer(self, timestamp: int) -> None: ...

    def register_processing_timer(self, timestamp: int) -> None: ...

    def delete_processing_timer(self, timestamp: int) -> None: ...


class TimerService:
    """Timers of the current key (``ctx.timer_service``).

    An event-time timer for ``t`` fires once the watermark reaches ``t``
    (``t <= watermark``); a processing-time timer once the processing time
    (:meth:`current_processing_time`, ms since the epoch) reaches ``t``, from
    the task's own wake-up (a timer whose time passed while the job was down
    fires right after the restore). :meth:`ProcessFunction.on_timer` is called
    with ``t``, the context of the key that registered it and
    ``ctx.time_domain`` (``"event_time"`` or ``"processing_time"``). Timers of
    one key and domain are unique by timestamp, fire in timestamp order, and
    are keyed state (checkpointed). The end of a bounded input (or a drain)
    fires every event-time timer left; pending processing-time timers do not
    fire.
    """

    __slots__ = ("_ctx",)

    def __init__(self, ctx: ProcessContext) -> None:
        self._ctx = ctx

    def _backend(self) -> _TimerBackend:
        ctx = self._ctx
        if ctx._timers is None:
            raise EddylineError(
                f"operator '{ctx.name}': event-time timers need a keyed process function "
                "(an ed.ProcessFunction that implements on_timer)",
                operator=ctx.name,
            )
        ctx._require_key()  # only while a key is current
        return ctx._timers

    def register_event_time_timer(self, timestamp: int) -> None:
        """Registers a timer of the current key at event time ``timestamp`` (ms)."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise TypeError(
                f"register_event_time_timer() needs an int timestamp in milliseconds, got "
                f"{timestamp!r}"
            )
        self._backend().register_timer(timestamp)

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Deletes the current key's timer at ``timestamp`` (a no-op if there is none)."""
        self._backend().delete_timer(timestamp)

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Registers a timer of the current key at processing time ``timestamp`` (ms)."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise TypeError(
                f"register_processing_time_timer() needs an int timestamp in milliseconds, got "
                f"{timestamp!r}"
            )
        self._backend().register_processing_timer(timestamp)

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Deletes the current key's processing-time timer at ``timestamp`` (if any)."""
        self._backend().delete_processing_timer(timestamp)

    def current_watermark(self) -> int:
        """The operator's current watermark (``-2**63`` before the first)."""
        return self._ctx.current_watermark

    def current_processing_time(self) -> int:
        """The current processing time (ms since the epoch), the clock of state TTL."""
        return _clock()

    def __repr__(self) -> str:
        return f"TimerService({self._ctx.name!r})"


class ProcessContext:
    """What a keyed process function sees besides the record.

    Attributes:
        key: The key of the record being processed (the value of the key
            column, or a tuple of values for several key columns); ``None``
            outside :meth:`ProcessFunction.process_element` and
            :meth:`ProcessFunction.on_timer`.
        timestamp: The event time (ms since the epoch) of the record being
            processed, if the stream has event time (``assign_timestamps``
            upstream); in ``on_timer`` the timer's timestamp; else ``None``.
        name: The operator name.
        subtask_index: Which parallel instance runs the function.
        parallelism: The operator's parallelism.
        attempt: The restart attempt (0 for the first run).
        current_checkpoint: The last checkpoint whose barrier passed the
            operator (0 before the first; also counts barriers replayed by a
            recompute recovery). Functions that declare
            :meth:`ProcessFunction.null_state_watermark` remember it when a
            piece of state begins.
    """

    __slots__ = (
        "_bound",
        "_cols",
        "_gone",
        "_kinds",
        "_side_rows",
        "_states",
        "_timer_service",
        "_timers",
        "_ttl_seen",
        "attempt",
        "current_checkpoint",
        "key",
        "name",
        "parallelism",
        "subtask_index",
        "time_domain",
        "timestamp",
    )

    def __init__(self, name: str, subtask_index: int, parallelism: int, attempt: int) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.attempt = attempt
        self.current_checkpoint = 0
        self.key: Hashable | None = None
        self.timestamp: int | None = None
        self.time_domain: str | None = None
        """In ``on_timer``: ``"event_time"`` or ``"processing_time"``; else ``None``."""
        self._bound = False
        """Whether a key is current (``key``): set by the runner around the calls of
        process_element and on_timer."""
        self._cols: dict[str, dict[Hashable, Any]] = {}
        """The keyed state, one column per named state: ``name -> {key: value}`` (a
        value, or the list or dict of a list or map state; ``_Expiring`` with a ttl).
        The runner's own dict (a dict per state, not one per key)."""
        self._gone: list[Hashable] = []
        """Keys that lost an entry of a column (cleared, emptied, expired): the
        runner drops those left without state (the runner's own list)."""
        self._states: dict[str, tuple[type, Any, Any, ValueState | ListState | MapState]] = {}
        """name -> (state class, default, ttl as given, the state handle)."""
        self._kinds: dict[str, str] = {}
        self._side_rows: dict[str, list[Row]] = {}
        self._ttl_seen = False
        """Whether any state has a ttl (declared, or restored from a checkpoint)."""
        self._timers: _TimerBackend | None = None
        self._timer_service = TimerService(self)

    @property
    def state(self) -> ValueState:
        """The default value state (named ``"value"``) of the current key."""
        return self.get_state("value")

    @property
    def timer_service(self) -> TimerService:
        """Event-time timers of the current key."""
        return self._timer_service

    @property
    def current_watermark(self) -> int:
        """The operator's current event-time watermark (``-2**63`` before the first)."""
        return self._timers.watermark if self._timers is not None else MIN_WATERMARK

    def get_state(self, name: str, default: Any = None, ttl: Duration | None = None) -> ValueState:
        """Returns the value state called ``name`` of the current key.

        Args:
            name: The state's name; states of different names are independent.
            default: What :meth:`ValueState.value` returns while unset.
            ttl: How long a written value lives (processing time since the last
                write: ``"10min"``, seconds); an expired value is never returned
                and is dropped from checkpoints. ``None``: until cleared.
        """
        return cast(ValueState, self._state(ValueState, "value", name, ttl, default))

    def get_list_state(self, name: str, ttl: Duration | None = None) -> ListState:
        """Returns the list state called ``name`` of the current key.

        Args:
            name: The state's name, distinct from the names of the other states.
            ttl: How long each added element lives (processing time); ``None``:
                until cleared.
        """
        return cast(ListState, self._state(ListState, "list", name, ttl))

    def get_map_state(self, name: str, ttl: Duration | None = None) -> MapState:
        """Returns the map state called ``name`` of the current key.

        Args:
            name: The state's name, distinct from the names of the other states.
            ttl: How long each entry lives after it was put (processing time);
                ``None``: until removed.
        """
        return cast(MapState, self._state(MapState, "map", name, ttl))

    def _state(
        self, cls: type, kind: str, name: str, ttl: Duration | None, default: Any = None
    ) -> ValueState | ListState | MapState:
        """The handle of state ``name``: the one made before when asked for the same
        way again (the per-record path does no checks), else a checked new one."""
        try:
            held = self._states.get(name)
        except TypeError:  # an unhashable name: _ttl_of says what is wrong
            held = None
        if held is not None and held[0] is cls and held[1] is default and held[2] is ttl:
            return held[3]
        ttl_ms = self._ttl_of(name, kind, ttl)
        state: ValueState | ListState | MapState
        if cls is ValueState:
            state = ValueState(self, name, default, ttl_ms)
        else:
            state = cls(self, name, ttl_ms)
        self._states[name] = (cls, default, ttl, state)
        return state

    def output(self, tag: OutputTag, row: Row) -> None:
        """Emits ``row`` (a dict) to the side output ``tag``, read with
        ``stream.side_output(tag)`` (rows for a tag nobody reads are dropped).

        Example:
            >>> import eddyline as ed
            >>> big = ed.OutputTag("big")
            >>> class Split(ed.ProcessFunction):
            ...     def process_element(self, row, ctx):
            ...         if row["value"] > 2:
            ...             ctx.output(big, {"value": row["value"]})
            ...             return None
            ...         return [row]
            >>> env = ed.StreamEnvironment(1)
            >>> small = env.from_sequence(0, 5).key_by("value").process(Split())
            >>> large = small.side_output(big).collect()
            >>> _ = small.collect()
            >>> _ = env.execute()
            >>> sorted(r["value"] for r in large.to_pylist())
            [3, 4]
        """
        if not isinstance(tag, OutputTag):
            raise TypeError(
                f"operator '{self.name}': ctx.output() needs an ed.OutputTag, got {tag!r}"
            )
        if not isinstance(row, dict):
            raise TypeError(
                f"operator '{self.name}': ctx.output({tag.name!r}, row) needs a dict row, got "
                f"{type(row).__name__}"
            )
        self._side_rows.setdefault(tag.name, []).append(row)

    def _ttl_of(self, name: str, kind: str, ttl: Duration | None) -> int | None:
        """Checks a state's name and kind (one name is one kind of state); returns
        its ttl in ms."""
        if not isinstance(name, str) or not name:
            raise TypeError(
                f"operator '{self.name}': a state name must be a non-empty str, got {name!r}"
            )
        ttl_ms = _ttl_ms(ttl, self.name, name)
        if ttl_ms is not None:
            self._ttl_seen = True
        known = self._kinds.setdefault(name, kind)
        if known != kind:
            raise EddylineError(
                f"operator '{self.name}': state {name!r} is a {known} state; it cannot also be "
                f"used as a {kind} state (give each state its own name)",
                operator=self.name,
            )
        return ttl_ms

    def _column(self, name: str) -> dict[Hashable, Any]:
        """The column of state ``name`` (made empty when new)."""
        column = self._cols.get(name)
        if column is None:
            column = self._cols[name] = {}
        return column

    def _require_key(self) -> None:
        if not self._bound:
            raise EddylineError(
                f"operator '{self.name}': keyed state and timers are only available while a "
                "record or a timer of a key is processed (process_element, on_timer), not in "
                "open(), end_input(), finish() or close()",
                operator=self.name,
            )

    def __repr__(self) -> str:
        return f"ProcessContext(name={self.name!r}, key={self.key!r})"


class ProcessFunction:
    """Base class of keyed process functions with state and event-time timers.

    Override :meth:`process_element`; the lifecycle hooks are optional and
    called in this order per parallel instance: :meth:`open`, records and
    timers, :meth:`end_input` per input, :meth:`finish` (only when the input
    really ended: not when the job is stopped with a savepoint without
    draining), :meth:`close` (always, also after a failure). Each parallel
    instance gets its own copy of the object.
    """

    def open(self, ctx: ProcessContext) -> None:
        """Called once per parallel instance before any record."""

    def process_element(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        """Handles one record; returns the records to emit (or ``None``).

        Args:
            row: The record.
            ctx: The context: ``ctx.key``, ``ctx.state``, ``ctx.get_state(name)``,
                ``ctx.get_list_state(name)``, ``ctx.get_map_state(name)``,
                ``ctx.timestamp``, ``ctx.timer_service``, ``ctx.current_watermark``.
        """
        raise NotImplementedError("ProcessFunction subclasses must implement process_element")

    def on_timer(self, timestamp: int, ctx: ProcessContext) -> Iterable[Row] | None:
        """Called when an event-time timer of ``ctx.key`` fires; returns records to emit.

        Keyed state of the timer's key is available through ``ctx``, and
        ``ctx.timestamp`` is ``timestamp``.
        """
        return None

    def end_input(self, input: int, ctx: ProcessContext) -> Iterable[Row] | None:
        """Called when input ``input`` ended (after its last record); returns records to emit."""
        return None

    def finish(self, ctx: ProcessContext) -> Iterable[Row] | None:
        """Called once after every input ended and every timer fired; returns records to emit."""
        return None

    def close(self) -> None:
        """Called once per parallel instance at the end, also after failures."""

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        """Declares the function's state recomputable (FLINK-4120) by overriding this.

        Called when checkpoint ``checkpoint_id`` is taken; returns the earliest
        checkpoint from whose source positions the function's current state
        (values and timers of every key) can be rebuilt by processing the input
        again: ``checkpoint_id`` when it holds no state, else the
        :attr:`ProcessContext.current_checkpoint` seen when its oldest live
        state began. ``None`` means "persist my state". With
        ``CheckpointConfig(recovery="recompute")`` a function that overrides
        this persists no state; a recovery replays the input from the job's
        null-state checkpoint. Replaying must rebuild exactly the same state:
        the function must be deterministic (no clocks, randomness, external
        reads, or iteration over unordered sets that affects results). Not
        overridden: the state is always persisted. An exception fails the
        checkpoint and the task.
        """
        return None

    def on_barrier(self, checkpoint_id: int, ctx: ProcessContext) -> None:
        """Called when the barrier of checkpoint ``checkpoint_id`` passed (also replayed ones).

        Also called once before :meth:`open` with the checkpoint the function
        starts from (0 on a fresh start). An exception fails that checkpoint
        and the task, like one in :meth:`process_element`.
        """


class CoProcessFunction(ProcessFunction):
    """A keyed function of two connected inputs (``a.connect(b).key_by(ka, kb).process(fn)``).

    Override :meth:`process_element1` (rows of the first input) and
    :meth:`process_element2` (rows of the second). Both see one keyed state
    and one timer service per key: a key of the first input and an equal key
    of the second are the same key. :meth:`on_timer` and the lifecycle hooks
    are those of :class:`ProcessFunction`.
    """

    def process_element1(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        """Handles one row of the first input; returns the rows to emit (or ``None``)."""
        raise NotImplementedError("CoProcessFunction subclasses must implement process_element1")

    def process_element2(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        """Handles one row of the second input; returns the rows to emit (or ``None``)."""
        raise NotImplementedError("CoProcessFunction subclasses must implement process_element2")

    def process_element(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        """Not used: a CoProcessFunction gets its rows by input."""
        raise TypeError("a CoProcessFunction handles rows in process_element1/process_element2")
