"""The differential tests share the Spark suite's one local[2] session."""

from __future__ import annotations

import os

import pytest

from spark.conftest import spark  # noqa: F401  (the session fixture, reused)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.join(os.path.dirname(__file__), "test_functions_spark")
    for item in items:
        path = str(item.fspath)
        # The differential tests: test_functions_spark*, test_time_spark,
        # test_json_spark.
        if path.startswith(here) or path.endswith("_spark.py"):
            item.add_marker(pytest.mark.spark)
