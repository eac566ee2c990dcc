"""Runners of ``python`` nodes: all user-function logic of a job, in plain Python.

The Rust side creates one runner per parallel subtask by calling the node's
factory, then calls ``open``, ``process`` (once per batch, with the GIL held
for the whole batch), ``finish``, ``snapshot``/``restore``/
``notify_checkpoint_complete`` and ``close``. Optional methods, called only
if a runner defines them: ``on_watermark(watermark)`` when the input
watermark advances (before it is forwarded; ``2**63 - 1`` ends event time),
``end_input(input)`` when one input ended; and the attribute
``late_records`` (a running count the binding reports as a metric).
A runner returns ``None``, a batch or a list of batches; an item
``(port, batch)`` emits on an output port instead of port 0 (a window's late
records go to port 1, its side output).
Stopping a job with a savepoint without draining calls neither
``finish`` nor ``on_watermark`` with the maximum watermark. Per-record functions are looped
over the rows of a batch here: each column is converted to Python once, rows
are built by a dict-literal comprehension compiled for the batch's schema, and
consecutive per-record stages run in one generated loop.
"""

from __future__ import annotations

import copy
import functools
import heapq
import itertools
import pickle
import traceback
from collections.abc import Callable, Hashable, Iterable, Sequence
from types import CodeType, TracebackType
from typing import Any, ClassVar, Literal, TypeAlias

import pyarrow as pa

from ._event_time import event_times, key_group_range
from .errors import EddylineError, GraphError, JobFailedError, SchemaError
from .functions import MIN_WATERMARK, ProcessContext, ProcessFunction, Row

PortBatch: TypeAlias = tuple[int, pa.RecordBatch]
"""A batch for output port ``port`` (a side output), as ``(port, batch)``."""
RunnerOutput: TypeAlias = (
    pa.RecordBatch | PortBatch | list[pa.RecordBatch] | list[pa.RecordBatch | PortBatch] | None
)
State: TypeAlias = bytes | list[bytes] | dict[int, bytes]
"""A runner's checkpointed state: operator state (``bytes``, or a list of
independent entries that a restore at another parallelism deals to the new
subtasks), or keyed state (one blob per key group, ``{key_group: bytes}``)."""
StageKind = Literal["map", "flat_map", "filter"]
Stage: TypeAlias = tuple[StageKind, Callable[..., Any], str]
"""One per-record stage: its kind, the user function and the operator name."""

_ARROW_CONVERSION_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError)


# ---------------------------------------------------------------------------
# code generation


def _dict_items(names: Sequence[str]) -> str:
    return ", ".join(f"{name!r}: _v{i}" for i, name in enumerate(names))


def _loop_header(ncols: int) -> str:
    if ncols == 0:
        return "for _ in range(_n):"
    values = ", ".join(f"_v{i}" for i in range(ncols))
    columns = ", ".join(f"_c{i}" for i in range(ncols))
    if ncols == 1:
        return f"for {values} in {columns}:"
    return f"for {values} in zip({columns}):"


@functools.lru_cache(maxsize=256)
def _compile_rows(names: tuple[str, ...]) -> Callable[..., list[Row]]:
    """Compiles ``rows(n, *columns) -> list[dict]`` for a schema's column names."""
    params = "".join(f", _c{i}" for i in range(len(names)))
    source = (
        f"def _rows(_n{params}):\n"
        f"    return [{{{_dict_items(names)}}} {_loop_header(len(names))[:-1]}]\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<eddyline rows>", "exec"), namespace)
    fn: Callable[..., list[Row]] = namespace["_rows"]
    return fn


def rows_of(batch: pa.RecordBatch) -> list[Row]:
    """Returns the rows of ``batch`` as dicts (each column converted once).

    Example:
        >>> import pyarrow as pa
        >>> rows_of(pa.record_batch({"a": [1, 2], "b": ["x", None]}))
        [{'a': 1, 'b': 'x'}, {'a': 2, 'b': None}]
    """
    fn = _compile_rows(tuple(batch.schema.names))
    return fn(batch.num_rows, *(column.to_pylist() for column in batch.columns))


@functools.lru_cache(maxsize=256)
def _compile_chain(
    names: tuple[str, ...], kinds: tuple[StageKind, ...]
) -> tuple[Callable[..., None], dict[int, tuple[int, str]]]:
    """Compiles the loop that runs every row through a chain of per-record stages.

    The generated function is ``chain(n, append, f0, ..., fk, c0, ..., cm)``.
    When every stage is a filter, it appends one bool per row (the keep mask);
    otherwise it appends the output rows. The second result maps a line of the
    generated code to (stage index, name of the variable holding the stage's
    input row), so a failure can be attributed to its stage and row.
    """
    fns = "".join(f", _f{i}" for i in range(len(kinds)))
    cols = "".join(f", _c{i}" for i in range(len(names)))
    lines = [f"def _chain(_n, _append{fns}{cols}):", "    " + _loop_header(len(names))]
    indent = "        "
    lines.append(f"{indent}_r0 = {{{_dict_items(names)}}}")
    where: dict[int, tuple[int, str]] = {}
    current = "_r0"
    filter_only = all(kind == "filter" for kind in kinds)
    for i, kind in enumerate(kinds):
        where[len(lines) + 1] = (i, current)
        if kind == "filter":
            lines.append(f"{indent}if not _f{i}({current}):")
            if filter_only:
                lines.append(f"{indent}    _append(False)")
            lines.append(f"{indent}    continue")
        elif kind == "map":
            lines.append(f"{indent}_r{i + 1} = _f{i}({current})")
            current = f"_r{i + 1}"
        else:
            # A dict is iterable (over its keys): refuse it before iterating.
            lines.append(f"{indent}_o{i + 1} = _f{i}({current})")
            lines.append(f"{indent}if isinstance(_o{i + 1}, dict):")
            lines.append(f"{indent}    raise _FlatMapDict({i}, _o{i + 1})")
            where[len(lines) + 1] = (i, current)  # a generator raises while iterated
            lines.append(f"{indent}for _r{i + 1} in _o{i + 1} or ():")
            current = f"_r{i + 1}"
            indent += "    "
    lines.append(f"{indent}_append(True)" if filter_only else f"{indent}_append({current})")
    namespace: dict[str, Any] = {"_FlatMapDict": _FlatMapDict}
    exec(compile("\n".join(lines) + "\n", "<eddyline chain>", "exec"), namespace)
    return namespace["_chain"], where


