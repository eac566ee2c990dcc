"""The sink API: collecting results in the driver, dropping them, two-phase commit.

The connectors that write elsewhere (``ParquetSink``, ``DeltaSink``, ``KafkaSink``,
``SparkTableSink``) live in :mod:`eddyline.connectors`.

Example:
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> out = env.from_collection([{"x": 1}, {"x": 2}]).collect()
    >>> _ = env.execute()  # doctest: +SKIP
    >>> out.to_pylist()  # doctest: +SKIP
    [{'x': 1}, {'x': 2}]
"""

from __future__ import annotations

from typing import Any, Protocol, Self

import pyarrow as pa

from .errors import EddylineError
from .user_api import Sink, TwoPhaseCommitSink

__all__ = ["CollectHandle", "DiscardSink", "Sink", "TwoPhaseCommitSink"]


class _SinkOperators(Protocol):
    """The sink node a :class:`CollectHandle` names (``stream.py``'s
    ``DataStreamSink``, which imports this module, so it is not named here)."""

    def uid(self, uid: str) -> Any: ...

    def name(self, name: str) -> Any: ...


class CollectHandle:
    """The rows a ``stream.collect()`` sink received, available after the job ran.

    Rows are those committed by the sink: exactly once, even across restarts
    inside one ``execute``. Like every sink, it takes :meth:`uid` (to match
    its state on a restore after the job changed) and :meth:`name`.

    Example:
        >>> import eddyline as ed
        >>> env = ed.StreamEnvironment()
        >>> env.from_sequence(0, 3).collect().uid("out").name("results")
        CollectHandle('results', not run yet)
    """

    def __init__(
        self, operator: str, schema: pa.Schema | None, sink: _SinkOperators | None = None
    ) -> None:
        self._operator = operator
        self._schema = schema
        self._sink = sink
        self._batches: list[pa.RecordBatch] | None = None

    def _operators(self) -> _SinkOperators:
        if self._sink is None:
            raise EddylineError(
                f"collect sink '{self._operator}' is not part of a job graph",
                operator=self._operator,
            )
        return self._sink

    def uid(self, uid: str) -> Self:
        """Sets the sink's stable id (matches its state on restore); returns ``self``."""
        self._operators().uid(uid)
        return self

    def name(self, name: str) -> Self:
        """Names the sink (used in metrics, errors and logs); returns ``self``."""
        self._operators().name(name)
        return self

    def _set(self, batches: list[pa.RecordBatch]) -> None:
        self._batches = list(batches)

    @property
    def ready(self) -> bool:
        """True once a job containing this sink has finished."""
        return self._batches is not None

    def _require(self) -> list[pa.RecordBatch]:
        if self._batches is None:
            raise EddylineError(
                f"collect sink '{self._operator}' has no result yet: run the job with "
                "env.execute() (or wait for env.execute_async()) before reading it",
                operator=self._operator,
            )
        return self._batches

    def to_arrow(self) -> pa.Table:
        """Returns the collected rows as a table (empty, with the stream's schema, if none)."""
        batches = [batch for batch in self._require() if batch.num_rows > 0]
        if batches:
            return pa.Table.from_batches(batches)
        if self._schema is not None:
            return self._schema.empty_table()
        all_batches = self._require()
        if all_batches:
            return all_batches[0].schema.empty_table()
        return pa.table({})

    def to_pylist(self) -> list[dict[str, Any]]:
        """Returns the collected rows as a list of dicts."""
        rows: list[dict[str, Any]] = []
        for batch in self._require():
            rows.extend(batch.to_pylist())
        return rows

    def __len__(self) -> int:
        return sum(batch.num_rows for batch in self._require())

    def __repr__(self) -> str:
        state = f"{len(self)} rows" if self._batches is not None else "not run yet"
        return f"CollectHandle({self._operator!r}, {state})"


class DiscardSink(Sink):
    """Drops every row (Flink's ``DiscardingSink``, Spark's ``noop`` format).

    For measuring a pipeline without the cost of keeping or writing its
    output: the job's metrics still count the rows that reached the sink.

    Example:
        >>> import eddyline as ed
        >>> env = ed.StreamEnvironment(1)
        >>> _ = env.from_sequence(0, 1000).sink_to(ed.DiscardSink()).name("drop")
        >>> env.execute().metrics["operators"]["drop"]["records_in"]
        1000
    """

    def __repr__(self) -> str:
        return "DiscardSink()"
