"""Type stub of the native extension ``eddyline._core`` (hand-written; see API.md).

The plan's node specs and the job configuration (frozen dataclasses, read by
attribute) are defined in ``eddyline/_specs.py``, the builders of :class:`Expr`
in ``eddyline/expr.py`` and the Python runner protocol in
``eddyline/_exec/base.py``. ``python -m mypy.stubtest eddyline._core`` checks this
stub against the built extension.
"""

from typing import Any, Literal, TypeAlias, final

import pyarrow as pa

from eddyline._specs import JobConfigSpec, NodeSpec

__all__ = [
    "Expr",
    "JobHandle",
    "SqlAggregate",
    "SqlClosing",
    "SqlOver",
    "SqlFilter",
    "SqlJoin",
    "SqlProject",
    "SqlScan",
    "SqlUnion",
    "SqlWindow",
    "StoreDir",
    "WorkerSession",
    "__version__",
    "build_graph",
    "inspect_checkpoint",
    "list_checkpoints",
    "parquet_files",
    "plan_graph",
    "plan_sql",
    "read_keyed_state",
    "start_job",
    "worker_connect",
]

__version__: str

_JobStatus = Literal["running", "restarting", "finished", "failed", "cancelled"]

@final
class Expr:
    """A native column expression (immutable); build it with ``ed.col``,
    ``ed.lit`` and the Python operators."""

    @staticmethod
    def _col(name: str) -> Expr: ...
    @staticmethod
    def _lit(value: object) -> Expr: ...
    @staticmethod
    def _binary(op: str, left: Expr, right: Expr) -> Expr: ...
    @staticmethod
    def _unary(op: str, expr: Expr) -> Expr: ...
    @staticmethod
    def _call(name: str, args: list[Expr]) -> Expr: ...
    @staticmethod
    def _cast(expr: Expr, to: str) -> Expr: ...
    @staticmethod
    def _case(branches: list[tuple[Expr, Expr]], otherwise: Expr | None = None) -> Expr: ...
    @staticmethod
    def _parse(text: str) -> Expr: ...
    @staticmethod
    def _struct(values: list[Expr]) -> Expr: ...
    def __getitem__(self, key: str | int | Expr, /) -> Expr: ...
    def getField(self, name: str) -> Expr: ...
    def getItem(self, key: str | int | Expr) -> Expr: ...
    @property
    def _generator(self) -> tuple[str, Expr] | None: ...
    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]: ...
    @property
    def output_name(self) -> str | None:
        """The alias, or the name of a bare column; None otherwise."""
    def columns(self) -> list[str]:
        """The columns the expression reads, in first-use order."""
    def alias(self, *names: str) -> Expr:
        """The same expression, naming the column it produces (a name per
        column for a generator that makes several, ``F.posexplode``)."""
    @property
    def aliases(self) -> list[str]:
        """Every name ``alias(...)`` gave, in order."""
    def is_null(self) -> Expr: ...
    def is_not_null(self) -> Expr: ...
    def isNull(self) -> Expr: ...
    def isNotNull(self) -> Expr: ...
    def cast(self, to: str) -> Expr:
        """``CAST(self AS to)``, ``to`` a Spark type name."""
    def isin(self, *values: _Operand | list[_Operand] | tuple[_Operand, ...]) -> Expr:
        """``self = v1 OR self = v2 ...``; false for no values."""
    def between(self, lo: _Operand, hi: _Operand) -> Expr:
        """``lo <= self AND self <= hi``."""
    def like(self, pattern: _Operand) -> Expr: ...
    def rlike(self, pattern: _Operand) -> Expr: ...
    def startswith(self, other: _Operand) -> Expr: ...
    def endswith(self, other: _Operand) -> Expr: ...
    def contains(self, other: _Operand) -> Expr: ...
    def when(self, condition: _Operand, value: _Operand) -> Expr:
        """Another branch of a ``when(...)`` chain (a CASE without otherwise)."""
    def otherwise(self, value: _Operand) -> Expr:
        """The default of a ``when(...)`` chain; once, on a CASE only."""
    def __add__(self, other: _Operand, /) -> Expr: ...
    def __radd__(self, other: _Operand, /) -> Expr: ...
    def __sub__(self, other: _Operand, /) -> Expr: ...
    def __rsub__(self, other: _Operand, /) -> Expr: ...
    def __mul__(self, other: _Operand, /) -> Expr: ...
    def __rmul__(self, other: _Operand, /) -> Expr: ...
    def __truediv__(self, other: _Operand, /) -> Expr: ...
    def __rtruediv__(self, other: _Operand, /) -> Expr: ...
    def __floordiv__(self, other: _Operand, /) -> Expr: ...
    def __rfloordiv__(self, other: _Operand, /) -> Expr: ...
    def __mod__(self, other: _Operand, /) -> Expr: ...
    def __rmod__(self, other: _Operand, /) -> Expr: ...
    def __and__(self, other: _Operand, /) -> Expr: ...
    def __rand__(self, other: _Operand, /) -> Expr: ...
    def __or__(self, other: _Operand, /) -> Expr: ...
    def __ror__(self, other: _Operand, /) -> Expr: ...
    def __eq__(self, other: _Operand, /) -> Expr: ...  # type: ignore[override]
    def __ne__(self, other: _Operand, /) -> Expr: ...  # type: ignore[override]
    def __lt__(self, other: _Operand, /) -> Expr: ...
    def __le__(self, other: _Operand, /) -> Expr: ...
    def __gt__(self, other: _Operand, /) -> Expr: ...
    def __ge__(self, other: _Operand, /) -> Expr: ...
    def __invert__(self) -> Expr: ...
    def __neg__(self) -> Expr: ...
    def __pos__(self) -> Expr: ...
    def __bool__(self) -> bool: ...
    __hash__: None  # type: ignore[assignment]

