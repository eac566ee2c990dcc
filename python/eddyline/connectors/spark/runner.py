"""``SparkRunner``: a job's workers run as one gang of Spark barrier tasks.

Each attempt of the job is ONE Spark job, submitted from a background thread
of the driver in its own job group::

    sc.parallelize(range(N), N).barrier().mapPartitions(member).repartition(1).collect()

The shuffle after the barrier stage makes it a ShuffleMapStage, which Spark
retries as a gang when one of its tasks fails (a failing barrier
*ResultStage* would abort the job, SPARK-25161). Each task agrees on the gang
with one ``allGather`` (host and task attempt id, logged), then runs
``eddyline._exec.worker.run_worker``: it binds its data port on the interface that
routes to the driver (127.0.0.1 in local mode; a host's ``EDDYLINE_BIND_HOST``
and ``EDDYLINE_ADVERTISE_HOST``, or ``SPARK_LOCAL_IP``, choose others: see
``eddyline._exec.worker.data_addresses``), connects to the driver (which
listens on ``spark.driver.bindAddress`` if set, and is reached at
``spark.driver.host``, or 127.0.0.1 in local mode) and
receives the job, its peers' data-plane addresses and the checkpoint to
restore from in the driver's START message. The checkpoint coordinator stays
in the driver.

Restarts: when a worker fails or its connection breaks, the driver cancels
the attempt, cancels its Spark job group (``stop()``) and submits a new Spark
job for the next attempt (``launch(attempt + 1)``), as many times as the
job's restart strategy allows; every worker restores from the latest
completed checkpoint. The attempt number is baked into each task, so the
driver turns away tasks of an older attempt (a Spark gang retry of a job the
driver already gave up on, or a task that outlived its cancellation).
Spark's own gang retries (up to ``spark.stage.maxConsecutiveAttempts``, 4 by
default, a static conf that can only be raised before the session starts)
rerun the tasks with the same attempt number: they can complete an attempt
only while none of its workers has connected yet, because the driver holds a
connected worker's place. The driver's resubmission, bounded by the job's
restart strategy (``ed.RestartStrategy``), is the retry budget beyond them, so
long jobs raise the restart strategy, not Spark's conf.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..._storage import is_object_store_uri
from ...config import parse_duration
from ...errors import GraphError
from ._lazy import require_pyspark

__all__ = ["SparkRunner"]

_log = logging.getLogger("eddyline.spark")

_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,")


def _task_slots(sc: Any) -> int:
    """How many tasks the cluster runs at once (the most a barrier stage may have)."""
    master = str(sc.master)
    cpus = max(1, int(sc.getConf().get("spark.task.cpus", "1")))
    match = _LOCAL.match(master)
    if match:
        threads = match.group(1)
        if threads is None:
            cores = 1
        elif threads == "*":
            cores = os.cpu_count() or 1
        else:
            cores = int(threads)
    elif match := _LOCAL_CLUSTER.match(master):
        cores = int(match.group(1)) * int(match.group(2))
    else:
        cores = int(sc.defaultParallelism)
    return max(0, cores // cpus)


def _is_local(sc: Any) -> bool:
    return str(sc.master).startswith("local")


def _interpreter(path: str) -> str:
    return os.path.abspath(shutil.which(path) or path)


def _route_host(driver: str) -> str:
    """This machine's address on the interface that routes to ``driver`` (no packet is sent)."""
    host, _, port = driver.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))
        return str(probe.getsockname()[0])


