"""Helpers for testing eddyline jobs.

Example:
    >>> from eddyline.testing import assert_same_rows
    >>> assert_same_rows([{"a": 1}, {"a": 2}], [{"a": 2}, {"a": 1}])
    >>> last_by_key([{"k": 1, "v": 1}, {"k": 1, "v": 3}], "k")
    {1: {'k': 1, 'v': 3}}
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeAlias, TypeVar

import pyarrow as pa

from . import _core
from ._storage import is_object_store_uri
from .sinks import CollectHandle, TwoPhaseCommitSink

__all__ = [
    "FailOnce",
    "InjectedFailure",
    "KilledRun",
    "ManualClock",
    "RecordingTwoPhaseSink",
    "SleepPerBatch",
    "assert_exact_ids",
    "assert_same_rows",
    "channel_state_rows",
    "completed_checkpoints",
    "id_report",
    "kill_after_checkpoints",
    "last_by_key",
    "read_parquet_dir",
    "sigkill_when",
    "spark_s3a_test_conf",
    "to_rows",
    "wait_until",
]

T = TypeVar("T")

RowsLike: TypeAlias = pa.Table | pa.RecordBatch | CollectHandle | Iterable[dict[str, Any]]


class ManualClock:
    """The processing-time clock of this process, set by hand (state TTL and
    ``current_processing_time`` read it), for tests that must not sleep.

    Used as a context manager; the wall clock is back on exit. Only jobs that
    run in this process (the default runner) see it.

    Example:
        >>> import eddyline as ed
        >>> with ManualClock(1_000) as clock:
        ...     clock.advance(500)
        ...     clock.now()
        1500
    """

    def __init__(self, start_ms: int = 0) -> None:
        self._now = int(start_ms)
        self._lock = threading.Lock()
        self._previous: Callable[[], int] | None = None

    def now(self) -> int:
        """The clock's time (ms)."""
        with self._lock:
            return self._now

    def set(self, ms: int) -> None:
        """Sets the time (ms); it never goes back."""
        with self._lock:
            self._now = max(self._now, int(ms))

    def advance(self, ms: int) -> None:
        """Moves the time ``ms`` milliseconds on."""
        with self._lock:
            self._now += max(0, int(ms))

    def __enter__(self) -> ManualClock:
        from . import process_functions as functions

        self._previous = functions._clock
        functions._clock = self.now
        return self

    def __exit__(self, *exc: object) -> None:
        from . import process_functions as functions

        if self._previous is not None:
            functions._clock = self._previous
            self._previous = None


