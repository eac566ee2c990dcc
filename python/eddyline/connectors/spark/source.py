"""Reading Spark data into eddyline: ``env.from_spark(df)`` and ``from_spark_files(path)``.

``from_spark(df)`` pins its input when the job starts, so that every replay
reads exactly the same rows:

* a DataFrame that is a plain scan of Parquet files (``df.inputFiles()``, no
  filter, projection or partition columns) is pinned as its sorted file list;
* any other DataFrame is written once, by Spark, as a Parquet snapshot under
  the checkpoint dir (a temporary dir when checkpointing is off): one file
  per partition of the DataFrame, its rows in the partition's order, and
  every input file of a scan read as a partition of its own (Spark would
  pack small files into one). Each snapshot file is one event-time split, so
  a filtered scan keeps the splits ``from_parquet`` has on the same files
  (DESIGN.md "Event time per split").

The pin is recorded in ``<checkpoint dir>/_eddyline_spark_sources/<uid>/pin.json``
(by the source's uid, or its name when it has none); a job restored from a
checkpoint (``restore_from=``) reads the recorded pin instead of pinning
again. With the checkpoint dir on S3 (``s3://bucket/chk``) the snapshot is
written there by Spark (as ``s3a://``, through Hadoop's S3A filesystem, see
:mod:`eddyline.connectors.spark._s3a`) and ``pin.json`` is one object written by eddyline's
storage layer (``storage_options`` of the environment over the ``AWS_*``
environment variables); the source then reads the pinned objects with byte
ranges. With checkpoints on S3 every DataFrame is pinned as a snapshot there
(the job's hosts may not reach its input files). The pinned files are read by
the native Parquet source: batches go from the file to Rust without passing
through Python, and the checkpointed offsets are (file, row) positions in the
pinned input.

``from_spark_files(path)`` tails the ``_spark_metadata`` log of a Spark
streaming file sink: it only ever sees files of committed micro-batches.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import uuid
import warnings
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..._graph import native
from ..._specs import SourceParquetSpec
from ..._storage import is_object_store_uri
from ...errors import CheckpointError, GraphError, SchemaError
from ...sources import Source
from ._filelog import SinkLog, eddyline_uri, fsync_dir, local_path
from ._lazy import require_pyspark
from ._s3a import missing_s3a, spark_location

if TYPE_CHECKING:
    from ..._graph import LogicalNode
    from ...environment import StreamEnvironment
    from ...stream import DataStream

__all__ = ["SparkFilesSource", "UnorderedInputWarning", "from_spark", "from_spark_files"]

PINS_DIR = "_eddyline_spark_sources"


class UnorderedInputWarning(UserWarning):
    """A ``from_spark`` DataFrame whose partitions are not in its input's order feeds event time.

    Issued when the job starts (before it runs), naming the source and the
    Spark operator (a shuffle, a coalesce, ...) that reorders the rows: the
    watermark of a split follows the largest event time it has read, so rows
    that a shuffle put after later ones are late. Sort the DataFrame by the
    event-time column (``orderBy`` or ``sortWithinPartitions``) to keep them.
    """


_TEMP_DIRS: list[str] = []


@atexit.register
def _remove_temp_dirs() -> None:
    for path in _TEMP_DIRS:
        shutil.rmtree(path, ignore_errors=True)


def _temp_dir() -> str:
    path = tempfile.mkdtemp(prefix="eddyline-spark-")
    _TEMP_DIRS.append(path)
    return path


def _safe(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", key)


def _data_files(directory: str) -> list[str]:
    return sorted(
        os.path.join(directory, name)
        for name in os.listdir(directory)
        if not name.startswith(("_", ".")) and name.endswith(".parquet")
    )


def _plain_parquet_files(df: Any) -> list[str] | None:
    """The sorted local files of a DataFrame that is a bare Parquet scan, else ``None``.

    ``None`` (read a snapshot instead) also when this Spark's plan classes do
    not answer as expected or a file is not local; any other failure (the JVM
    gone, the DataFrame unreadable) is raised.
    """
    from py4j.protocol import Py4JError, Py4JJavaError, Py4JNetworkError

    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # Spark Connect: no plan to inspect; snapshot instead
        return None
    try:
        plan = jdf.queryExecution().optimizedPlan()
        if plan.getClass().getSimpleName() != "LogicalRelation":
            return None
        relation = plan.relation()
        if relation.getClass().getSimpleName() != "HadoopFsRelation":
            return None
        if relation.fileFormat().getClass().getSimpleName() != "ParquetFileFormat":
            return None
        if relation.partitionSchema().length() > 0:
            return None
    except (Py4JJavaError, Py4JNetworkError):
        raise
    except Py4JError:  # a method this Spark version's plan classes lack
        return None
    uris = list(df.inputFiles())
    try:
        files = sorted(local_path(u) for u in uris)
    except ValueError:  # not on the local filesystem
        return None
    if not files:
        return None
    try:
        schemas = {pq.read_schema(f).remove_metadata() for f in files[:1]}
        first = schemas.pop()
        if [n.lower() for n in first.names] != [c.lower() for c in df.columns]:
            return None
        for other in files[1:]:
            if not pq.read_schema(other).remove_metadata().equals(first):
                return None
    except (OSError, pa.ArrowException):
        return None
    return files


# Spark packs small input files into one partition (and cuts large ones into
# several) by these settings; a snapshot file written from such a partition
# would run through event time once per packed file. An open cost as large as
# the largest partition gives every input file a partition of its own, whole
# (1 TiB: larger files are still cut; the sum over many files stays far from
# overflowing Spark's long arithmetic).
_FILE_PER_PARTITION = {
    "spark.sql.files.maxPartitionBytes": str(1 << 40),
    "spark.sql.files.openCostInBytes": str(1 << 40),
}
# Caps the partition count by merging partitions again (Spark 3.5+); unset while writing.
_MAX_PARTITION_NUM = "spark.sql.files.maxPartitionNum"
_CONF_LOCK = threading.Lock()


def _write_split_per_file(df: Any, target: str) -> None:
    """Writes ``df`` as Parquet under ``target``: one file per partition, rows in order.

    Spark writes each partition of the DataFrame as its own part file (named by
    the partition's index, so sorted names are partition order) with its rows
    in the partition's order; ``maxRecordsPerFile=0`` keeps a partition in one
    file. For the time of the write, the session reads every input file as a
    partition of its own (see ``_FILE_PER_PARTITION``), so each input file of a
    scan under narrow operators (filter, projection, union) becomes one
    snapshot file: one event-time split, as ``from_parquet`` reads the same
    files (DESIGN.md "Event time per split"). The settings are the session's:
    a query another thread runs on it meanwhile plans its scans with them too.
    """
    conf = df.sparkSession.conf
    with _CONF_LOCK:
        saved = {key: conf.get(key, None) for key in (*_FILE_PER_PARTITION, _MAX_PARTITION_NUM)}
        try:
            for key, value in _FILE_PER_PARTITION.items():
                conf.set(key, value)
            if saved[_MAX_PARTITION_NUM] is not None:
                conf.unset(_MAX_PARTITION_NUM)
            df.write.mode("errorifexists").option("maxRecordsPerFile", 0).parquet(target)
        finally:
            for key, value in saved.items():
                if value is None:
                    conf.unset(key)
                else:
                    conf.set(key, value)


# Physical operators whose output partitions hold rows in an order of their own
# (hash, key or arrival order), or several input partitions one after another.
_REORDERING = {
    "ShuffleExchangeExec": "it shuffles",
    "CoalesceExec": "it concatenates partitions",
    "GlobalLimitExec": "it concatenates partitions",
    "CollectLimitExec": "it concatenates partitions",
    "SortMergeJoinExec": "a join orders by its key",
    "ShuffledHashJoinExec": "a join orders by its key",
    "CartesianProductExec": "a join orders by its key",
    "BroadcastNestedLoopJoinExec": "a join orders by its key",
    "HashAggregateExec": "an aggregation orders by its key",
    "SortAggregateExec": "an aggregation orders by its key",
    "ObjectHashAggregateExec": "an aggregation orders by its key",
    "WindowExec": "a window function orders by its partition key",
}


def _reordering(plan: Any) -> str | None:
    """The operator of a physical plan that leaves its partitions out of input order, else None.

    Walks down from the root to the first operator that fixes or loses the
    order of the rows in a partition: a sort (``orderBy``,
    ``sortWithinPartitions``) fixes it; a shuffle, a join, an aggregation or a
    coalesce loses it. Narrow operators (filter, projection, union, Python
    UDFs) keep their input's order; a broadcast join keeps its streamed side's.
    """
    name = plan.getClass().getSimpleName()
    if name == "AdaptiveSparkPlanExec":
        return _reordering(plan.inputPlan())
    if name in ("SortExec", "TakeOrderedAndProjectExec"):
        return None
    if name in _REORDERING:
        return f"{plan.simpleString(10)} ({_REORDERING[name]})"
    if name == "BroadcastHashJoinExec":
        return _reordering(plan.streamedPlan())
    if name == "InMemoryTableScanExec":
        cached = plan.relation().cachedPlan()
        found = _reordering(cached)
        if found is None and "FileSourceScanExec" in _plan_classes(cached):
            return (
                f"{plan.nodeName()} (a cached file scan: its partitions were cut when it was "
                "cached and may each hold several input files)"
            )
        return found
    children = plan.children()
    for i in range(children.size()):
        found = _reordering(children.apply(i))
        if found is not None:
            return found
    return None


def _plan_classes(plan: Any) -> set[str]:
    names = {plan.getClass().getSimpleName()}
    children = plan.children()
    for i in range(children.size()):
        names |= _plan_classes(children.apply(i))
    return names


def _warn_if_unordered(df: Any, operator: str, column: str) -> None:
    """Warns (:class:`UnorderedInputWarning`) when ``df``'s partitions are out of input order."""
    from py4j.protocol import Py4JError

    jdf = getattr(df, "_jdf", None)
    if jdf is None:  # Spark Connect: no plan to inspect
        return
    try:
        found = _reordering(jdf.queryExecution().executedPlan())
    except Py4JError:  # a plan class this Spark version shapes otherwise: no verdict
        return
    if found is None:
        return
    warnings.warn(
        f"from_spark source '{operator}': the DataFrame's partitions are not in its input's "
        f"order, because of {found}; each partition is one event-time split, so rows that come "
        f"after later ones by more than max_out_of_orderness are late for the event time on "
        f"'{column}'. Sort it first: df.sortWithinPartitions('{column}') (or orderBy)",
        UnorderedInputWarning,
        stacklevel=_caller_level(),
    )


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside eddyline (the user's ``execute`` call)."""
    # the directory of the top-level package, wherever in it this module sits
    top = sys.modules[__name__.partition(".")[0]].__file__ or __file__
    package = os.path.dirname(os.path.abspath(top)) + os.sep
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _event_time_column(env: StreamEnvironment, node: LogicalNode) -> str | None:
    """The column of the first ``assign_timestamps`` downstream of ``node``, else None."""
    nodes = env._graph.nodes
    consumers: dict[int, list[int]] = {}
    for other in nodes:
        for edge in other.inputs:
            consumers.setdefault(edge.node, []).append(other.id)
    todo, seen = [node.id], {node.id}
    while todo:
        for nid in consumers.get(todo.pop(), []):
            if nid in seen:
                continue
            seen.add(nid)
            if nodes[nid].kind == "assign_timestamps":
                return str(nodes[nid].spec.column)  # type: ignore[union-attr]
            todo.append(nid)
    return None


def _write_snapshot(df: Any, directory: str, operator: str) -> list[str]:
    try:
        _spark_writes_snapshot(df, directory, directory, operator)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    success = os.path.exists(os.path.join(directory, "_SUCCESS"))
    return _snapshot_files(success, _data_files(directory), directory, operator)


def _spark_writes_snapshot(df: Any, target: str, directory: str, operator: str) -> None:
    """Spark writes ``df`` to ``target`` (``directory`` as Spark names it), one
    file per split; a failure is the source's ``GraphError`` with its cause."""
    try:
        _write_split_per_file(df, target)
    except Exception as exc:
        s3a = missing_s3a(exc, directory, f"operator '{operator}'")
        if s3a is not None:
            raise s3a from exc
        raise GraphError(
            f"operator '{operator}': cannot read the Spark DataFrame (writing its snapshot to "
            f"{target!r} failed): {_first_line(exc)}",
            operator=operator,
        ) from exc


def _snapshot_files(success: bool, files: list[str], shown: str, operator: str) -> list[str]:
    """``files``, the snapshot's data files, once Spark marked it complete."""
    if not success:
        raise GraphError(
            f"operator '{operator}': Spark wrote no _SUCCESS marker into the snapshot {shown!r}",
            operator=operator,
        )
    if not files:
        raise GraphError(
            f"operator '{operator}': the snapshot {shown!r} holds no Parquet file",
            operator=operator,
        )
    return files


def _write_object_snapshot(
    df: Any, directory: str, operator: str, options: dict[str, str]
) -> list[str]:
    """The snapshot written by Spark under ``directory`` (an ``s3://`` URI; Spark
    writes ``s3a://``): its data objects as ``s3://`` URIs."""
    from ..._core import StoreDir

    target = spark_location(directory, what=f"operator '{operator}'")
    assert target is not None
    _spark_writes_snapshot(df, target, directory, operator)
    names = StoreDir(directory, options or None).files()
    files = sorted(
        f"{directory}/{n}" for n in names if not n.startswith(("_", ".")) and n.endswith(".parquet")
    )
    return _snapshot_files("_SUCCESS" in names, files, target, operator)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _write_json(path: str, data: dict[str, Any]) -> None:
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def _has_completed_checkpoint(directory: str, options: dict[str, str] | None = None) -> bool:
    return any(c.get("valid") for c in native().list_checkpoints(directory, options or {}))


def _check_input_files(df: Any, operator: str) -> None:
    """Fails early when a file the DataFrame scans is gone (Spark would fail at run time)."""
    try:
        uris = list(df.inputFiles())
    except Exception as exc:
        raise GraphError(
            f"operator '{operator}': cannot read the Spark DataFrame: {_first_line(exc)}",
            operator=operator,
        ) from exc
    for uri in uris:
        try:
            path = local_path(uri)
        except ValueError:
            continue  # not on the local filesystem: Spark reads it
        if not os.path.exists(path):
            raise GraphError(
                f"operator '{operator}': cannot read the Spark DataFrame: its input file "
                f"{path!r} does not exist",
                operator=operator,
            )


class _SparkPin:
    """Pins the input of one ``from_spark`` source when its job starts."""

    def __init__(
        self, env: StreamEnvironment, stream: DataStream, df: Any, files: list[str] | None
    ) -> None:
        self.env = env
        self.stream = stream
        self.df = df
        self.files = files

    @property
    def node(self) -> LogicalNode:
        """The source's node as the job starts (named and given its uid by then)."""
        return self.stream._node

    def _pin(self, **changes: Any) -> None:
        """Replaces fields of the source's spec (its files, its storage options)."""
        self.env._graph.update_spec(self.node.id, **changes)

    def _snapshot(self, directory: str) -> list[str]:
        return _write_snapshot(self.df, directory, self.node.display_name)

    def resolve(self, restore_from: str | None) -> None:
        node = self.node
        operator = node.display_name
        column = _event_time_column(self.env, node)
        if self.files is None and column is not None:
            _warn_if_unordered(self.df, operator, column)
        checkpoint = self.env.checkpoint
        if checkpoint is None:
            paths = self.files or self._snapshot(os.path.join(_temp_dir(), "snapshot"))
            self._pin(paths=paths)
            return
        if is_object_store_uri(checkpoint.dir):
            self._resolve_on_object_store(restore_from)
            return
        base = os.path.join(checkpoint.dir, PINS_DIR, _safe(node.uid or operator))
        manifest = os.path.join(base, "pin.json")
        if restore_from is not None:
            if os.path.exists(manifest):
                with open(manifest, encoding="utf-8") as fh:
                    pinned = json.load(fh)
                paths = list(pinned["files"])
                _check_pinned_input(operator, manifest, paths, os.path.exists)
                self._pin(paths=paths)
                return
            fresh = restore_from == "latest" and not _has_completed_checkpoint(checkpoint.dir)
            if not fresh:
                raise _no_pinned_input(operator, manifest, restore_from)
        os.makedirs(base, exist_ok=True)
        if self.files is not None:
            paths, snapshot = self.files, None
        else:
            snapshot = os.path.join(base, f"snapshot-{uuid.uuid4().hex[:12]}")
            paths = self._snapshot(snapshot)
        _write_json(manifest, {"operator": operator, "files": paths, "snapshot": snapshot})
        self._pin(paths=paths)

    def _resolve_on_object_store(self, restore_from: str | None) -> None:
        """:meth:`resolve` with the checkpoint dir on an object store (S3)."""
        from ..._core import StoreDir

        node, operator = self.node, self.node.display_name
        checkpoint = self.env.checkpoint
        assert checkpoint is not None
        options = dict(self.env.storage_options)
        chk = checkpoint.dir.rstrip("/")
        spark_location(chk, what=f"from_spark source '{operator}'")  # S3 only
        base = f"{eddyline_uri(chk)}/{PINS_DIR}/{_safe(node.uid or operator)}"
        pins = StoreDir(base, options or None)
        manifest = f"{base}/pin.json"
        self._pin(storage_options=options)
        if restore_from is not None:
            recorded = pins.read("pin.json")
            if recorded is not None:
                paths = list(json.loads(recorded)["files"])

                def exists(path: str) -> bool:
                    folder, _, name = path.rpartition("/")
                    return StoreDir(folder, options or None).stat(name) is not None

                _check_pinned_input(operator, manifest, paths, exists)
                self._pin(paths=paths)
                return
            fresh = restore_from == "latest" and not _has_completed_checkpoint(chk, options)
            if not fresh:
                raise _no_pinned_input(operator, manifest, restore_from)
        # Local input files are only on this host: snapshot them onto the store too.
        snapshot = f"{base}/snapshot-{uuid.uuid4().hex[:12]}"
        paths = _write_object_snapshot(self.df, snapshot, operator, options)
        body = {"operator": operator, "files": paths, "snapshot": snapshot}
        pins.put("pin.json", json.dumps(body, indent=1).encode())
        self._pin(paths=paths)


def _check_pinned_input(
    operator: str, manifest: str, paths: list[str], exists: Callable[[str], bool]
) -> None:
    """Raises if a pinned input file recorded in ``manifest`` is gone."""
    for path in paths:
        if not exists(path):
            raise CheckpointError(
                f"from_spark source '{operator}' cannot replay its pinned input: "
                f"{path!r} (recorded in {manifest!r}) is gone",
                operator=operator,
            )


def _no_pinned_input(operator: str, manifest: str, restore_from: str) -> CheckpointError:
    """The error of a restore that finds no pinned input recorded for the source."""
    return CheckpointError(
        f"from_spark source '{operator}' has no pinned input recorded at "
        f"{manifest!r}, so restoring from {restore_from!r} could not replay the same "
        "rows; give the source the uid it had (.uid(...)) and the same checkpoint dir",
        operator=operator,
    )


def from_spark(env: StreamEnvironment, df: Any) -> DataStream:
    """Implements :meth:`StreamEnvironment.from_spark` (see the module docs)."""
    require_pyspark("env.from_spark()")
    from pyspark.sql import DataFrame

    if not isinstance(df, DataFrame):
        raise TypeError(f"from_spark() needs a pyspark.sql.DataFrame, got {type(df).__name__}")
    operator = "from_spark"
    try:
        df.schema  # noqa: B018 - analyses the plan: an unreadable DataFrame fails here
    except Exception as exc:
        raise GraphError(
            f"operator '{operator}': cannot read the Spark DataFrame: {_first_line(exc)}",
            operator=operator,
        ) from exc
    _check_input_files(df, operator)
    files = _plain_parquet_files(df)
    if files is not None:
        probe = files
    else:
        # The schema the snapshot will have, from an empty snapshot written the same way.
        probe = _write_snapshot(df.limit(0), os.path.join(_temp_dir(), "schema"), operator)
    schema = pq.read_schema(probe[0]).remove_metadata()
    stream = env._source(operator, SourceParquetSpec(probe), schema)
    env._before_run.append(_SparkPin(env, stream, df, files).resolve)
    return stream


class SparkFilesSource(Source):
    """Tails the ``_spark_metadata`` log of a Spark streaming file sink (Parquet).

    Unbounded unless ``stop_after_batch`` is given. The offset is (log batch,
    file in that batch, row in that file); only files of committed batches are
    ever read.
    """

    operator_name = "from_spark_files"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        schema: pa.Schema | None = None,
        stop_after_batch: int | None = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.stop_after_batch = stop_after_batch
        self._schema = schema
        self._files: tuple[int, list[str]] | None = None
        self._open: tuple[tuple[int, int, int], Any] | None = None
        log = SinkLog(self.path)
        if schema is None:
            latest = log.latest()
            if latest < 0:
                raise GraphError(
                    f"from_spark_files(): {self.path!r} has no committed batch in its "
                    "_spark_metadata log yet; pass schema= to start before the first one",
                    operator=self.operator_name,
                )
            files = log.files_upto(latest)
            if not files:
                raise GraphError(
                    f"from_spark_files(): the log in {self.path!r} lists no file; pass schema=",
                    operator=self.operator_name,
                )
            self._schema = pq.read_schema(files[0]).remove_metadata()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_files"] = None
        state["_open"] = None
        return state

    def schema(self) -> pa.Schema:
        assert self._schema is not None
        return self._schema

    def splits(self) -> list[Any]:
        return [self.path]

    def initial_offset(self, split: Any) -> tuple[int, int, int]:
        return (0, 0, 0)

    def _batch_files(self, batch: int) -> list[str]:
        if self._files is None or self._files[0] != batch:
            self._files = (batch, SinkLog(self.path).new_files(batch))
        return self._files[1]

    def read(
        self, split: Any, offset: tuple[int, int, int], max_rows: int
    ) -> tuple[pa.RecordBatch | None, Any] | None:
        batch, index, row = offset
        log = SinkLog(self.path)
        while True:
            if self.stop_after_batch is not None and batch > self.stop_after_batch:
                return None
            if batch > log.latest():
                return None, (batch, index, row)
            files = self._batch_files(batch)
            if index < len(files):
                break
            batch, index, row = batch + 1, 0, 0
        key = (batch, index, row)
        if self._open is None or self._open[0] != key:
            reader = pq.ParquetFile(files[index]).iter_batches(batch_size=max_rows)
            skip = row
            pending: list[pa.RecordBatch] = []
            for chunk in reader:
                if skip >= chunk.num_rows:
                    skip -= chunk.num_rows
                    continue
                pending.append(chunk.slice(skip))
                break
            self._open = (key, (pending, reader))
        pending, reader = self._open[1]
        chunk = pending.pop() if pending else next(reader, None)
        if chunk is None:
            self._open = None
            return pa.RecordBatch.from_pylist([], schema=self.schema()), (batch, index + 1, 0)
        chunk = _conform(chunk, self.schema(), self.operator_name)
        nxt = (batch, index, row + chunk.num_rows)
        self._open = (nxt, (pending, reader))
        return chunk, nxt


def _conform(chunk: pa.RecordBatch, schema: pa.Schema, operator: str) -> pa.RecordBatch:
    if chunk.schema.equals(schema):
        return chunk
    try:
        return chunk.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowException, ValueError) as exc:
        raise SchemaError(
            f"source '{operator}': a committed file has schema\n{chunk.schema}\nnot\n{schema}",
            operator=operator,
        ) from exc


def from_spark_files(
    path: str | os.PathLike[str],
    *,
    schema: pa.Schema | None = None,
    stop_after_batch: int | None = None,
) -> SparkFilesSource:
    """A source tailing the committed output of a Spark streaming Parquet file sink.

    Use it with ``env.from_source(from_spark_files(path))``.

    Args:
        path: The sink's output directory (the one holding ``_spark_metadata``).
        schema: The schema, needed only when no batch is committed yet.
        stop_after_batch: End after this log batch (default: run until cancelled).
    """
    return SparkFilesSource(path, schema=schema, stop_after_batch=stop_after_batch)
