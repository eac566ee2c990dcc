"""Python worker processes for per-record operators (DESIGN.md "Runtime").

One interpreter's GIL bounds per-record Python: the user's functions run at
the speed of one core however many subtasks call them. A per-record operator
(a fused map/flat_map/filter chain, a keyed ``reduce``) therefore hands its
batches to Python worker processes once it has seen :data:`START_AFTER_ROWS`
rows and spent :data:`START_AFTER_SECONDS` on them, or sooner when its bounded
input's size says the job is long (:func:`start_due`), as PySpark runs Python
UDFs in Python workers fed with Arrow batches. The rest of the job stays in-process.

- Start: lazy and off the task thread. The operator keeps running its rows
  in-process while its workers import eddyline and load the stages (spawned
  at the same time, so the start does not grow with their number); it
  switches over at the first batch after all of them said they are ready.
  Small jobs never start a worker, so their first record is not delayed.
- Transport: length-prefixed frames over the worker's stdin/stdout pipes,
  each batch one Arrow IPC stream (the measured copy costs ~1 % of the
  per-record work; see benches/RESULTS.md "Per-record Python in worker
  processes" for the figures and the options rejected).
- Exactly-once: a call hands its batch to the workers and waits for all of
  their results before it returns, so nothing is in flight in a worker when
  the operator reaches a checkpoint barrier (ABS: the operator's state at the
  barrier is what the workers returned). A keyed reduce's state lives in its
  workers; :meth:`WorkerPool.snapshot` fetches it.
- Order: a batch is cut into contiguous slices (a keyed reduce's rows are
  dealt by key group) and the outputs are put back in input order.
- Failure: a worker that dies (SIGKILL, out of memory) is a
  :class:`PythonWorkerLost`, which fails the job over to its last checkpoint
  like any task failure. A user function that raises in a worker is the same
  :class:`~eddyline._exec.user_code.UserFunctionError` (operator, row,
  traceback) as in-process.
- Shutdown: ``close`` ends the workers; a worker also exits when its stdin
  closes (the job's process ended, even by SIGKILL) and asks the kernel to
  kill it if its parent dies (``PR_SET_PDEATHSIG``). No shared memory is used,
  so nothing outlives a job.

``EDDYLINE_PYTHON_WORKERS``: ``auto`` (default: ``cpus // parallelism``
workers per subtask, at least 1, and none on a 1-cpu machine), ``0`` (off:
everything in-process) or a number of workers per subtask. Worker processes
of ``ProcessRunner`` / ``SparkRunner`` run per-record operators in-process:
those runners already spread the subtasks over processes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import pickle
import struct
import subprocess
import sys
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import IO, Any

import pyarrow as pa

from ..errors import JobFailedError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

START_AFTER_ROWS = 100_000
"""Rows an operator runs in-process before it starts its worker processes."""
START_AFTER_SECONDS = 0.5
"""Seconds a subtask spends in-process in the operator's Python before it starts them: a
worker's start costs ~0.5 s of CPU (importing pyarrow and eddyline), which a job that
ends sooner would pay without gaining (benches/RESULTS.md "Per-record Python in worker
processes")."""


START_PROJECTED_SECONDS = 1.0
"""Seconds of in-process Python still ahead of a subtask (its rows to come, at its rate so
far) from which it starts its workers at once, when it knows how many rows are to come
(:func:`start_due`): the workers' start (~0.5 s of CPU each, off the task thread) is then
repaid by the rest of the job. Jobs of about half a second stay in-process (RESULTS.md,
"Starting the workers by the input's size")."""
SAMPLE_ROWS = 10_000
"""Rows a subtask times in-process before it projects its rate over its rows to come."""


def start_due(rows: int, seconds: float, expected: int | None = None) -> bool:
    """Whether an operator that ran ``rows`` rows in ``seconds`` of its Python starts workers.

    Rent or buy: by default once it has run :data:`START_AFTER_ROWS` rows
    and :data:`START_AFTER_SECONDS`. When the subtask knows it will see about
    ``expected`` rows in all (its bounded sources' row count shared among its
    parallel subtasks, :attr:`~eddyline._exec.base.Runner.input_rows`), it starts as
    soon as :data:`SAMPLE_ROWS` rows project :data:`START_PROJECTED_SECONDS` or more
    of in-process Python still ahead: a long job does not wait.
    """
    if rows >= START_AFTER_ROWS and seconds >= START_AFTER_SECONDS:
        return True
    if expected is None or rows < SAMPLE_ROWS or seconds <= 0.0:
        return False
    return seconds / rows * (expected - rows) >= START_PROJECTED_SECONDS


_ENV = "EDDYLINE_PYTHON_WORKERS"
_HEADER = struct.Struct("<BQ")
KEY_GROUPS = "__eddyline_key_groups"
"""The column carrying a keyed batch's key groups to a worker."""
FIRST_ROW = "__eddyline_first_row"
"""The column carrying, per output row of a keyed reduce, the row that first touched its key."""

# Frames to a worker
INIT, BATCH, STATE, SNAPSHOT, EXIT, WATERMARK = 1, 2, 3, 4, 5, 6
# Frames from a worker
READY, OK, ERR = 11, 12, 13

WAIT_FOR_START = False
"""Tests set it: an operator waits for its workers when it starts them (deterministic switch)."""
in_worker_process = False
"""Set by :func:`eddyline._exec.worker.run_worker`: ProcessRunner/SparkRunner workers."""

_live: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_log = logging.getLogger(__name__)


class PythonWorkerLost(JobFailedError):
    """A Python worker process of a per-record operator ended unexpectedly."""


def workers_per_subtask(parallelism: int) -> int:
    """The number of worker processes a subtask of a per-record operator uses (0: none).

    Raises:
        ValueError: ``EDDYLINE_PYTHON_WORKERS`` is neither ``auto`` nor an int >= 0.
    """
    setting = os.environ.get(_ENV, "auto").strip().lower()
    if setting in ("", "auto"):
        if in_worker_process:
            return 0
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        cpus = cpus or 1
        return 0 if cpus < 2 else max(1, cpus // max(1, parallelism))
    try:
        count = int(setting)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{_ENV} must be 'auto' or an int >= 0, got {setting!r}")
    return count


def write_frame(stream: IO[bytes], kind: int, payload: bytes | memoryview | pa.Buffer) -> None:
    view = memoryview(payload)  # type: ignore[arg-type]
    stream.write(_HEADER.pack(kind, view.nbytes))
    while view.nbytes:
        written = stream.write(view)
        if written is None:  # pragma: no cover - pipes here are blocking
            continue
        view = view[written:]
    stream.flush()


def read_frame(stream: IO[bytes]) -> tuple[int, bytearray] | None:
    """The next frame, or ``None`` at the end of the stream."""
    header = _read_exact(stream, _HEADER.size)
    if header is None:
        return None
    kind, size = _HEADER.unpack(header)
    payload = _read_exact(stream, size)
    if payload is None:
        return None
    return kind, payload


def _read_exact(stream: IO[bytes], size: int) -> bytearray | None:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            return None
        got += n
    return buf


def encode_batches(batches: Sequence[pa.RecordBatch]) -> pa.Buffer | bytes:
    """Batches of one schema as one Arrow IPC stream (empty bytes: none)."""
    if not batches:
        return b""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def decode_batches(payload: bytearray | bytes) -> list[pa.RecordBatch]:
    if not payload:
        return []
    return list(pa.ipc.open_stream(pa.py_buffer(payload)))


PIPE_BYTES = 1 << 20
"""The pipes' kernel buffer (Linux ``F_SETPIPE_SZ``; 64 KiB by default): a 65,536-row
batch of two int64 columns is ~1.3 MB, which a 64 KiB pipe passes in ~20 pieces, each a
wake-up of the reader and the writer (benches/RESULTS.md "Keyed process-function state:
per-row state lookup, pipes, column conversion")."""


def _widen_pipe(fd: int) -> None:
    """Raises the pipe's buffer to :data:`PIPE_BYTES` where the kernel allows it (an
    unprivileged process may get less: ``/proc/sys/fs/pipe-max-size``); else leaves it."""
    setter = getattr(fcntl, "F_SETPIPE_SZ", None) if fcntl is not None else None
    if setter is None:  # pragma: no cover - not Linux
        return
    with contextlib.suppress(OSError):
        fcntl.fcntl(fd, setter, PIPE_BYTES)


class _Worker:
    """One worker process and its pipes."""

    def __init__(self, operator: str, init: bytes) -> None:
        self.operator = operator
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eddyline._exec.record_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            close_fds=True,
            # the worker imports eddyline and the job's modules from where this process did
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            start_new_session=True,  # a terminal's Ctrl-C goes to the job, which ends us
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin: IO[bytes] = self.proc.stdin
        self.stdout: IO[bytes] = self.proc.stdout
        self._init = init
        for stream in (self.stdin, self.stdout):
            _widen_pipe(stream.fileno())

    def handshake(self) -> str | None:
        """Sends the stages and waits until the worker loaded them; the failure, or None."""
        try:
            write_frame(self.stdin, INIT, self._init)
            frame = read_frame(self.stdout)
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"
        if frame is None:
            return f"the worker exited with {self.proc.wait()} while starting"
        kind, payload = frame
        if kind == READY:
            return None
        return bytes(payload).decode("utf-8", "replace")

    def send(self, kind: int, payload: bytes | memoryview | pa.Buffer) -> None:
        try:
            write_frame(self.stdin, kind, payload)
        except OSError as exc:
            raise self.lost(exc) from exc

    def receive(self) -> bytearray:
        """The payload of the worker's next OK frame; raises what the worker sent as ERR."""
        try:
            frame = read_frame(self.stdout)
        except OSError as exc:
            raise self.lost(exc) from exc
        if frame is None:
            raise self.lost(None)
        kind, payload = frame
        if kind == OK:
            return payload
        error = pickle.loads(payload)
        raise error

    def lost(self, exc: BaseException | None) -> PythonWorkerLost:
        try:
            code = self.proc.wait(timeout=1.0)
            how = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        except subprocess.TimeoutExpired:
            how = f"pipe error {exc}"
        return PythonWorkerLost(
            f"operator '{self.operator}': its Python worker process (pid {self.proc.pid}) "
            f"ended unexpectedly ({how}); the job restarts from its last checkpoint",
            operator=self.operator,
        )

    def close(self) -> None:
        for stream in (self.stdin, self.stdout):
            with contextlib.suppress(OSError):
                stream.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class WorkerPool:
    """The worker processes of one subtask of a per-record operator.

    Args:
        operator: The operator's name (for errors).
        runner: What each worker runs: a picklable ``(cls, args)`` building the
            in-process runner whose ``process`` the worker calls.
        count: The number of worker processes.
    """

    def __init__(
        self, operator: str, runner: tuple[Callable[..., Any], tuple[Any, ...]], count: int
    ) -> None:
        import cloudpickle

        self.operator = operator
        self.count = count
        blob = cloudpickle.dumps(runner, protocol=pickle.HIGHEST_PROTOCOL)
        self._init = pickle.dumps((list(sys.path), blob), protocol=pickle.HIGHEST_PROTOCOL)
        self._workers: list[_Worker] = []
        self._ready = threading.Event()
        self.failure: str | None = None
        self._closed = False
        _live.add(self)
        # Spawned here, on the task thread (PR_SET_PDEATHSIG follows the spawning
        # thread), all at once; the handshakes (imports, loading the stages) run
        # on a helper thread while the operator goes on in-process.
        try:
            for _ in range(count):
                self._workers.append(_Worker(self.operator, self._init))
        except OSError as exc:
            self.failure = f"cannot start a worker process: {exc}"
            self._ready.set()
        self._thread = threading.Thread(
            target=self._start, name=f"eddyline-pool-{operator}", daemon=True
        )
        self._thread.start()

    def _start(self) -> None:
        for worker in self._workers:
            failure = worker.handshake()
            if failure is not None and self.failure is None:
                self.failure = failure
        self._ready.set()

    def wait_started(self, timeout: float = 60.0) -> None:
        """Blocks until every worker answered its handshake (or one failed)."""
        self._ready.wait(timeout)

    def ready(self) -> bool:
        """True once every worker loaded the stages (never if one failed to)."""
        return self._ready.is_set() and self.failure is None and not self._closed

    def failed(self) -> bool:
        return self._ready.is_set() and self.failure is not None

    @property
    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self._workers]

    def run(self, parts: Sequence[tuple[int, bytes | pa.Buffer]]) -> list[bytearray]:
        """Sends ``(kind, payload)`` to each worker and returns their answers in order.

        Every worker is answered before an error is raised (the first in worker
        order), so the pipes stay in step.
        """
        sent = []
        for worker, (kind, payload) in zip(self._workers, parts, strict=False):
            worker.send(kind, payload)
            sent.append(worker)
        answers: list[bytearray] = []
        error: BaseException | None = None
        for worker in sent:
            try:
                answers.append(worker.receive())
            except PythonWorkerLost as exc:
                self.close()
                raise exc from None
            except BaseException as exc:  # the user's failure, raised after the others answer
                if error is None:
                    error = exc
        if error is not None:
            raise error
        return answers

    def close(self) -> None:
        """Ends the worker processes (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if not self._ready.is_set():
            # Still starting: the helper thread may be blocked on a pipe. Killing the
            # workers ends its reads and writes; then nothing else uses the pipes.
            for worker in self._workers:
                with contextlib.suppress(OSError):
                    worker.proc.kill()
        self._thread.join()
        for worker in self._workers:
            worker.close()


def close_all() -> None:
    """Ends every pool still open (at interpreter exit)."""
    for pool in list(_live):
        pool.close()


def batch_slices(batch: pa.RecordBatch, count: int, min_rows: int = 1024) -> list[pa.RecordBatch]:
    """``batch`` cut into at most ``count`` contiguous zero-copy slices."""
    n = batch.num_rows
    parts = max(1, min(count, n // min_rows))
    step = -(-n // parts)
    return [batch.slice(start, step) for start in range(0, n, step)]


def keyed_parts(
    batch: pa.RecordBatch, key_groups: pa.UInt32Array, count: int
) -> list[tuple[pa.RecordBatch, pa.UInt32Array, Any]]:
    """Rows dealt to ``count`` workers by key group (``group % count``): for each
    worker its rows, their key groups and their positions in ``batch`` (numpy)."""
    import numpy as np

    if count == 1:
        return [(batch, key_groups, np.arange(batch.num_rows))]
    owner = key_groups.to_numpy(zero_copy_only=False) % count
    parts = []
    for i in range(count):
        positions = np.flatnonzero(owner == i)
        take = pa.array(positions)
        parts.append((batch.take(take), key_groups.take(take), positions))
    return parts


def run_keyed(
    pool: WorkerPool, batch: pa.RecordBatch, key_groups: pa.UInt32Array
) -> pa.RecordBatch | None:
    """Runs ``batch`` on the workers, dealt by key group (:func:`keyed_parts`), and
    puts their outputs back in order: with several workers each output row carries
    the position in ``batch`` of the input row it stands for (``FIRST_ROW``), and
    the rows are sorted by it, so the output is the one the operator gives in-process."""
    parts = keyed_parts(batch, key_groups, pool.count)
    payloads = [
        (BATCH, encode_batches([rows.append_column(KEY_GROUPS, groups)]))
        for rows, groups, _ in parts
    ]
    outs: list[pa.RecordBatch] = []
    firsts = []
    for (_, _, positions), answer in zip(parts, pool.run(payloads), strict=True):
        for out in decode_batches(answer):
            if pool.count > 1:
                index = out.schema.get_field_index(FIRST_ROW)
                firsts.append(positions[out.column(index).to_numpy()])
                out = out.remove_column(index)
            outs.append(out)
    if not outs:
        return None
    if len(outs) == 1:
        return outs[0]
    import numpy as np

    order = np.argsort(np.concatenate(firsts), kind="stable")
    table = pa.Table.from_batches(outs).take(pa.array(order))
    return table.combine_chunks().to_batches()[0]


atexit.register(close_all)


class PoolUser:
    """What a per-record runner (a record chain, a keyed reduce) does to move to its
    worker processes: count its rows, start the pool when due, fall back to running
    in-process when the workers cannot start."""

    name: str
    _pool: WorkerPool | None
    _pool_size: int
    input_rows: int | None  # (Runner.input_rows)
    _rows_seen: int
    _rows_expected: int | None
    _python_s: float

    def _no_pool(self) -> None:
        """No workers yet (``open`` sizes the pool, :meth:`_started_pool` starts it)."""
        self._pool = None
        self._pool_size = 0
        self._rows_seen = 0  # rows run in-process (timed in _python_s)
        self._rows_expected = None
        self._python_s = 0.0  # time spent in the operator's Python in-process

    def _size_pool(self, ctx: dict[str, Any]) -> None:
        """Called from ``open``: how many workers a subtask of this parallelism gets,
        and how many rows it expects (its share of ``input_rows``, when known)."""
        parallelism = max(1, int(ctx.get("parallelism", 1)))
        self._pool_size = workers_per_subtask(parallelism)
        total = self.input_rows
        self._rows_expected = None if total is None else -(-total // parallelism)

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()

    def _started_pool(
        self,
        rows: int,
        can_start: bool,
        make: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]],
    ) -> WorkerPool | None:
        """The pool once started (ready or not); starts it when :func:`start_due` and
        ``can_start``, with ``make()`` giving the workers' (runner class, arguments)."""
        if self._pool is not None:
            return self._pool
        if self._pool_size == 0:
            return None
        due = can_start and start_due(self._rows_seen, self._python_s, self._rows_expected)
        self._rows_seen += rows  # (run in-process until the pool is ready)
        if not due:
            return None
        try:
            self._pool = WorkerPool(self.name, make(), self._pool_size)
        except Exception as exc:  # functions that cannot be pickled stay in-process
            _log.info("operator '%s' runs in-process: %s", self.name, exc)
            self._pool_size = 0
            return None
        if not WAIT_FOR_START:
            return None
        self._pool.wait_started()
        return self._pool

    def _drop_if_failed(self, pool: WorkerPool) -> None:
        """Runs in-process from now on when ``pool``'s workers did not start."""
        if pool.failed():
            _log.warning(
                "operator '%s' runs in-process: its worker processes did not start (%s)",
                self.name,
                pool.failure,
            )
            pool.close()
            self._pool, self._pool_size = None, 0
