"""StreamScope rules (FLIP-15)."""

from __future__ import annotations

import pytest

import eddyline as ed
from eddyline import StreamScope


def test_top_scope_is_level_zero_and_unique() -> None:
    top = StreamScope.top()
    assert top.level == 0
    assert top == StreamScope.top()
    assert hash(top) == hash(StreamScope.top())
    assert top.outer_scopes() == []


def test_unnest_of_top_scope_raises_scope_error() -> None:
    with pytest.raises(ed.ScopeError, match="level 0"):
        StreamScope.top().unnest()


def test_nest_opens_a_deeper_distinct_scope() -> None:
    top = StreamScope.top()
    a = top.nest()
    b = top.nest()
    assert a.level == b.level == 1
    assert a != b
    assert a == a
    assert a.unnest() == top
    assert len({a, b, top, a}) == 3


def test_inner_and_outer_relations_are_transitive_and_strict() -> None:
    top = StreamScope.top()
    one = top.nest()
    two = one.nest()
    other = top.nest()
    assert two.is_inner_of(one) and two.is_inner_of(top)
    assert top.is_outer_of(two) and one.is_outer_of(two)
    assert not two.is_inner_of(two) and not two.is_outer_of(two)
    assert not two.is_inner_of(other)
    assert not top.is_inner_of(one)
    assert two.outer_scopes() == [one, top]
    assert [s.level for s in two.outer_scopes()] == [1, 0]


def test_scope_is_immutable() -> None:
    scope = StreamScope.top().nest()
    with pytest.raises(AttributeError):
        scope.level = 3  # type: ignore[misc]


def test_streams_start_in_the_top_scope() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_collection([1, 2])
    assert stream.scope == StreamScope.top()
    assert stream.map(lambda r: r).scope.level == 0