class SleepPerBatch:
    """A picklable ``map_batches`` function that sleeps, to make a job slow.

    Example:
        >>> import pyarrow as pa
        >>> SleepPerBatch(0.0)(pa.record_batch({"x": [1]})).num_rows
        1
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        time.sleep(self.seconds)
        return batch


def to_rows(data: RowsLike) -> list[dict[str, Any]]:
    """Returns rows (dicts) from a table, batch, collect handle or iterable of dicts."""
    if isinstance(data, CollectHandle):
        return data.to_pylist()
    if isinstance(data, pa.Table | pa.RecordBatch):
        rows: list[dict[str, Any]] = data.to_pylist()
        return rows
    return [dict(row) for row in data]


def _canonical(value: Any) -> Hashable:
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    if isinstance(value, dict):
        return tuple(sorted((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_canonical(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value  # type: ignore[no-any-return]


def _row_key(row: dict[str, Any]) -> Hashable:
    return tuple(sorted((k, _canonical(v)) for k, v in row.items()))


def assert_same_rows(
    actual: RowsLike,
    expected: RowsLike,
    *,
    sort_by: str | Sequence[str] | None = None,
) -> None:
    """Asserts that two collections hold the same rows, as multisets (order ignored).

    Args:
        actual: The rows produced.
        expected: The reference rows.
        sort_by: If given, both sides are sorted by these columns and compared
            in order (the failure message then points at the first difference).

    Raises:
        AssertionError: Listing missing and unexpected rows.
    """
    got = to_rows(actual)
    want = to_rows(expected)
    if sort_by is not None:
        keys = [sort_by] if isinstance(sort_by, str) else list(sort_by)

        def order(row: dict[str, Any]) -> tuple[Any, ...]:
            return tuple((row.get(k) is None, row.get(k)) for k in keys)

        got_sorted, want_sorted = sorted(got, key=order), sorted(want, key=order)
        for index, (g, w) in enumerate(zip(got_sorted, want_sorted, strict=False)):
            if _row_key(g) != _row_key(w):
                raise AssertionError(
                    f"rows differ at position {index} (sorted by {keys}): got {g!r}, expected {w!r}"
                )
        if len(got) != len(want):
            raise AssertionError(f"got {len(got)} rows, expected {len(want)}")
        return
    counts_got = Counter(_row_key(row) for row in got)
    counts_want = Counter(_row_key(row) for row in want)
    if counts_got == counts_want:
        return
    missing = list((counts_want - counts_got).elements())
    unexpected = list((counts_got - counts_want).elements())

    def show(items: list[Hashable]) -> str:
        shown = [repr(dict(item)) for item in items[:10]]  # type: ignore[call-overload]
        more = f" ... and {len(items) - 10} more" if len(items) > 10 else ""
        return "\n  ".join(shown) + more

    message = [f"got {len(got)} rows, expected {len(want)}"]
    if missing:
        message.append(f"missing {len(missing)} rows:\n  {show(missing)}")
    if unexpected:
        message.append(f"unexpected {len(unexpected)} rows:\n  {show(unexpected)}")
    raise AssertionError("\n".join(message))


def id_report(ids: Iterable[int], expected: Iterable[int]) -> tuple[int, int, str]:
    """Compares ids with the expected ids as multisets.

    Returns:
        ``(lost, duplicated, description)``: how many expected ids are missing
        (plus ids that were not expected at all), how many extra copies there
        are, and a sentence with examples.

    Example:
        >>> id_report([0, 1, 1, 3], range(4))
        (1, 1, '4 rows for 4 ids: 1 lost (e.g. [2]), 1 duplicated (e.g. [1]), 0 unexpected')
    """
    import numpy as np

    values = np.fromiter((int(i) for i in ids), dtype=np.int64)
    want = np.fromiter((int(i) for i in expected), dtype=np.int64)
    uniq, freq = np.unique(values, return_counts=True)
    dup_ids = uniq[freq > 1].tolist()
    duplicated = int((freq[freq > 1] - 1).sum())
    lost_ids = np.setdiff1d(want, uniq).tolist()
    unexpected = np.setdiff1d(uniq, want).tolist()
    text = (
        f"{len(values)} rows for {len(want)} ids: {len(lost_ids)} lost"
        + (f" (e.g. {lost_ids[:5]})" if lost_ids else "")
        + f", {duplicated} duplicated"
        + (f" (e.g. {dup_ids[:5]})" if dup_ids else "")
        + f", {len(unexpected)} unexpected"
        + (f" (e.g. {unexpected[:5]})" if unexpected else "")
    )
    return len(lost_ids) + len(unexpected), duplicated, text


def assert_exact_ids(ids: Iterable[int], expected: Iterable[int], what: str = "ids") -> None:
    """Asserts that every expected id is present exactly once: none lost, none duplicated.

    Example:
        >>> assert_exact_ids([2, 0, 1], range(3))
        >>> assert_exact_ids([0, 0], range(1), "out")
        Traceback (most recent call last):
        ...
        AssertionError: out: 2 rows for 1 ids: 0 lost, 1 duplicated (e.g. [0]), 0 unexpected
    """
    lost, duplicated, text = id_report(ids, expected)
    if lost or duplicated:
        raise AssertionError(f"{what}: {text}")


def last_by_key(rows: RowsLike, keys: str | Sequence[str]) -> dict[Any, dict[str, Any]]:
    """Returns the last row of every key (the final value of a running aggregate).

    Args:
        rows: Rows in emission order.
        keys: The key column(s); several give tuple keys.
    """
    names = [keys] if isinstance(keys, str) else list(keys)
    out: dict[Any, dict[str, Any]] = {}
    for row in to_rows(rows):
        key = row[names[0]] if len(names) == 1 else tuple(row[k] for k in names)
        out[key] = row
    return out


# ---------------------------------------------------------------------------
# fault injection


class InjectedFailure(RuntimeError):
    """The exception :class:`FailOnce` raises."""


_CHECKPOINT_DIR_RE = re.compile(r"^chk-(\d+)$")


def completed_checkpoints(directory: str | os.PathLike[str]) -> list[int]:
    """The ids of the completed checkpoints in ``directory`` (``chk-N`` with a manifest).

    Example:
        >>> completed_checkpoints("/nonexistent")
        []
    """
    root = os.fspath(directory)
    if is_object_store_uri(root):
        # Object stores: the core lists what has a manifest (store.rs), with
        # the standard environment variables for the endpoint and keys.
        return sorted(int(c["id"]) for c in _core.list_checkpoints(root))
    try:
        entries = os.listdir(root)
    except OSError:
        return []
    ids = []
    for entry in entries:
        match = _CHECKPOINT_DIR_RE.match(entry)
        if match and os.path.isfile(os.path.join(root, entry, "_manifest.json")):
            ids.append(int(match.group(1)))
    return sorted(ids)


def channel_state_rows(checkpoint: str | os.PathLike[str]) -> dict[tuple[str, int, int], int]:
    """Rows of in-flight data in an unaligned checkpoint, per channel.

    Reads the "(channel state)" entries of the manifest of ``checkpoint`` (a
    local ``chk-N`` directory) and decodes each subtask's channel state
    (docs/DESIGN.md "Unaligned checkpoints"; the encoding of
    ``core/src/checkpoint/channel_state.rs``: ``EDCHST01`` | channels u32 | per
    channel: segments u32 | per segment: length u64 | an Arrow IPC stream).

    Returns:
        ``{(entry name, subtask, input channel): rows}`` for every channel that
        holds rows; empty for an aligned checkpoint.

    Example:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = pathlib.Path(tmp, "_manifest.json").write_text('{"operators": []}')
        ...     channel_state_rows(tmp)
        {}
    """
    import struct

    root = os.fspath(checkpoint)
    with open(os.path.join(root, "_manifest.json")) as f:
        manifest = json.load(f)
    rows: dict[tuple[str, int, int], int] = {}
    for op in manifest["operators"]:
        if not op["name"].endswith(" (channel state)"):
            continue
        for sub in op["subtasks"]:
            if sub.get("state") is None:
                continue
            with open(os.path.join(root, sub["state"]["file"]), "rb") as f:
                data = f.read()
            at = data.index(b"EDCHST01") + 8
            (channels,) = struct.unpack_from("<I", data, at)
            at += 4
            for channel in range(channels):
                (segments,) = struct.unpack_from("<I", data, at)
                at += 4
                for _ in range(segments):
                    (length,) = struct.unpack_from("<Q", data, at)
                    at += 8
                    table = pa.ipc.open_stream(pa.py_buffer(data[at : at + length])).read_all()
                    at += length
                    if table.num_rows:
                        key = (op["name"], int(sub["subtask"]), channel)
                        rows[key] = rows.get(key, 0) + table.num_rows
    return rows


def wait_until(
    condition: Callable[[], T], *, timeout: float, what: str, interval: float = 0.005
) -> T:
    """Polls ``condition`` until it returns something truthy, and returns that.

    Raises:
        TimeoutError: ``timeout`` seconds passed first (naming ``what``).

    Example:
        >>> wait_until(lambda: 42, timeout=1, what="the answer")
        42
    """
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


@dataclasses.dataclass(frozen=True)
class KilledRun:
    """A run :func:`sigkill_when` killed: what ``ready`` returned, and the run's output."""

    ready: Any
    stdout: str
    stderr: str


