"""eddyline: a streaming dataflow engine with a Rust core and a Python DSL.

Quick start::

    import eddyline as ed

    env = ed.StreamEnvironment(parallelism=2)
    orders = env.from_collection([
        {"user": "ada", "amount": 12},
        {"user": "bob", "amount": 5},
        {"user": "ada", "amount": 7},
    ])
    big = orders.filter(ed.col("amount") > 6)            # native, runs in Rust
    tagged = big.map(lambda r: {**r, "vip": r["user"] == "ada"}).name("tag")
    totals = tagged.key_by("user").sum("amount").collect()
    env.execute("orders")
    print(totals.to_pylist())   # running sums, one updated row per key per batch

Pure-Python pieces (configuration, expressions, scopes, errors) import
without the native extension; building and running jobs needs
``eddyline._core``.
"""

from __future__ import annotations

from .broadcast_functions import (
    BroadcastContext,
    BroadcastProcessFunction,
    KeyedBroadcastContext,
    KeyedBroadcastProcessFunction,
)
from .client.job import CheckpointStats, JobClient, JobResult, OperatorCheckpointStats
from .client.runners import ProcessRunner
from .config import CheckpointConfig, RestartStrategy, parse_duration
from .connected import (
    BroadcastConnectedStreams,
    BroadcastStream,
    ConnectedStreams,
    KeyedConnectedStreams,
)
from .connectors import DeltaSink, KafkaSink, ParquetSink
from .environment import StreamEnvironment
from .errors import (
    CheckpointError,
    DashboardError,
    EddylineError,
    GraphError,
    JobCancelledError,
    JobFailedError,
    KafkaError,
    SchemaError,
    ScopeError,
    SqlError,
    StorageError,
)
from .expr import Expr, col, lit
from .keyed import KeyedStream, WindowedStream
from .loops import CoLoopFunction, LoopFunction
from .process_functions import (
    CoProcessFunction,
    ListState,
    MapState,
    ProcessContext,
    ProcessFunction,
    TimerService,
    ValueState,
)
from .scope import StreamScope
from .sinks import CollectHandle, DiscardSink, TwoPhaseCommitSink
from .sources import Source
from .state_reader import read_state
from .stream import DataStream, DataStreamSink
from .windows import OutputTag, Session, Sliding, TimeWindow, Tumbling

__version__ = "0.1.0"

__all__ = [
    "CheckpointConfig",
    "CheckpointError",
    "CheckpointStats",
    "DashboardError",
    "CoLoopFunction",
    "CollectHandle",
    "DiscardSink",
    "BroadcastConnectedStreams",
    "BroadcastContext",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CoProcessFunction",
    "KeyedBroadcastContext",
    "KeyedBroadcastProcessFunction",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "DeltaSink",
    "EddylineError",
    "Expr",
    "GraphError",
    "JobCancelledError",
    "JobClient",
    "JobFailedError",
    "JobResult",
    "KafkaError",
    "KafkaSink",
    "KeyedStream",
    "ListState",
    "LoopFunction",
    "MapState",
    "OperatorCheckpointStats",
    "OutputTag",
    "ParquetSink",
    "ProcessContext",
    "KeyedConnectedStreams",
    "ProcessFunction",
    "ProcessRunner",
    "RestartStrategy",
    "SchemaError",
    "ScopeError",
    "SqlError",
    "Session",
    "Sliding",
    "Source",
    "StreamEnvironment",
    "StorageError",
    "StreamScope",
    "TimeWindow",
    "TimerService",
    "Tumbling",
    "TwoPhaseCommitSink",
    "ValueState",
    "WindowedStream",
    "__version__",
    "col",
    "lit",
    "parse_duration",
    "read_state",
]


_SUBMODULES = frozenset({"spark", "kafka", "functions", "cli"})
"""The documented submodules ``ed.<name>`` reaches without an explicit import
(``ed.kafka.end_offsets``, ``ed.spark.SparkRunner``); none needs pyspark."""


def __getattr__(name: str) -> object:
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'eddyline' has no attribute {name!r}")
