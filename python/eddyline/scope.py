"""Loop scopes (FLIP-15).

Every stream lives in a :class:`StreamScope`. Streams outside any loop are in
the top-level scope (level 0); each loop opens a nested scope one level
deeper. Binary operations (``union``, ``connect``) are only allowed between
streams of the same scope.

Example:
    >>> from eddyline import StreamScope
    >>> top = StreamScope.top()
    >>> inner = top.nest()
    >>> inner.level, inner.is_inner_of(top), top.is_outer_of(inner)
    (1, True, True)
    >>> inner.unnest() == top, inner == top.nest()
    (True, False)
"""

from __future__ import annotations

from .errors import ScopeError

__all__ = ["StreamScope"]


class _Loop:
    """Identity of one loop; scopes are equal when they belong to the same loop."""

    __slots__ = ("id",)
    _next = 1

    def __init__(self) -> None:
        self.id = _Loop._next
        _Loop._next += 1


class StreamScope:
    """The loop scope a stream belongs to. Immutable.

    Two scopes are equal when they belong to the same loop (all top-level
    scopes are equal). Use :meth:`top` for the top-level scope and
    :meth:`nest` to open the scope of a new loop inside this one.

    Attributes:
        level: 0 for the top level, 1 inside one loop, 2 inside a nested loop, ...
    """

    __slots__ = ("_loop", "_parent", "level")

    level: int
    _parent: StreamScope | None
    _loop: _Loop | None

    def __init__(self, parent: StreamScope | None = None, loop: _Loop | None = None) -> None:
        if (parent is None) != (loop is None):
            raise ScopeError("a nested scope needs both its outer scope and its loop")
        object.__setattr__(self, "_parent", parent)
        object.__setattr__(self, "_loop", loop)
        object.__setattr__(self, "level", 0 if parent is None else parent.level + 1)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("StreamScope is immutable")

    @classmethod
    def top(cls) -> StreamScope:
        """Returns the top-level scope (level 0).

        Example:
            >>> StreamScope.top().level
            0
        """
        return _TOP

    def nest(self) -> StreamScope:
        """Opens the scope of a new loop inside this scope.

        Returns:
            A new scope one level deeper; it equals no other scope.
        """
        return StreamScope(self, _Loop())

    def unnest(self) -> StreamScope:
        """Returns the scope this one is nested in.

        Raises:
            ScopeError: If this is the top-level scope.
        """
        if self._parent is None:
            raise ScopeError("the top-level scope (level 0) has no outer scope to unnest to")
        return self._parent

    @property
    def loop_id(self) -> int | None:
        """The id of the loop this scope belongs to (``None`` at the top level)."""
        return None if self._loop is None else self._loop.id

    def _loop_path(self) -> list[int]:
        """Loop ids from the outermost loop to this scope's loop."""
        path: list[int] = []
        scope: StreamScope | None = self
        while scope is not None and scope._loop is not None:
            path.append(scope._loop.id)
            scope = scope._parent
        return path[::-1]

    def outer_scopes(self) -> list[StreamScope]:
        """Returns the scopes enclosing this one, innermost first, ending at level 0.

        Example:
            >>> s = StreamScope.top().nest().nest()
            >>> [o.level for o in s.outer_scopes()]
            [1, 0]
        """
        out: list[StreamScope] = []
        scope = self._parent
        while scope is not None:
            out.append(scope)
            scope = scope._parent
        return out

    def is_inner_of(self, other: StreamScope) -> bool:
        """True if this scope is nested (at any depth) inside ``other``."""
        return any(outer == other for outer in self.outer_scopes())

    def is_outer_of(self, other: StreamScope) -> bool:
        """True if ``other`` is nested (at any depth) inside this scope."""
        return other.is_inner_of(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StreamScope):
            return NotImplemented
        return self._loop is other._loop

    def __hash__(self) -> int:
        return id(self._loop)

    def __repr__(self) -> str:
        if self._loop is None:
            return "StreamScope(level=0)"
        return f"StreamScope(level={self.level}, loop={self._loop.id})"


_TOP = StreamScope()