_Operand: TypeAlias = Expr | bool | int | float | str | None

def build_graph(nodes: list[NodeSpec], max_parallelism: int) -> list[pa.Schema | None]:
    """Validates a graph; returns each node's output schema (None where unknown)."""

def plan_graph(
    nodes: list[NodeSpec], max_parallelism: int
) -> tuple[list[list[int]], list[str], list[pa.Schema | None]]:
    """Validates a graph; returns the chains a fresh run makes of it (each chain's node
    ids, head first), every node's uid (the spec's, or the one the core generates) and
    every node's output schema (None where unknown)."""

def start_job(
    nodes: list[NodeSpec],
    config: JobConfigSpec,
    launcher: Any = None,
    workers: int = 1,
    spec: bytes | None = None,
    bind: str = "127.0.0.1:0",
    start_timeout_s: float = 120.0,
) -> JobHandle:
    """Starts a job on background threads and returns at once.

    With ``launcher`` (an object with ``launch(attempt, workers, driver,
    secret)``, ``check()`` and ``stop()``) the subtasks run in ``workers``
    worker processes it starts, each rebuilding the job from ``spec``; this
    process listens for them on ``bind`` and keeps the coordinator.

    ``config``: ``{"name", "max_parallelism", "batch_size", "restart": None |
    {"attempts", "delay_s"}, "checkpoint": None | {"dir", "interval", "mode",
    "unaligned", "incremental", "retained", "recovery", "timeout"}, "restore_from": None |
    "latest" | path, "allow_non_restored_state": bool, "allow_duplicate_output": bool}``. Raises
    ``CheckpointError`` (before anything runs) for an unwritable checkpoint dir,
    a missing or corrupt restore path, or a restore path holding state of
    operators (by uid) the graph lacks unless ``allow_non_restored_state``.
    """

def parquet_files(
    location: str, storage_options: dict[str, str], what: str
) -> tuple[list[str], pa.Schema]:
    """The data files under ``location`` (a path or an object store URI) and
    their common schema, read from the footers by byte ranges."""

def list_checkpoints(dir: str, storage_options: dict[str, str] = ...) -> list[dict[str, Any]]:
    """The checkpoints under ``dir`` (a path or an object store URI), newest first: ``{"id", "kind",
    "trigger_time_ms", "completion_time_ms", "duration_ms", "bytes", "path",
    "valid", "error", "null_state_checkpoint"}``."""

def inspect_checkpoint(path: str, storage_options: dict[str, str] = ...) -> dict[str, Any]:
    """One checkpoint (``DIR/chk-N``): its stats, ``"alignments"`` and
    ``"operators"`` (uid, name, finished, recomputes, null_state_checkpoint,
    bytes, subtasks with bytes, key groups and file), the checkpoint's
    ``"null_state_checkpoint"`` (FLINK-4120) and ``"final"`` (taken after every
    task finished: it also stores recomputing operators' state). Raises ``CheckpointError``
    naming the file when it is corrupt."""

