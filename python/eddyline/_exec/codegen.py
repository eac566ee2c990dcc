"""Code generation for per-record functions: loops compiled for a batch's schema.

Per-record functions are looped over the rows of a batch here: each column is
converted to Python once, rows are built by a dict-literal comprehension
compiled for the batch's column names, and consecutive per-record stages (map,
flat_map, filter fused into one node) run in one generated loop, with the GIL
taken once per batch (DESIGN.md "Runtime"). Generated functions are cached per
schema.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import CodeType, TracebackType
from typing import Any, Literal

import pyarrow as pa

from ..process_functions import Row

StageKind = Literal["map", "flat_map", "filter"]
"""One per-record stage: its kind, the user function and the operator name."""


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
def compile_rows(names: tuple[str, ...]) -> Callable[..., list[Row]]:
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


def pylist(array: pa.Array) -> list[Any]:
    """The values of ``array`` as Python objects, as ``array.to_pylist()`` gives them.

    An integer or float column without nulls goes through numpy (``tolist`` makes
    the same ``int`` / ``float`` objects, a third to half faster than pyarrow's
    ``to_pylist``); any other column through ``to_pylist``.

    Example:
        >>> pylist(pa.array([1, 2])), pylist(pa.array([1.5, None]))
        ([1, 2], [1.5, None])
    """
    kind = array.type
    if array.null_count == 0 and (
        pa.types.is_integer(kind) or (pa.types.is_floating(kind) and kind != pa.float16())
    ):
        values: list[Any] = array.to_numpy().tolist()
        return values
    return array.to_pylist()


def rows_of(batch: pa.RecordBatch) -> list[Row]:
    """Returns the rows of ``batch`` as dicts (each column converted once).

    Example:
        >>> import pyarrow as pa
        >>> rows_of(pa.record_batch({"a": [1, 2], "b": ["x", None]}))
        [{'a': 1, 'b': 'x'}, {'a': 2, 'b': None}]
    """
    fn = compile_rows(tuple(batch.schema.names))
    return fn(batch.num_rows, *(column.to_pylist() for column in batch.columns))


@functools.lru_cache(maxsize=256)
def compile_chain(
    names: tuple[str, ...],
    kinds: tuple[StageKind, ...],
    outputs: tuple[str, ...] | None = None,
) -> tuple[Callable[..., None], dict[int, tuple[int, str]]]:
    """Compiles the loop that runs every row through a chain of per-record stages.

    The generated function is ``chain(n, append, f0, ..., fk, c0, ..., cm)``.
    When every stage is a filter, it appends one bool per row (the keep mask);
    otherwise it appends the output rows. The second result maps a line of the
    generated code to (stage index, name of the variable holding the stage's
    input row), so a failure can be attributed to its stage and row.

    With ``outputs`` (the output schema's field names, known after the first
    batch) the function is ``chain(n, append, f..., c..., a0, ..., aw)``: the
    fields of an output row that is a plain dict with exactly those keys are
    appended straight to the column lists through ``a0..aw`` (no row list to
    walk again); any other output row goes to ``append``, which
    checks it (and appends its fields, or raises the SchemaError).
    """
    fns = "".join(f", _f{i}" for i in range(len(kinds)))
    cols = "".join(f", _c{i}" for i in range(len(names)))
    filter_only = all(kind == "filter" for kind in kinds)
    if filter_only:
        outputs = None
    outs = "".join(f", _a{j}" for j in range(len(outputs or ())))
    lines = [f"def _chain(_n, _append{fns}{cols}{outs}):", "    " + _loop_header(len(names))]
    indent = "        "
    lines.append(f"{indent}_r0 = {{{_dict_items(names)}}}")
    where: dict[int, tuple[int, str]] = {}
    current = "_r0"
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
            lines.append(f"{indent}    raise FlatMapDict({i}, _o{i + 1})")
            where[len(lines) + 1] = (i, current)  # a generator raises while iterated
            lines.append(f"{indent}for _r{i + 1} in _o{i + 1} or ():")
            current = f"_r{i + 1}"
            indent += "    "
    if outputs is None:
        lines.append(f"{indent}_append(True)" if filter_only else f"{indent}_append({current})")
    else:
        r = current
        lines.append(f"{indent}if {r}.__class__ is _dict and len({r}) == {len(outputs)}:")
        lines.append(f"{indent}    try:")
        lines.extend(f"{indent}        _x{j} = {r}[{name!r}]" for j, name in enumerate(outputs))
        lines.append(f"{indent}    except KeyError:")
        lines.append(f"{indent}        _append({r})")
        lines.append(f"{indent}        continue")
        lines.extend(f"{indent}    _a{j}(_x{j})" for j in range(len(outputs)))
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    _append({r})")
    namespace: dict[str, Any] = {"FlatMapDict": FlatMapDict, "_dict": dict}
    exec(compile("\n".join(lines) + "\n", "<eddyline chain>", "exec"), namespace)
    return namespace["_chain"], where


class FlatMapDict(Exception):
    """Raised by a compiled chain when flat_map stage ``stage`` returned a dict."""

    def __init__(self, stage: int, value: dict[Any, Any]) -> None:
        super().__init__(stage, value)
        self.stage = stage
        self.value = value


def frame_of(exc: BaseException, code: CodeType) -> TracebackType | None:
    """The entry of ``exc``'s traceback that ran generated ``code``, if any.

    Its frame holds the row variables of the loop when the exception was
    raised; the entries after it are the user's function.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    return tb