class _FlatMapDict(Exception):
    """Raised by a compiled chain when flat_map stage ``stage`` returned a dict."""

    def __init__(self, stage: int, value: dict[Any, Any]) -> None:
        super().__init__(stage, value)
        self.stage = stage
        self.value = value


# ---------------------------------------------------------------------------
# errors


def _short(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def user_error(
    exc: BaseException,
    operator: str,
    *,
    node: str | None = None,
    detail: str | None = None,
    tb: TracebackType | None = None,
) -> JobFailedError:
    """Wraps an exception raised by user code into a :class:`JobFailedError`.

    Args:
        exc: The user's exception (kept as ``__cause__``).
        operator: The operator whose function raised.
        node: The name of the node the operator was fused into, if different.
        detail: Extra context, such as the offending row.
        tb: The traceback to report (defaults to the exception's own).
    """
    where = f"operator '{operator}'"
    if node is not None and node != operator:
        where += f" (fused into '{node}')"
    message = f"{where} failed: {type(exc).__name__}: {exc}"
    if detail:
        message += f"; {detail}"
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    err = JobFailedError(message, operator=operator, user_traceback=text)
    err.__cause__ = exc
    return err


def call_user(operator: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Calls a user hook (open, close, commit, ...), wrapping its failures."""
    try:
        return fn(*args)
    except EddylineError:
        raise
    except Exception as exc:
        raise user_error(exc, operator, tb=_skip_own_frames(exc)) from exc


def _skip_own_frames(exc: BaseException) -> TracebackType | None:
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None and tb.tb_frame.f_code is call_user.__code__:
        return tb.tb_next
    return tb


# ---------------------------------------------------------------------------
# rows -> batches


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _holds_integers(t: pa.DataType) -> bool:
    """True if ``t`` is an integer type or a nested type with integer leaves."""
    if pa.types.is_integer(t):
        return True
    return any(_holds_integers(t.field(i).type) for i in range(t.num_fields))


def _same_numbers(converted: Any, value: Any) -> bool:
    """Whether every number of ``value`` survived its conversion to ``converted``.

    Only numbers are compared (``2 == 2.0`` but ``2 != 2.5``); other leaves were
    checked by pyarrow's typed conversion, and a dict's keys that the struct
    does not have are ignored (pyarrow ignores them too).
    """
    if isinstance(converted, bool) or isinstance(value, bool):
        return True
    if isinstance(converted, int):
        return bool(converted == value)
    if isinstance(converted, dict) and isinstance(value, dict):
        return all(_same_numbers(v, value.get(k)) for k, v in converted.items())
    if isinstance(converted, list) and isinstance(value, list | tuple):
        return len(converted) == len(value) and all(
            _same_numbers(c, v) for c, v in zip(converted, value, strict=True)
        )
    return True


def exact_array(values: list[Any], type: pa.DataType) -> pa.Array:
    """Converts Python values to an array of ``type``, refusing any value that changes.

    pyarrow's typed conversion truncates floats into integer columns
    (``2.5 -> 2``). Here the values are converted by inference first: when the
    inferred type is ``type`` (the common case, and no slower than a typed
    conversion) that array is the result; between numeric types a *safe* cast
    refuses truncation and overflow (2.5 or NaN into int64, 300 into int8)
    while exact values and lossless widening pass (2.0 into int64, an int into
    float64). Anything else takes pyarrow's typed conversion, whose integers
    are then compared with the values.

    Raises:
        pa.ArrowException, TypeError, ValueError, OverflowError: A value does
            not fit ``type`` exactly.

    Example:
        >>> exact_array([1, 2.0, None], pa.int64()).to_pylist()
        [1, 2, None]
        >>> exact_array([2.5], pa.int64())
        Traceback (most recent call last):
        ...
        pyarrow.lib.ArrowInvalid: Float value 2.500000 was truncated converting to int64
    """
    try:
        inferred = pa.array(values)
    except _ARROW_CONVERSION_ERRORS:
        inferred = None
    if inferred is not None:
        found = inferred.type
        if found == type:
            return inferred
        if pa.types.is_null(found) or (_numeric(found) and _numeric(type)):
            return inferred.cast(type, safe=True)
    array = pa.array(values, type=type)
    if _holds_integers(type):
        for converted, value in zip(array.to_pylist(), values, strict=True):
            if not _same_numbers(converted, value):
                raise ValueError(f"{_short(value, 80)} does not fit {type} exactly")
    return array


class RowWriter:
    """Converts output rows to a record batch of one fixed schema.

    The schema is the one given, or else the one inferred from the first
    non-empty output. Every row must be a dict with exactly the schema's
    fields, and every value must convert to its field's type exactly (see
    :func:`exact_array`: a float is never truncated into an integer column);
    otherwise a :class:`SchemaError` names the operator, the field and the row.
    """

    def __init__(self, operator: str, schema: pa.Schema | None = None) -> None:
        self.operator = operator
        self.schema = schema

    def encode(self, rows: list[Any]) -> pa.RecordBatch | None:
        """Returns the rows as one batch, or ``None`` if there are none."""
        if not rows:
            return None
        schema = self.schema if self.schema is not None else self._infer(rows)
        names = schema.names
        width = len(names)
        for row in rows:
            if not isinstance(row, dict) or len(row) != width:
                self._shape_error(row, names)
        arrays = []
        for field in schema:
            name = field.name
            try:
                values = [row[name] for row in rows]
            except KeyError:
                bad = next(row for row in rows if name not in row)
                self._shape_error(bad, names)
            try:
                arrays.append(exact_array(values, field.type))
            except _ARROW_CONVERSION_ERRORS:
                self._type_error(field, values, rows)
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        self.schema = schema
        return batch

    def _infer(self, rows: list[Any]) -> pa.Schema:
        first = rows[0]
        if not isinstance(first, dict):
            self._shape_error(first, None)
        fields = []
        for name in first:
            if not isinstance(name, str):
                raise SchemaError(
                    f"operator '{self.operator}' returned a row with a non-str field name "
                    f"{name!r}; field names must be str",
                    operator=self.operator,
                )
            values = [row.get(name) if isinstance(row, dict) else None for row in rows]
            try:
                inferred = pa.array(values)
            except _ARROW_CONVERSION_ERRORS as exc:
                kinds = sorted({type(v).__name__ for v in values if v is not None})
                raise SchemaError(
                    f"operator '{self.operator}' returned field '{name}' with values of "
                    f"incompatible types ({', '.join(kinds)}): {exc}; return one type per "
                    "field, or pass schema=",
                    operator=self.operator,
                ) from None
            fields.append(pa.field(name, inferred.type))
        return pa.schema(fields)

    def _shape_error(self, row: object, names: list[str] | None) -> None:
        op = self.operator
        if not isinstance(row, dict):
            expected = f"a dict with fields {names}" if names is not None else "a dict"
            raise SchemaError(
                f"operator '{op}' returned a {type(row).__name__} ({_short(row, 80)}), "
                f"expected {expected}",
                operator=op,
            )
        assert names is not None
        missing = [name for name in names if name not in row]
        extra = [key for key in row if key not in names]
        if missing:
            raise SchemaError(
                f"operator '{op}' returned a row without field '{missing[0]}' "
                f"(expected fields {names}, got {list(row)})",
                operator=op,
            )
        raise SchemaError(
            f"operator '{op}' returned a row with unexpected field '{extra[0]}' "
            f"(expected fields {names}, got {list(row)})",
            operator=op,
        )

    def _type_error(self, field: pa.Field, values: list[Any], rows: list[Any]) -> None:
        op = self.operator
        for value, row in zip(values, rows, strict=True):
            try:
                exact_array([value], field.type)
            except _ARROW_CONVERSION_ERRORS as exc:
                hint = ""
                if pa.types.is_null(field.type):
                    hint = (
                        "; the field's type was inferred as null from an earlier output with "
                        "only None values: pass schema= to declare it"
                    )
                raise SchemaError(
                    f"operator '{op}' returned field '{field.name}' of type "
                    f"{type(value).__name__} ({_short(value, 80)}) in row {_short(row)}, "
                    f"expected type {field.type}, which does not hold it exactly "
                    f"({exc}){hint}",
                    operator=op,
                ) from None
        raise SchemaError(  # pragma: no cover - the column failed but no single value does
            f"operator '{op}' returned values for field '{field.name}' that do not convert to "
            f"{field.type}",
            operator=op,
        )


def check_batches(
    operator: str, result: object, expected: pa.Schema | None
) -> tuple[list[pa.RecordBatch], pa.Schema | None]:
    """Validates what a batch function returned.

    Returns:
        The non-empty batches, and the schema the output has from now on.
    """
    if result is None:
        return [], expected
    if isinstance(result, pa.RecordBatch):
        batches, schema = [result], result.schema
    elif isinstance(result, pa.Table):
        batches, schema = result.to_batches(), result.schema
    elif isinstance(result, list | tuple) and all(isinstance(b, pa.RecordBatch) for b in result):
        if not result:
            return [], expected
        batches, schema = list(result), result[0].schema
    else:
        raise SchemaError(
            f"operator '{operator}' returned a {type(result).__name__}, expected a "
            "pyarrow.RecordBatch (or a pyarrow.Table, or None)",
            operator=operator,
        )
    for batch in batches:
        if expected is None:
            expected = schema
        if not batch.schema.equals(expected):
            raise SchemaError(
                f"operator '{operator}' returned a batch whose schema differs from its earlier "
                f"output: expected schema\n{expected}\nbut got schema\n{batch.schema}",
                operator=operator,
            )
    return [batch for batch in batches if batch.num_rows > 0], expected


def _one_or_many(batches: list[pa.RecordBatch]) -> RunnerOutput:
    if not batches:
        return None
    return batches[0] if len(batches) == 1 else batches


# ---------------------------------------------------------------------------
# runners


class Runner:
    """Base runner: no-op lifecycle, no state. Subclasses implement ``process``.

    FLINK-4120: a runner class whose ``recomputable`` is true (or whose
    :meth:`recomputable_for` says so for its arguments) persists no state
    with ``CheckpointConfig(recovery="recompute")``; it reports
    :meth:`null_state_watermark` with every checkpoint and hears of every
    barrier (also replayed ones) through :meth:`on_barrier`.
    """

    name: str = "python"
    ctx: dict[str, Any]
    # True only for stateless runners: a replay from any earlier checkpoint
    # rebuilds their (empty) state; keyed process functions start exactly
    # at their null-state watermark.
    recomputable: ClassVar[bool] = False
    # True for runners whose operator state is a list of entries that any
    # subtask can restore (FLIP-147: dealt round-robin to the subtasks of a
    # restore at another parallelism). Other operator state stays with its
    # subtask, and such a restore is refused with a CheckpointError.
    redistributable: ClassVar[bool] = False

    @classmethod
    def recomputable_for(cls, *args: Any) -> bool:
        """Whether a runner built from ``args`` can rebuild its state by replay."""
        return cls.recomputable

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        """The earliest checkpoint its state can be rebuilt from (stateless: this one)."""
        return checkpoint_id

    def on_barrier(self, checkpoint_id: int) -> None:
        """The barrier of checkpoint ``checkpoint_id`` passed (also when replayed)."""

    def open(self, ctx: dict[str, Any]) -> None:
        """Called once per subtask before any batch, after :meth:`restore` (if any)."""
        self.ctx = ctx

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        """Handles one input batch; returns the output batches."""
        raise NotImplementedError

    def finish(self) -> RunnerOutput:
        """Called once when all inputs have ended; returns final output."""
        return None

    def snapshot(self, checkpoint_id: int) -> State | None:
        """Returns the state for checkpoint ``checkpoint_id``.

        ``bytes`` is operator state (restored into the same subtask index);
        ``list[bytes]`` is operator state as independent entries (runners with
        ``redistributable``: at another parallelism each entry goes to one new
        subtask); ``{key_group: bytes}`` is keyed state, redistributed by key
        group, so that it can be restored at another parallelism. ``None``: no
        state.
        """
        return None

    def restore(self, data: State) -> None:
        """Restores state written by :meth:`snapshot`.

        Keyed state arrives as ``{key_group: bytes}`` holding only the key
        groups this subtask owns now; entry lists as ``list[bytes]``, the
        entries dealt to this subtask.
        """

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Called when checkpoint ``checkpoint_id`` has completed."""

    def close(self) -> None:
        """Called once per subtask at the end, also after failures."""


class RecordChainRunner(Runner):
    """Runs rows through fused per-record stages (map, flat_map, filter)."""

    recomputable = True  # stateless; user functions must be deterministic

    def __init__(
        self,
        node: str,
        stages: Sequence[Stage],
        schema: pa.Schema | None,
        max_rows: int = 8192,
    ) -> None:
        self._max_rows = max(1, max_rows)
        self.name = node
        self._kinds = tuple(kind for kind, _, _ in stages)
        self._fns = tuple(fn for _, fn, _ in stages)
        self._names = tuple(name for _, _, name in stages)
        self._filter_only = all(kind == "filter" for kind in self._kinds)
        producer = [name for kind, _, name in stages if kind != "filter"]
        self._writer = RowWriter(producer[-1] if producer else node, schema)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        chain, where = _compile_chain(tuple(batch.schema.names), self._kinds)
        out: list[Any] = []
        try:
            chain(
                batch.num_rows,
                out.append,
                *self._fns,
                *(column.to_pylist() for column in batch.columns),
            )
        except EddylineError:
            raise
        except _FlatMapDict as bad:
            name = self._names[bad.stage]
            raise SchemaError(
                f"operator '{name}' (flat_map) returned a dict ({_short(bad.value, 80)}) where "
                "an iterable of dicts was expected; return [row] to emit one row",
                operator=name,
            ) from None
        except Exception as exc:
            raise self._failure(exc, chain.__code__, where) from exc
        if self._filter_only:
            if all(out):
                return batch
            if not any(out):
                return None
            return batch.filter(pa.array(out, type=pa.bool_()))
        if len(out) <= self._max_rows:
            return self._writer.encode(out)
        # flat_map may multiply rows: emit batches of at most batch_size rows, so
        # that batches do not grow without bound (e.g. pass after pass in a loop).
        step = self._max_rows
        chunks = [self._writer.encode(out[i : i + step]) for i in range(0, len(out), step)]
        return [chunk for chunk in chunks if chunk is not None]

    def _failure(
        self, exc: Exception, code: CodeType, where: dict[int, tuple[int, str]]
    ) -> JobFailedError:
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code is not code:
            tb = tb.tb_next
        if tb is None:  # pragma: no cover - the failure is always inside the chain
            return user_error(exc, self.name)
        stage, variable = where.get(tb.tb_lineno, (len(self._names) - 1, "_r0"))
        row = tb.tb_frame.f_locals.get(variable)
        return user_error(
            exc,
            self._names[stage],
            node=self.name,
            detail=f"row: {_short(row)}",
            tb=tb.tb_next or tb,
        )


class ConnectedRecordRunner(Runner):
    """``connect(...).map(fn1, fn2)``: rows of input ``i`` go through ``fns[i]``."""

    recomputable = True  # stateless; user functions must be deterministic

    def __init__(self, node: str, fns: Sequence[Callable[[Row], Row]], schema: pa.Schema | None):
        self.name = node
        self._fns = tuple(fns)
        self._writer = RowWriter(node, schema)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows == 0:
            return None
        chain, _ = _compile_chain(tuple(batch.schema.names), ("map",))
        out: list[Any] = []
        try:
            chain(
                batch.num_rows,
                out.append,
                self._fns[input],
                *(column.to_pylist() for column in batch.columns),
            )
        except EddylineError:
            raise
        except Exception as exc:
            tb = exc.__traceback__
            while tb is not None and tb.tb_frame.f_code is not chain.__code__:
                tb = tb.tb_next
            row = tb.tb_frame.f_locals.get("_r0") if tb is not None else None
            raise user_error(
                exc,
                self.name,
                detail=f"input {input}, row: {_short(row)}",
                tb=(tb.tb_next or tb) if tb is not None else None,
            ) from exc
        return self._writer.encode(out)


class BatchRunner(Runner):
    """``map_batches(fn)`` and ``connect(...).map_batches(fn1, fn2)``."""

    recomputable = True  # stateless; user functions must be deterministic

    def __init__(
        self,
        node: str,
        fns: Sequence[Callable[[pa.RecordBatch], Any]],
        schema: pa.Schema | None,
    ) -> None:
        self.name = node
        self._fns = tuple(fns)
        self._schema = schema

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        try:
            result = self._fns[input](batch)
        except EddylineError:
            raise
        except Exception as exc:
            detail = f"input batch of {batch.num_rows} rows with schema ({_schema_line(batch)})"
            if len(self._fns) > 1:
                detail = f"input {input}, {detail}"
            raise user_error(exc, self.name, detail=detail, tb=_skip_frame(exc)) from exc
        batches, self._schema = check_batches(self.name, result, self._schema)
        return _one_or_many(batches)


def _schema_line(batch: pa.RecordBatch) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in batch.schema)


