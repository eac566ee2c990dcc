"""Bad input and failing user code give named errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed

MakeEnv = Callable[..., ed.StreamEnvironment]

ROWS = [{"id": i, "x": i * 1.5} for i in range(40)]


def _explode(row: dict[str, Any]) -> dict[str, Any]:
    if row["id"] == 13:
        raise ZeroDivisionError("unlucky row")
    return row


def test_raising_map_fails_job_with_operator_cause_and_traceback(make_env: MakeEnv) -> None:
    env = make_env()
    env.from_collection(ROWS).map(_explode).name("boom").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'boom'") as info:
        env.execute()
    err = info.value
    assert err.operator == "boom"
    assert isinstance(err.__cause__, ZeroDivisionError)
    assert err.user_traceback is not None
    assert "ZeroDivisionError: unlucky row" in err.user_traceback
    assert "_explode" in err.user_traceback


def test_raising_stage_inside_fused_chain_is_named(make_env: MakeEnv) -> None:
    env = make_env()
    (
        env.from_collection(ROWS)
        .map(lambda r: r)
        .filter(lambda r: 1 / (r["id"] - 7) != 0)
        .name("boom")
        .map(lambda r: r)
        .collect()
    )
    with pytest.raises(ed.JobFailedError, match="operator 'boom'") as info:
        env.execute()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert "'id': 7" in str(info.value)


def test_raising_keyed_process_and_batch_functions(make_env: MakeEnv) -> None:
    def bad_process(row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        raise KeyError("missing")

    env = make_env()
    env.from_collection(ROWS).key_by("id").process(bad_process).name("boom").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'boom'") as info:
        env.execute()
    assert isinstance(info.value.__cause__, KeyError)

    def bad_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
        raise RuntimeError("batch failed")

    env = make_env()
    env.from_collection(ROWS).map_batches(bad_batch).name("boom").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'boom'") as info:
        env.execute()
    assert isinstance(info.value.__cause__, RuntimeError)


def test_wrong_output_type_raises_schema_error_naming_field(make_env: MakeEnv) -> None:
    env = make_env()
    schema = pa.schema([("id", pa.int64()), ("label", pa.int64())])
    (
        env.from_collection(ROWS)
        .map(lambda r: {"id": r["id"], "label": "x" if r["id"] == 5 else r["id"]}, schema=schema)
        .name("parse")
        .collect()
    )
    with pytest.raises(ed.SchemaError, match="operator 'parse'") as info:
        env.execute()
    message = str(info.value)
    assert "'label'" in message and "int64" in message and "str" in message


def test_type_change_after_first_output_raises_schema_error(make_env: MakeEnv) -> None:
    env = make_env(batch_size=4)
    (
        env.from_collection(ROWS)
        .set_parallelism(1)
        .map(lambda r: {"v": r["id"] if r["id"] < 20 else f"s{r['id']}"})
        .set_parallelism(1)
        .name("parse")
        .collect()
    )
    with pytest.raises(ed.SchemaError, match="field 'v'"):
        env.execute()


def test_missing_and_extra_fields_raise_schema_error(make_env: MakeEnv) -> None:
    env = make_env()
    schema = pa.schema([("id", pa.int64()), ("y", pa.float64())])
    env.from_collection(ROWS).map(lambda r: {"id": r["id"]}, schema=schema).name("m").collect()
    with pytest.raises(ed.SchemaError, match="without field 'y'"):
        env.execute()

    env = make_env()
    extra = {"id": 1, "y": 2.0, "z": 3}
    env.from_collection(ROWS).map(lambda r: extra, schema=schema).name("m").collect()
    with pytest.raises(ed.SchemaError, match="unexpected field 'z'"):
        env.execute()


def test_map_returning_non_dict_raises_schema_error(make_env: MakeEnv) -> None:
    env = make_env()
    env.from_collection(ROWS).map(lambda r: r["id"]).name("scalar").collect()  # type: ignore[arg-type,return-value]
    with pytest.raises(ed.SchemaError, match="operator 'scalar' returned a int"):
        env.execute()


def test_map_batches_schema_change_names_both_schemas(make_env: MakeEnv) -> None:
    env = make_env(batch_size=5)

    def fn(batch: pa.RecordBatch) -> pa.RecordBatch:
        first = batch.column("id")[0].as_py()
        if first < 10:
            return pa.record_batch({"id": batch.column("id")})
        return pa.record_batch({"id": batch.column("id"), "extra": batch.column("x")})

    env.from_collection(ROWS).set_parallelism(1).map_batches(fn).set_parallelism(1).name(
        "shift"
    ).collect()
    with pytest.raises(ed.SchemaError, match="operator 'shift'") as info:
        env.execute()
    message = str(info.value)
    assert "id: int64" in message and "extra: double" in message


def test_map_batches_wrong_return_type_raises_schema_error(make_env: MakeEnv) -> None:
    env = make_env()
    env.from_collection(ROWS).map_batches(lambda b: b.to_pylist()).name("lists").collect()  # type: ignore[arg-type,return-value]
    with pytest.raises(ed.SchemaError, match="operator 'lists' returned a list"):
        env.execute()


def test_missing_column_in_expression_raises_when_building() -> None:
    env = ed.StreamEnvironment()
    stream = env.from_collection(ROWS)
    with pytest.raises(ed.EddylineError, match="nope") as info:
        stream.filter(ed.col("nope") > 1)
    assert "filter_1" in str(info.value)
    with pytest.raises(ed.EddylineError, match="nope"):
        stream.with_columns(y=ed.col("nope") + 1)
    with pytest.raises(ed.EddylineError, match="nope"):
        stream.select("id", "nope")
    with pytest.raises(ed.EddylineError, match="nope"):
        stream.key_by("id").sum("nope")
    # the failed operators left nothing behind: the job still builds and runs
    out = stream.filter(ed.col("id") > 30).collect()
    env.execute()
    assert len(out) == 9


def test_missing_column_after_python_map_raises_at_execute() -> None:
    env = ed.StreamEnvironment()
    env.from_collection(ROWS).map(lambda r: {"a": 1}).filter(ed.col("nope") > 1).collect()
    with pytest.raises(ed.EddylineError):
        env.execute()


def test_union_across_scopes_raises_scope_error() -> None:
    env = ed.StreamEnvironment()
    a = env.from_collection(ROWS)
    b = env.from_collection(ROWS)
    raised: list[str] = []

    def body(inner: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        # ``inner`` is in the loop's scope, ``a`` outside it: neither may be
        # combined with the other; the body itself stays a valid loop.
        assert inner.scope.level == 1 and a.scope.level == 0
        with pytest.raises(ed.ScopeError, match="same loop scope"):
            a.union(inner)
        raised.append("union")
        with pytest.raises(ed.ScopeError, match="same loop scope"):
            a.connect(inner)
        raised.append("connect")
        return inner.filter(ed.col("id") < 0), inner

    b.iterate(body)
    assert raised == ["union", "connect"]


def test_restart_strategy_is_accepted(make_env: MakeEnv) -> None:
    env = make_env(restart=ed.RestartStrategy.fixed_delay(attempts=2, delay="10ms"))
    out = env.from_collection(ROWS).map(lambda r: r).collect()
    result = env.execute("with-restarts")
    assert result.restarts == 0
    assert len(out) == len(ROWS)
    env = make_env(restart=ed.RestartStrategy.none())
    env.from_collection(ROWS).map(_explode).name("boom").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'boom'"):
        env.execute()


def test_execute_async_client(make_env: MakeEnv) -> None:
    env = make_env()
    out = env.from_sequence(0, 100).collect()
    client = env.execute_async("async-job")
    result = client.wait(timeout=60)
    assert client.status == "finished"
    assert result is client.wait()
    assert len(out) == 100
    assert result.metrics["wall_time_s"] >= 0
    # savepoints of an ended job (here also without checkpointing) are refused
    with pytest.raises(ed.CheckpointError):
        client.trigger_savepoint("/tmp/sp")
    with pytest.raises(ed.CheckpointError):
        client.stop_with_savepoint("/tmp/sp", drain=True)


def test_trigger_checkpoint_without_checkpointing_raises(make_env: MakeEnv) -> None:
    env = make_env()
    env.from_sequence(0, 10).collect()
    client = env.execute_async()
    client.wait(timeout=60)
    with pytest.raises(ed.CheckpointError):
        client.trigger_checkpoint()


def test_bad_parallelism_is_rejected() -> None:
    with pytest.raises(ValueError, match="parallelism"):
        ed.StreamEnvironment(0)
    env = ed.StreamEnvironment(max_parallelism=8)
    with pytest.raises(ValueError, match="max_parallelism"):
        env.from_sequence(0, 1).set_parallelism(9)


def test_duplicate_uid_is_rejected() -> None:
    env = ed.StreamEnvironment()
    env.from_sequence(0, 1).uid("src")
    with pytest.raises(ed.GraphError, match="uid"):
        env.from_sequence(0, 1).uid("src")


def test_float_into_declared_int_column_raises_schema_error(make_env: MakeEnv) -> None:
    env = make_env()
    (
        env.from_sequence(0, 4)
        .map(lambda r: {"v": r["value"] / 2}, schema={"v": "int64"})  # type: ignore[arg-type]
        .name("halve")
        .collect()
    )
    with pytest.raises(ed.SchemaError, match="operator 'halve'") as info:
        env.execute()
    message = str(info.value)
    assert "field 'v'" in message and "int64" in message
    # the offending value and its row (0.5 or 1.5, whichever subtask failed first)
    assert "in row {'v': 0.5}" in message or "in row {'v': 1.5}" in message
    assert info.value.operator == "halve"


def test_float_into_inferred_int_column_raises_schema_error() -> None:
    # One subtask, batches of two: the first output fixes v as int64, the
    # second batch returns floats.
    env = ed.StreamEnvironment(1, batch_size=2)
    (
        env.from_sequence(0, 4)
        .map(lambda r: {"v": r["value"] if r["value"] < 2 else r["value"] / 2})
        .name("halve")
        .collect()
    )
    with pytest.raises(ed.SchemaError, match=r"operator 'halve' returned field 'v' of type float"):
        env.execute()


@pytest.mark.parametrize(
    ("value", "column", "found"),
    [(300, "int8", "int (300)"), (-1, "uint32", "int (-1)"), ("7", "int64", "str ('7')")],
)
def test_value_that_does_not_fit_its_column_raises_schema_error(
    value: object, column: str, found: str
) -> None:
    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 3).map(
        lambda r: {"id": r["value"], "v": value if r["value"] == 1 else 1},
        schema={"id": "int64", "v": column},  # type: ignore[arg-type]
    ).name("fit").collect()
    with pytest.raises(ed.SchemaError, match="operator 'fit'") as info:
        env.execute()
    message = str(info.value)
    assert f"field 'v' of type {found}" in message
    assert "'id': 1" in message and column in message


def test_exact_values_and_lossless_widening_are_kept(make_env: MakeEnv) -> None:
    env = make_env()
    schema = {"i": "int64", "f": "float64", "s": "int8"}
    out = (
        env.from_sequence(0, 20)
        .map(
            lambda r: {"i": r["value"] * 2 / 2, "f": r["value"], "s": None},
            schema=schema,  # type: ignore[arg-type]
        )
        .collect()
    )
    env.execute()
    table = out.to_arrow()
    assert table.schema.field("i").type == pa.int64()
    assert sorted(table["i"].to_pylist()) == list(range(20))
    assert sorted(table["f"].to_pylist()) == [float(v) for v in range(20)]
    assert table["s"].null_count == 20


def test_flat_map_returning_a_dict_names_the_dict(make_env: MakeEnv) -> None:
    env = make_env()
    (
        env.from_collection(ROWS)
        .map(lambda r: r)
        .flat_map(lambda r: {"a": r["id"]})  # type: ignore[arg-type,return-value]
        .name("explode")
        .map(lambda r: r)
        .collect()
    )
    with pytest.raises(ed.SchemaError, match="operator 'explode'") as info:
        env.execute()
    message = str(info.value)
    assert "returned a dict ({'a': " in message
    assert "where an iterable of dicts was expected" in message
    assert "str" not in message
    assert info.value.operator == "explode"


def test_flat_map_generator_failure_names_its_stage(make_env: MakeEnv) -> None:
    def rows(r: dict[str, Any]) -> Any:
        yield r
        if r["id"] == 9:
            raise ValueError("bad generator")

    env = make_env()
    env.from_collection(ROWS).flat_map(rows).name("gen").map(lambda r: r).name("after").collect()
    with pytest.raises(ed.JobFailedError, match="operator 'gen'") as info:
        env.execute()
    assert "'id': 9" in str(info.value)


def test_a_runner_property_that_raises_is_an_error_naming_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eddyline._exec.factory import RunnerFactory

    def broken(self: RunnerFactory) -> bool:
        raise ZeroDivisionError("property failed")

    env = ed.StreamEnvironment(1)
    out = env.from_sequence(0, 10).map(lambda r: r).name("m").collect()
    monkeypatch.setattr(RunnerFactory, "redistributable", property(broken))
    with pytest.raises(ed.JobFailedError, match="operator 'm'") as info:
        env.execute()
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert not out.ready


@pytest.mark.parametrize(
    ("items", "schema", "detail"),
    [
        ([{"v": 1}, {"v": 2.5}], {"v": "int64"}, "field 'v'"),
        ([{"v": 300}], {"v": "int8"}, "field 'v'"),
        ([1.5, 2], {"value": "int64"}, "1.5"),
    ],
)
def test_from_collection_value_that_does_not_fit_its_declared_column_raises(
    items: list[Any], schema: dict[str, str], detail: str
) -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.SchemaError, match=f"from_collection.*{detail}"):
        env.from_collection(items, schema=schema)


def test_from_collection_keeps_exact_values_and_widens_losslessly() -> None:
    env = ed.StreamEnvironment(1)
    out = env.from_collection(
        [{"i": 2.0, "f": 1}, {"i": None, "f": 2.5}], schema={"i": "int64", "f": "float64"}
    ).collect()
    env.execute("exact")
    assert out.to_pylist() == [{"i": 2, "f": 1.0}, {"i": None, "f": 2.5}]
