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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stream import ConnectedStreams, DataStream

__all__ = ["CoLoopFunction", "LoopFunction"]


class LoopFunction:
    """The body of ``stream.iterate(...)``. Subclass and implement :meth:`loop`.

    A plain callable ``fn(stream) -> (feedback, output)`` is accepted too.
    """

    def loop(self, stream: DataStream) -> tuple[DataStream, DataStream]:
        """Builds the loop body on ``stream`` (the loop input plus the feedback).

        Returns:
            ``(feedback, output)``: the stream fed back to the loop's head (it
            must have the loop input's schema) and the stream leaving the loop.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement loop(stream)")


class CoLoopFunction:
    """The body of ``stream.iterate_with_feedback(...)``. Subclass and implement :meth:`loop`.

    The body sees the loop input and the feedback apart, as the first and
    second stream of a :class:`~eddyline.ConnectedStreams`, so the feedback
    may have its own schema (declared with ``feedback_schema``).
    """

    def loop(self, connected: ConnectedStreams) -> tuple[DataStream, DataStream]:
        """Builds the loop body on ``connected`` = (loop input, feedback).

        Returns:
            ``(feedback, output)``; the feedback must have ``feedback_schema``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement loop(connected)")


def call_loop_function(fn: Any, arg: Any, what: str) -> tuple[Any, Any]:
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