def _skip_frame(exc: BaseException) -> TracebackType | None:
    tb = exc.__traceback__
    return tb.tb_next if tb is not None and tb.tb_next is not None else tb


class _KeyedRunner(Runner):
    """Shared parts of keyed runners: key extraction and per-key-group state."""

    def __init__(self, node: str, keys: Sequence[str]) -> None:
        self.name = node
        self._keys = tuple(keys)
        self._state: dict[int, dict[Hashable, Any]] = {}

    def _keys_of(self, batch: pa.RecordBatch, columns: list[list[Any]]) -> list[Any]:
        indices = []
        for key in self._keys:
            index = batch.schema.get_field_index(key)
            if index < 0:
                raise SchemaError(
                    f"operator '{self.name}': key column '{key}' is not in the input schema "
                    f"({_schema_line(batch)})",
                    operator=self.name,
                )
            indices.append(index)
        if len(indices) == 1:
            return columns[indices[0]]
        return list(zip(*(columns[i] for i in indices), strict=True))

    @staticmethod
    def _groups_of(key_groups: pa.UInt32Array | None, n: int) -> list[int]:
        if key_groups is None:
            return [0] * n
        groups: list[int] = key_groups.to_pylist()
        return groups

    def snapshot(self, checkpoint_id: int) -> dict[int, bytes] | None:
        """One pickled ``{key: value}`` blob per non-empty key group."""
        return {
            group: pickle.dumps(entries, protocol=pickle.HIGHEST_PROTOCOL)
            for group, entries in self._state.items()
            if entries
        }

    def restore(self, data: State) -> None:
        """Restores the key groups given (``{key_group: blob}``).

        A single ``bytes`` blob (a whole ``{key_group: {key: value}}`` table)
        is accepted too.
        """
        if isinstance(data, bytes | bytearray | memoryview):
            table: dict[int, dict[Hashable, Any]] = pickle.loads(data)
            for group, entries in table.items():
                self._state.setdefault(int(group), {}).update(entries)
            return
        if not isinstance(data, dict):
            raise TypeError(f"keyed state must be {{key_group: bytes}}, got {type(data).__name__}")
        for group, blob in data.items():
            restored: dict[Hashable, Any] = pickle.loads(blob)
            self._state.setdefault(int(group), {}).update(restored)


