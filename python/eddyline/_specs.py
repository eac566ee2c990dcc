"""The typed plan: one frozen spec per operator kind, as the native layer reads it.

A DSL method builds the spec of its operator when it is called; the logical
node (``eddyline/_graph.py``) holds it unchanged, and the compiled graph
hands it to ``eddyline._core`` inside a :class:`NodeSpec` (what every
physical node has: id, name, uid, parallelism, inputs, scope). The field
names are the names ``python/src/graph.rs`` reads, by attribute, with one
derived ``FromPyObject`` per kind (DESIGN.md "Layers": conversions only in
the binding): nothing is renamed on the way. The job configuration crosses
the same way (:class:`JobConfigSpec`).

This module is the plan layer: it imports nothing of the DSL or of the
execution layer (a runner factory is an opaque callable here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

import pyarrow as pa

from .expr import Expr

__all__ = [
    "AggName",
    "AggregateSpec",
    "AssignTimestampsSpec",
    "CheckpointSpec",
    "EdgeSpec",
    "ExplodeSpec",
    "FilterSpec",
    "JobConfigSpec",
    "JoinSpec",
    "KeyedAggSpec",
    "KeyedAggsSpec",
    "KeyedSessionSpec",
    "KeyedWindowSpec",
    "LoopExitSpec",
    "LoopHeadSpec",
    "NodeSpec",
    "OperatorSpec",
    "OverAggregateSpec",
    "OverRangeSpec",
    "OverRowsSpec",
    "PythonPlanSpec",
    "PythonSpec",
    "RecordStageSpec",
    "RestartSpec",
    "SessionWindowSpec",
    "SinkCollectSpec",
    "SinkDiscardSpec",
    "SinkParquetSpec",
    "SourceArrowSpec",
    "SourceParquetSpec",
    "SourcePythonSpec",
    "SelectSpec",
    "SourceSequenceSpec",
    "UnionSpec",
    "WindowAssignerSpec",
    "SessionAggsSpec",
    "WindowAggsSpec",
    "WindowSpec",
    "WithColumnsSpec",
]

AggName: TypeAlias = Literal["sum", "count", "min", "max"]
"""A native aggregate (keyed running aggregates and windows)."""

Partition: TypeAlias = Literal["forward", "rebalance", "broadcast", "hash"]


@dataclass(frozen=True, slots=True)
class EdgeSpec:
    """An input of a node: the producing node, how records are partitioned to
    this node's subtasks, which logical input they arrive on and the
    producer's output port (1: a co-loop head's feedback or a window's late
    records)."""

    node: int
    partition: Partition
    keys: list[str]
    input: int
    port: int


# ---- sources -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceArrowSpec:
    """``env.from_collection`` / ``from_arrow``: batches held in the spec."""

    kind: ClassVar[str] = "source_arrow"
    schema: pa.Schema
    batches: list[pa.RecordBatch]


@dataclass(frozen=True, slots=True)
class SourceSequenceSpec:
    """``env.from_sequence``: the int64 column ``value`` over ``[start, end)``."""

    kind: ClassVar[str] = "source_sequence"
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class SourceParquetSpec:
    """``env.from_parquet`` and ``from_spark``: the files, read in order.

    ``storage_options``: of the object store the paths lie on (empty: local
    paths, or the standard environment variables). ``columns``: read only
    these top-level columns (``from_parquet(columns=)`` or pushed down from
    the selects that read the source); None: every column. ``num_rows``: the
    rows of local files in all (a hint for worker start-up, not read natively).
    """

    kind: ClassVar[str] = "source_parquet"
    paths: list[str]
    storage_options: dict[str, str] = field(default_factory=dict)
    columns: list[str] | None = None
    num_rows: int | None = None


@dataclass(frozen=True, slots=True)
class SourcePythonSpec:
    """``env.from_source``: a user :class:`~eddyline.Source` behind its reader
    factory; ``union_offsets``: offsets are restored by union (a source that
    discovers its splits)."""

    kind: ClassVar[str] = "source_python"
    schema: pa.Schema
    make_reader: Callable[..., Any]
    union_offsets: bool = False


# ---- native operators ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterSpec:
    """A native filter on a boolean expression; ``reads``: the columns it reads."""

    kind: ClassVar[str] = "filter"
    expr: Expr
    reads: list[str]


@dataclass(frozen=True, slots=True)
class WithColumnsSpec:
    """``with_columns``: adds or replaces named expressions; ``reads``: the
    columns they read."""

    kind: ClassVar[str] = "with_columns"
    columns: list[tuple[str, Expr]]
    reads: list[str]


@dataclass(frozen=True, slots=True)
class SelectSpec:
    """``select``: keeps only the named expressions; ``reads``: the columns
    they read."""

    kind: ClassVar[str] = "select"
    columns: list[tuple[str, Expr]]
    reads: list[str]


@dataclass(frozen=True, slots=True)
class ExplodeSpec:
    """``explode``: one row per element of ``columns[generator]`` (an array
    expression), the other columns repeated; ``outer`` keeps null and empty
    arrays as a null element; ``keep_input`` keeps the input columns
    (``stream.explode``) rather than only ``columns`` (``select``);
    ``reads``: the columns the expressions read; ``position``: for
    ``posexplode``, the column of the elements' positions."""

    kind: ClassVar[str] = "explode"
    columns: list[tuple[str, Expr]]
    generator: int
    outer: bool
    keep_input: bool
    reads: list[str]
    position: str | None = None


