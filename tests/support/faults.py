"""Fault injection and checkers for eddyline's own tests, benches and chaos tester.

What a job is slowed, held back, failed or killed with (``SleepPerBatch``,
``CheckpointGatedSequence``, ``FailOnce``, ``sigkill_when``,
``kill_after_checkpoints``, ``killable_script``, ``run_killed``), what it is waited on with
(``wait_until``, ``completed_checkpoints``) and how its ids are checked
(``assert_exact_ids``, docs/TESTING.md "structured input"). Users test their jobs
with :mod:`eddyline.testing`; these helpers serve eddyline's own suites.

The functions here are pickled into jobs (``map_batches(SleepPerBatch(...))``):
worker processes find this module because ``tests/`` is on their ``PYTHONPATH``
(``tests/conftest.py`` puts it there; a bench or a chaos case script adds it).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa

from eddyline import _core
from eddyline._storage import is_object_store_uri
from eddyline.sources import Source

__all__ = [
    "CheckpointGatedSequence",
    "FailOnce",
    "InjectedFailure",
    "KilledRun",
    "SleepPerBatch",
    "assert_exact_ids",
    "completed_checkpoints",
    "id_report",
    "kill_after_checkpoints",
    "killable_script",
    "run_killed",
    "sigkill_when",
    "source_records",
    "wait_until",
]

T = TypeVar("T")


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


class CheckpointGatedSequence(Source):
    """``value`` = ``0..n`` in ``splits`` equal splits, holding rows back until
    checkpoints complete, so that a test gets checkpoints *during* the input
    whatever the timing (a fixed sleep per batch leaves it to chance).

    Rows at or past ``gates[k]`` (a fraction of each split) are read only once
    checkpoint ``k + 1`` or a later one completed in ``checkpoint_dir`` (ids
    count from 1 in a fresh directory; retention may have deleted the older
    ones). Until then :meth:`read` answers ``(None, offset)``, which keeps the
    subtask free to pass barriers (a function that blocks on the data path
    would hold the barrier it waits for). Checkpoints come from the interval
    or from ``trigger_checkpoint``; a restored run, whose directory has them
    already, is not held back. Rows at or past ``hold`` (a fraction) are never
    read: the job runs until the test cancels it.

    With ``fresh``, each gate waits instead for a checkpoint *triggered after*
    the split reached it (an id two above the newest completed on arrival:
    one checkpoint is in flight at a time), so a barrier separates the rows
    before every gate from those after it, however many checkpoints came
    earlier. A run with ``fresh`` needs periodic checkpoints, also when restored.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     src = CheckpointGatedSequence(tmp, 10, splits=2, gates=(0.4,))
        ...     batch, offset = src.read(1, 5, 100)
        ...     batch.column(0).to_pylist(), offset, src.read(1, offset, 100)
        ([5, 6], 7, (None, 7))
    """

    def __init__(
        self,
        checkpoint_dir: str | os.PathLike[str],
        n: int,
        *,
        splits: int = 2,
        gates: Sequence[float] = (1 / 3, 2 / 3),
        hold: float | None = None,
        fresh: bool = False,
    ) -> None:
        if n % splits:
            raise ValueError(f"{n} rows do not split evenly into {splits}")
        self.checkpoint_dir = os.fspath(checkpoint_dir)
        self.per_split = n // splits
        self.n_splits = splits
        self.gates = sorted(int(g * self.per_split) for g in gates)
        self.hold = None if hold is None else int(hold * self.per_split)
        self.fresh = fresh
        self._arrived: dict[tuple[int, int], int] = {}

    def schema(self) -> pa.Schema:
        return pa.schema([("value", pa.int64())])

    def splits(self) -> list[int]:
        return list(range(self.n_splits))

    def initial_offset(self, split: int) -> int:
        return split * self.per_split

    def gate_values(self, k: int) -> list[int]:
        """The first value of each split that waits for ``k + 1`` checkpoints."""
        return [s * self.per_split + self.gates[k] for s in range(self.n_splits)]

    def read(self, split: int, offset: int, max_rows: int) -> Any:
        start, end = split * self.per_split, (split + 1) * self.per_split
        if offset >= end:
            return None
        if self.hold is not None and offset - start >= self.hold:
            return None, offset
        needed = sum(1 for g in self.gates if offset - start >= g)
        if needed:
            newest = max(completed_checkpoints(self.checkpoint_dir), default=0)
            if self.fresh:
                arrived = self._arrived.setdefault((split, needed), newest)
                if newest < arrived + 2:
                    return None, offset
            elif newest < needed:
                return None, offset
        cuts = [*self.gates, *([] if self.hold is None else [self.hold])]
        stop = min([end, offset + max_rows, *(start + g for g in cuts if start + g > offset)])
        return pa.record_batch([pa.array(range(offset, stop), pa.int64())], names=["value"]), stop


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
    if proc.returncode == 0 and allow_early_end:
        # it ended on its own between the check above and the kill
        return None
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


_KILLABLE_PROLOGUE = """\
import sys

{imports}import eddyline as ed
from support.faults import SleepPerBatch

out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = ed.StreamEnvironment(
    2,
    checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3),
    batch_size={batch_size},
)
"""


def killable_script(body: str, *, imports: Sequence[str] = (), batch_size: int = 200) -> str:
    """A job script for :func:`run_killed`: it reads ``out chk n`` from its
    arguments and builds ``env`` (two subtasks, a checkpoint every 100 ms into
    ``chk``, three retained) before ``body`` (dedented) builds and runs the job.

    ``imports`` are extra import lines put before eddyline's
    (``SleepPerBatch`` is always imported).
    """
    lines = "".join(f"{line}\n" for line in imports)
    prologue = _KILLABLE_PROLOGUE.format(
        imports=f"{lines}\n" if lines else "", batch_size=batch_size
    )
    return prologue + textwrap.dedent(body)


def run_killed(
    script: str,
    directory: Path,
    n: int,
    *,
    kills: int,
    rng: random.Random,
    timeout: float,
    max_delay: float = 0.25,
    allow_early_end: bool = False,
) -> tuple[list[str], Path]:
    """Writes ``script`` (see :func:`killable_script`) into ``directory`` and
    runs it with ``directory/out directory/chk n`` through
    :func:`kill_after_checkpoints` (same ``kills``, ``rng``, ``timeout``,
    ``max_delay`` and ``allow_early_end``).

    Returns:
        The stdout of every run, and the output directory ``directory/out``.
    """
    path = directory / "job.py"
    path.write_text(script)
    out, chk = directory / "out", directory / "chk"
    command = [sys.executable, str(path), str(out), str(chk), str(n)]
    outputs = kill_after_checkpoints(
        command,
        chk,
        kills=kills,
        rng=rng,
        timeout=timeout,
        max_delay=max_delay,
        allow_early_end=allow_early_end,
    )
    return outputs, out


def source_records(output: str) -> int:
    """The ``source records N`` a job script printed at its end."""
    found = re.search(r"^source records (\d+)$", output, re.M)
    if found is None:
        raise AssertionError(f"no 'source records' line in the run's output:\n{output}")
    return int(found.group(1))


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
