"""Exception classes raised by eddyline.

Every error eddyline raises on purpose derives from :class:`EddylineError`. The
Rust core maps each of its error variants to exactly one of these classes and
instantiates it by name as ``cls(message, operator=..., user_traceback=...)``,
so the constructor signature is part of the binding contract.

Example:
    >>> import eddyline as ed
    >>> err = ed.SchemaError("operator 'parse' returned a str", operator="parse")
    >>> isinstance(err, ed.EddylineError), err.operator
    (True, 'parse')
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "DashboardError",
    "EddylineError",
    "GraphError",
    "JobCancelledError",
    "JobFailedError",
    "KafkaError",
    "SchemaError",
    "ScopeError",
    "SqlError",
    "StorageError",
]


class EddylineError(Exception):
    """Base class of every error raised by eddyline.

    Args:
        message: A full sentence describing the problem; it names the operator
            when one is involved.
        operator: The name of the operator the error belongs to, if any.
        user_traceback: The formatted traceback of a user function that raised,
            if the error was caused by user code.

    Attributes:
        operator: The operator name, or ``None``.
        user_traceback: The user function's formatted traceback, or ``None``.
    """

    operator: str | None
    user_traceback: str | None

    def __init__(
        self,
        message: str,
        *,
        operator: str | None = None,
        user_traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.operator = operator
        self.user_traceback = user_traceback

    @property
    def message(self) -> str:
        """The error message (the first constructor argument)."""
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[object, ...]:
        # Keep the keyword-only attributes when errors cross process boundaries.
        return (
            _rebuild_error,
            (type(self), self.message, self.operator, self.user_traceback),
        )


def _rebuild_error(
    cls: type[EddylineError],
    message: str,
    operator: str | None,
    user_traceback: str | None,
) -> EddylineError:
    return cls(message, operator=operator, user_traceback=user_traceback)


class GraphError(EddylineError):
    """The job graph is invalid (unknown column, bad parallelism, no sink, ...).

    Raised while the graph is built, before anything runs.
    """


class SqlError(GraphError):
    """SQL that a stream cannot run, or that does not plan (``env.sql``).

    Raised by ``env.sql`` before any operator exists; the message names the
    construct (``ORDER BY``, ``LIMIT``, ``JOIN``, an unknown ``table`` or
    ``column``, ...) and why.

    Attributes:
        construct: The SQL construct refused (``"ORDER BY"``, ``"column"``, ...).
    """

    construct: str

    def __init__(
        self,
        message: str,
        construct: str = "query",
        *,
        operator: str | None = None,
        user_traceback: str | None = None,
    ) -> None:
        super().__init__(message, operator=operator or "sql", user_traceback=user_traceback)
        self.construct = construct


class ScopeError(EddylineError):
    """Streams of different loop scopes were combined, or a scope was misused.

    Example:
        >>> import eddyline as ed
        >>> ed.StreamScope.top().unnest()
        Traceback (most recent call last):
        ...
        eddyline.errors.ScopeError: the top-level scope (level 0) has no outer scope to unnest to
    """


class SchemaError(EddylineError):
    """Data does not have the schema an operator expects.

    Raised when a user function returns the wrong type or shape (the message
    names the operator, the field, the expected and the actual type), when
    batches of one stream have different schemas, or when streams that must
    agree (union, connect) do not.
    """


class CheckpointError(EddylineError):
    """A checkpoint or savepoint is missing, corrupt or incompatible, or
    checkpointing is not possible (for example, not enabled)."""


class StorageError(EddylineError):
    """A path or URI that storage cannot reach or write.

    Raised for a URI of a scheme no store serves, an object store URI
    without a bucket, and, before the job runs where possible, for an
    unreachable endpoint, a missing bucket or bad credentials; it names the
    URI.

    Attributes:
        uri: The URI or path, when known.

    Example:
        >>> import eddyline as ed
        >>> ed.CheckpointConfig("ftp://host/chk")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        eddyline.errors.StorageError: checkpoint dir: the URI scheme 'ftp' of ...
    """

    uri: str | None

    def __init__(
        self,
        message: str,
        *,
        operator: str | None = None,
        user_traceback: str | None = None,
        uri: str | None = None,
    ) -> None:
        super().__init__(message, operator=operator, user_traceback=user_traceback)
        self.uri = uri

    def __reduce__(self) -> tuple[object, ...]:
        return (
            _rebuild_storage_error,
            (self.message, self.operator, self.user_traceback, self.uri),
        )


def _rebuild_storage_error(
    message: str, operator: str | None, user_traceback: str | None, uri: str | None
) -> StorageError:
    return StorageError(message, operator=operator, user_traceback=user_traceback, uri=uri)


class KafkaError(EddylineError):
    """A Kafka broker cannot be reached, a topic is missing, or a message
    could not be delivered; the message names the operator and the cause.

    Example:
        >>> import eddyline as ed
        >>> issubclass(ed.KafkaError, ed.EddylineError)
        True
    """


class DashboardError(EddylineError):
    """The job's dashboard cannot be served (its port is taken, the address is invalid)."""


class JobFailedError(EddylineError):
    """A job failed and its restart strategy is exhausted.

    When a user function raised, ``operator`` names the operator, the
    original exception is kept as ``__cause__`` and its formatted traceback
    is in ``user_traceback``.
    """


class JobCancelledError(EddylineError):
    """The job was cancelled (``JobClient.cancel()``, or Ctrl-C while waiting).

    :meth:`JobClient.wait` raises it for a cancelled job; the output committed
    before the cancellation stays committed.
    """