def sigkill_when(
    command: Sequence[str],
    ready: Callable[[], Any],
    *,
    timeout: float,
    what: str,
    delay: float = 0.0,
    allow_early_end: bool = False,
) -> KilledRun | None:
    """Runs ``command`` and SIGKILLs it ``delay`` s after ``ready()`` first returns
    something truthy (a seeded random delay makes the kill moment reproducible).

    Returns:
        The killed run, or ``None`` if it ended before its kill and
        ``allow_early_end`` (otherwise that is an ``AssertionError`` with its
        stderr, like a run that was not ended by the SIGKILL).

    Raises:
        TimeoutError: ``ready()`` stayed false for ``timeout`` s (naming ``what``).
    """
    import signal
    import subprocess

    # `with` closes the pipes whichever way the run ends (one that ends before its
    # kill leaves them unread; CI once failed a later test on their ResourceWarning)
    with subprocess.Popen(
        list(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            found = wait_until(
                lambda: ready() or proc.poll() is not None, timeout=timeout, what=what
            )
            time.sleep(delay)
            if proc.poll() is not None:
                if allow_early_end:
                    return None
                raise AssertionError(
                    f"the run ended before it was killed ({what}); make the job longer:\n"
                    f"{proc.communicate()[1]}"
                )
            proc.send_signal(signal.SIGKILL)
            stdout, stderr = proc.communicate(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if proc.returncode != -signal.SIGKILL:
        raise AssertionError(
            f"the run ({what}) exited with {proc.returncode}, not by SIGKILL:\n{stderr}"
        )
    return KilledRun(found, stdout, stderr)


def kill_after_checkpoints(
    command: Sequence[str],
    checkpoint_dir: str | os.PathLike[str],
    *,
    kills: int,
    rng: random.Random,
    timeout: float,
    new_checkpoints: int = 1,
    max_delay: float = 0.25,
    allow_early_end: bool = False,
) -> list[str]:
    """Runs a job script ``kills`` times, SIGKILLing each run, then once to its end.

    Each run is killed at a random moment (up to ``max_delay`` s, drawn from
    ``rng``) after ``new_checkpoints`` more checkpoints completed in
    ``checkpoint_dir`` since it started, so every restore has a newer
    checkpoint to start from. A run that ends before its kill is an error,
    unless ``allow_early_end`` (then no more runs are killed).

    Returns:
        The stdout of every killed run, then that of the final run (which
        must exit with status 0).
    """
    import subprocess

    outputs: list[str] = []
    for kill in range(kills):
        before = max(completed_checkpoints(checkpoint_dir), default=0)
        run = sigkill_when(
            command,
            lambda before=before: (  # type: ignore[misc]
                max(completed_checkpoints(checkpoint_dir), default=0) >= before + new_checkpoints
            ),
            timeout=timeout,
            what=f"{new_checkpoints} new checkpoint(s) in run {kill} (after chk-{before})",
            delay=rng.uniform(0.0, max_delay),  # the kill moment, from the seed
            allow_early_end=allow_early_end,
        )
        if run is None:
            break
        outputs.append(run.stdout)
    final = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout)
    if final.returncode != 0:
        raise AssertionError(f"the final run failed:\n{final.stderr}")
    outputs.append(final.stdout)
    return outputs


def int_key_group(key: int, max_parallelism: int = 128) -> int:
    """The key group of an ``Int64`` key, as the engine computes it (``keygroup::mix64``,
    the murmur3 finalizer, modulo ``max_parallelism``): for tests that pick keys
    falling in one key group.

    Example:
        >>> int_key_group(0), 0 <= int_key_group(12345) < 128
        (0, True)
    """
    mask = (1 << 64) - 1
    x = key & mask
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    x ^= x >> 33
    return x % max_parallelism


class FailOnce:
    """Wraps a function so that it raises once, at a chosen record, then never again.

    Works for ``map_batches`` functions (``fn(batch) -> batch``) and
    per-record functions (``fn(row) -> row``). It fires on the first call that
    sees a record whose ``column`` is ``>= at`` once it is armed; "once" is
    recorded by creating the marker file ``marker_dir/fired`` exclusively, so
    exactly one call fires over all subtasks, restarts and processes (later
    attempts pass through). The marker holds a JSON note of where it fired.

    Args:
        fn: The wrapped function (``None``: identity).
        marker_dir: An existing directory for the marker file.
        column: The id column to watch.
        at: The id to fail at (or at the first id above it, once armed).
        armed_by: A checkpoint directory: arm only once a completed checkpoint
            (``chk-N/_manifest.json``) exists in it, so that recovery has a
            checkpoint to start from. ``None``: armed at once.
        exit_code: Instead of raising, end the process at once with
            ``os._exit(exit_code)`` (a crashed worker process or Spark task).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     f = FailOnce(None, tmp, column="id", at=2)
        ...     f({"id": 1})
        ...     try:
        ...         f({"id": 2})
        ...     except InjectedFailure as exc:
        ...         print(exc)
        ...     f({"id": 2}), f.fired_info()["id"]
        {'id': 1}
        injected failure at id=2 (armed after checkpoints [])
        ({'id': 2}, 2)
    """

    def __init__(
        self,
        fn: Callable[[Any], Any] | None,
        marker_dir: str | os.PathLike[str],
        *,
        column: str = "value",
        at: int = 0,
        armed_by: str | os.PathLike[str] | None = None,
        exit_code: int | None = None,
    ) -> None:
        self.fn = fn
        self.exit_code = exit_code
        self.marker = os.path.join(os.fspath(marker_dir), "fired")
        self.column = column
        self.at = at
        self.armed_by = os.fspath(armed_by) if armed_by is not None else None
        self._done = False
        self._armed_after: list[int] | None = None if armed_by is not None else []

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_done"] = False
        return state

    def _armed(self) -> bool:
        if self._armed_after is not None:
            return True
        assert self.armed_by is not None
        found = completed_checkpoints(self.armed_by)
        if found:
            self._armed_after = found
        return bool(found)

    def _trigger(self, value: Any) -> None:
        if self._done:
            return
        if os.path.exists(self.marker):
            self._done = True
            return
        if not self._armed():
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            self._done = True
            return
        self._done = True
        note = {"id": value, "armed_after": self._armed_after, "pid": os.getpid()}
        with os.fdopen(fd, "w") as marker:
            json.dump(note, marker)
            marker.flush()
            os.fsync(marker.fileno())
        if self.exit_code is not None:
            os._exit(self.exit_code)
        raise InjectedFailure(
            f"injected failure at {self.column}={value} (armed after checkpoints "
            f"{self._armed_after})"
        )

    def __call__(self, item: Any) -> Any:
        if not self._done:
            if isinstance(item, pa.RecordBatch):
                index = item.schema.get_field_index(self.column)
                if index < 0:
                    raise KeyError(f"FailOnce: no column {self.column!r} in {item.schema.names}")
                column = item.column(index)
                if len(column):
                    import pyarrow.compute as pc

                    mask = pc.greater_equal(column, self.at)
                    if pc.any(mask).as_py():
                        first = pc.index(mask, True).as_py()
                        self._trigger(column[first].as_py())
            elif item[self.column] >= self.at:
                self._trigger(item[self.column])
        return item if self.fn is None else self.fn(item)

    @property
    def fired(self) -> bool:
        """True once the failure fired (in any subtask or process)."""
        return os.path.exists(self.marker)

    def fired_info(self) -> dict[str, Any]:
        """Where it fired: ``{"id", "armed_after": [checkpoint ids], "pid"}``.

        Raises:
            FileNotFoundError: It never fired.
        """
        with open(self.marker) as marker:
            info: dict[str, Any] = json.load(marker)
        return info


def read_parquet_dir(directory: str | os.PathLike[str]) -> pa.Table:
    """The committed rows of a Parquet directory, as ``pyarrow.dataset`` reads them.

    Files whose names start with ``_`` or ``.`` (uncommitted) are ignored; a
    missing or empty directory gives an empty table.
    """
    import pyarrow.dataset as ds

    root = os.fspath(directory)
    if not os.path.isdir(root):
        return pa.table({})
    dataset = ds.dataset(root, format="parquet")
    if not dataset.files:
        return pa.table({})
    return dataset.to_table()


# ---------------------------------------------------------------------------
# a reference two-phase-commit sink


class RecordingTwoPhaseSink(TwoPhaseCommitSink):
    """A reference exactly-once sink that logs every phase durably.

    Each transaction is written at pre-commit to ``dir/pending/<txn>.arrow``
    and committed by renaming it into ``dir/committed/`` (idempotent: a
    re-commit of a committed transaction only logs ``"recommit"``). Every
    phase is appended, fsynced, to ``dir/log.jsonl`` as one JSON object:
    ``{"phase", "txn", "checkpoint", "subtask", "attempt", "rows", "pid"}``
    (``phase`` is ``begin``, ``pre_commit``, ``commit``, ``recommit`` or
    ``abort``; ``checkpoint`` is the id the transaction was pre-committed for).
    Works across threads and processes.

    Args:
        dir: The sink's directory (created if missing).
    """

    END_OF_JOB = 2**64 - 1

    def __init__(self, dir: str | os.PathLike[str]) -> None:
        self.dir = os.fspath(dir)
        self.subtask = 0
        self.attempt = 0

    # -- reading the outcome ---------------------------------------------------

    @staticmethod
    def read_log(dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
        """The logged phases, in the order they were written."""
        path = os.path.join(os.fspath(dir), "log.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as log:
            return [json.loads(line) for line in log if line.strip()]

    @staticmethod
    def committed(dir: str | os.PathLike[str]) -> pa.Table:
        """The rows of every committed transaction (an empty table if none)."""
        import pyarrow.ipc as ipc

        root = os.path.join(os.fspath(dir), "committed")
        tables = []
        for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
            if name.endswith(".arrow"):
                with pa.memory_map(os.path.join(root, name)) as source:
                    tables.append(ipc.open_file(source).read_all())
        tables = [t for t in tables if t.num_rows]
        return pa.concat_tables(tables) if tables else pa.table({})

    # -- the sink ---------------------------------------------------------------

    _lock = threading.Lock()

    def _log(self, phase: str, txn: dict[str, Any], **extra: Any) -> None:
        entry = {
            "phase": phase,
            "txn": txn["id"],
            "checkpoint": txn.get("checkpoint"),
            "subtask": txn.get("subtask", self.subtask),
            "attempt": self.attempt,
            "rows": txn.get("rows", 0),
            "pid": os.getpid(),
            **extra,
        }
        line = (json.dumps(entry) + "\n").encode()
        path = os.path.join(self.dir, "log.jsonl")
        with RecordingTwoPhaseSink._lock:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def _path(self, kind: str, txn: dict[str, Any]) -> str:
        suffix = ".arrow" if txn["rows"] else ".empty"
        return os.path.join(self.dir, kind, f"{txn['id']}{suffix}")

    def open(self, ctx: dict[str, Any]) -> None:
        self.subtask = int(ctx.get("subtask_index", 0))
        self.attempt = int(ctx.get("attempt", 0))
        for kind in ("pending", "committed"):
            os.makedirs(os.path.join(self.dir, kind), exist_ok=True)

    def begin_transaction(self) -> dict[str, Any]:
        txn: dict[str, Any] = {
            "id": f"s{self.subtask}-a{self.attempt}-{uuid.uuid4().hex[:12]}",
            "subtask": self.subtask,
            "checkpoint": None,
            "rows": 0,
            "batches": [],
        }
        self._log("begin", txn)
        return txn

    def write(self, txn: dict[str, Any], batch: pa.RecordBatch) -> None:
        txn["batches"].append(batch)
        txn["rows"] += batch.num_rows

    def on_checkpoint(self, txn: dict[str, Any], checkpoint_id: int) -> None:
        txn["checkpoint"] = checkpoint_id

    def pre_commit(self, txn: dict[str, Any]) -> None:
        import pyarrow.ipc as ipc

        batches: list[pa.RecordBatch] = txn["batches"]
        path = self._path("pending", txn)
        tmp = path + ".tmp"
        if batches:
            with pa.OSFile(tmp, "wb") as out, ipc.new_file(out, batches[0].schema) as writer:
                for batch in batches:
                    writer.write_batch(batch)
        else:
            open(tmp, "wb").close()
        with open(tmp, "rb+") as done:
            os.fsync(done.fileno())
        os.replace(tmp, path)
        txn["batches"] = []
        self._log("pre_commit", txn)

    def commit(self, txn: dict[str, Any]) -> None:
        pending, committed = self._path("pending", txn), self._path("committed", txn)
        if os.path.exists(committed):
            self._log("recommit", txn)
            return
        try:
            os.replace(pending, committed)
        except FileNotFoundError:
            if os.path.exists(committed):  # a concurrent re-commit won the race
                self._log("recommit", txn)
                return
            raise RuntimeError(
                f"transaction {txn['id']} was never pre-committed: no {pending}"
            ) from None
        self._log("commit", txn)

    def abort(self, txn: dict[str, Any]) -> None:
        txn["batches"] = []
        self._log("abort", txn)


#: Comma-separated paths of the hadoop-aws and AWS SDK bundle jars that give a
#: test Spark session Hadoop's S3A filesystem (``.ci/run`` fetches them).
S3A_JARS_ENV = "EDDYLINE_TEST_S3A_JARS"


def spark_s3a_test_conf() -> tuple[dict[str, str] | None, str]:
    """Spark settings that load Hadoop's S3A filesystem for the test suites, or
    ``(None, why)`` when the jars named by ``EDDYLINE_TEST_S3A_JARS`` are missing.

    The jars ``.ci/run`` extracts (hadoop-aws 3.3.1 with AWS SDK 1.11) are older
    than pyspark's Hadoop client (3.4/3.5), whose defaults they cannot parse:
    durations with units (``60s``) and SDK-v2 credential provider classes. The
    settings give those as plain numbers and name the v1 provider. Endpoint and
    keys are set by the tests (:func:`eddyline.spark.s3a_settings`).

    Example:
        >>> conf, why = spark_s3a_test_conf()
        >>> conf is None or "spark.jars" in conf
        True
    """
    listed = [p for p in os.environ.get(S3A_JARS_ENV, "").split(",") if p.strip()]
    if not listed:
        return None, f"{S3A_JARS_ENV} is not set (.ci/run fetches the S3A jars)"
    missing = [p for p in listed if not os.path.isfile(p)]
    if missing:
        return None, f"{S3A_JARS_ENV} names missing jars: {missing}"
    prefix = "spark.hadoop.fs.s3a."
    numeric = {
        "threads.keepalivetime": "60",
        "connection.establish.timeout": "5000",
        "connection.timeout": "200000",
        "multipart.purge.age": "86400",
        "connection.ttl": "300000",
        "assumed.role.session.duration": "1800",
        "retry.interval": "500",
        "retry.throttle.interval": "100",
        "connection.request.timeout": "0",
    }
    conf = {prefix + k: v for k, v in numeric.items()}
    conf["spark.jars"] = ",".join(listed)
    conf[prefix + "impl"] = "org.apache.hadoop.fs.s3a.S3AFileSystem"
    conf[prefix + "aws.credentials.provider"] = (
        "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
    )
    return conf, ""