@dataclass(frozen=True, slots=True)
class AssignTimestampsSpec:
    """Event time from ``column``; watermarks trail the largest time by the bound."""

    kind: ClassVar[str] = "assign_timestamps"
    column: str
    max_out_of_orderness_ms: int
    idle_timeout_ms: int | None = None


@dataclass(frozen=True, slots=True)
class KeyedAggSpec:
    """A running native aggregate per key (``column`` is None for ``count``)."""

    kind: ClassVar[str] = "keyed_agg"
    keys: list[str]
    agg: AggName
    column: str | None


@dataclass(frozen=True, slots=True)
class AggregateSpec:
    """One aggregate of ``.agg(...)``: Spark's function name, its argument
    expressions and its output column."""

    function: str
    args: list[Expr]
    name: str


@dataclass(frozen=True, slots=True)
class KeyedAggsSpec:
    """``keyed.agg(...)``: running aggregates (DataFusion accumulators) per key."""

    kind: ClassVar[str] = "keyed_aggs"
    keys: list[str]
    aggregates: list[AggregateSpec]


@dataclass(frozen=True, slots=True)
class WindowAssignerSpec:
    """Tumbling (``slide_ms`` None) or sliding windows of ``size_ms``."""

    size_ms: int
    slide_ms: int | None = None


@dataclass(frozen=True, slots=True)
class KeyedWindowSpec:
    """What both kinds of ``keyed.window(Tumbling|Sliding)`` aggregate share:
    the key columns, the event-time column and the assigner. Not an
    operator of its own: :class:`WindowSpec` adds a native aggregate,
    :class:`WindowAggsSpec` the aggregates of ``.agg(...)``."""

    keys: list[str]
    time_column: str
    assigner: WindowAssignerSpec


@dataclass(frozen=True, slots=True)
class WindowAggsSpec(KeyedWindowSpec):
    """``keyed.window(Tumbling|Sliding).agg(...)``: aggregates per key and window."""

    kind: ClassVar[str] = "window_aggs"
    aggregates: list[AggregateSpec]


@dataclass(frozen=True, slots=True)
class KeyedSessionSpec:
    """What both kinds of ``keyed.window(Session(gap))`` aggregate share: the key
    columns, the event-time column and the gap. Not an operator of its own:
    :class:`SessionWindowSpec` adds a native aggregate, :class:`SessionAggsSpec`
    the aggregates of ``.agg(...)``."""

    keys: list[str]
    time_column: str
    gap_ms: int


@dataclass(frozen=True, slots=True)
class SessionAggsSpec(KeyedSessionSpec):
    """``keyed.window(Session(gap)).agg(...)``: aggregates per key and session."""

    kind: ClassVar[str] = "session_aggs"
    aggregates: list[AggregateSpec]


@dataclass(frozen=True, slots=True)
class WindowSpec(KeyedWindowSpec):
    """A native event-time window aggregate per key (``column`` is None for ``count``)."""

    kind: ClassVar[str] = "window"
    agg: AggName
    column: str | None


