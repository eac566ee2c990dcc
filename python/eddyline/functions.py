"""User function base classes and keyed state for ``KeyedStream.process``.

Example:
    >>> import eddyline as ed
    >>> class RunningCount(ed.ProcessFunction):
    ...     def process_element(self, row, ctx):
    ...         n = (ctx.state.value() or 0) + 1
    ...         ctx.state.update(n)
    ...         return [{"key": ctx.key, "n": n}]
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

from .errors import EddylineError

__all__ = ["ProcessContext", "ProcessFunction", "Row", "ValueState"]

Row = dict[str, Any]
"""A record as seen by per-record functions: column name to Python value."""


class ValueState:
    """One named value of keyed state, scoped to the key being processed.

    Obtain it from :attr:`ProcessContext.state` (the state named ``"value"``)
    or :meth:`ProcessContext.get_state`. Values must be picklable; they are
    part of checkpoints.
    """

    __slots__ = ("_ctx", "_default", "name")

    def __init__(self, ctx: ProcessContext, name: str, default: Any = None) -> None:
        self._ctx = ctx
        self.name = name
        self._default = default

    def value(self) -> Any:
        """Returns the value for the current key, or the default (``None``) if unset."""
        return self._ctx._current_values().get(self.name, self._default)

    def update(self, value: Any) -> None:
        """Sets the value for the current key."""
        self._ctx._current_values()[self.name] = value

    def clear(self) -> None:
        """Removes the value for the current key."""
        self._ctx._current_values().pop(self.name, None)

    def __repr__(self) -> str:
        return f"ValueState({self.name!r})"


class ProcessContext:
    """What a keyed process function sees besides the record.

    Attributes:
        key: The key of the record being processed (the value of the key
            column, or a tuple of values for several key columns); ``None``
            outside :meth:`ProcessFunction.process_element`.
        name: The operator name.
        subtask_index: Which parallel instance runs the function.
        parallelism: The operator's parallelism.
        attempt: The restart attempt (0 for the first run).
    """

    __slots__ = ("_states", "_values", "attempt", "key", "name", "parallelism", "subtask_index")

    def __init__(self, name: str, subtask_index: int, parallelism: int, attempt: int) -> None:
        self.name = name
        self.subtask_index = subtask_index
        self.parallelism = parallelism
        self.attempt = attempt
        self.key: Hashable | None = None
        self._values: dict[str, Any] | None = None
        self._states: dict[str, ValueState] = {}

    @property
    def state(self) -> ValueState:
        """The default value state (named ``"value"``) of the current key."""
        return self.get_state("value")

    def get_state(self, name: str, default: Any = None) -> ValueState:
        """Returns the value state called ``name`` of the current key.

        Args:
            name: The state's name; states of different names are independent.
            default: What :meth:`ValueState.value` returns while unset.
        """
        state = self._states.get(name)
        if state is None or state._default is not default:
            state = ValueState(self, name, default)
            self._states[name] = state
        return state

    def _current_values(self) -> dict[str, Any]:
        if self._values is None:
            raise EddylineError(
                f"operator '{self.name}': keyed state is only available while a record is "
                "processed (inside process_element), not in open() or close()",
                operator=self.name,
            )
        return self._values

    def __repr__(self) -> str:
        return f"ProcessContext(name={self.name!r}, key={self.key!r})"


class ProcessFunction:
    """Base class of keyed process functions with state.

    Override :meth:`process_element`; :meth:`open` and :meth:`close` are
    optional. Each parallel instance gets its own copy of the object.
    """

    def open(self, ctx: ProcessContext) -> None:
        """Called once per parallel instance before any record."""

    def process_element(self, row: Row, ctx: ProcessContext) -> Iterable[Row] | None:
        """Handles one record; returns the records to emit (or ``None``).

        Args:
            row: The record.
            ctx: The context: ``ctx.key``, ``ctx.state``, ``ctx.get_state(name)``.
        """
        raise NotImplementedError("ProcessFunction subclasses must implement process_element")

    def close(self) -> None:
        """Called once per parallel instance after the last record."""
