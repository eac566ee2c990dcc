"""from_spark's check for a bare Parquet scan lets real failures through (no Spark needed).

It falls back to a snapshot (``None``) only when this Spark's plan classes lack
a method or a file is not local; anything else is raised, not swallowed.
"""

from __future__ import annotations

from typing import Any

import pytest

py4j_protocol = pytest.importorskip(
    "py4j.protocol", reason="Spark errors are py4j errors (pyspark, test extra)"
)

from eddyline.connectors.spark.source import _plain_parquet_files  # noqa: E402


class _Named:
    def __init__(self, name: str, **attrs: Any) -> None:
        self._name = name
        self.__dict__.update(attrs)

    def getClass(self) -> Any:  # the JVM method name
        name = self._name
        return type("Cls", (), {"getSimpleName": staticmethod(lambda: name)})()


class _Length:
    def length(self) -> int:
        return 0


def _df(plan: Any, files: list[str]) -> Any:
    execution = type("QueryExecution", (), {"optimizedPlan": lambda self: plan()})()
    jdf = type("Jdf", (), {"queryExecution": lambda self: execution})()
    return type("DF", (), {"_jdf": jdf, "inputFiles": lambda self: files, "columns": []})()


def _parquet_plan() -> Any:
    relation = _Named(
        "HadoopFsRelation",
        fileFormat=lambda: _Named("ParquetFileFormat"),
        partitionSchema=lambda: _Length(),
    )
    return _Named("LogicalRelation", relation=lambda: relation)


def test_a_real_failure_is_raised() -> None:
    def broken() -> Any:
        raise RuntimeError("the plan cannot be built")

    with pytest.raises(RuntimeError, match="the plan cannot be built"):
        _plain_parquet_files(_df(broken, []))


def test_a_network_error_is_raised() -> None:
    def gateway_gone() -> Any:
        raise py4j_protocol.Py4JNetworkError("gateway gone")

    with pytest.raises(py4j_protocol.Py4JNetworkError):
        _plain_parquet_files(_df(gateway_gone, []))


def test_a_missing_plan_method_falls_back_to_a_snapshot() -> None:
    def old_spark() -> Any:
        raise py4j_protocol.Py4JError("method relation([]) does not exist")

    assert _plain_parquet_files(_df(old_spark, [])) is None


def test_remote_files_fall_back_to_a_snapshot() -> None:
    assert _plain_parquet_files(_df(_parquet_plan, ["s3://bucket/part-0.parquet"])) is None
