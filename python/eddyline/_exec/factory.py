"""The picklable factory of a ``python`` node's executors, one per parallel subtask.

The binding reads the factory's properties once when the graph is built:
whether the executors rebuild their state by replay (FLINK-4120), whether
their operator state can be dealt to other subtasks (FLIP-147), and which of
the optional hooks of :class:`~eddyline._exec.base.Runner` they have.
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

from ..errors import GraphError
from .base import Runner

_COPY_ERRORS = (pickle.PicklingError, TypeError, AttributeError, copy.Error)
"""What copying an object that holds a lock, a socket or a client raises."""


def private_copy(obj: Any, operator: str) -> Any:
    """Returns a copy of a user object for one subtask (objects carry state).

    A pickled copy (cloudpickle), or else a deep copy. An object that allows
    neither cannot be given to each parallel instance, as the sink and
    process-function contracts promise: a :class:`GraphError` naming
    ``operator`` says so (sharing it would let subtasks change each other's
    state). Any other exception a user's ``__reduce__`` raises goes through.
    """
    import cloudpickle

    try:
        return pickle.loads(cloudpickle.dumps(obj))
    except _COPY_ERRORS as pickling:
        try:
            return copy.deepcopy(obj)
        except _COPY_ERRORS:
            raise GraphError(
                f"operator '{operator}': its {type(obj).__name__} object cannot be copied for "
                f"each parallel instance ({type(pickling).__name__}: {pickling}); create "
                "connections, locks and clients in open()",
                operator=operator,
            ) from pickling


class RunnerFactory:
    """A picklable ``factory() -> Runner`` for a ``python`` node.

    Arguments listed in ``private`` are copied for every runner so that
    parallel subtasks (and restarts) never share a user object's state; the
    first argument is the node's name. An argument that cannot be copied is a
    :class:`GraphError` when the factory is made, before anything runs.
    """

    def __init__(self, cls: type[Runner], *args: Any, private: tuple[int, ...] = ()) -> None:
        self.cls = cls
        self.args = args
        self.private = private
        self.input_rows: int | None = None
        """The rows the bounded sources upstream read (set when the graph is compiled;
        given to every runner as :attr:`Runner.input_rows`)."""
        for i in private:
            private_copy(args[i], str(args[0]))

    def __call__(self) -> Runner:
        args = [
            private_copy(a, str(self.args[0])) if i in self.private else a
            for i, a in enumerate(self.args)
        ]
        runner = self.cls(*args)
        if self.input_rows is not None:
            runner.input_rows = self.input_rows
        return runner

    @property
    def recomputable(self) -> bool:
        """Whether its runners rebuild their state by replay (read by the engine)."""
        return self.cls.recomputable_for(*self.args)

    @property
    def handles_processing_time(self) -> bool:
        """Whether its runners have processing-time timers (read by the engine)."""
        return self.cls.processing_time_for(*self.args)

    @property
    def broadcast_state(self) -> bool:
        """Whether its runners hold broadcast state: one copy, written by subtask 0 and
        restored into every subtask at any parallelism (read by the engine)."""
        return self.cls.broadcast_state

    @property
    def union_state(self) -> bool:
        """Whether its runners' operator state is union list state: at another
        parallelism every subtask gets the entries of all old subtasks (read by the
        engine)."""
        return self.cls.union_state

    @property
    def redistributable(self) -> bool:
        """Whether its runners' operator state can move to other subtasks (read by the engine)."""
        return self.cls.redistributable

    @property
    def handles_watermarks(self) -> bool:
        """Whether its runners have ``on_watermark`` (read by the engine)."""
        return self.cls.handles_watermarks

    @property
    def handles_end_input(self) -> bool:
        """Whether its runners have ``end_input`` (read by the engine)."""
        return self.cls.handles_end_input

    @property
    def counts_late_records(self) -> bool:
        """Whether its runners count late records (read by the engine after each batch)."""
        return self.cls.counts_late_records

    @property
    def passes_source_progress(self) -> bool:
        """Whether its runners emit each batch's output in the call that got it, so the
        engine passes the source's progress through them (read by the engine)."""
        return self.cls.passes_source_progress

    @property
    def replayable_from_earlier(self) -> bool:
        """Whether a replay from before the null-state watermark also rebuilds the state."""
        return self.cls.recomputable and self.recomputable

    def __repr__(self) -> str:
        return f"RunnerFactory({self.cls.__name__})"