class KeyedReduceRunner(_KeyedRunner):
    """``key_by(...).reduce(fn)``: one accumulated row per key; emits the updated rows."""

    def __init__(self, node: str, keys: Sequence[str], fn: Callable[[Row, Row], Row]) -> None:
        super().__init__(node, keys)
        self._fn = fn
        self._writer = RowWriter(node)

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        n = batch.num_rows
        if n == 0:
            return None
        if self._writer.schema is None:
            self._writer.schema = batch.schema
        columns = [column.to_pylist() for column in batch.columns]
        rows = _compile_rows(tuple(batch.schema.names))(n, *columns)
        keys = self._keys_of(batch, columns)
        groups = self._groups_of(key_groups, n)
        state = self._state
        fn = self._fn
        touched: dict[Hashable, dict[Hashable, Any]] = {}
        for row, key, group in zip(rows, keys, groups, strict=True):
            entries = state.get(group)
            if entries is None:
                entries = state[group] = {}
            if key in entries:
                try:
                    entries[key] = fn(entries[key], row)
                except EddylineError:
                    raise
                except Exception as exc:
                    raise user_error(
                        exc,
                        self.name,
                        detail=f"key {_short(key)}, row: {_short(row)}",
                        tb=_skip_frame(exc),
                    ) from exc
            else:
                entries[key] = row
            touched[key] = entries
        return self._writer.encode([entries[key] for key, entries in touched.items()])


