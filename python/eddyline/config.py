"""Job configuration: durations, checkpointing and restart strategies.

Durations are given in seconds as numbers, or as strings with a unit:

    >>> from eddyline.config import parse_duration
    >>> parse_duration("250ms"), parse_duration("2min"), parse_duration(1.5)
    (0.25, 120.0, 1.5)
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Final, Literal

from ._storage import storage_location

__all__ = ["CheckpointConfig", "Duration", "RestartStrategy", "parse_duration", "parse_size"]

Duration = float | int | str
"""A duration: seconds as a number, or a string such as ``"250ms"`` or ``"2min"``."""

# The units Flink (``TimeUtils``) and Spark (interval strings) users write.
_UNIT_NAMES: Final[dict[float, tuple[str, ...]]] = {
    1e-6: ("us", "micro", "micros", "microsecond", "microseconds"),
    1e-3: ("ms", "milli", "millis", "millisecond", "milliseconds"),
    1.0: ("s", "sec", "secs", "second", "seconds"),
    60.0: ("m", "min", "mins", "minute", "minutes"),
    3600.0: ("h", "hour", "hours"),
    86400.0: ("d", "day", "days"),
}
_UNITS: Final[dict[str, float]] = {
    name: seconds for seconds, names in _UNIT_NAMES.items() for name in names
}
_UNITS_HINT: Final = "; units: " + ", ".join("/".join(names) for names in _UNIT_NAMES.values())
_DURATION_RE: Final = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$")

CheckpointMode = Literal["exactly_once", "at_least_once"]
RecoveryMode = Literal["latest", "recompute"]


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}


def parse_size(value: int | str, *, what: str = "size") -> int:
    """Parses a byte size: an int, or a string like ``"64MiB"``, ``"512KiB"``, ``"1GB"``.

    Example:
        >>> parse_size("64MiB"), parse_size("1kB"), parse_size(4096)
        (67108864, 1000, 4096)
    """
    if isinstance(value, bool):
        raise TypeError(f"{what} must be an int or a string like '64MiB', got {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(number) :]
        if unit not in _SIZE_UNITS or not number:
            raise ValueError(
                f"{what} {value!r} is not a size: use a number of bytes or a string like "
                "'512KiB', '64MiB', '1GiB'"
            )
        try:
            size = int(float(number) * _SIZE_UNITS[unit])
        except ValueError:
            raise ValueError(f"{what} {value!r} is not a size") from None
    else:
        raise TypeError(f"{what} must be an int or a string like '64MiB', got {value!r}")
    if size <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return size


def parse_duration(value: Duration, *, what: str = "duration") -> float:
    """Parses a duration into seconds.

    Args:
        value: Seconds as an ``int`` or ``float``, or a string made of a
            non-negative number and a unit, with or without a space
            between them: ``us``, ``ms``, ``s``/``sec``/``second(s)``,
            ``m``/``min``/``minute(s)``, ``h``/``hour(s)``, ``d``/``day(s)``
            (and the long forms of ``us`` and ``ms``); a bare number string
            means seconds.
        what: What the duration is for, used in error messages.

    Returns:
        The duration in seconds, as a float.

    Raises:
        ValueError: If the value is negative, not finite, or not understood.

    Example:
        >>> parse_duration("1s"), parse_duration("1 minute"), parse_duration("1d")
        (1.0, 60.0, 86400.0)
        >>> parse_duration("soon")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: invalid duration 'soon': expected seconds as a number or a string like ...
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid {what} {value!r}: expected seconds as a number, not a bool")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION_RE.match(value.lower())
        unit = match.group(2) if match else ""
        if match is None or (unit and unit not in _UNITS):
            raise ValueError(
                f"invalid {what} {value!r}: expected seconds as a number or a string like "
                f"'250ms', '1s', '2min', '1h'{_UNITS_HINT}"
            )
        seconds = float(match.group(1)) * _UNITS[unit or "s"]
    else:
        raise ValueError(
            f"invalid {what} {value!r}: expected seconds as a number or a string like "
            f"'250ms', '1s', '2min', '1h', got {type(value).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"invalid {what} {value!r}: must be a finite, non-negative duration")
    return seconds


class CheckpointConfig:
    """Where and how often a job takes checkpoints.

    Args:
        dir: The checkpoint directory (created when the job starts): a local
            path, a ``file://`` URI, or an object store URI (``s3://bucket/prefix``,
            ``gs://...``, ``az://...``, ``abfss://...``) reached with the
            environment's ``storage_options`` or the standard environment
            variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...). A
            checkpoint on an object store exists once its manifest object is
            written.
        interval: Time between checkpoints; must be positive.
        mode: ``"exactly_once"`` (barriers aligned) or ``"at_least_once"``.
        unaligned: Take unaligned checkpoints (Flink's FLIP-76): a barrier
            overtakes the data queued in its channels, each task snapshots on
            the first barrier of a checkpoint, and the data the barrier
            overtook is stored with the checkpoint as channel state and
            replayed, in order, on restore. Checkpoints then complete quickly
            under backpressure. Savepoints stay aligned. A checkpoint holding
            channel state also restores at another parallelism: the in-flight
            rows are dealt out by each edge's partitioning (a keyed exchange
            sends each row to the subtask owning its key group) and replayed
            before any new data.
            Works in-process and across worker processes, and in loops: the
            barrier overtakes the loop's feedback queue too (its spilled part
            is referred to, not copied), and the feedback in flight is the
            feedback channel's state, re-emitted first on restore.
        aligned_timeout: With ``unaligned=True``: start each checkpoint aligned
            and switch a task to unaligned when its alignment takes longer than
            this (Flink's ``aligned-checkpoint-timeout``), so checkpoints stay
            aligned (no channel state) while there is no backpressure. ``None``
            (the default): unaligned from the start. In loops the head also
            switches a checkpoint whose barrier takes longer to come back around
            the cycle: its FLIP-16 log so far and the feedback queued before the
            barrier become the feedback channel state.
        retained: How many completed checkpoints to keep (at least 1).
        incremental: Write only the key groups that changed since the last
            completed checkpoint; a checkpoint's manifest refers to the state
            files it shares with earlier ones (under ``DIR/shared/``), and
            retention deletes a shared file only when no retained checkpoint
            refers to it. Restores read exactly one checkpoint's files, at any
            parallelism. Savepoints stay full and self-contained.
        recovery: ``"latest"`` restores all state from the latest checkpoint;
            ``"recompute"`` persists no state for operators that can rebuild it
            from a bounded stretch of input and replays that input instead
            (FLINK-4120). Replay must reproduce the run: user functions must be
            deterministic, sources must return the same batches from the same
            offsets, and ``batch_size`` and the sources' parallelism must not
            change (a replayed barrier not met at its recorded offset, or a
            checkpoint without an offset for a source subtask, is a
            ``CheckpointError``). Needs
            ``mode="exactly_once"`` and ``unaligned=False``.
        timeout: How long one checkpoint may take before it is aborted (its
            transactions then never commit); must be positive.

    Raises:
        ValueError: If a value is out of range.
        StorageError: If ``dir`` is a URI whose scheme cannot be served.

    Example:
        >>> cfg = CheckpointConfig("/tmp/chk", interval="500ms", retained=2)
        >>> cfg.interval, cfg.mode, cfg.retained, cfg.timeout
        (0.5, 'exactly_once', 2, 600.0)
    """

    __slots__ = (
        "aligned_timeout",
        "dir",
        "incremental",
        "interval",
        "mode",
        "recovery",
        "retained",
        "timeout",
        "unaligned",
    )

    dir: str
    interval: float
    mode: CheckpointMode
    unaligned: bool
    incremental: bool
    aligned_timeout: float | None
    retained: int
    recovery: RecoveryMode
    timeout: float

    def __init__(
        self,
        dir: str | os.PathLike[str],
        *,
        interval: Duration = "1s",
        mode: CheckpointMode = "exactly_once",
        unaligned: bool = False,
        incremental: bool = False,
        retained: int = 3,
        recovery: RecoveryMode = "latest",
        timeout: Duration = "10min",
        aligned_timeout: Duration | None = None,
    ) -> None:
        path = os.fspath(dir)
        if not isinstance(path, str) or not path:
            raise ValueError(f"checkpoint dir must be a non-empty path, got {dir!r}")
        path = storage_location(path, what="checkpoint dir")
        seconds = parse_duration(interval, what="checkpoint interval")
        if seconds <= 0:
            raise ValueError(f"checkpoint interval must be positive, got {interval!r}")
        if mode not in ("exactly_once", "at_least_once"):
            raise ValueError(
                f"checkpoint mode must be 'exactly_once' or 'at_least_once', got {mode!r}"
            )
        if not isinstance(unaligned, bool):
            raise ValueError(f"unaligned must be a bool, got {unaligned!r}")
        if unaligned and mode != "exactly_once":
            raise ValueError("unaligned checkpoints require mode='exactly_once'")
        if not isinstance(incremental, bool):
            raise ValueError(f"incremental must be a bool, got {incremental!r}")
        aligned_s: float | None = None
        if aligned_timeout is not None:
            aligned_s = parse_duration(aligned_timeout, what="aligned_timeout")
            if not unaligned:
                raise ValueError(
                    "aligned_timeout switches aligned checkpoints to unaligned ones: it needs "
                    "unaligned=True"
                )
        if isinstance(retained, bool) or not isinstance(retained, int) or retained < 1:
            raise ValueError(f"retained must be an int >= 1, got {retained!r}")
        if recovery not in ("latest", "recompute"):
            raise ValueError(f"recovery must be 'latest' or 'recompute', got {recovery!r}")
        if recovery == "recompute" and (mode != "exactly_once" or unaligned):
            raise ValueError(
                "recovery='recompute' needs mode='exactly_once' with aligned barriers "
                "(unaligned=False): replayed state is only exact when every barrier cuts the "
                "input where it did in the original run"
            )
        timeout_s = parse_duration(timeout, what="checkpoint timeout")
        if timeout_s <= 0:
            raise ValueError(f"checkpoint timeout must be positive, got {timeout!r}")
        object.__setattr__(self, "dir", path)
        object.__setattr__(self, "interval", seconds)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "unaligned", unaligned)
        object.__setattr__(self, "incremental", incremental)
        object.__setattr__(self, "aligned_timeout", aligned_s)
        object.__setattr__(self, "retained", retained)
        object.__setattr__(self, "recovery", recovery)
        object.__setattr__(self, "timeout", timeout_s)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("CheckpointConfig is immutable")

    def __repr__(self) -> str:
        return (
            f"CheckpointConfig({self.dir!r}, interval={self.interval!r}, mode={self.mode!r}, "
            f"unaligned={self.unaligned!r}, incremental={self.incremental!r}, "
            f"retained={self.retained!r}, "
            f"recovery={self.recovery!r}, timeout={self.timeout!r}, "
            f"aligned_timeout={self.aligned_timeout!r})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CheckpointConfig):
            return NotImplemented
        return self._to_dict() == other._to_dict()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._to_dict().items())))

    def _to_dict(self) -> dict[str, Any]:
        """The binding's view: the fields, with ``interval`` and ``timeout`` in seconds.

        Example:
            >>> CheckpointConfig("d")._to_dict()["interval"]
            1.0
        """
        return {
            "dir": self.dir,
            "interval": self.interval,
            "mode": self.mode,
            "unaligned": self.unaligned,
            "incremental": self.incremental,
            "aligned_timeout": self.aligned_timeout,
            "retained": self.retained,
            "recovery": self.recovery,
            "timeout": self.timeout,
        }


