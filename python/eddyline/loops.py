"""Loops (FLIP-15, FLIP-16): :class:`LoopFunction` and :class:`CoLoopFunction`.

``stream.iterate(fn)`` opens a loop: ``fn`` receives the stream inside the
loop and returns ``(feedback, output)``. Feedback goes back to the loop's
head; the output leaves the loop. A loop ends when its input ended and no
record is left anywhere inside it (checked by termination rounds, never by a
timeout); the loop's feedback and a log of it are part of every checkpoint,
so a restored job continues exactly where the checkpoint was taken.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> def halve(s):
    ...     step = s.with_columns(x=ed.col("x") // 2)
    ...     return step.filter(ed.col("x") > 0), step.filter(ed.col("x") == 0)
    >>> out = env.from_collection([{"x": 8}, {"x": 3}]).iterate(halve).collect()
    >>> _ = env.execute()  # doctest: +SKIP
    >>> sorted(r["x"] for r in out.to_pylist())  # doctest: +SKIP
    [0, 0]

The loop plumbing lives here too: :func:`build_loop` (behind
``DataStream.iterate`` and ``iterate_with_feedback``) adds the loop head (a new
:class:`~eddyline.StreamScope` one level deeper), runs the loop function on
the stream inside the loop, checks its ``(feedback, output)`` and closes the
loop with its exit; a loop function that fails leaves nothing in the graph.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Generic

import pyarrow as pa

from ._specs import LoopExitSpec, LoopHeadSpec
from ._stream_core import S
from .config import parse_size
from .connected import ConnectedStreams
from .errors import GraphError, SchemaError, ScopeError

if TYPE_CHECKING:
    from ._graph import LogicalNode

__all__ = ["CoLoopFunction", "LoopFunction", "build_loop"]


class LoopFunction(Generic[S]):
    """The body of ``stream.iterate(...)``. Subclass and implement :meth:`loop`.

    A plain callable ``fn(stream) -> (feedback, output)`` is accepted too.
    """

    def loop(self, stream: S) -> tuple[S, S]:
        """Builds the loop body on ``stream`` (the loop input plus the feedback).

        Returns:
            ``(feedback, output)``: the stream fed back to the loop's head (it
            must have the loop input's schema) and the stream leaving the loop.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement loop(stream)")


class CoLoopFunction(Generic[S]):
    """The body of ``stream.iterate_with_feedback(...)``. Subclass and implement :meth:`loop`.

    The body sees the loop input and the feedback apart, as the first and
    second stream of a :class:`~eddyline.ConnectedStreams`, so the feedback
    may have its own schema (declared with ``feedback_schema``).
    """

    def loop(self, connected: ConnectedStreams[S]) -> tuple[S, S]:
        """Builds the loop body on ``connected`` = (loop input, feedback).

        Returns:
            ``(feedback, output)``; the feedback must have ``feedback_schema``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement loop(connected)")


def _call_loop_function(fn: Any, arg: Any, what: str) -> tuple[Any, Any]:
    """Calls a loop function (object with ``loop`` or callable) and checks its result."""
    if isinstance(fn, (LoopFunction, CoLoopFunction)) or hasattr(fn, "loop"):
        result = fn.loop(arg)
    elif callable(fn):
        result = fn(arg)
    else:
        raise TypeError(
            f"{what} needs an ed.LoopFunction/ed.CoLoopFunction or a callable, got "
            f"{type(fn).__name__}"
        )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(
            f"{what}: the loop function must return (feedback, output), got {type(result).__name__}"
        )
    return result


def build_loop(
    outer: S,
    what: str,
    fn: Any,
    *,
    co: bool,
    feedback_memory: int | str,
    priority: str,
    spill_dir: str | os.PathLike[str] | None,
    feedback_schema: pa.Schema | None,
) -> S:
    """Opens a loop on ``outer``, builds its body with ``fn`` and closes it; returns
    the loop's output. A failing body leaves nothing behind in the graph.

    ``co`` (``iterate_with_feedback``): the body gets (loop input, feedback)
    as :class:`~eddyline.ConnectedStreams` and the feedback has
    ``feedback_schema``; otherwise the body gets one stream and the feedback
    has ``outer``'s schema.
    """
    # The loop head, in a scope nested in the outer one.
    if priority not in ("feedback_first", "adaptive"):
        raise ValueError(
            f"{what}: priority must be 'feedback_first' or 'adaptive', got {priority!r}"
        )
    memory = parse_size(feedback_memory, what=f"{what}: feedback_memory")
    scope = outer.scope.nest()
    assert scope.loop_id is not None  # a nested scope is a loop's
    spec = LoopHeadSpec(
        loop=scope.loop_id,
        feedback_memory=memory,
        priority=priority,  # type: ignore[arg-type]
        co=co,
        spill_dir=os.fspath(spill_dir) if spill_dir is not None else None,
        feedback_schema=_nullable(feedback_schema),
    )
    head = outer._plan.add(
        "iterate",
        spec,
        [outer._edge()],
        scope=scope,
        schema=_nullable(outer.schema),
        time_column=outer.time_column,
    )
    try:
        inner = outer._on(head)
        arg: Any = ConnectedStreams(inner, outer._on(head, port=1)) if co else inner
        result = _call_loop_function(fn, arg, what)
        expected = feedback_schema if co else outer.schema
        return _close_loop(outer, what, head, result, expected)
    except BaseException:
        # The graph's current head: closing the loop replaces the node.
        if outer._plan.nodes[head.id].spec.feedback_from is None:  # type: ignore[union-attr]
            outer._plan.discard_from(head)
        raise


def _close_loop(
    outer: S,
    what: str,
    head: LogicalNode,
    result: tuple[Any, Any],
    expected: pa.Schema | None,
) -> S:
    """Checks the loop function's ``(feedback, output)``, wires the feedback to the
    head and adds the loop's exit (back in ``outer``'s scope)."""
    feedback, output = result
    for role, stream in (("feedback", feedback), ("output", output)):
        # type(outer) is DataStream: this module never names the class
        # (stream.py imports this module, not the other way round).
        if not isinstance(stream, type(outer)):
            raise TypeError(
                f"{what}: the loop function must return (feedback, output) DataStreams; "
                f"its {role} is a {type(stream).__name__}"
            )
        if stream._env is not outer._env:
            raise GraphError(f"{what}: the loop's {role} belongs to another StreamEnvironment")
        if stream.scope != head.scope:
            raise ScopeError(
                f"{what}: the loop's {role} '{stream.operator_name}' is in scope "
                f"{stream.scope!r}, not in the loop's scope {head.scope!r}; build it from "
                "the stream the loop function received",
                operator=stream.operator_name,
            )
    if feedback._port:
        raise GraphError(
            f"{what}: the feedback stream of the loop cannot be fed back unchanged",
            operator=head.display_name,
        )
    got = feedback.schema
    if expected is not None and got is not None and not _same_columns(expected, got):
        raise SchemaError(
            f"{what}: the feedback '{feedback.operator_name}' has schema\n{got}\nbut the "
            f"loop's feedback must have schema\n{expected}",
            operator=feedback.operator_name,
        )
    outer._plan.close_loop(head, feedback._node)
    # The exit is back in the outer scope and keeps the output's event time.
    return outer._add("loop_output", LoopExitSpec(), schema=output.schema, inputs=[output._edge()])


def _nullable(schema: pa.Schema | None) -> pa.Schema | None:
    """``schema`` with every field nullable (what a loop head emits)."""
    if schema is None:
        return None
    return pa.schema([f.with_nullable(True) for f in schema], metadata=schema.metadata)


def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b, strict=True))