_KEYED_STATE_FORMAT = "eddyline.keyed_process.v2"


class KeyedProcessRunner(_KeyedRunner):
    """``key_by(...).process(fn)`` with per-key value state and event-time timers.

    ``self._state[key_group][key]`` holds the key's named values;
    ``self._timers[key_group][key]`` the timestamps of its timers, mirrored in
    a heap of ``(timestamp, seq, key_group, key)`` entries (deleted timers
    are skipped when popped). Timers fire in :meth:`on_watermark`, in
    timestamp order, also those that ``on_timer`` registers at or below the
    watermark. Both are checkpointed per key group.
    """

    def __init__(
        self,
        node: str,
        keys: Sequence[str],
        fn: ProcessFunction | Callable[[Row, ProcessContext], Iterable[Row] | None],
        schema: pa.Schema | None,
        time_column: str | None = None,
    ) -> None:
        super().__init__(node, keys)
        self._function = fn if isinstance(fn, ProcessFunction) else None
        self._fn = fn.process_element if isinstance(fn, ProcessFunction) else fn
        self._writer = RowWriter(node, schema)
        self._time_column = time_column
        self._timers: dict[int, dict[Hashable, set[int]]] = {}
        self._heap: list[tuple[int, int, int, Hashable]] = []
        self._seq = itertools.count()
        self._group = 0
        self.watermark = MIN_WATERMARK
        self._context = self._new_context(node, 0, 1, 0)

    def _new_context(
        self, name: str, subtask_index: int, parallelism: int, attempt: int
    ) -> ProcessContext:
        context = ProcessContext(name, subtask_index, parallelism, attempt)
        context._timers = self
        return context

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        epoch = self._context.current_checkpoint
        self._context = self._new_context(
            self.name,
            int(ctx.get("subtask_index", 0)),
            int(ctx.get("parallelism", 1)),
            int(ctx.get("attempt", 0)),
        )
        self._context.current_checkpoint = epoch
        if self._function is not None:
            call_user(self.name, self._function.open, self._context)

    # ---- recompute (FLINK-4120) -----------------------------------------------

    @classmethod
    def recomputable_for(cls, *args: Any) -> bool:
        """Recomputable when the function is a ProcessFunction declaring it."""
        fn = args[2] if len(args) > 2 else None
        return isinstance(fn, ProcessFunction) and _overrides(fn, "null_state_watermark")

    def null_state_watermark(self, checkpoint_id: int) -> int | None:
        if self._function is None:
            return None
        return call_user(self.name, self._function.null_state_watermark, checkpoint_id)

    def on_barrier(self, checkpoint_id: int) -> None:
        self._context.current_checkpoint = checkpoint_id
        if self._function is not None and _overrides(self._function, "on_barrier"):
            call_user(self.name, self._function.on_barrier, checkpoint_id, self._context)

    # ---- timers (the ProcessContext's timer backend) --------------------------

    def register_timer(self, timestamp: int) -> None:
        """Registers ``timestamp`` for the current key (idempotent)."""
        if self._function is None or not _overrides(self._function, "on_timer"):
            raise EddylineError(
                f"operator '{self.name}': event-time timers need an ed.ProcessFunction that "
                "implements on_timer(timestamp, ctx)",
                operator=self.name,
            )
        key = self._context.key
        group = self._group
        per_key = self._timers.setdefault(group, {}).setdefault(key, set())
        if timestamp not in per_key:
            per_key.add(timestamp)
            heapq.heappush(self._heap, (timestamp, next(self._seq), group, key))

    def delete_timer(self, timestamp: int) -> None:
        """Deletes the current key's timer at ``timestamp``, if any."""
        key = self._context.key
        keyed = self._timers.get(self._group)
        per_key = keyed.get(key) if keyed is not None else None
        if per_key is not None and timestamp in per_key:
            per_key.discard(timestamp)
            if not per_key:
                del keyed[key]  # type: ignore[union-attr]

    def timers_pending(self) -> int:
        """How many timers are registered (for tests)."""
        return sum(len(ts) for keyed in self._timers.values() for ts in keyed.values())

    # ---- records --------------------------------------------------------------

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        n = batch.num_rows
        if n == 0:
            return None
        columns = [column.to_pylist() for column in batch.columns]
        rows = _compile_rows(tuple(batch.schema.names))(n, *columns)
        keys = self._keys_of(batch, columns)
        groups = self._groups_of(key_groups, n)
        times: Sequence[int | None]
        if self._time_column is not None and self._time_column in batch.schema.names:
            times = event_times(batch, self._time_column, self.name)
        else:
            times = itertools.repeat(None, n)  # type: ignore[assignment]
        fn = self._fn
        ctx = self._context
        out: list[Any] = []
        append = out.append
        row: Row | None = None
        try:
            for row, key, group, timestamp in zip(rows, keys, groups, times, strict=False):
                result = self._call_for_key(group, key, timestamp, fn, row)
                if result is None:
                    continue
                if isinstance(result, dict):
                    append(result)
                else:
                    out.extend(result)
        except EddylineError:
            raise
        except Exception as exc:
            raise user_error(
                exc,
                self.name,
                detail=f"key {_short(ctx.key)}, row: {_short(row)}",
                tb=_skip_frame(exc),
            ) from exc
        finally:
            ctx.key = None
            ctx.timestamp = None
            ctx._values = None
        return self._writer.encode(out)

    def _call_for_key(
        self, group: int, key: Hashable, timestamp: int | None, fn: Callable[..., Any], arg: Any
    ) -> Any:
        """Calls ``fn(arg, ctx)`` with ``ctx`` bound to ``key``'s state and writes it back.

        A key whose state ends up empty holds no entry, so snapshots stay small.
        """
        ctx = self._context
        entries = self._state.get(group)
        if entries is None:
            entries = self._state[group] = {}
        values = entries.get(key)
        fresh = values is None
        if fresh:
            values = {}
        ctx.key = key
        ctx.timestamp = timestamp
        ctx._values = values
        self._group = group
        result = fn(arg, ctx)
        if values:
            if fresh:
                entries[key] = values
        elif not fresh:
            del entries[key]
        return result

    def on_watermark(self, watermark: int) -> RunnerOutput:
        """Fires the timers at or below ``watermark``, in timestamp order."""
        if watermark <= self.watermark:
            return None
        self.watermark = watermark
        heap = self._heap
        if not heap or heap[0][0] > watermark:
            return None
        assert self._function is not None  # only a ProcessFunction registers timers
        on_timer = self._function.on_timer
        ctx = self._context
        out: list[Any] = []
        timestamp = 0
        try:
            while heap and heap[0][0] <= watermark:
                timestamp, _, group, key = heapq.heappop(heap)
                keyed = self._timers.get(group)
                per_key = keyed.get(key) if keyed is not None else None
                if per_key is None or timestamp not in per_key:
                    continue  # deleted
                per_key.discard(timestamp)
                if not per_key:
                    del keyed[key]  # type: ignore[union-attr]
                result = self._call_for_key(group, key, timestamp, on_timer, timestamp)
                if result is None:
                    continue
                if isinstance(result, dict):
                    out.append(result)
                else:
                    out.extend(result)
        except EddylineError:
            raise
        except Exception as exc:
            raise user_error(
                exc,
                self.name,
                detail=f"on_timer at {timestamp} for key {_short(ctx.key)}",
                tb=_skip_frame(exc),
            ) from exc
        finally:
            ctx.key = None
            ctx.timestamp = None
            ctx._values = None
        return self._writer.encode(out)

    def _lifecycle(self, hook: str, *args: Any) -> RunnerOutput:
        if self._function is None or not _overrides(self._function, hook):
            return None
        result = call_user(self.name, getattr(self._function, hook), *args, self._context)
        if result is None:
            return None
        return self._writer.encode([result] if isinstance(result, dict) else list(result))

    def end_input(self, input: int) -> RunnerOutput:
        """Calls ``ProcessFunction.end_input(input, ctx)``."""
        return self._lifecycle("end_input", input)

    def finish(self) -> RunnerOutput:
        """Calls ``ProcessFunction.finish(ctx)`` (not when stopped without draining)."""
        return self._lifecycle("finish")

    # ---- state ----------------------------------------------------------------

    def snapshot(self, checkpoint_id: int) -> dict[int, bytes] | None:
        """One blob per key group: ``(format, values, timers, watermark)``.

        Written for the key groups with values or timers and, once the
        runner has a watermark, for every key group it owns (even empty
        ones), so the watermark survives a restore (issue 12.3; like the
        window operator's, DESIGN.md "Keyed state layer").
        """
        groups = {g for g, entries in self._state.items() if entries}
        groups.update(g for g, keyed in self._timers.items() if keyed)
        if self.watermark > MIN_WATERMARK:
            ctx = getattr(self, "ctx", {})
            groups.update(
                key_group_range(
                    int(ctx.get("subtask_index", 0)),
                    int(ctx.get("parallelism", 1)),
                    int(ctx.get("max_parallelism", 128)),
                )
            )
        return {
            group: pickle.dumps(
                (
                    _KEYED_STATE_FORMAT,
                    self._state.get(group, {}),
                    {key: sorted(ts) for key, ts in self._timers.get(group, {}).items()},
                    self.watermark,
                ),
                protocol=pickle.HIGHEST_PROTOCOL,
            )
            for group in sorted(groups)
        }

    def restore(self, data: State) -> None:
        """Restores values, timers and the watermark (the largest of the key groups given).

        Also the formats of earlier versions: values only, and values with
        timers but no watermark.
        """
        if isinstance(data, bytes | bytearray | memoryview):
            super().restore(data)
            return
        if not isinstance(data, dict):
            raise TypeError(f"keyed state must be {{key_group: bytes}}, got {type(data).__name__}")
        for group, blob in data.items():
            restored = pickle.loads(blob)
            group = int(group)
            if isinstance(restored, dict):  # values only
                self._state.setdefault(group, {}).update(restored)
                continue
            _, values, timers, *rest = restored
            if rest:
                self.watermark = max(self.watermark, int(rest[0]))
            if values:
                self._state.setdefault(group, {}).update(values)
            keyed = self._timers.setdefault(group, {})
            for key, stamps in timers.items():
                keyed.setdefault(key, set()).update(stamps)
                for ts in stamps:
                    heapq.heappush(self._heap, (ts, next(self._seq), group, key))

    def close(self) -> None:
        if self._function is not None:
            call_user(self.name, self._function.close)