class RestartStrategy:
    """What to do when a job fails: restart it, or give up.

    Create one with :meth:`fixed_delay` or :meth:`none`.

    Example:
        >>> RestartStrategy.fixed_delay(attempts=2, delay="50ms")._to_dict()
        {'attempts': 2, 'delay_s': 0.05}
        >>> RestartStrategy.none()._to_dict()
        {'attempts': 0, 'delay_s': 0.0}
    """

    __slots__ = ("attempts", "delay")

    attempts: int
    delay: float

    def __init__(self, attempts: int, delay: Duration) -> None:
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
            raise ValueError(f"restart attempts must be an int >= 0, got {attempts!r}")
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "delay", parse_duration(delay, what="restart delay"))

    @classmethod
    def fixed_delay(cls, attempts: int = 3, delay: Duration = "100ms") -> RestartStrategy:
        """Restarts a failed job up to ``attempts`` times, waiting ``delay`` each time.

        Args:
            attempts: The maximum number of restarts (``>= 0``).
            delay: The wait before each restart.

        Returns:
            The strategy.
        """
        return cls(attempts, delay)

    @classmethod
    def none(cls) -> RestartStrategy:
        """Never restarts: the first failure fails the job.

        Returns:
            The strategy.
        """
        return cls(0, 0.0)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("RestartStrategy is immutable")

    def __repr__(self) -> str:
        if self.attempts == 0:
            return "RestartStrategy.none()"
        return f"RestartStrategy.fixed_delay(attempts={self.attempts}, delay={self.delay!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RestartStrategy):
            return NotImplemented
        return (self.attempts, self.delay) == (other.attempts, other.delay)

    def __hash__(self) -> int:
        return hash((self.attempts, self.delay))

    def _to_dict(self) -> dict[str, Any]:
        """The binding's view: ``{"attempts": int, "delay_s": float}``."""
        return {"attempts": self.attempts, "delay_s": self.delay}