def read_keyed_state(path: str, uid: str, storage_options: dict[str, str] = ...) -> dict[str, Any]:
    """The keyed state of operator ``uid`` in a checkpoint, savepoint or storage
    root (its newest checkpoint): ``{"checkpoint_id", "path", "uid", "name",
    "key_columns": [(name, pa.DataType | None)], "kind": "native" | "pickled" |
    "empty", "batches": [pa.RecordBatch], "blobs": [(key_group, bytes)]}``.
    Raises ``CheckpointError`` for an unknown uid, a path that is not a
    checkpoint, or an operator without keyed state."""

@final
class StoreDir:
    """One directory of the core storage layer: a local directory or an object
    store prefix (``s3://bucket/prefix``), reached with ``storage_options`` over
    the standard environment variables. Every call blocks with the GIL
    released; a failed request is a ``StorageError`` naming the object."""

    def __new__(cls, location: str, storage_options: dict[str, str] | None = None) -> StoreDir: ...
    @property
    def location(self) -> str: ...
    def child(self, name: str) -> StoreDir: ...
    def read(self, name: str) -> bytes | None: ...
    def put(self, name: str, data: bytes) -> None:
        """Writes ``name`` whole (readers see the old content or all of ``data``)."""
    def put_if_absent(self, name: str, data: bytes) -> bool:
        """Writes ``name`` only if it does not exist (S3: ``If-None-Match: *``);
        False, with nothing written, if it did."""
    def upload(self, name: str, path: str) -> None:
        """Uploads the local file ``path`` as ``name`` (in parts when large)."""
    def copy_from(self, source: StoreDir, from_name: str, name: str) -> bool:
        """Copies ``from_name`` of ``source`` (same disk or bucket) to ``name``
        here, server-side on an object store; False when the source is missing."""
    def stat(self, name: str) -> tuple[int, int] | None:
        """``(size, modified_ms)`` of ``name``, or None."""
    def files(self) -> list[str]: ...
    def dirs(self) -> list[str]: ...
    def remove(self, name: str) -> None: ...
    def remove_all(self) -> None: ...

@final
class JobHandle:
    """A running (or ended) job."""

    @property
    def status(self) -> _JobStatus: ...
    def wait(self, timeout_s: float) -> bool:
        """Waits up to ``timeout_s`` (GIL released); True once the job has ended."""
    def metrics(self) -> dict[str, Any]: ...
    def restart_causes(self) -> list[dict[str, Any]]:
        """Every restart so far, oldest first: ``{"attempt", "time_ms", "cause"}``."""
    def result(self) -> dict[str, Any]:
        """``{"restarts", "checkpoints", "metrics"}``; raises the job's error if it failed."""
    def cancel(self) -> None: ...
    def collected(self, node_id: int) -> list[pa.RecordBatch]: ...
    def trigger_checkpoint(self) -> int:
        """Triggers a checkpoint and waits (GIL released) until it completed; its id."""
    def checkpoints(self) -> list[dict[str, Any]]:
        """The completed checkpoints so far, oldest first."""
    def failed_checkpoints(self) -> int: ...
    def checkpoint_failures(self) -> list[dict[str, Any]]:
        """The latest failed checkpoints, oldest first: ``{"id", "kind", "reason"}``."""
    def trigger_savepoint(self, path: str) -> str:
        """Takes a savepoint without stopping; waits (GIL released); its directory."""
    def stop_with_savepoint(self, path: str, drain: bool = False) -> str:
        """Stops the sources with a savepoint (``drain``: MAX watermark and finish first);
        waits until it completed and its 2PC sinks committed; its directory."""

def worker_connect(
    driver: str,
    secret: str,
    index: int,
    attempt: int | None = None,
    bind_host: str = "127.0.0.1",
    advertise_host: str | None = None,
) -> WorkerSession:
    """Connects to the driver as worker ``index`` and waits for the job."""

@final
class WorkerSession:
    """A worker connected to its driver, holding the job it was given."""

    @property
    def spec(self) -> bytes: ...
    @property
    def attempt(self) -> int: ...
    @property
    def index(self) -> int: ...
    @property
    def workers(self) -> int: ...
    def fail(self, message: str) -> None:
        """Tells the driver this worker cannot run the job."""
    def run(self, nodes: list[NodeSpec], config: JobConfigSpec) -> None:
        """Runs this worker's subtasks until the attempt ends (GIL released)."""

