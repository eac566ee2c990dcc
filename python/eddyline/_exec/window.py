"""The executor of Python window functions: ``keyed.window(...).reduce(fn)`` and ``.apply(fn)``.

Windows are assigned and fired exactly like the native ``window`` operator
(see :mod:`eddyline.windows`): a record with event time ``t`` joins every
window ``[start, start + size)`` holding ``t`` that is not over yet (over:
``end - 1 <= watermark``); a record whose windows are all over is late,
counted in :attr:`PythonWindowRunner.late_records` and dropped, or, with
``late_output``, returned unchanged for output port 1 (the side output) as
its batch is processed: the batch itself when all its rows are late, else
one filtered batch. The binding
calls :meth:`~PythonWindowRunner.on_watermark` when the input watermark
advances; every window that is over then fires, ordered by window end.

State is keyed, one blob per key group owned by the subtask: the group's
open windows (reduce: the accumulated row; apply: the rows), the watermark
(so that records late before a failure are late after it, as in the native
operator) and the input schema.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Literal, cast

import pyarrow as pa

from ..errors import EddylineError, SchemaError
from ..process_functions import MIN_WATERMARK, Row
from ..user_api import TimeWindow
from .base import RunnerOutput, State
from .event_time import event_times, key_group_range, millis_to_value
from .keyed import KeyedRunner
from .output import RowWriter
from .user_code import UserCode, short

__all__ = ["Fired", "PythonWindowRunner", "WindowTime", "window_output_schema"]

WindowMode = Literal["reduce", "apply"]
Fired = tuple[int, int, Hashable, Any]
"""A fired window: its start and end (ms), the key and the accumulator."""
_STATE_FORMAT = "eddyline.window.v1"
LATE_PORT = 1
"""The output port of late records (the window's side output)."""


def window_output_schema(
    input_schema: pa.Schema, keys: Sequence[str], time_column: str
) -> pa.Schema:
    """The output schema of a window reduce: keys, window bounds, then the other input fields.

    Example:
        >>> s = pa.schema([("k", pa.string()), ("t", pa.int64()), ("v", pa.float64())])
        >>> window_output_schema(s, ["k"], "t").names
        ['k', 'window_start', 'window_end', 't', 'v']
    """
    time_type = input_schema.field(time_column).type
    fields = [input_schema.field(key).with_nullable(True) for key in keys]
    fields += [pa.field("window_start", time_type), pa.field("window_end", time_type)]
    fields += [field for field in input_schema if field.name not in keys]
    return pa.schema(fields)


class WindowTime:
    """A batch function: the batch with column ``window_time``, its column
    ``window_end`` minus 1 ms (the event time of a window's result, as in Flink),
    where the graph does not know it is an integer; the other columns are shared,
    not copied.

    Example:
        >>> b = pa.record_batch({"window_end": pa.array([60_000], pa.timestamp("ms"))})
        >>> WindowTime("window_end")(b).column("window_time").cast(pa.int64()).to_pylist()
        [59999]
    """

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow.compute as pc

        end = batch.column(self.column)
        if pa.types.is_timestamp(end.type):
            one_ms = pa.scalar(1, pa.duration("ms")).cast(pa.duration(end.type.unit))
        else:  # integer milliseconds (a schema unknown when the graph was built)
            one_ms = pa.scalar(1, end.type)
        return batch.append_column(
            pa.field("window_time", end.type, nullable=False), pc.subtract(end, one_ms)
        )


class PythonWindowRunner(KeyedRunner):
    """Keyed event-time windows evaluated by a Python function.

    ``self._state[key_group][window_start][key]`` is the window's accumulator:
    the reduced row (``reduce``) or the list of rows (``apply``).
    """

    counts_late_records = True
    #: The tag of the state blobs (restore refuses another).
    state_format = _STATE_FORMAT

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        size_ms: int,
        slide_ms: int,
        time_column: str,
        mode: WindowMode,
        fn: Callable[..., Any],
        schema: pa.Schema | None,
        late_output: bool = False,
    ) -> None:
        super().__init__(node, keys)
        self._late_output = late_output
        self._size = size_ms
        self._slide = slide_ms
        self._time_column = time_column
        self._mode = mode
        self._fn = fn
        self._declared = schema
        self._writer = RowWriter(node, schema, self.agree_schema)
        self._input_schema: pa.Schema | None = None
        self._watermark = MIN_WATERMARK
        self._group_watermarks: dict[int, int] = {}
        self._owned: range | None = None
        self.late_records = 0

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        self._owned = key_group_range(
            int(ctx.get("subtask_index", 0)),
            int(ctx.get("parallelism", 1)),
            int(ctx.get("max_parallelism", 128)),
        )

    # ---- records ------------------------------------------------------------

    def _watermark_of(self, group: int) -> int:
        restored = self._group_watermarks.get(group)
        return self._watermark if restored is None else max(restored, self._watermark)

    def _process_keyed(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        times, rows, keys, groups = self._prepare(batch, key_groups)
        size, slide = self._size, self._slide
        reduce = self._mode == "reduce"
        fn = self._fn
        state = self._state
        late_rows: list[int] = []
        row: Row | None = None
        key: Hashable = None
        start = 0
        with UserCode(
            self.name,
            detail=lambda v: (
                f"key {short(v['key'])}, window {TimeWindow(v['start'], v['start'] + v['size'])}, "
                f"row: {short(v['row'])}"
            ),
        ):
            for i, (row, key, group, t) in enumerate(zip(rows, keys, groups, times, strict=True)):
                watermark = self._watermark_of(group)
                start = t - t % slide
                if start + size - 1 <= watermark:
                    late_rows.append(i)
                    continue
                windows = state.get(group)
                if windows is None:
                    windows = state[group] = {}
                while start > t - size and start + size - 1 > watermark:
                    accs = windows.get(start)
                    if accs is None:
                        accs = windows[start] = {}
                    if not reduce:
                        accs.setdefault(key, []).append(row)
                    elif key in accs:
                        accs[key] = fn(accs[key], row)
                    else:
                        accs[key] = dict(row)
                    start -= slide
        return self._late(batch, late_rows)

    def _prepare(
        self, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> tuple[list[int], list[Row], list[Any], list[int]]:
        """The batch's event times, rows, keys and key groups (its schema noted)."""
        if self._input_schema is None:
            self._input_schema = batch.schema
        times = event_times(batch, self._time_column, self.name)
        rows, keys, groups = self._rows(batch, key_groups)
        return times, rows, keys, groups

    def _late(self, batch: pa.RecordBatch, late_rows: list[int]) -> RunnerOutput:
        """Counts the late rows of ``batch`` (indices ``late_rows``) and, with a late
        output, returns them for port 1: the batch itself when all are late."""
        self.late_records += len(late_rows)
        if not late_rows or not self._late_output:
            return None
        n = batch.num_rows
        if len(late_rows) == n:
            return (LATE_PORT, batch)
        mask = [False] * n
        for i in late_rows:
            mask[i] = True
        return (LATE_PORT, batch.filter(pa.array(mask, pa.bool_())))

    # ---- firing -------------------------------------------------------------

    def on_watermark(self, watermark: int) -> RunnerOutput:
        """Fires every window that is over at ``watermark`` (``end - 1 <= watermark``)."""
        if watermark <= self._watermark:
            return None
        self._watermark = watermark
        size = self._size
        fired: list[Fired] = []
        for group_state in self._state.values():
            windows = cast(dict[int, dict[Hashable, Any]], group_state)
            due = [start for start in windows if start + size - 1 <= watermark]
            for start in due:
                end = start + size
                fired.extend((start, end, key, acc) for key, acc in windows.pop(start).items())
        if not fired:
            return None
        fired.sort(key=lambda item: item[1])
        return self._emit(fired)

    def _bounds(self, start: int, end: int) -> tuple[Any, Any]:
        schema = self._input_schema
        if schema is None:
            return start, end
        time_type = schema.field(self._time_column).type
        return millis_to_value(start, time_type), millis_to_value(end, time_type)

    def _key_fields(self, key: Any) -> dict[str, Any]:
        if len(self._keys) == 1:
            return {self._keys[0]: key}
        return dict(zip(self._keys, key, strict=True))

    def _emit(self, fired: list[Fired]) -> RunnerOutput:
        out: list[Row] = []
        bounds: dict[tuple[int, int], tuple[Any, Any]] = {}
        key_names = set(self._keys)
        for start, end, key, acc in fired:
            b = bounds.get((start, end))
            if b is None:
                b = bounds[(start, end)] = self._bounds(start, end)
            prefix = self._key_fields(key)
            prefix["window_start"], prefix["window_end"] = b
            if self._mode == "reduce":
                if not isinstance(acc, dict):
                    raise SchemaError(
                        f"operator '{self.name}': the reduce function returned a "
                        f"{type(acc).__name__} ({short(acc)}), expected a dict",
                        operator=self.name,
                    )
                prefix.update((k, v) for k, v in acc.items() if k not in key_names)
                out.append(prefix)
                continue
            window = TimeWindow(start, end)
            with UserCode(
                self.name,
                detail=lambda v: (
                    f"key {short(v['key'])}, window {v['window']}, {len(v['acc'])} rows"
                ),
            ):
                results = self._fn(key, window, acc)
                for result in results if results is not None else ():
                    if not isinstance(result, dict):
                        out.append(result)  # the writer names the bad shape
                        continue
                    out.append({**prefix, **result})
        if self._writer.schema is None and out:
            schema = self._output_schema(out)
            self._writer.schema = None if schema is None else self.agree_schema(schema)
        return self._writer.encode(out)

    def _output_schema(self, rows: list[Any]) -> pa.Schema | None:
        input_schema = self._input_schema
        if input_schema is None:
            return None  # inferred from the rows
        if self._mode == "reduce":
            return window_output_schema(input_schema, self._keys, self._time_column)
        inferred = RowWriter(self.name)._infer(rows)
        time_type = input_schema.field(self._time_column).type
        known = {key: input_schema.field(key).type for key in self._keys}
        known["window_start"] = known["window_end"] = time_type
        fields = []
        for field in inferred:
            target = known.get(field.name)
            if target is not None and (
                pa.types.is_null(field.type) or _same_kind(field.type, target)
            ):
                field = field.with_type(target)
            fields.append(field)
        return pa.schema(fields)

    # ---- lifecycle and state ------------------------------------------------

    def snapshot(self, checkpoint_id: int) -> dict[int, bytes] | None:
        """One blob per owned key group: its watermark, input schema, open windows and
        ``(size_ms, slide_ms, time_column)`` (for ``ed.read_state``; restore ignores it)."""
        groups = set(self._state)
        if self._watermark > MIN_WATERMARK or self._group_watermarks:
            groups.update(self._owned or ())
            groups.update(self._group_watermarks)
        return {
            group: pickle.dumps(
                (
                    self.state_format,
                    self._watermark_of(group),
                    self._input_schema,
                    self._state.get(group, {}),
                    (self._size, self._slide, self._time_column),
                ),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            for group in sorted(groups)
        }

    def restore(self, data: State) -> None:
        if not isinstance(data, dict):
            raise TypeError(
                f"operator '{self.name}': a window has keyed state ({{key_group: bytes}}), "
                f"got {type(data).__name__}"
            )
        for group, blob in data.items():
            fmt, watermark, schema, windows, *_ = pickle.loads(blob)
            if fmt != self.state_format:
                raise EddylineError(
                    f"operator '{self.name}': unknown window state format {fmt!r} in key group "
                    f"{group}",
                    operator=self.name,
                )
            self._group_watermarks[int(group)] = int(watermark)
            if schema is not None and self._input_schema is None:
                self._input_schema = schema
            if windows:
                self._state.setdefault(int(group), {}).update(windows)


def _same_kind(inferred: pa.DataType, known: pa.DataType) -> bool:
    """True if values inferred as ``inferred`` can be stored as ``known`` losslessly enough."""
    if pa.types.is_timestamp(known):
        return pa.types.is_timestamp(inferred)
    if pa.types.is_integer(known):
        return pa.types.is_integer(inferred)
    return True