def _overrides(function: ProcessFunction, hook: str) -> bool:
    """True if ``function``'s class overrides the base class's ``hook``."""
    return getattr(type(function), hook, None) is not getattr(ProcessFunction, hook)


END_OF_JOB = 2**64 - 1
"""The pseudo-checkpoint that commits everything when a job runs without checkpointing."""


class TwoPhaseCommitRunner(Runner):
    """Drives a :class:`~eddyline.sinks.TwoPhaseCommitSink`.

    A transaction is open at all times. On a checkpoint it is pre-committed
    and remembered as pending, and a new one begins; pending transactions
    commit when their checkpoint completes (and, on restore, again: commit is
    idempotent). After the end of the input, the final checkpoint (or, without
    checkpointing, the end-of-job pseudo-checkpoint ``END_OF_JOB``) pre-commits
    the open transaction and commits it; no transaction begins after it.

    The engine restores state before it opens an operator (Flink's
    ``initializeState`` before ``open``), but the sink's ``open`` comes
    before anything else it is asked to do: the restored transactions are
    committed again in :meth:`open`, right after the sink's own ``open``.
    """

    redistributable: ClassVar[bool] = True

    def __init__(self, node: str, sink: Any) -> None:
        self.name = node
        self._sink = sink
        self._txn: Any = None
        self._open = False
        self._opened = False
        self._finished = False
        self._pending: dict[int, Any] = {}
        self._restored: dict[int, Any] = {}

    def open(self, ctx: dict[str, Any]) -> None:
        super().open(ctx)
        call_user(self.name, self._sink.open, ctx)
        self._opened = True
        self._commit_restored()
        self._begin()

    def _commit_restored(self) -> None:
        # Every pending transaction restored belongs to a completed checkpoint:
        # commit it (idempotent). At another parallelism each one was dealt to
        # exactly one subtask.
        restored, self._restored = self._restored, {}
        for checkpoint_id in sorted(restored):
            call_user(self.name, self._sink.commit, restored[checkpoint_id])

    def _begin(self) -> None:
        self._txn = call_user(self.name, self._sink.begin_transaction)
        self._open = True

    def process(
        self, input: int, batch: pa.RecordBatch, key_groups: pa.UInt32Array | None
    ) -> RunnerOutput:
        if batch.num_rows:
            call_user(self.name, self._sink.write, self._txn, batch)
        return None

    def snapshot(self, checkpoint_id: int) -> State | None:
        if self._open:
            hook = getattr(self._sink, "on_checkpoint", None)
            if hook is not None:
                call_user(self.name, hook, self._txn, checkpoint_id)
            call_user(self.name, self._sink.pre_commit, self._txn)
            self._pending[checkpoint_id] = self._txn
            self._open = False
            if checkpoint_id != END_OF_JOB and not self._finished:
                self._begin()
        return [
            pickle.dumps((checkpoint, txn), protocol=pickle.HIGHEST_PROTOCOL)
            for checkpoint, txn in sorted(self._pending.items(), key=lambda item: item[0])
        ]

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        for done in sorted(c for c in self._pending if c <= checkpoint_id):
            call_user(self.name, self._sink.commit, self._pending.pop(done))

    def restore(self, data: State) -> None:
        # The transactions are committed once the sink is open.
        if isinstance(data, list):
            pending: dict[int, Any] = dict(pickle.loads(entry) for entry in data)
        elif isinstance(data, bytes | bytearray | memoryview):
            pending = pickle.loads(data)  # a checkpoint written before entry lists
        else:
            raise TypeError(
                f"operator '{self.name}': a two-phase-commit sink has operator state "
                f"(a list of bytes), got {type(data).__name__}"
            )
        self._restored.update(pending)
        if self._opened:
            self._commit_restored()

    def finish(self) -> RunnerOutput:
        # Nothing commits here: only a completed checkpoint may commit.
        self._finished = True
        return None

    def close(self) -> None:
        try:
            if self._open:
                self._open = False
                call_user(self.name, self._sink.abort, self._txn)
        finally:
            call_user(self.name, self._sink.close)


