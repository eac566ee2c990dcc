"""The entry points pyproject.toml declares and the import paths the docs
give resolve to what they name (a moved module must not break them)."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import pytest

import eddyline as ed

ROOT = Path(__file__).resolve().parents[2]


def test_console_script_names_the_command_line() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attr = scripts["eddyline"].partition(":")
    main = getattr(importlib.import_module(module), attr)
    assert main is importlib.import_module("eddyline.client.cli").main
    assert importlib.import_module("eddyline.cli").main is main  # installs made before


KEPT_PATHS = [
    ("eddyline.kafka", "eddyline.connectors.kafka", "KafkaSink KafkaSource end_offsets"),
    (
        "eddyline.spark",
        "eddyline.connectors.spark",
        "SparkRunner SparkTableSink UnorderedInputWarning from_spark_files read_state "
        "register s3a_settings",
    ),
    (
        "eddyline.functions",
        "eddyline.process_functions",
        "ProcessFunction CoProcessFunction ProcessContext TimerService ValueState ListState "
        "MapState",
    ),
]


@pytest.mark.parametrize("path, home, names", KEPT_PATHS, ids=[p for p, _, _ in KEPT_PATHS])
def test_documented_import_paths_reach_the_moved_names(path: str, home: str, names: str) -> None:
    module = importlib.import_module(path)
    for name in names.split():
        assert getattr(module, name) is getattr(importlib.import_module(home), name)
        assert name in module.__all__
    assert getattr(ed, path.rpartition(".")[2]) is module  # ed.kafka without an import


def test_connectors_stay_reexported_at_the_top() -> None:
    connectors = importlib.import_module("eddyline.connectors")
    for name in ("KafkaSink", "DeltaSink", "ParquetSink"):
        assert getattr(ed, name) is getattr(connectors, name)
        assert name in ed.__all__