def _emit_lines(row: str, indent: str, outputs: tuple[str, ...] | None, pos: bool) -> list[str]:
    """The lines emitting output row ``row``: its fields appended to the column lists
    ``_a0..`` when it is a plain dict with exactly the fields ``outputs``, else handed
    to ``_append`` (which checks it); with ``pos``, ``_p(_i)`` records its input row."""
    lines = []
    if outputs is None:
        lines.append(f"{indent}_append({row})")
    else:
        lines.append(f"{indent}if {row}.__class__ is _dict and len({row}) == {len(outputs)}:")
        lines.append(f"{indent}    try:")
        lines.extend(f"{indent}        _x{j} = {row}[{name!r}]" for j, name in enumerate(outputs))
        lines.append(f"{indent}    except KeyError:")
        lines.append(f"{indent}        _append({row})")
        lines.append(f"{indent}    else:")
        lines.extend(f"{indent}        _a{j}(_x{j})" for j in range(len(outputs)))
        lines.append(f"{indent}else:")
        lines.append(f"{indent}    _append({row})")
    if pos:
        lines.append(f"{indent}_p(_i)")
    return lines


@functools.lru_cache(maxsize=256)
def compile_process(
    names: tuple[str, ...],
    key_column: int | None,
    event_time: bool,
    timers: bool,
    outputs: tuple[str, ...] | None,
    positions: bool = False,
) -> Callable[..., None]:
    """Compiles the per-record loop of a keyed process function for a batch's schema.

    The generated function is ``loop(fn, ctx, runner, bind, known, append, keys,
    groups, times, p, c0..cm, a0..aw)``. Per row it builds the row dict, registers
    a key new to the operator (not in ``known``, one dict lookup per row:
    ``bind(key, group)``; the state handles find a key's value in their state's
    column by ``ctx.key``: docs/DESIGN.md "Keyed state layer"), sets ``ctx.key``
    (``ctx.timestamp`` only with ``event_time``; ``runner._group`` only when the
    function may register ``timers``), calls ``fn(row, ctx)`` and emits what it
    returns (None, a dict, or an iterable of dicts) as the record chain does
    (:func:`compile_chain` with ``outputs``). ``key_column``: the index of the
    single key column (its value is the key), or ``None`` to take the keys from
    ``keys``. With ``positions``, ``p(i)`` is called with the input row's index
    for every output row (a worker process returns them to put the outputs of its
    key groups back in input order). The loop's locals ``_row`` and ``_key`` name
    the failing row and key (:func:`frame_of`).
    """
    cols = "".join(f", _c{i}" for i in range(len(names)))
    outs = "".join(f", _a{j}" for j in range(len(outputs or ())))
    header = [f"_v{i}" for i in range(len(names))] + ["_g"]
    sources = [f"_c{i}" for i in range(len(names))] + ["_groups"]
    if event_time:
        header.append("_t")
        sources.append("_times")
    if key_column is None:
        header.append("_k")
        sources.append("_keys")
    target = ", ".join(header)
    if positions:
        target = f"_i, ({target})"
        loop = f"    for {target} in enumerate(zip({', '.join(sources)})):"
    else:
        loop = f"    for {target} in zip({', '.join(sources)}):"
    lines = [
        f"def _process(_fn, _ctx, _self, _bind, _known, _append, _keys, _groups, _times, _p"
        f"{cols}{outs}):",
        loop,
        f"        _key = {'_k' if key_column is None else f'_v{key_column}'}",
        f"        _row = {{{_dict_items(names)}}}",
        "        if _key not in _known:",
        "            _bind(_key, _g)",
        "        _ctx.key = _key",
    ]
    if event_time:
        lines.append("        _ctx.timestamp = _t")
    if timers:
        lines.append("        _self._group = _g")
    lines += [
        "        _o = _fn(_row, _ctx)",
        "        if _o is None:",
        "            continue",
        "        if _o.__class__ is _list:",
        "            for _r in _o:",
        *_emit_lines("_r", "                ", outputs, positions),
        "        elif isinstance(_o, _dict):",
        *_emit_lines("_o", "            ", outputs, positions),
        "        else:",
        "            for _r in _o:",
        *_emit_lines("_r", "                ", outputs, positions),
    ]
    namespace: dict[str, Any] = {"_dict": dict, "_list": list}
    exec(compile("\n".join(lines) + "\n", "<eddyline process>", "exec"), namespace)
    fn: Callable[..., None] = namespace["_process"]
    return fn