@dataclass(frozen=True, slots=True)
class SessionWindowSpec(KeyedSessionSpec):
    """Native event-time session windows (``ed.Session(gap)``) with an aggregate per key."""

    kind: ClassVar[str] = "session_window"
    agg: AggName
    column: str | None


@dataclass(frozen=True, slots=True)
class OverAggregateSpec:
    """One aggregate of ``keyed.over_rows(...)``: ``sum``, ``count``, ``avg``, ``min``
    or ``max`` of ``column`` (None: ``count`` of rows), output as ``name``."""

    function: str
    column: str | None
    name: str


@dataclass(frozen=True, slots=True)
class OverRowsSpec:
    """``keyed.over_rows(...)``: per key, each row with the aggregates of itself and
    the ``preceding`` rows before it in event-time order (None: every row before it;
    ``order_by`` orders the rows of one event time)."""

    kind: ClassVar[str] = "over_rows"
    keys: list[str]
    time_column: str
    order_by: list[str]
    preceding: int | None
    aggregates: list[OverAggregateSpec]


@dataclass(frozen=True, slots=True)
class OverRangeSpec:
    """``keyed.over_range(...)``: per key, each row with the aggregates of every row
    whose event time is at most ``preceding_ms`` before its own and not after it
    (None: every row up to its time)."""

    kind: ClassVar[str] = "over_range"
    keys: list[str]
    time_column: str
    preceding_ms: int | None
    aggregates: list[OverAggregateSpec]


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """A native keyed join of input 0 (left) and input 1 (right) (``stream.join``).

    ``within``: ``(lower_ms, upper_ms)`` of an interval join, None for an
    unbounded one (bounded by ``state_ttl_ms`` when given); ``time_columns``:
    the event-time columns of the left and right inputs; ``temporal``: an
    event-time "as of" join against the right input's versions;
    ``window_ms``/``window_slide_ms``: a join within windows;
    ``session_gap_ms``: within session windows formed from both inputs' rows.
    """

    kind: ClassVar[str] = "join"
    left_keys: list[str]
    right_keys: list[str]
    how: Literal["inner", "left", "right", "outer"]
    within: tuple[int, int] | None
    state_ttl_ms: int | None
    time_columns: tuple[str | None, str | None]
    temporal: bool = False
    window_ms: int | None = None
    window_slide_ms: int | None = None
    session_gap_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LoopHeadSpec:
    """The head of loop ``loop`` (FLIP-15, FLIP-16): its feedback arrives from
    node ``feedback_from`` (None while the loop is still being built; a
    logical id in the logical graph, a physical one once compiled)."""

    kind: ClassVar[str] = "loop_head"
    loop: int
    feedback_memory: int
    priority: Literal["feedback_first", "adaptive"]
    co: bool
    spill_dir: str | None
    feedback_schema: pa.Schema | None
    feedback_from: int | None = None


@dataclass(frozen=True, slots=True)
class LoopExitSpec:
    """A loop's exit: no fields of its own."""

    kind: ClassVar[str] = "loop_exit"


@dataclass(frozen=True, slots=True)
class UnionSpec:
    """A union of same-schema inputs: no fields of its own."""

    kind: ClassVar[str] = "union"


# ---- Python code -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PythonPlanSpec:
    """Python code as the DSL declares it: ``make_factory(name)`` makes the
    runner factory once the node's final name is known (at compile time).

    ``is_sink``: a user's TwoPhaseCommitSink (it commits outside the process,
    so it is a sink to the engine); ``declares_side_outputs``: a process
    function, whose side outputs are declared by asking for them;
    ``input_keys``: a two-input keyed function's key columns per input.
    """

    kind: ClassVar[str] = "python"
    make_factory: Callable[[str], Any]
    output_schema: pa.Schema | None
    is_sink: bool = False
    declares_side_outputs: bool = False
    input_keys: list[list[str]] | None = None


@dataclass(frozen=True, slots=True)
class RecordStageSpec:
    """One per-record Python stage (``map``, ``flat_map``, ``filter(fn)``),
    fused with its neighbours into one ``python`` node at compile time."""

    kind: ClassVar[str] = "record"
    stage: Literal["map", "flat_map", "filter"]
    fn: Callable[..., Any]
    output_schema: pa.Schema | None


