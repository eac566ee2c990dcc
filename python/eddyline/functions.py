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
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from .config import Duration, parse_duration
from .errors import EddylineError

if TYPE_CHECKING:
    from .windows import OutputTag

__all__ = [
    "BroadcastContext",
    "BroadcastProcessFunction",
    "CoProcessFunction",
    "KeyedBroadcastContext",
    "KeyedBroadcastProcessFunction",
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


def purge_expired(values: dict[str, Any], now: int) -> bool:
    """Drops the expired entries of one key's states (``values``: name -> value,
    list or dict as the states keep them); a state left empty is removed.
    Returns whether the key holds no state any more."""
    for name in list(values):
        held = values[name]
        if type(held) is _Expiring:
            if held.expires_at <= now:
                del values[name]
        elif type(held) is list:
            live = [e for e in held if _live(e, now)]
            if len(live) != len(held):
                if live:
                    values[name] = live
                else:
                    del values[name]
        elif type(held) is dict:
            expired = [k for k, e in held.items() if not _live(e, now)]
            for k in expired:
                del held[k]
            if expired and not held:
                del values[name]
    return not values


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

    __slots__ = ("_ctx", "_default", "_ttl", "name")

    def __init__(
        self, ctx: ProcessContext, name: str, default: Any = None, ttl: int | None = None
    ) -> None:
        self._ctx = ctx
        self.name = name
        self._default = default
        self._ttl = ttl

    def value(self) -> Any:
        """Returns the value for the current key, or the default (``None``) if unset
        (or, with a ttl, written longer ago than the ttl)."""
        values = self._ctx._values  # the per-record path: no call while a key is bound
        if values is None:
            values = self._ctx._current_values()  # raises: no key is bound
        held = values.get(self.name, _MISSING)
        if held is _MISSING:
            return self._default
        if type(held) is _Expiring:
            if held.expires_at <= _clock():
                del values[self.name]
                return self._default
            return held.value
        return held

    def update(self, value: Any) -> None:
        """Sets the value for the current key (with a ttl: for the ttl from now)."""
        values = self._ctx._values
        if values is None:
            values = self._ctx._current_values()  # raises: no key is bound
        ttl = self._ttl
        values[self.name] = value if ttl is None else _Expiring(value, _clock() + ttl)

    def clear(self) -> None:
        """Removes the value for the current key."""
        self._ctx._current_values().pop(self.name, None)

    def __repr__(self) -> str:
        return f"ValueState({self.name!r})"


class ListState:
    """A list of values of keyed state, scoped to the key being processed.

    Obtain it from :meth:`ProcessContext.get_list_state`. The elements must be
    picklable; they are part of checkpoints. An empty list holds no state.
    """

    __slots__ = ("_ctx", "_ttl", "name")

    def __init__(self, ctx: ProcessContext, name: str, ttl: int | None = None) -> None:
        self._ctx = ctx
        self.name = name
        self._ttl = ttl

    def _wrap(self, items: list[Any]) -> list[Any]:
        ttl = self._ttl
        if ttl is None:
            return items
        expires = _clock() + ttl
        return [_Expiring(v, expires) for v in items]

    def get(self) -> list[Any]:
        """The current key's elements in the order added (a new list; empty when unset).
        With a ttl, each element lives for the ttl from when it was added."""
        values = self._ctx._current_values()
        held = values.get(self.name)
        if not held:
            return []
        if not self._ctx._ttl_seen:
            return list(held)
        now = _clock()
        live = [e for e in held if _live(e, now)]
        if len(live) != len(held):
            if live:
                values[self.name] = live
            else:
                del values[self.name]
        return [_plain(e) for e in live]

    def add(self, value: Any) -> None:
        """Appends ``value`` to the current key's list."""
        self._ctx._current_values().setdefault(self.name, []).extend(self._wrap([value]))

    def add_all(self, values: Iterable[Any]) -> None:
        """Appends every element of ``values``, in order."""
        items = _as_list(values, self._ctx.name, f"ListState({self.name!r}).add_all")
        if items:
            self._ctx._current_values().setdefault(self.name, []).extend(self._wrap(items))

    def update(self, values: Iterable[Any]) -> None:
        """Replaces the current key's list with the elements of ``values``."""
        items = _as_list(values, self._ctx.name, f"ListState({self.name!r}).update")
        current = self._ctx._current_values()
        if items:
            current[self.name] = self._wrap(items)
        else:
            current.pop(self.name, None)

    def clear(self) -> None:
        """Removes the current key's list."""
        self._ctx._current_values().pop(self.name, None)

    def __repr__(self) -> str:
        return f"ListState({self.name!r})"


_D = TypeVar("_D")


class MapState:
    """A map of keyed state (user key to value), scoped to the key being processed.

    Obtain it from :meth:`ProcessContext.get_map_state`. User keys must be
    hashable, keys and values picklable; they are part of checkpoints. An
    empty map holds no state.
    """

    __slots__ = ("_ctx", "_ttl", "name")

    def __init__(self, ctx: ProcessContext, name: str, ttl: int | None = None) -> None:
        self._ctx = ctx
        self.name = name
        self._ttl = ttl

    def _map(self) -> dict[Any, Any]:
        """The current key's map, its expired entries dropped, values still wrapped."""
        values = self._ctx._current_values()
        held: dict[Any, Any] | None = values.get(self.name)
        if not held:
            return {}
        if self._ctx._ttl_seen:
            now = _clock()
            expired = [k for k, e in held.items() if not _live(e, now)]
            for k in expired:
                del held[k]
            if not held:
                del values[self.name]
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
        self._ctx._current_values().setdefault(self.name, {})[key] = (
            value if ttl is None else _Expiring(value, _clock() + ttl)
        )

    def remove(self, key: Hashable) -> None:
        """Removes ``key`` (a no-op when absent)."""
        current = self._ctx._current_values()
        entries = current.get(self.name)
        if entries is not None:
            entries.pop(key, None)
            if not entries:
                del current[self.name]

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
        self._ctx._current_values().pop(self.name, None)

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
        ctx._current_values()  # only while a key is current
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
        "_kinds",
        "_side_rows",
        "_states",
        "_timer_service",
        "_timers",
        "_ttl_seen",
        "_values",
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
        self._values: dict[str, Any] | None = None
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
        from .windows import OutputTag

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

    def _current_values(self) -> dict[str, Any]:
        if self._values is None:
            raise EddylineError(
                f"operator '{self.name}': keyed state and timers are only available while a "
                "record or a timer of a key is processed (process_element, on_timer), not in "
                "open(), end_input(), finish() or close()",
                operator=self.name,
            )
        return self._values

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


class _ReadOnlyMapState(MapState):
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
        cls = _ReadOnlyMapState if read_only else MapState
        self.broadcast_state = cls(self, "broadcast")  # type: ignore[arg-type]

    def _current_values(self) -> dict[str, Any]:
        return self._values

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
    subtask therefore holds the same broadcast state; it is checkpointed once
    and restored into every subtask at any parallelism. Rows of the two
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
