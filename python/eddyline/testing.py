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
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Self, TypeAlias, TypeVar

import pyarrow as pa

from . import _core
from ._storage import is_object_store_uri
from .sinks import CollectHandle

__all__ = [
    "FailOnce",
    "InjectedFailure",
    "KilledRun",
    "ManualClock",
    "SleepPerBatch",
    "assert_exact_ids",
    "assert_same_rows",
    "completed_checkpoints",
    "id_report",
    "kill_after_checkpoints",
    "last_by_key",
    "read_parquet_dir",
    "sigkill_when",
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

    def __enter__(self) -> Self:
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