def _first_lines(exc: BaseException, limit: int = 1500) -> str:
    """Spark's message of a failed job, without the Java stack trace."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("\tat "))
    text = text.strip() or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + " ..."


def _gang_member(
    driver: str, secret: str, attempt: int, paths: list[str]
) -> Callable[[Iterable[Any]], Iterator[tuple[int, str, int]]]:
    """The function each barrier task runs (captures no session: it is pickled)."""

    def member(_rows: Iterable[Any]) -> Iterator[tuple[int, str, int]]:
        from pyspark import BarrierTaskContext

        # The modules of the job's functions, as the driver imports them.
        for path in paths:
            if path not in sys.path:
                sys.path.append(path)
        ctx = BarrierTaskContext.get()
        index = ctx.partitionId()
        host = _route_host(driver)
        me = {"index": index, "host": host, "task": ctx.taskAttemptId()}
        gang = sorted((json.loads(m) for m in ctx.allGather(json.dumps(me))), key=str)
        _log.info(
            "eddyline attempt %d, Spark stage %d: worker %d of gang %s",
            attempt,
            ctx.stageId(),
            index,
            gang,
        )
        from ..._exec.worker import run_worker

        run_worker(driver, secret, index, attempt, bind_host=host)
        yield index, host, ctx.taskAttemptId()

    return member


class SparkRunner:
    """Runs a job's workers as Spark barrier tasks (``runner=SparkRunner(spark, workers=N)``).

    Subtask ``i`` of every operator runs in worker ``i % workers``, as with
    :class:`eddyline.ProcessRunner`; give operators a parallelism of at least
    ``workers``. The driver (this process) keeps the checkpoint coordinator;
    the checkpoint dir and the sinks' outputs must be on storage every
    executor sees. A failed task restarts the job from its latest completed
    checkpoint as a new Spark job (see the module docs), within the job's
    restart strategy.

    Args:
        spark: A classic (not Spark Connect) ``SparkSession``.
        workers: Number of workers, each one Spark task holding one task slot
            for the whole run; at most the cluster's task slots.
        start_timeout: How long the workers of an attempt may take to connect
            (``"120s"`` by default).
        allow_local_paths: On a cluster (a master other than ``local[...]``) every
            path the job uses must be a URI all hosts reach (``s3://...``); a
            local path is a :class:`~eddyline.errors.GraphError` before anything
            runs, unless this is ``True`` (every host mounts the same shared
            filesystem at that path).

    Raises:
        TypeError: ``spark`` is not a classic ``SparkSession``.
        ValueError: ``workers`` is not a positive int or exceeds the task slots
            (Spark would wait for slots for up to 10 minutes, then fail), or
            Spark's Python workers would run another interpreter than this one
            (set ``PYSPARK_PYTHON`` to ``sys.executable`` before the session
            starts).

    Example:
        >>> from eddyline.spark import SparkRunner                     # doctest: +SKIP
        >>> env.execute("job", runner=SparkRunner(spark, workers=2))   # doctest: +SKIP
    """

    def __init__(
        self,
        spark: Any,
        workers: int = 2,
        *,
        start_timeout: str | float = "120s",
        allow_local_paths: bool = False,
    ) -> None:
        require_pyspark("SparkRunner")
        from pyspark.sql import SparkSession

        if not isinstance(spark, SparkSession):
            raise TypeError(f"SparkRunner needs a pyspark SparkSession, got {type(spark).__name__}")
        try:
            sc = spark.sparkContext
        except Exception as exc:
            raise TypeError(
                "SparkRunner needs a classic SparkSession with a SparkContext (Spark Connect "
                f"sessions cannot run barrier tasks): {exc}"
            ) from exc
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers must be an int >= 1, got {workers!r}")
        slots = _task_slots(sc)
        if workers > slots:
            raise ValueError(
                f"SparkRunner(workers={workers}) needs {workers} task slots at once, but Spark "
                f"(master {sc.master!r}, spark.task.cpus "
                f"{sc.getConf().get('spark.task.cpus', '1')}) has {slots}; use workers <= "
                f"{slots} or a bigger cluster"
            )
        worker_python = _interpreter(str(sc.pythonExec))
        if worker_python != _interpreter(sys.executable):
            raise ValueError(
                f"Spark's Python workers run {sc.pythonExec!r}, not this interpreter "
                f"({sys.executable!r}), so they would not import this eddyline and the job's "
                "modules; set the environment variable PYSPARK_PYTHON (and "
                "PYSPARK_DRIVER_PYTHON) to sys.executable before the SparkSession is created"
            )
        self.spark = spark
        self.workers = workers
        self.start_timeout_s = parse_duration(start_timeout, what="start_timeout")
        if not isinstance(allow_local_paths, bool):
            raise TypeError(f"allow_local_paths must be a bool, got {allow_local_paths!r}")
        self.allow_local_paths = allow_local_paths
        self._launcher: _SparkLauncher | None = None

    def __repr__(self) -> str:
        return f"SparkRunner(workers={self.workers})"

    def _driver_host(self) -> str:
        """The address the workers connect to the driver at (``spark.driver.host``)."""
        sc = self.spark.sparkContext
        if _is_local(sc):
            return "127.0.0.1"
        return str(self.spark.conf.get("spark.driver.host"))

    def _driver_bind(self) -> str:
        """The address the driver listens for workers on: as Spark's own driver
        ports, ``spark.driver.bindAddress`` when set (a multi-homed host, a
        container), else the advertised ``spark.driver.host``."""
        host = self._driver_host()
        if _is_local(self.spark.sparkContext):
            return host
        return str(self.spark.conf.get("spark.driver.bindAddress", None) or host)

    # ---- used by execute_async ----------------------------------------------

    def _check_reachable(self, nodes: list[Any], config: Any) -> None:
        """On a cluster, every path must be a URI all hosts reach.

        A local path would name a directory on each host separately: checkpoints
        the driver cannot find, output scattered over the executors' disks.
        """
        sc = self.spark.sparkContext
        if _is_local(sc) or self.allow_local_paths:
            return
        named: list[tuple[str, str]] = []
        if config.checkpoint is not None:
            named.append(("the checkpoint dir", str(config.checkpoint.dir)))
        restore = config.restore_from
        if restore and restore != "latest":
            named.append(("restore_from", str(restore)))
        for node in nodes:
            if node.kind == "source_parquet":
                named += [(f"source '{node.name}'", str(p)) for p in node.op.paths]
            elif node.kind == "sink_parquet":
                named.append((f"sink '{node.name}'", str(node.op.dir)))
        for what, path in named:
            if not is_object_store_uri(path):
                raise GraphError(
                    f"SparkRunner on {sc.master!r}: {what} is the local path {path!r}, which "
                    "the executors on other hosts do not see; use a URI every host reaches "
                    "(s3://..., gs://..., az://...), or SparkRunner(..., allow_local_paths=True) "
                    "when every host mounts the same shared filesystem at that path"
                )

    def _start(self, core: Any, nodes: list[Any], config: Any, spec: bytes) -> Any:
        self._check_reachable(nodes, config)
        host = self._driver_host()
        self._launcher = _SparkLauncher(self.spark, config.name, host)
        listen = self._driver_bind()
        bind = f"[{listen}]:0" if ":" in listen else f"{listen}:0"
        return core.start_job(
            nodes,
            config,
            launcher=self._launcher,
            workers=self.workers,
            spec=spec,
            bind=bind,
            start_timeout_s=self.start_timeout_s,
        )


class _SparkLauncher:
    """Submits one Spark job per attempt for the native driver (see ``Launcher``)."""

    def __init__(self, spark: Any, name: str, driver_host: str) -> None:
        self._spark = spark
        self._name = name
        self._driver_host = driver_host
        self._tag = uuid.uuid4().hex[:12]
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._group: str | None = None
        self._attempt = -1
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.gang: list[tuple[int, str, int]] = []
        """``(worker, host, Spark task attempt id)`` of the last attempt that ended normally."""

    def launch(self, attempt: int, workers: int, driver: str, secret: str) -> None:
        self.stop()
        from pyspark import InheritableThread

        sc = self._spark.sparkContext
        group = f"eddyline-{self._tag}-a{attempt}"
        # The driver listens where spark.driver.bindAddress says (maybe every
        # interface); the workers reach it at spark.driver.host.
        port = driver.rpartition(":")[2]
        host = self._driver_host
        driver = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        member = _gang_member(driver, secret, attempt, [p for p in sys.path if p])
        done = threading.Event()

        def submit() -> None:
            sc.setJobGroup(
                group, f"eddyline job {self._name!r}, attempt {attempt}", interruptOnCancel=True
            )
            try:
                rdd = sc.parallelize(range(workers), workers).barrier().mapPartitions(member)
                # The shuffle makes the barrier stage a ShuffleMapStage (gang retries).
                gang = rdd.repartition(1).collect()
                with self._lock:
                    self.gang = sorted(gang)
            except BaseException as exc:  # reported by check()
                with self._lock:
                    self._error = exc
            finally:
                done.set()

        thread = InheritableThread(target=submit, name=f"eddyline-spark-{group}", daemon=True)
        with self._lock:
            self._thread, self._group, self._attempt = thread, group, attempt
            self._done, self._error = done, None
        thread.start()

    def check(self) -> None:
        with self._lock:
            done, error, attempt = self._done, self._error, self._attempt
        if self._thread is not None and done.is_set():
            why = _first_lines(error) if error is not None else "it ended without an error"
            raise RuntimeError(
                f"the Spark job of attempt {attempt} ended before all its workers connected "
                f"to the driver: {why}"
            )

    def stop(self) -> None:
        with self._lock:
            thread, group = self._thread, self._group
            self._thread = None
        if thread is None:
            return
        sc = self._spark.sparkContext
        # After a normal end the tasks are returning: give them a moment.
        thread.join(timeout=2.0)
        while thread.is_alive():
            # Repeated: a cancellation that came before the job was submitted is lost.
            sc.cancelJobGroup(group)
            thread.join(timeout=0.5)
        from .sink import refresh_tables

        refresh_tables(self._spark)
