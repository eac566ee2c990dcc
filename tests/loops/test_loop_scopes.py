"""(f) Scope rules of loops: unique scopes, levels, nesting, ScopeError across scopes."""

from __future__ import annotations

import pyarrow as pa
import pytest

import eddyline as ed


def _split(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
    return s.filter(ed.col("value") < 0), s.filter(ed.col("value") >= 0)


def test_every_loop_has_a_unique_scope_one_level_deeper() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    seen: list[ed.StreamScope] = []

    def record(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        seen.append(s.scope)
        step = s.with_columns(value=ed.col("value") + 1)
        assert step.scope == s.scope, "streams of one loop share its scope"
        return _split(step)

    out1 = src.iterate(record)
    out2 = src.iterate(record)
    a, b = seen
    assert a != b and a.level == b.level == 1
    assert a.unnest() == src.scope == b.unnest()
    assert a.is_inner_of(src.scope) and src.scope.is_outer_of(a)
    assert out1.scope == src.scope == out2.scope, "a loop's output is in the outer scope"
    assert out1.union(out2).scope == src.scope


def test_nested_loops_nest_scopes() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    scopes: dict[str, ed.StreamScope] = {}

    def outer(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        scopes["outer"] = s.scope

        def inner(t: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            scopes["inner"] = t.scope
            return _split(t)

        back = s.iterate(inner)
        scopes["back"] = back.scope
        return _split(back)

    src.iterate(outer)
    assert scopes["inner"].level == 2 and scopes["outer"].level == 1
    assert scopes["inner"].unnest() == scopes["outer"] == scopes["back"]
    assert scopes["inner"].outer_scopes() == [scopes["outer"], src.scope]
    assert scopes["inner"].is_inner_of(src.scope)


def test_union_and_connect_across_scopes_raise_scope_error() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    other = env.from_sequence(0, 10)

    def union_outside(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        return _split(s.union(other))

    with pytest.raises(ed.ScopeError, match="scope"):
        src.iterate(union_outside)

    def connect_outside(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        s.connect(other)
        return _split(s)

    with pytest.raises(ed.ScopeError):
        src.iterate(connect_outside)
    # the failed loops left nothing behind: the graph still runs
    out = src.collect()
    env.execute()
    assert len(out.to_pylist()) == 10


def test_feedback_or_output_from_outside_the_loop_is_a_scope_error() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    with pytest.raises(ed.ScopeError, match="feedback"):
        src.iterate(lambda s: (src, s))
    with pytest.raises(ed.ScopeError, match="output"):
        src.iterate(lambda s: (s.filter(ed.col("value") < 0), src))


def test_feedback_schema_mismatch_is_a_schema_error_at_build_time() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    with pytest.raises(ed.SchemaError, match="feedback"):
        src.iterate(lambda s: (s.with_columns(extra=ed.lit(1)), s))
    declared = pa.schema([("value", pa.int64()), ("n", pa.int64())])
    with pytest.raises(ed.SchemaError, match="feedback"):
        src.iterate_with_feedback(lambda c: (c.first, c.first), feedback_schema=declared)


def test_bad_loop_arguments_are_rejected() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 10)
    with pytest.raises(ValueError, match="priority"):
        src.iterate(_split, priority="round_robin")
    with pytest.raises(ValueError, match="feedback_memory"):
        src.iterate(_split, feedback_memory="lots")
    with pytest.raises(TypeError, match="feedback, output"):
        src.iterate(lambda s: s)


def test_a_raising_function_inside_a_loop_fails_the_job_naming_it() -> None:
    env = ed.StreamEnvironment()
    src = env.from_sequence(0, 100)

    def boom(row: dict) -> dict:
        if row["value"] == 42:
            raise ValueError("bad record 42")
        return row

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        return _split(s.map(boom).name("explode"))

    src.iterate(body).collect()
    with pytest.raises(ed.JobFailedError, match="explode") as info:
        env.execute()
    assert isinstance(info.value.__cause__, ValueError)
