"""The entry point of every job: :class:`StreamEnvironment`.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment(parallelism=2, restart=ed.RestartStrategy.none())
    >>> numbers = env.from_sequence(0, 100)
    >>> numbers.schema
    value: int64 not null
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from .sinks import CollectHandle

from . import _core
from ._checks import SchemaLike, as_schema
from ._exec.output import exact_array
from ._explain import explain
from ._graph import LogicalGraph, native
from ._job import JobClient, JobResult
from ._registry import connector
from ._runner import Runner
from ._specs import (
    CheckpointSpec,
    JobConfigSpec,
    NodeSpec,
    OperatorSpec,
    RestartSpec,
    SourceArrowSpec,
    SourceParquetSpec,
    SourcePythonSpec,
    SourceSequenceSpec,
)
from ._storage import (
    checked_storage_options,
    is_object_store_uri,
    local_path,
    storage_location,
)
from .config import CheckpointConfig, Duration, RestartStrategy, parse_duration
from .errors import GraphError, SchemaError
from .scope import StreamScope
from .sources import Source, SourceReaderFactory
from .sql import plan_query
from .stream import DataStream

__all__ = ["StreamEnvironment"]

_MAX_PARALLELISM_LIMIT = 32768


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parquet_files(path: str | os.PathLike[str]) -> list[str]:
    """Lists the data files of a Parquet file or directory.

    A directory is walked recursively; names starting with ``_`` or ``.``
    (uncommitted or hidden files, and such directories) are skipped; the
    result is sorted.

    Raises:
        FileNotFoundError: If ``path`` does not exist.
    """
    root = os.fspath(path)
    if os.path.isfile(root):
        return [root]
    if not os.path.isdir(root):
        raise FileNotFoundError(f"from_parquet(): no such file or directory: {root!r}")
    found: list[str] = []
    for current, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")))
        found.extend(os.path.join(current, f) for f in files if not f.startswith(("_", ".")))
    return sorted(found)


def _parquet_footer(file: str) -> pq.FileMetaData:
    """The footer of Parquet ``file``; a file that is not Parquet (or is
    cut short) is a ``SchemaError`` naming it, with pyarrow's error as its
    cause.
    """
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(file)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SchemaError(
            f"from_parquet(): {file!r} is not a readable Parquet file ({exc}); remove it from "
            "the directory, or name it with a leading '_' or '.' to have it skipped",
            operator="from_parquet",
        ) from exc


class StreamEnvironment:
    """Builds and runs one streaming job.

    Args:
        parallelism: Default parallelism of sources and operators.
        checkpoint: Checkpointing configuration, or ``None`` to disable checkpoints.
        restart: What to do when the job fails (default: no restart).
        batch_size: Maximum rows per record batch produced by the built-in sources.
        max_parallelism: Number of key groups; the upper bound of any parallelism.
        storage_options: Options of the object store checkpoints, savepoints and
            ``restore_from`` lie on (the keys the ``object_store`` crate accepts,
            e.g. ``aws_endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``,
            ``aws_region``, ``aws_allow_http``); unset keys come from the standard
            environment variables (``AWS_ENDPOINT_URL``, ...).
        ansi: Spark's ANSI mode (``spark.sql.ansi.enabled``) for the native
            expressions of ``eddyline.functions``: a cast of a value that does
            not convert, an integer cast that overflows or a time string that
            does not parse fails the job with an ``ed.JobFailedError`` naming the
            operator and the function, instead of giving null (the default,
            Spark's non-ANSI behaviour).
    """

    def __init__(
        self,
        parallelism: int = 1,
        *,
        checkpoint: CheckpointConfig | None = None,
        restart: RestartStrategy | None = None,
        batch_size: int = 8192,
        max_parallelism: int = 128,
        storage_options: Mapping[str, str] | None = None,
        ansi: bool = False,
    ) -> None:
        if not isinstance(ansi, bool):
            raise TypeError(f"ansi must be a bool, got {ansi!r}")
        self.ansi = ansi
        if not _is_int(max_parallelism) or not 1 <= max_parallelism <= _MAX_PARALLELISM_LIMIT:
            raise ValueError(
                f"max_parallelism must be an int in [1, {_MAX_PARALLELISM_LIMIT}], "
                f"got {max_parallelism!r}"
            )
        self.max_parallelism = max_parallelism
        self._check_parallelism(parallelism, "the environment")
        if not _is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if checkpoint is not None and not isinstance(checkpoint, CheckpointConfig):
            raise TypeError(
                "checkpoint must be an ed.CheckpointConfig or None, got "
                f"{type(checkpoint).__name__}"
            )
        if restart is not None and not isinstance(restart, RestartStrategy):
            raise TypeError(
                f"restart must be an ed.RestartStrategy or None, got {type(restart).__name__}"
            )
        self.storage_options = checked_storage_options(storage_options)
        self.parallelism = parallelism
        self.checkpoint = checkpoint
        self.restart = restart
        self.batch_size = batch_size
        self._graph = LogicalGraph(lambda: self.parallelism, lambda: self.batch_size)
        # The handles of the collect sinks, by logical node id.
        self._collects: dict[int, CollectHandle] = {}
        # Called with ``restore_from`` right before a job starts (from_spark pins its input).
        self._before_run: list[Callable[[str | None], None]] = []
        self._scope = StreamScope.top()
        # The streams SQL queries read, by view name (create_temporary_view).
        self._views: dict[str, DataStream] = {}
        # The views' state_ttl for SQL joins without a time bound.
        self._view_ttls: dict[str, Duration] = {}

    def __repr__(self) -> str:
        return (
            f"StreamEnvironment(parallelism={self.parallelism}, batch_size={self.batch_size}, "
            f"max_parallelism={self.max_parallelism}, operators={len(self._graph.nodes)})"
        )

    def _check_parallelism(self, parallelism: object, what: str) -> None:
        if not _is_int(parallelism) or not 1 <= parallelism <= self.max_parallelism:  # type: ignore[operator]
            raise ValueError(
                f"parallelism of {what} must be an int in [1, {self.max_parallelism}] "
                f"(max_parallelism), got {parallelism!r}"
            )

    # ---- sources ------------------------------------------------------------

    def _source(self, op: str, spec: OperatorSpec, schema: pa.Schema) -> DataStream:
        node = self._graph.add(op, spec, [], scope=self._scope, schema=schema)
        return DataStream(self, node)

    def from_collection(
        self, items: Iterable[Any], *, schema: SchemaLike | None = None
    ) -> DataStream:
        """A bounded source of Python values.

        Args:
            items: Dicts (one column per key) or scalars (one column ``value``).
            schema: The schema; inferred from the items if omitted (required
                for an empty collection).

        Example:
            >>> import eddyline as ed
            >>> ed.StreamEnvironment().from_collection([1, 2, 3]).schema
            value: int64
        """
        rows = list(items)
        declared = as_schema(schema, "from_collection()")
        n_dicts = sum(1 for item in rows if isinstance(item, dict))
        if n_dicts not in (0, len(rows)):
            raise TypeError(
                "from_collection() needs all items to be dicts (one column per key) or all to be "
                "scalars (one column 'value'), not a mix"
            )
        if not rows and declared is None:
            raise SchemaError(
                "from_collection(): cannot infer a schema from an empty collection; pass schema="
            )
        try:
            if n_dicts and declared is not None:
                # pyarrow's typed conversion truncates 2.5 into an int64 column: convert
                # column by column and refuse any value that would change.
                for row in rows:
                    extra = set(row) - set(declared.names)
                    if extra:
                        raise SchemaError(
                            f"from_collection(): item {row!r} has fields {sorted(extra)} "
                            f"that the schema does not have:\n{declared}"
                        )
                columns = []
                for field in declared:
                    try:
                        columns.append(exact_array([r.get(field.name) for r in rows], field.type))
                    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                        raise SchemaError(
                            f"from_collection(): field {field.name!r} ({field.type}): {exc}"
                        ) from exc
                table = pa.Table.from_arrays(columns, schema=declared)
            elif n_dicts:
                table = pa.Table.from_pylist(rows)
            elif declared is not None and not rows:
                table = declared.empty_table()
            elif declared is not None:
                if len(declared) != 1:
                    raise SchemaError(
                        "from_collection(): scalar items need a schema with exactly one field, "
                        f"got\n{declared}"
                    )
                column = exact_array(rows, declared.field(0).type)
                table = pa.Table.from_arrays([column], schema=declared)
            else:
                table = pa.table({"value": pa.array(rows)})
        except SchemaError:
            raise
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise SchemaError(
                f"from_collection(): cannot convert the items to Arrow: {exc}"
            ) from exc
        return self.from_arrow(table, _op="from_collection")

    def from_arrow(
        self,
        data: pa.Table | pa.RecordBatch | Sequence[pa.RecordBatch],
        *,
        schema: SchemaLike | None = None,
        _op: str = "from_arrow",
    ) -> DataStream:
        """A bounded source of Arrow data, split into batches of at most ``batch_size`` rows.

        Args:
            data: A ``pyarrow.Table``, a ``RecordBatch`` or a list of batches
                (all of one schema).
            schema: Required only for an empty list of batches.
        """
        declared = as_schema(schema, f"{_op}()")
        if isinstance(data, pa.Table):
            table_schema, batches = data.schema, data.to_batches(max_chunksize=self.batch_size)
        elif isinstance(data, pa.RecordBatch):
            table_schema = data.schema
            batches = pa.Table.from_batches([data]).to_batches(max_chunksize=self.batch_size)
        elif isinstance(data, Sequence) and all(isinstance(b, pa.RecordBatch) for b in data):
            if not data and declared is None:
                raise SchemaError(f"{_op}(): an empty list of batches needs schema=")
            table_schema = data[0].schema if data else declared
            for index, batch in enumerate(data):
                if not batch.schema.equals(table_schema):
                    raise SchemaError(
                        f"{_op}(): batch {index} has schema\n{batch.schema}\nbut batch 0 has "
                        f"schema\n{table_schema}"
                    )
            batches = (
                pa.Table.from_batches(list(data), schema=table_schema).to_batches(
                    max_chunksize=self.batch_size
                )
                if data
                else []
            )
        else:
            raise TypeError(
                f"{_op}() needs a pyarrow.Table, a pyarrow.RecordBatch or a list of record "
                f"batches, got {type(data).__name__}"
            )
        if declared is not None and not declared.equals(table_schema):
            raise SchemaError(f"{_op}(): data has schema\n{table_schema}\nnot\n{declared}")
        assert table_schema is not None
        batches = [batch for batch in batches if batch.num_rows > 0]
        return self._source(_op, SourceArrowSpec(table_schema, batches), table_schema)

    def from_sequence(self, start: int, end: int) -> DataStream:
        """A bounded source of the int64 column ``value`` with ``start <= value < end``."""
        if not _is_int(start) or not _is_int(end):
            raise TypeError(f"from_sequence() needs int bounds, got {start!r}, {end!r}")
        if end < start:
            raise ValueError(f"from_sequence(): end ({end}) must be >= start ({start})")
        # not null, as the batches the engine emits (sequence.rs)
        schema = pa.schema([pa.field("value", pa.int64(), nullable=False)])
        return self._source("from_sequence", SourceSequenceSpec(start, end), schema)

    def from_parquet(
        self,
        path: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        storage_options: Mapping[str, str] | None = None,
    ) -> DataStream:
        """A bounded source reading a Parquet file, or every data file in a directory.

        In a directory, files and subdirectories whose names start with ``_``
        or ``.`` are ignored (like ``pyarrow.dataset``). ``path`` may be an
        object store URI (``s3://bucket/prefix``, ...): its objects are read by
        byte ranges (footer, then column chunks), reached with
        ``storage_options`` over the environment's and the standard environment
        variables.

        ``columns`` reads only those top-level columns (in the files' column
        order); the others are neither fetched nor decoded. Without it, a
        source whose rows only reach ``select`` (through filters) reads
        just the columns those use (projection pushdown, as Spark's).

        Raises:
            SchemaError: A column of ``columns`` is not in the files, the
                files' schemas differ, or a file is not Parquet (named).
        """
        location = os.fspath(path)
        if isinstance(location, str) and is_object_store_uri(location):
            options = {**self.storage_options, **checked_storage_options(storage_options)}
            found, found_schema = _core.parquet_files(location, options, "from_parquet()")
            kept = _projected(found_schema.remove_metadata(), columns)
            picked = kept.names if columns is not None else None
            spec = SourceParquetSpec(found, options, columns=picked)
            return self._source("from_parquet", spec, kept)
        files = parquet_files(local_path(path, what="from_parquet()"))
        if not files:
            raise GraphError(f"from_parquet(): no data files in {os.fspath(path)!r}")
        # Each footer is read once: its schema, and its row count, which tells
        # per-record operators downstream how long the job is (Runner.input_rows;
        # not part of the native spec).
        footers = [_parquet_footer(file) for file in files]
        schema = footers[0].schema.to_arrow_schema().remove_metadata()
        for other, footer in zip(files[1:], footers[1:], strict=True):
            other_schema = footer.schema.to_arrow_schema().remove_metadata()
            if not other_schema.equals(schema):
                raise SchemaError(
                    f"from_parquet(): {other!r} has schema\n{other_schema}\nbut {files[0]!r} has "
                    f"schema\n{schema}"
                )
        num_rows = sum(footer.num_rows for footer in footers)
        schema = _projected(schema, columns)
        spec = SourceParquetSpec(
            files, columns=schema.names if columns is not None else None, num_rows=num_rows
        )
        return self._source("from_parquet", spec, schema)

    def from_source(self, source: Source) -> DataStream:
        """A source implementing :class:`ed.Source` (splits, read from an offset, report it).

        The offsets the source reports are checkpointed; after a failure each
        split is read again from its offset in the last completed checkpoint.
        """
        if not isinstance(source, Source):
            raise TypeError(f"from_source() needs an ed.Source, got {type(source).__name__}")
        try:
            schema = source.schema()
        except Exception as exc:
            raise GraphError(
                f"from_source(): {type(source).__name__}.schema() raised {exc!r}"
            ) from exc
        if not isinstance(schema, pa.Schema):
            raise SchemaError(
                f"from_source(): {type(source).__name__}.schema() returned "
                f"{type(schema).__name__}, not a pyarrow.Schema"
            )
        op = getattr(source, "operator_name", "from_source")
        spec = SourcePythonSpec(
            schema,
            SourceReaderFactory(source, op),
            # Splits found while running are dealt by id: every restored
            # subtask sees every offset and keeps its own (sources.DynamicReader).
            union_offsets=source.discovery_interval is not None,
        )
        return self._source(op, spec, schema)

    def from_kafka(
        self,
        bootstrap_servers: str,
        topics: str | Sequence[str],
        *,
        schema: pa.Schema | None = None,
        format: str = "json",
        starting_offsets: str | Mapping[tuple[str, int], int] = "earliest",
        properties: Mapping[str, Any] | None = None,
        skip_invalid: bool = False,
        discovery_interval: str | float = "10s",
        timeout: str | float = "30s",
        stopping_offsets: Mapping[tuple[str, int], int] | None = None,
    ) -> DataStream:
        """Reads Kafka topics as a replayable source (see :mod:`eddyline.kafka`).

        Partitions are splits: their offsets are the checkpointed state (a
        restore rewinds to them exactly; consumer-group offsets are committed
        after a checkpoint completes, for monitoring only), they are spread
        over the subtasks, and each has its own watermark when
        ``assign_timestamps`` follows. Partitions added to a topic are found
        every ``discovery_interval`` and read from their beginning.

        Args:
            bootstrap_servers: ``host:port[,host:port...]``.
            topics: A topic or a list of topics (they must exist).
            schema: The fields decoded from each JSON message (``format="json"``;
                missing fields are null, others ignored).
            format: ``"json"`` (decoded natively, a batch at a time) or ``"raw"``
                (``key`` and ``value`` binary columns).
            starting_offsets: ``"earliest"``, ``"latest"`` or
                ``{(topic, partition): offset}`` (other partitions: earliest) for
                a fresh job; a restore uses the checkpoint's offsets.
            properties: librdkafka consumer properties (``group.id``, security, ...).
            skip_invalid: Skip (and count) messages that do not decode instead
                of failing the job with a ``SchemaError`` naming topic,
                partition, offset and field.
            discovery_interval: How often to look for new partitions.
            timeout: How long to wait for the broker's metadata.
            stopping_offsets: ``{(topic, partition): offset}`` makes a bounded
                read: each partition up to (not including) its offset, then the
                source ends; a partition not named reads nothing more (as Flink's
                ``OffsetsInitializer.offsets``); partitions are listed only at
                start and restore. It may be given when restoring an unbounded
                job (each partition then reads from its checkpointed offset up to
                its stopping offset) and left out when restoring a checkpoint a
                bounded one took before it ended (it reads on).

        Every row also has ``_topic``, ``_partition``, ``_offset`` and
        ``_timestamp`` (the message timestamp, milliseconds).
        """
        return self.from_source(
            connector("kafka")(
                bootstrap_servers,
                topics,
                schema=schema,
                format=format,
                starting_offsets=starting_offsets,
                properties=properties,
                skip_invalid=skip_invalid,
                discovery_interval=discovery_interval,
                timeout=timeout,
                stopping_offsets=stopping_offsets,
            )
        )

    def from_spark(self, df: Any) -> DataStream:
        """A Spark DataFrame as a replayable, checkpointed source.

        The input is pinned when the job starts (the DataFrame's Parquet files
        when it is a plain scan of them, otherwise a Parquet snapshot written
        once under the checkpoint dir) and read by the native Parquet reader;
        offsets are positions in the pinned input, so a restore replays exactly
        the same rows. Needs pyspark (``pip install "eddyline[spark]"``); see
        :func:`eddyline.spark.from_spark`.
        """
        return cast(DataStream, connector("spark")(self, df))

    # ---- execution ----------------------------------------------------------

    def _config(
        self,
        name: str,
        restore_from: str | None,
        allow_non_restored_state: bool = False,
        allow_duplicate_output: bool = False,
    ) -> JobConfigSpec:
        checkpoint = self.checkpoint
        return JobConfigSpec(
            name=name,
            max_parallelism=self.max_parallelism,
            batch_size=self.batch_size,
            restart=RestartSpec(**self.restart._to_dict()) if self.restart is not None else None,
            checkpoint=(
                CheckpointSpec(**checkpoint._to_dict(), storage_options=dict(self.storage_options))
                if checkpoint is not None
                else None
            ),
            restore_from=restore_from,
            allow_non_restored_state=allow_non_restored_state,
            allow_duplicate_output=allow_duplicate_output,
            ansi=self.ansi,
        )

    # ---- SQL ----------------------------------------------------------------

    def create_temporary_view(
        self, name: str, stream: DataStream, *, state_ttl: Duration | None = None
    ) -> None:
        """Registers ``stream`` as the view ``name`` that :meth:`sql` queries read.

        The view's columns are the stream's (its schema must be known before
        running); its event time is the stream's ``assign_timestamps`` /
        ``with_watermark`` column (docs/API.md "SQL"). ``state_ttl`` bounds how
        long a SQL join without a time bound keeps this view's rows (event time,
        against the watermark; it overrides the query's ``state_ttl``).

        Raises:
            GraphError: ``name`` is already a view, or the stream belongs to
                another environment.

        Example:
            >>> import eddyline as ed
            >>> env = ed.StreamEnvironment()
            >>> env.create_temporary_view("t", env.from_collection([{"v": 1}]))
            >>> env.sql("SELECT v + 1 AS w FROM t").schema.names
            ['w']
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"create_temporary_view() needs a non-empty name, got {name!r}")
        if not isinstance(stream, DataStream):
            raise TypeError(
                f"create_temporary_view() needs a DataStream, got {type(stream).__name__}"
            )
        if stream._env is not self:
            raise GraphError(
                f"create_temporary_view({name!r}): the stream belongs to another StreamEnvironment"
            )
        if name in self._views:
            raise GraphError(
                f"create_temporary_view({name!r}): a view of that name already exists "
                f"(stream '{self._views[name].operator_name}')"
            )
        if state_ttl is not None:
            parse_duration(state_ttl, what=f"state_ttl of view '{name}'")
            self._view_ttls[name] = state_ttl
        self._views[name] = stream

    def sql(self, query: str, *, state_ttl: Duration | None = None) -> DataStream:
        """The stream of a SQL query over the registered views.

        ``SELECT`` with the function library, ``WHERE``, ``GROUP BY`` (running:
        an updated row per key per batch; or over Flink's windowing table
        functions ``TUMBLE``/``HOP``/``SESSION``), ``HAVING``, ``UNION ALL``,
        ``WITH`` and subqueries in ``FROM``, joins (equi, interval, window and
        temporal; docs/API.md "SQL"). The result is a :class:`DataStream` like
        any other: it takes DSL operators and sinks. ``state_ttl`` bounds the
        state of the query's joins without a time bound, for views registered
        without one.

        Raises:
            SqlError: The query names an unknown table or column, or uses a
                construct a stream cannot run (a global ``ORDER BY``, ``LIMIT``,
                ...); the message names the construct.
        """
        if state_ttl is not None:
            parse_duration(state_ttl, what="state_ttl")
        return plan_query(self._views, query, state_ttl=state_ttl, view_ttls=self._view_ttls)

    def build(self) -> list[NodeSpec]:
        """Validates the job graph and returns the node specs the native layer runs.

        Raises:
            GraphError: If the job has no sink or the graph is invalid.
        """
        sinks = self._graph.sinks()
        if not sinks:
            raise GraphError(
                "the job has no sink: add stream.collect() or stream.sink_to(...) before executing"
            )
        compiled = self._graph.compile(sinks, complete=True)
        native().build_graph(compiled.nodes, self.max_parallelism)
        return compiled.nodes

    def explain(self) -> str:
        """The plan of the whole job (everything that leads to a sink), as it would run.

        The same text as :meth:`DataStream.explain`, for every sink of the
        environment (docs/API.md "Explaining a job"). It displays as the plan in a
        REPL; ``print`` it in a script.

        Raises:
            GraphError: If the job has no sink, a loop is still being built or the
                graph is invalid (as ``execute`` would).
        """
        sinks = self._graph.sinks()
        if not sinks:
            raise GraphError(
                "the job has no sink to explain: add stream.collect() or stream.sink_to(...)"
            )
        return explain(self._graph, sinks, self.max_parallelism, complete=True)

    def execute_async(
        self,
        name: str = "job",
        *,
        restore_from: str | os.PathLike[str] | None = None,
        runner: Runner | None = None,
        allow_non_restored_state: bool = False,
        allow_duplicate_output: bool = False,
        dashboard: bool | int | None = None,
        dashboard_host: str = "127.0.0.1",
    ) -> JobClient:
        """Starts the job and returns at once.

        Args:
            name: The job name.
            restore_from: A checkpoint or savepoint path, or ``"latest"``.
            runner: Where the subtasks run: ``None`` (threads of this
                process), :class:`eddyline.ProcessRunner` or
                ``eddyline.spark.SparkRunner``.
            allow_non_restored_state: Drop, knowingly, the state that
                ``restore_from`` holds for operators (by uid) this job lacks;
                by default that is a ``CheckpointError`` naming them.
            allow_duplicate_output: Restore, knowingly, a checkpoint older
                than checkpoints of its directory that already committed
                output through sinks outside this process (files, tables,
                two-phase sinks): that output is committed a second time.
                By default such a restore is a ``CheckpointError`` naming
                the later checkpoints and the sinks.
            dashboard: ``True`` serves the job's web dashboard on port 8081,
                an int on that port (``0`` picks a free one); its address is
                printed on stderr and in ``client.dashboard_url``. It stops
                when :meth:`JobClient.wait` returns. ``None`` (the default):
                none, unless the script runs under ``eddyline run --dashboard``.
            dashboard_host: The interface the dashboard listens on (only this
                machine by default).

        Returns:
            A client to wait on, cancel or checkpoint the job.
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"the job name must be a non-empty str, got {name!r}")
        if not isinstance(allow_non_restored_state, bool):
            raise TypeError(
                f"allow_non_restored_state must be a bool, got {allow_non_restored_state!r}"
            )
        if not isinstance(allow_duplicate_output, bool):
            raise TypeError(
                f"allow_duplicate_output must be a bool, got {allow_duplicate_output!r}"
            )
        if runner is not None and not callable(getattr(runner, "_start", None)):
            raise TypeError(
                "runner must be None, ed.ProcessRunner(...) or eddyline.spark.SparkRunner(...), "
                f"got {runner!r}"
            )
        port = _dashboard_port(RUN_DASHBOARD[0] if dashboard is None else dashboard)
        if not isinstance(dashboard_host, str) or not dashboard_host:
            raise TypeError(f"dashboard_host must be a non-empty str, got {dashboard_host!r}")
        restore = os.fspath(restore_from) if restore_from is not None else None
        if restore is not None and restore != "latest":
            restore = storage_location(restore, what="restore_from")
        sinks = self._graph.sinks()
        if sinks:
            for hook in self._before_run:
                hook(restore)
        if not sinks:
            raise GraphError(
                "the job has no sink: add stream.collect() or stream.sink_to(...) before executing"
            )
        compiled = self._graph.compile(sinks, complete=True)
        core = native()
        core.build_graph(compiled.nodes, self.max_parallelism)
        collects = [(self._collects[logical], index) for logical, index in compiled.collects]
        for handle, _ in collects:
            handle._batches = None
        config = replace(
            self._config(name, restore, allow_non_restored_state, allow_duplicate_output),
            run_tag=_run_tag(self.checkpoint),
        )
        if runner is None:
            handle = core.start_job(compiled.nodes, config)
        else:
            start = getattr(runner, "_start")  # noqa: B009 - checked callable above
            handle = start(core, compiled.nodes, config, _job_spec(compiled.nodes, config))
        client = JobClient(handle, name, collects)
        if port is not None:
            client._serve_dashboard([n.summary() for n in compiled.nodes], port, dashboard_host)
        return client

    def execute(
        self,
        name: str = "job",
        *,
        restore_from: str | os.PathLike[str] | None = None,
        runner: Runner | None = None,
        allow_non_restored_state: bool = False,
        allow_duplicate_output: bool = False,
        dashboard: bool | int | None = None,
        dashboard_host: str = "127.0.0.1",
    ) -> JobResult:
        """Runs the job to the end and returns its result.

        Ctrl-C cancels the job. On a terminal, a one-line progress display is
        shown on stderr while the job runs.

        Args:
            name: The job name.
            restore_from: A checkpoint or savepoint path, or ``"latest"``.
            runner: ``None`` runs in-process; :class:`eddyline.ProcessRunner`
                in local worker processes; ``eddyline.spark.SparkRunner`` as
                Spark tasks.
            allow_non_restored_state: Drop, knowingly, the state that
                ``restore_from`` holds for operators this job lacks.
            allow_duplicate_output: Restore, knowingly, a checkpoint older
                than checkpoints that already committed output through
                external sinks (see :meth:`execute_async`).
            dashboard: ``True`` (port 8081) or a port (``0``: a free one)
                serves the web dashboard while the job runs (see
                :meth:`execute_async`).
            dashboard_host: The interface the dashboard listens on.

        Raises:
            JobFailedError: The job failed and its restart strategy is exhausted.
            CheckpointError: ``restore_from`` is missing, corrupt or holds state
                of operators this job lacks (unless ``allow_non_restored_state``),
                or is older than checkpoints that committed output through
                external sinks (unless ``allow_duplicate_output``).
        """
        return self.execute_async(
            name,
            restore_from=restore_from,
            runner=runner,
            allow_non_restored_state=allow_non_restored_state,
            allow_duplicate_output=allow_duplicate_output,
            dashboard=dashboard,
            dashboard_host=dashboard_host,
        ).wait()


RUN_DASHBOARD: list[bool | int | None] = [None]
"""The ``dashboard`` of jobs that do not say (set by ``eddyline run --dashboard``)."""


def _dashboard_port(dashboard: object) -> int | None:
    """The port ``dashboard=`` asks for; ``None`` for no dashboard.

    Example:
        >>> _dashboard_port(True), _dashboard_port(False), _dashboard_port(0)
        (8081, None, 0)
    """
    if dashboard is True:
        return 8081
    if dashboard is False or dashboard is None:
        return None
    if isinstance(dashboard, int) and 0 <= dashboard <= 65535:
        return dashboard
    raise TypeError(f"dashboard must be a bool or a port number 0-65535, got {dashboard!r}")


def _compact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A copy of ``batch`` holding only its own rows.

    ``from_arrow`` keeps zero-copy slices of the user's table; a pickled
    slice carries the whole table's buffers (a 400k-row table cut into
    8,192-row batches pickled to 49 copies of the table). Arrow IPC writes a
    slice's rows only.
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return pa.ipc.open_stream(sink.getvalue()).read_next_batch()


def _job_spec(nodes: list[NodeSpec], config: JobConfigSpec) -> bytes:
    """The job as worker processes receive it (node specs and config, pickled)."""
    import cloudpickle

    nodes = [
        replace(node, op=replace(node.op, batches=[_compact(b) for b in node.op.batches]))
        if isinstance(node.op, SourceArrowSpec)
        else node
        for node in nodes
    ]
    try:
        return bytes(cloudpickle.dumps((nodes, config)))
    except Exception as exc:
        names = []
        for node in nodes:
            try:
                cloudpickle.dumps(node)
            except Exception:
                names.append(node.name)
        where = f" (operator(s) {', '.join(repr(n) for n in names)})" if names else ""
        raise GraphError(
            f"the job cannot be sent to worker processes{where}: {type(exc).__name__}: {exc}; "
            "functions and sinks must be picklable by cloudpickle",
            operator=names[0] if names else None,
        ) from exc


def _run_tag(checkpoint: CheckpointConfig | None) -> str:
    """The tag of one run of a job, in the names of the files its sinks write.

    ``<job>r<time>`` with ``<job>`` naming the checkpoint dir (the job's
    identity across runs), so a sink can tell the files of this job's killed
    runs from those of other jobs writing into the same directory (see
    ``core/src/sink/parquet.rs``); without a checkpoint dir, ``<time>``. Both
    parts are hex digits, so the first ``r`` ends ``<job>``.
    """
    run = f"{time.time_ns() // 1_000_000:x}"
    if checkpoint is None:
        return run
    job = hashlib.sha256(os.fspath(checkpoint.dir).encode()).hexdigest()[:8]
    return f"{job}r{run}"


def _projected(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """``from_parquet``'s schema with only ``columns`` (in the files' order); the
    whole schema when ``columns`` is None."""
    if columns is None:
        return schema
    if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
        raise TypeError(f"from_parquet(columns=...) needs a list of column names, got {columns!r}")
    missing = [c for c in columns if c not in schema.names]
    if missing:
        raise SchemaError(
            f"operator 'from_parquet': the Parquet files have no column {missing[0]!r} "
            f"(they have {schema.names})",
            operator="from_parquet",
        )
    if not columns:
        raise GraphError("from_parquet(columns=[]): name at least one column to read")
    kept = [name for name in schema.names if name in set(columns)]
    return pa.schema([schema.field(name) for name in kept])
