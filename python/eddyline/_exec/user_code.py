"""Calling user code: one context manager turns what it raises into an error naming the operator.

Every executor runs user functions inside ``with UserCode(operator, ...)``.
An exception the user's code raises leaves the block as a
:class:`UserFunctionError` (a :class:`~eddyline.JobFailedError`) that names
the operator, keeps the user's exception as ``__cause__`` and its formatted
traceback (starting at the user's function) as ``user_traceback``, and adds
context such as the offending row. eddyline's own errors (a
:class:`~eddyline.SchemaError` of a bad output, say) pass through unchanged.

The binding (``python/src/errors.rs``) reads the error's attributes, not its
text, to build the engine's error (DESIGN.md "What a user sees").
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

from ..errors import EddylineError, JobFailedError


def short(value: object, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters.

    Example:
        >>> short("x" * 300, 10)
        "'xxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class UserFunctionError(JobFailedError):
    """A user function raised while operator ``operator`` ran.

    Attributes:
        reason: The failure without the operator's name: the exception's
            type and text, then the detail (``"ValueError: bad; row: {...}"``).
        fused_into: The node a fused per-record stage ran in, or ``None``.

    Example:
        >>> err = UserFunctionError("parse", "ValueError: bad")
        >>> str(err), err.operator, err.reason
        ("operator 'parse' failed: ValueError: bad", 'parse', 'ValueError: bad')
    """

    operator: str

    def __init__(
        self,
        operator: str,
        reason: str,
        *,
        fused_into: str | None = None,
        user_traceback: str | None = None,
    ) -> None:
        where = f"operator '{operator}'"
        if fused_into is not None:
            where += f" (fused into '{fused_into}')"
        message = f"{where} failed: {reason}"
        super().__init__(message, operator=operator, user_traceback=user_traceback)
        self.reason = reason
        self.fused_into = fused_into

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (self.operator, self.reason, self.fused_into, self.user_traceback))


def _rebuild(
    operator: str, reason: str, fused_into: str | None, user_traceback: str | None
) -> UserFunctionError:
    return UserFunctionError(operator, reason, fused_into=fused_into, user_traceback=user_traceback)


def user_error(
    exc: BaseException,
    operator: str,
    *,
    node: str | None = None,
    detail: str | None = None,
    tb: TracebackType | None = None,
) -> UserFunctionError:
    """Wraps an exception raised by user code into a :class:`UserFunctionError`.

    Args:
        exc: The user's exception (kept as ``__cause__``).
        operator: The operator whose function raised.
        node: The name of the node the operator was fused into, if different.
        detail: Extra context, such as the offending row.
        tb: The traceback to report (defaults to the exception's own).
    """
    reason = f"{type(exc).__name__}: {exc}"
    if detail:
        reason += f"; {detail}"
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    err = UserFunctionError(
        operator,
        reason,
        fused_into=node if node is not None and node != operator else None,
        user_traceback=text,
    )
    err.__cause__ = exc
    return err


class UserCode:
    """``with UserCode(operator): ...`` runs user code, wrapping what it raises.

    An :class:`Exception` raised in the block (other than an
    :class:`~eddyline.EddylineError`, which passes unchanged) is raised again
    as the :class:`UserFunctionError` of :func:`user_error`, from the user's
    exception; its traceback starts below the frame holding the ``with``
    statement, at the user's function. Entering costs one small object, so
    executors enter once per batch, not per record.

    Args:
        operator: The operator the block runs user code of.
        detail: Called on failure only, with the variables of the function
            that holds the ``with`` statement as they were when it failed:
            context for the message (the row, key or window being
            processed). Reading them from the frame, not from a closure,
            keeps a loop's variables plain locals, as fast as without the
            block.
        describe: Called on failure only, instead of the above: the error to
            raise for the exception (used where the failing stage and row are
            found in the traceback, as in a fused chain).

    Example:
        >>> def invert(value):
        ...     with UserCode("invert", detail=lambda v: f"value {v['value']!r}"):
        ...         return 1 / value
        >>> invert(0)
        Traceback (most recent call last):
        ...
        eddyline._exec.user_code.UserFunctionError: operator 'invert' failed: \
ZeroDivisionError: division by zero; value 0
    """

    __slots__ = ("describe", "detail", "operator")

    def __init__(
        self,
        operator: str,
        detail: Callable[[Mapping[str, Any]], str] | None = None,
        describe: Callable[[Exception], EddylineError] | None = None,
    ) -> None:
        self.operator = operator
        self.detail = detail
        self.describe = describe

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, EddylineError):
            return  # no exception, or one that is not the user's to wrap
        if self.describe is not None:
            error = self.describe(exc)
        else:
            detail = None
            if self.detail is not None and tb is not None:
                detail = self.detail(tb.tb_frame.f_locals)
            error = user_error(exc, self.operator, detail=detail, tb=_below_caller(exc))
        raise error from error.__cause__


def _below_caller(exc: BaseException) -> TracebackType | None:
    """The traceback from the frame below the one that holds the ``with``."""
    tb = exc.__traceback__
    return tb.tb_next if tb is not None and tb.tb_next is not None else tb


def call_user(operator: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls a user hook (open, close, commit, ...) in a :class:`UserCode` block."""
    with UserCode(operator):
        return fn(*args)
