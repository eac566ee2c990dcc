"""The loop bodies the tests and benches of eddyline's loops build jobs from."""

from __future__ import annotations

from typing import TYPE_CHECKING

from support.faults import SleepPerBatch

if TYPE_CHECKING:
    from eddyline.stream import DataStream


def collatz_steps(n: int) -> int:
    """How many Collatz steps (``n/2`` if even, ``3n+1`` if odd) take ``n`` to 1.

    Example:
        >>> [collatz_steps(n) for n in (1, 2, 3, 6)]
        [0, 1, 7, 8]
    """
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def collatz_body(s: DataStream, *, sleep_per_batch: float = 0.0) -> tuple[DataStream, DataStream]:
    """A Collatz loop body in Rust expressions, for ``stream.iterate``.

    Records with ``x == 1`` leave the loop; the others take one step
    (``x // 2`` or ``3x + 1``) and ``steps + 1`` and go round again. With
    ``sleep_per_batch`` (seconds), the step first sleeps that long per batch
    (:class:`SleepPerBatch`): a slow body, so the feedback backs up (spills,
    backpressure) in fault tests; pass it with ``functools.partial``.
    """
    from eddyline.expr import col, lit

    done = s.filter(col("x") == 1)
    odd = col("x") % 2
    going = s.filter(col("x") > 1)
    if sleep_per_batch > 0:
        going = going.map_batches(SleepPerBatch(sleep_per_batch))
    step = going.with_columns(
        x=odd * (col("x") * 3 + 1) + (lit(1) - odd) * (col("x") // 2),
        steps=col("steps") + 1,
    )
    return step, done


def nested_body(
    s: DataStream, *, spill_dir: str | None = None, sleep_per_batch: float = 0.0
) -> tuple[DataStream, DataStream]:
    """An outer loop body holding an inner loop, for ``stream.iterate`` (nested loops).

    Input columns ``value``, ``outer`` (rounds left, e.g. ``value % 7 + 1``) and
    ``steps``. Each outer round runs an inner loop of ``(value + outer) % 3 + 1``
    steps (uid ``"inner"``, its feedback always spilled to ``spill_dir``), then
    counts ``outer`` down; records with ``outer == 0`` leave. :func:`nested_steps`
    is the reference. ``sleep_per_batch`` slows the inner step as in
    :func:`collatz_body`; pass both with ``functools.partial``.
    """
    from eddyline.expr import col

    prepared = s.with_columns(inner=(col("value") + col("outer")) % 3 + 1)

    def inner_body(t: DataStream) -> tuple[DataStream, DataStream]:
        if sleep_per_batch > 0:
            t = t.map_batches(SleepPerBatch(sleep_per_batch))
        stepped = t.with_columns(steps=col("steps") + 1, inner=col("inner") - 1)
        return stepped.filter(col("inner") > 0), stepped.filter(col("inner") == 0)

    after = prepared.iterate(inner_body, feedback_memory=1, spill_dir=spill_dir).uid("inner")
    stepped = after.select("value", "outer", "steps").with_columns(outer=col("outer") - 1)
    return stepped.filter(col("outer") > 0), stepped.filter(col("outer") == 0)


def nested_steps(value: int) -> int:
    """The ``steps`` :func:`nested_body` gives ``value`` when it starts with
    ``outer = value % 7 + 1``.

    Example:
        >>> [nested_steps(v) for v in (1, 2, 7)]
        [4, 6, 3]
    """
    outer, steps = value % 7 + 1, 0
    while outer > 0:
        steps += (value + outer) % 3 + 1
        outer -= 1
    return steps