@dataclass(frozen=True, slots=True)
class PythonSpec:
    """Python code (fused per-record stages, batch, keyed, window or sink
    functions) run by the runners ``factory`` makes; hash-partitioned on
    ``keys`` (or, for two inputs, on ``input_keys``) when given."""

    kind: ClassVar[str] = "python"
    factory: Any
    output_schema: pa.Schema | None
    keys: list[str] | None
    is_sink: bool
    input_keys: list[list[str]] | None = None


# ---- sinks -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SinkCollectSpec:
    """``stream.collect()``: batches kept in the driver."""

    kind: ClassVar[str] = "sink_collect"


@dataclass(frozen=True, slots=True)
class SinkDiscardSpec:
    """``DiscardSink()``: batches dropped."""

    kind: ClassVar[str] = "sink_discard"


@dataclass(frozen=True, slots=True)
class SinkParquetSpec:
    """``ParquetSink(dir)``: files committed with checkpoints."""

    kind: ClassVar[str] = "sink_parquet"
    dir: str
    storage_options: dict[str, str] = field(default_factory=dict)


OperatorSpec: TypeAlias = (
    SourceArrowSpec
    | SourceSequenceSpec
    | SourceParquetSpec
    | SourcePythonSpec
    | FilterSpec
    | WithColumnsSpec
    | SelectSpec
    | ExplodeSpec
    | AssignTimestampsSpec
    | KeyedAggSpec
    | KeyedAggsSpec
    | WindowAggsSpec
    | SessionAggsSpec
    | WindowSpec
    | SessionWindowSpec
    | OverRowsSpec
    | OverRangeSpec
    | JoinSpec
    | LoopHeadSpec
    | LoopExitSpec
    | UnionSpec
    | PythonPlanSpec
    | RecordStageSpec
    | PythonSpec
    | SinkCollectSpec
    | SinkDiscardSpec
    | SinkParquetSpec
)
"""The spec of one operator, as a DSL method declares it."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One physical node as ``eddyline._core`` reads it: what every node has
    and its operator's spec ``op``; ``scope`` is the loop path, outermost
    loop first.

    ``late_output``: the node (a window) emits its late records on port 1.
    ``side_outputs``: the ports of a process function's side outputs and
    their schemas (``None``: inferred from the rows).
    """

    id: int
    name: str
    uid: str | None
    parallelism: int
    inputs: list[EdgeSpec]
    scope: list[int]
    op: OperatorSpec
    late_output: bool = False
    side_outputs: list[tuple[int, pa.Schema | None]] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """The operator's kind (``"filter"``, ``"python"``, ``"sink_parquet"``, ...)."""
        return self.op.kind

    def summary(self) -> dict[str, Any]:
        """The node as plain values (what the dashboard draws): id, name, kind,
        parallelism, inputs (node, partition, keys), scope and a loop head's
        ``feedback_from``."""
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "parallelism": self.parallelism,
            "inputs": [
                {"node": e.node, "partition": e.partition, "keys": list(e.keys)}
                for e in self.inputs
            ],
            "scope": list(self.scope),
            "feedback_from": getattr(self.op, "feedback_from", None),
        }


# ---- the job configuration -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    """``CheckpointConfig`` as the native layer reads it (durations in seconds)."""

    dir: str
    interval: float
    mode: Literal["exactly_once", "at_least_once"]
    unaligned: bool
    incremental: bool
    aligned_timeout: float | None
    retained: int
    recovery: Literal["latest", "recompute"] | None
    timeout: float | None
    storage_options: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RestartSpec:
    """``RestartStrategy`` as the native layer reads it."""

    attempts: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class JobConfigSpec:
    """The configuration of one run of a job (``start_job``, ``WorkerSession.run``).

    ``run_tag`` names the run in the files its sinks write (None: the start
    time); ``restore_from`` is a checkpoint path or ``"latest"``.
    """

    name: str
    max_parallelism: int
    batch_size: int
    restart: RestartSpec | None = None
    checkpoint: CheckpointSpec | None = None
    restore_from: str | None = None
    allow_non_restored_state: bool = False
    allow_duplicate_output: bool = False
    run_tag: str | None = None
    channel_capacity: int | None = None
    # Spark's ANSI mode for native expressions (spark.sql.ansi.enabled).
    ansi: bool = False