# ---- SQL (python/src/sql.rs; lowered by eddyline/sql.py) ---------------------------

def plan_sql(query: str, views: list[tuple[str, pa.Schema, str | None]]) -> _SqlStep:
    """Plans ``query`` over the views ``(name, schema, time column)``; raises ``SqlError``."""

class _SqlNode:
    """What every step has (stub only: the runtime classes share no base)."""

    @property
    def columns(self) -> list[str]:
        """The step's output columns, in order."""

class _SqlWindowSizes(_SqlNode):
    """A window's sizes in milliseconds, None where its kind has none: ``size_ms``
    (tumble, hop), ``slide_ms`` (hop), ``gap_ms`` (session)."""

    @property
    def size_ms(self) -> int | None: ...
    @property
    def slide_ms(self) -> int | None: ...
    @property
    def gap_ms(self) -> int | None: ...

@final
class SqlScan(_SqlNode):
    """A view's stream."""

    @property
    def view(self) -> str: ...

@final
class SqlWindow(_SqlWindowSizes):
    """A windowing table function (``kind``: ``"tumble"``, ``"hop"``, ``"session"``)."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def time_column(self) -> str: ...
    @property
    def kind(self) -> str: ...

@final
class SqlFilter(_SqlNode):
    """Rows where ``predicate`` holds."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def predicate(self) -> Expr: ...

@final
class SqlProject(_SqlNode):
    """Named expressions ``(name, Expr)``, in order."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def exprs(self) -> list[tuple[str, Expr]]: ...

@final
class SqlUnion(_SqlNode):
    """``UNION ALL`` of ``inputs``."""

    @property
    def inputs(self) -> list[_SqlStep]: ...

@final
class SqlAggregate(_SqlNode):
    """``GROUP BY keys`` with ``aggregates`` ``(function, args, column or None, name)``;
    ``window`` is Spark's ``GROUP BY window(...)``: ``(column, time column, kind,
    size_ms, slide_ms, gap_ms)``, or None."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def aggregates(self) -> list[tuple[str, list[Expr], str | None, str]]: ...
    @property
    def window(
        self,
    ) -> tuple[str, str, str, int | None, int | None, int | None] | None: ...

@final
class SqlJoin(_SqlWindowSizes):
    """A join of ``left`` and ``right`` on ``left_on[i] = right_on[i]``: ``kind`` is
    ``regular``, ``interval`` (``lower_ms <= right.ts - left.ts <= upper_ms``), ``window``
    (the windowing function ``window`` with its sizes) or ``temporal``."""

    @property
    def left(self) -> _SqlStep: ...
    @property
    def right(self) -> _SqlStep: ...
    @property
    def how(self) -> str: ...
    @property
    def left_on(self) -> list[str]: ...
    @property
    def right_on(self) -> list[str]: ...
    @property
    def kind(self) -> str: ...
    @property
    def lower_ms(self) -> int | None: ...
    @property
    def upper_ms(self) -> int | None: ...
    @property
    def window(self) -> str | None: ...
    @property
    def time_columns(self) -> tuple[str, str] | None: ...

@final
class SqlClosing(_SqlNode):
    """The rows of ``input``, each before the watermark passes its ``column`` (a join's
    rows bounded by a column of each row); a window of 1 ms on it closes their groups."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def column(self) -> str: ...

@final
class SqlOver(_SqlNode):
    """Every row of ``input`` with its frame's ``aggregates`` (as ``SqlAggregate``'s):
    ``agg(col) OVER (PARTITION BY keys ORDER BY time_column, order_by... ROWS|RANGE
    BETWEEN preceding PRECEDING AND CURRENT ROW)``: ``preceding`` rows, or with
    ``range`` milliseconds of event time; None: ``UNBOUNDED``."""

    @property
    def input(self) -> _SqlStep: ...
    @property
    def keys(self) -> list[str]: ...
    @property
    def time_column(self) -> str: ...
    @property
    def order_by(self) -> list[str]: ...
    @property
    def preceding(self) -> int | None: ...
    @property
    def range(self) -> bool: ...
    @property
    def aggregates(self) -> list[tuple[str, list[Expr], str | None, str]]: ...

_SqlStep: TypeAlias = (
    SqlScan
    | SqlWindow
    | SqlFilter
    | SqlProject
    | SqlUnion
    | SqlAggregate
    | SqlJoin
    | SqlClosing
    | SqlOver
)
