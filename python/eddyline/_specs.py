"""The node specs the DSL hands to the native layer (``eddyline._core``).

A job graph crosses the Rust/Python boundary as a list of node specs, one
typed dict per physical node, in topological order: the fields every node has
(:class:`NodeBase`) and those of its ``kind``. ``eddyline/_graph.py`` builds
them (mypy checks every key and value type against these definitions) and
``python/src/graph.rs`` reads them, one function per kind (DESIGN.md
"Layers": conversions only in the binding). The stub ``_core.pyi`` types the
graph arguments of ``build_graph``, ``start_job`` and ``WorkerSession.run``
with :data:`NodeSpec`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, NotRequired, TypeAlias, TypedDict

import pyarrow as pa

from .expr import Tree

if TYPE_CHECKING:
    from ._exec.factory import RunnerFactory
    from .sources import SourceReaderFactory

__all__ = [
    "AggName",
    "EdgeSpec",
    "NodeBase",
    "NodeSpec",
    "WindowAssignerSpec",
]

AggName: TypeAlias = Literal["sum", "count", "min", "max"]
"""A native aggregate (keyed running aggregates and windows)."""

WindowAssignerSpec: TypeAlias = (
    tuple[Literal["tumbling"], int] | tuple[Literal["sliding"], int, int]
)
"""``("tumbling", size_ms)`` or ``("sliding", size_ms, slide_ms)``."""


class EdgeSpec(TypedDict):
    """An input of a node: the producing node, how records are partitioned to
    this node's subtasks, which logical input they arrive on and the
    producer's output port (1: a co-loop head's feedback or a window's late
    records)."""

    node: int
    partition: Literal["forward", "rebalance", "broadcast", "hash"]
    keys: list[str]
    input: int
    port: int


class NodeBase(TypedDict):
    """What every node spec holds; ``scope`` is the loop path, outermost loop first.

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
    late_output: NotRequired[bool]
    side_outputs: NotRequired[list[tuple[int, pa.Schema | None]]]


class SourceArrowSpec(NodeBase):
    """``env.from_collection`` / ``from_arrow``: batches held in the spec."""

    kind: Literal["source_arrow"]
    schema: pa.Schema
    batches: list[pa.RecordBatch]


class SourceSequenceSpec(NodeBase):
    """``env.from_sequence``: the int64 column ``value`` over ``[start, end)``."""

    kind: Literal["source_sequence"]
    start: int
    end: int


class SourceParquetSpec(NodeBase):
    """``env.from_parquet`` and ``from_spark``: the files, read in order."""

    kind: Literal["source_parquet"]
    paths: list[str]
    #: Options of the object store the paths lie on (empty: local paths, or
    #: the standard environment variables).
    storage_options: dict[str, str]
    #: Read only these top-level columns (``from_parquet(columns=)`` or pushed
    #: down from the selects that read the source); absent: every column.
    columns: NotRequired[list[str]]


class SourcePythonSpec(NodeBase):
    """``env.from_source``: a user :class:`~eddyline.Source` behind its reader factory."""

    kind: Literal["source_python"]
    schema: pa.Schema
    make_reader: SourceReaderFactory
    # The offsets are restored by union (a source that discovers its splits).
    union_offsets: bool


class FilterSpec(NodeBase):
    """A native filter on a boolean expression tree (``eddyline/expr.py``)."""

    kind: Literal["filter"]
    expr: Tree


class ProjectSpec(NodeBase):
    """``with_columns`` (adds or replaces) and ``select`` (keeps only) named expressions."""

    kind: Literal["with_columns", "select"]
    columns: list[tuple[str, Tree]]


class AssignTimestampsSpec(NodeBase):
    """Event time from ``column``; watermarks trail the largest time by the bound."""

    kind: Literal["assign_timestamps"]
    column: str
    max_out_of_orderness_ms: int
    idle_timeout_ms: NotRequired[int]


