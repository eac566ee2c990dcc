"""The typed plan: frozen specs built by the DSL, handed to the core unchanged."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import eddyline as ed
from eddyline import _specs
from eddyline._graph import LogicalGraph


def test_dsl_methods_build_frozen_specs_that_compile_unchanged() -> None:
    env = ed.StreamEnvironment(2)
    predicate = ed.col("value") > 3
    kept = env.from_sequence(0, 10).filter(predicate)
    summed = kept.key_by("value").sum("value")
    summed.collect()
    node = kept._node
    assert isinstance(node.spec, _specs.FilterSpec)
    assert node.spec.expr is predicate and node.spec.reads == ["value"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        node.spec.reads = []  # type: ignore[misc]
    compiled = env._graph.compile(env._graph.sinks(), complete=True)
    by_name = {spec.name: spec for spec in compiled.nodes}
    # No renaming on the way: the native layer reads the DSL's own spec.
    assert by_name[node.display_name].op is node.spec
    agg = by_name[summed.operator_name]
    assert agg.kind == "keyed_agg" and agg.op == _specs.KeyedAggSpec(["value"], "sum", "value")
    assert [(e.partition, e.keys) for e in agg.inputs] == [("hash", ["value"])]


def test_a_join_spec_names_the_keys_the_core_reads() -> None:
    env = ed.StreamEnvironment(1)
    left = env.from_collection([{"k": 1, "a": 2}])
    right = env.from_collection([{"id": 1, "b": 3}])
    joined = left.join(right, left_on="k", right_on="id")
    spec = joined._node.spec
    assert isinstance(spec, _specs.JoinSpec)
    assert (spec.left_keys, spec.right_keys) == (["k"], ["id"])
    assert joined._node.input_keys == [["k"], ["id"]]


def test_the_job_config_is_a_frozen_spec() -> None:
    env = ed.StreamEnvironment(restart=ed.RestartStrategy.fixed_delay(2, "50ms"))
    config = env._config("job", None)
    assert config.restart == _specs.RestartSpec(attempts=2, delay_s=0.05)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.name = "other"  # type: ignore[misc]


def test_the_plan_does_not_import_the_execution_layer() -> None:
    source = Path(LogicalGraph.__module__.replace(".", "/") + ".py")
    path = Path(ed.__file__).parent.parent / source
    imported: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.append("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            imported.extend(alias.name for alias in node.names)
    assert imported and not [name for name in imported if "_exec" in name], imported