# ---------------------------------------------------------------------------
# factories


_COPY_ERRORS = (pickle.PicklingError, TypeError, AttributeError, copy.Error)
"""What copying an object that holds a lock, a socket or a client raises."""


def private_copy(obj: Any, operator: str) -> Any:
    """Returns a copy of a user object for one subtask (objects carry state).

    A pickled copy (cloudpickle), or else a deep copy. An object that allows
    neither cannot be given to each parallel instance, as the sink and
    process-function contracts promise: a :class:`GraphError` naming
    ``operator`` says so (sharing it would let subtasks change each other's
    state). Any other exception a user's ``__reduce__`` raises goes through.
    """
    import cloudpickle

    try:
        return pickle.loads(cloudpickle.dumps(obj))
    except _COPY_ERRORS as pickling:
        try:
            return copy.deepcopy(obj)
        except _COPY_ERRORS:
            raise GraphError(
                f"operator '{operator}': its {type(obj).__name__} object cannot be copied for "
                f"each parallel instance ({type(pickling).__name__}: {pickling}); create "
                "connections, locks and clients in open()",
                operator=operator,
            ) from pickling


class RunnerFactory:
    """A picklable ``factory() -> Runner`` for a ``python`` node.

    Arguments listed in ``private`` are copied for every runner so that
    parallel subtasks (and restarts) never share a user object's state; the
    first argument is the node's name. An argument that cannot be copied is a
    :class:`GraphError` when the factory is made, before anything runs.
    """

    def __init__(self, cls: type[Runner], *args: Any, private: tuple[int, ...] = ()) -> None:
        self.cls = cls
        self.args = args
        self.private = private
        for i in private:
            private_copy(args[i], str(args[0]))

    def __call__(self) -> Runner:
        args = [
            private_copy(a, str(self.args[0])) if i in self.private else a
            for i, a in enumerate(self.args)
        ]
        return self.cls(*args)

    @property
    def recomputable(self) -> bool:
        """Whether its runners rebuild their state by replay (read by the engine)."""
        return self.cls.recomputable_for(*self.args)

    @property
    def redistributable(self) -> bool:
        """Whether its runners' operator state can move to other subtasks (read by the engine)."""
        return self.cls.redistributable

    @property
    def replayable_from_earlier(self) -> bool:
        """Whether a replay from before the null-state watermark also rebuilds the state."""
        return self.cls.recomputable and self.recomputable

    def __repr__(self) -> str:
        return f"RunnerFactory({self.cls.__name__})"