class KeyedAggSpec(NodeBase):
    """A running native aggregate per key (``column`` is None for ``count``)."""

    kind: Literal["keyed_agg"]
    keys: list[str]
    agg: AggName
    column: str | None


class WindowSpec(NodeBase):
    """A native event-time window aggregate per key."""

    kind: Literal["window"]
    keys: list[str]
    time_column: str
    assigner: WindowAssignerSpec
    agg: AggName
    column: str | None


class SessionWindowSpec(NodeBase):
    """Native event-time session windows (``ed.Session(gap)``) with an aggregate per key."""

    kind: Literal["session_window"]
    keys: list[str]
    time_column: str
    gap_ms: int
    agg: AggName
    column: str | None


class JoinSpec(NodeBase):
    """A native keyed join of input 0 (left) and input 1 (right) (``stream.join``).

    ``within``: ``(lower_ms, upper_ms)`` of an interval join, None for an
    unbounded one (bounded by ``state_ttl_ms`` when given); ``time_columns``:
    the event-time columns of the left and right inputs.
    """

    kind: Literal["join"]
    left_keys: list[str]
    right_keys: list[str]
    how: Literal["inner", "left", "right", "outer"]
    within: tuple[int, int] | None
    state_ttl_ms: int | None
    time_columns: tuple[str | None, str | None]
    #: An event-time "as of" join against the right input's versions.
    temporal: NotRequired[bool]
    #: A join within windows of this size (ms), one starting every window_slide_ms.
    window_ms: NotRequired[int | None]
    window_slide_ms: NotRequired[int | None]
    #: A join within session windows of this gap (ms), formed from both inputs' rows.
    session_gap_ms: NotRequired[int | None]


class LoopHeadSpec(NodeBase):
    """The head of loop ``loop`` (FLIP-15, FLIP-16): its feedback arrives from
    node ``feedback_from`` (None while the loop is still being built)."""

    kind: Literal["loop_head"]
    loop: int
    feedback_from: int | None
    feedback_memory: int
    priority: Literal["feedback_first", "adaptive"]
    co: bool
    spill_dir: str | None
    feedback_schema: pa.Schema | None


class PassThroughSpec(NodeBase):
    """A loop's exit, or a union of same-schema inputs: no fields of its own."""

    kind: Literal["loop_exit", "union"]


class PythonSpec(NodeBase):
    """Python code (fused per-record stages, batch, keyed, window or sink
    functions) run by the runner ``factory()`` builds; hash-partitioned on
    ``keys`` when given."""

    kind: Literal["python"]
    factory: RunnerFactory
    output_schema: pa.Schema | None
    keys: list[str] | None
    #: A user's TwoPhaseCommitSink: it commits outside the process, so it is
    #: a sink to the engine (no output; counted among the external sinks).
    is_sink: bool
    #: A two-input keyed function: the key columns of each input.
    input_keys: NotRequired[list[list[str]]]


class SinkCollectSpec(NodeBase):
    """``stream.collect()``: batches kept in the driver."""

    kind: Literal["sink_collect"]


class SinkDiscardSpec(NodeBase):
    """``DiscardSink()``: batches dropped."""

    kind: Literal["sink_discard"]


class SinkParquetSpec(NodeBase):
    """``ParquetSink(dir)``: files committed with checkpoints."""

    kind: Literal["sink_parquet"]
    dir: str
    storage_options: dict[str, str]


NodeSpec: TypeAlias = (
    SourceArrowSpec
    | SourceSequenceSpec
    | SourceParquetSpec
    | SourcePythonSpec
    | FilterSpec
    | ProjectSpec
    | AssignTimestampsSpec
    | KeyedAggSpec
    | WindowSpec
    | JoinSpec
    | SessionWindowSpec
    | LoopHeadSpec
    | PassThroughSpec
    | PythonSpec
    | SinkCollectSpec
    | SinkDiscardSpec
    | SinkParquetSpec
)
"""One node of a job graph as ``eddyline._core`` reads it."""
