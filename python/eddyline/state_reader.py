"""``ed.read_state``: an operator's keyed state in a checkpoint or savepoint, as a table.

API.md "Reading state from checkpoints and savepoints"; docs/read_state.md.
The core (``core/src/checkpoint/read_state.rs``) loads and verifies the
checkpoint as a restore would, gathers the operator's key groups from all
subtasks and decodes the native operators' blobs (keyed aggregates, windows,
joins) into Arrow without the GIL. The Python runners' keyed state (process
functions, ``reduce``, Python windows) is pickled; it is decoded here.

Columns: the key columns, then one column per state:

* native ``sum``/``count``/``min``/``max``: the aggregate under its output
  column name (the aggregated column, or ``count``);
* ``reduce``: the reduced row's columns other than the keys;
* windows (native or Python): ``window_start``, ``window_end`` (the time
  column's type), then the accumulator: the aggregate under its column name,
  a ``reduce``'s row columns, or for ``apply`` the window's rows as ``rows``
  (a list of structs);
* joins: one row per kept row of either side: ``side`` (``"left"`` or
  ``"right"``), the row as a struct in ``left`` or ``right`` (the other
  null), ``time_ms`` (its event time, 0 without time bounds) and ``matched``
  (whether it has met a row of the other side);
* process functions: one column per named state. A ``ValueState`` is its
  value, a ``ListState`` a list, a ``MapState`` an Arrow ``map`` (user key to
  value, in insertion order). A key without some state has a null there.
  Entries whose ttl expired are never returned (as the function would not
  see them). Timers are not state columns.

Rows come in key-group order, then in the order the keys were first seen,
whatever the parallelism that wrote the checkpoint.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Hashable, Mapping
from typing import Any

import pyarrow as pa

from ._exec.process import as_v3
from ._storage import checked_storage_options, storage_location
from .errors import CheckpointError
from .process_functions import _Expiring, processing_time

__all__ = ["read_state"]

_PROCESS_FORMATS = (
    "eddyline.keyed_process.v2",
    "eddyline.keyed_process.v3",
    "eddyline.keyed_process.v4",
    "eddyline.keyed_process.v5",
)
_PY_WINDOW_FORMAT = "eddyline.window.v1"
_PY_SESSION_FORMAT = "eddyline.session.v1"


def read_state(
    path: str | os.PathLike[str],
    uid: str,
    *,
    state: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> pa.Table:
    """The keyed state of operator ``uid`` in a checkpoint or savepoint.

    Args:
        path: A checkpoint's ``chk-<id>`` directory, a savepoint directory, or
            a checkpoint storage root (its newest completed checkpoint is
            read); a local path or an object store URI (``s3://...``).
        uid: The operator's uid (``.uid("...")``, or the name it was given).
        state: Only this state column (a process function's named state, or
            an aggregate's column); the key columns (and window bounds) stay.
        storage_options: Object store options (``endpoint``, ...), as for
            ``CheckpointConfig``; default: the standard environment variables.

    Returns:
        The key columns, then one column per state (see the module docs).

    Raises:
        CheckpointError: ``path`` is not a checkpoint, no operator has
            ``uid`` (the message lists the uids present), the operator has
            no keyed state, ``state`` names no state of it, or a state holds
            values Arrow cannot represent.

    Example:
        >>> import tempfile, eddyline as ed
        >>> chk = tempfile.mkdtemp()
        >>> env = ed.StreamEnvironment(checkpoint=ed.CheckpointConfig(chk))
        >>> rows = env.from_collection([{"k": "a", "v": 1}, {"k": "b", "v": 2}, {"k": "a", "v": 3}])
        >>> _ = rows.key_by("k").sum("v").uid("sums").collect()
        >>> result = env.execute()
        >>> final = result.checkpoints[-1].path
        >>> ed.read_state(final, "sums").sort_by("k").to_pylist()
        [{'k': 'a', 'v': 4}, {'k': 'b', 'v': 2}]
    """
    return read_state_info(path, uid, state=state, storage_options=storage_options)[0]


def read_state_info(
    path: str | os.PathLike[str],
    uid: str,
    *,
    state: str | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> tuple[pa.Table, dict[str, Any]]:
    """:func:`read_state` and what was read: ``{"checkpoint_id", "path", "uid", "name"}``."""
    from . import _core

    if not isinstance(uid, str) or not uid:
        raise TypeError(f"read_state() needs the operator's uid as a non-empty str, got {uid!r}")
    if state is not None and (not isinstance(state, str) or not state):
        raise TypeError(f"read_state(state=) must be a non-empty str, got {state!r}")
    location = storage_location(path, what="read_state")
    options = checked_storage_options(storage_options)
    info: dict[str, Any] = _core.read_keyed_state(location, uid, options)
    kind = info["kind"]
    if kind == "native":
        table = pa.Table.from_batches(info["batches"])
    elif kind == "pickled":
        table = _decode_pickled(info, state)
    else:
        table = _key_table(info, [])
    about = {k: info[k] for k in ("checkpoint_id", "path", "uid", "name")}
    return _select(table, info, state), about


def _what(info: Mapping[str, Any]) -> str:
    return (
        f"operator '{info['name']}' (uid '{info['uid']}') in checkpoint "
        f"{info['checkpoint_id']} at '{info['path']}'"
    )


def _key_fields(info: Mapping[str, Any]) -> list[tuple[str, pa.DataType | None]]:
    keys = [(str(name), ty) for name, ty in info["key_columns"]]
    return keys or [("key", None)]


def _column(values: list[Any], ty: pa.DataType | None, info: Mapping[str, Any], what: str) -> Any:
    try:
        return pa.array(values, type=ty)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise CheckpointError(
            f"{_what(info)}: {what} holds values Arrow cannot represent ({exc}); pass state= "
            "to read another state"
        ) from exc


def _key_table(info: Mapping[str, Any], keys: list[Hashable]) -> pa.Table:
    """The key columns of ``keys`` (one value, or a tuple for several key columns)."""
    fields = _key_fields(info)
    if len(fields) == 1:
        per_column = [list(keys)]
    else:
        per_column = [[k[i] for k in keys] for i in range(len(fields))]  # type: ignore[index]
    arrays = [
        _column(values, ty, info, f"key column '{name}'")
        for (name, ty), values in zip(fields, per_column, strict=True)
    ]
    return pa.table(arrays, names=[name for name, _ in fields])


def _select(table: pa.Table, info: Mapping[str, Any], state: str | None) -> pa.Table:
    if state is None:
        return table
    fixed = {name for name, _ in _key_fields(info)} | {"window_start", "window_end"}
    states = [name for name in table.column_names if name not in fixed]
    if state not in states:
        listed = ", ".join(repr(s) for s in states) or "none"
        raise CheckpointError(f"{_what(info)} has no state {state!r}; its states: {listed}")
    return table.select([name for name in table.column_names if name in fixed or name == state])


def _decode_pickled(info: Mapping[str, Any], state: str | None) -> pa.Table:
    # The blobs are the operator's own checkpoint, unpickled as a restore does.
    blobs = [(int(kg), _unpack(pickle.loads(blob))) for kg, blob in info["blobs"]]
    kinds = {_blob_kind(info, kg, blob) for kg, blob in blobs}
    if len(kinds) > 1:
        raise CheckpointError(
            f"{_what(info)} holds key groups of different formats: {sorted(kinds)}"
        )
    kind = kinds.pop()
    if kind == "process":
        return _process_table(info, [blob for _, blob in blobs], state)
    if kind == "window":
        return _window_table(info, [blob for _, blob in blobs])
    if kind == "session":
        return _session_table(info, [blob for _, blob in blobs])
    return _reduce_table(info, [blob for _, blob in blobs])


def _unpack(blob: Any) -> Any:
    """A process function's v4 or v5 blob in the v3 shape (its watermark ``None``
    for v5: the watermark is the subtask's operator state, which read_state
    does not need)."""
    return as_v3(blob)


def _blob_kind(info: Mapping[str, Any], kg: int, blob: Any) -> str:
    if isinstance(blob, tuple) and blob and blob[0] in _PROCESS_FORMATS:
        return "process"
    if isinstance(blob, tuple) and blob and blob[0] == _PY_WINDOW_FORMAT:
        return "window"
    if isinstance(blob, tuple) and len(blob) > 3 and blob[0] == _PY_SESSION_FORMAT:
        return "session"
    if isinstance(blob, dict):
        return "reduce"
    tag = blob[0] if isinstance(blob, tuple) and blob else type(blob).__name__
    raise CheckpointError(
        f"{_what(info)} holds keyed state (key group {kg}) in a format read_state cannot "
        f"decode ({tag!r})"
    )


# ---- process functions -------------------------------------------------------


def _live(held: Any, kind: str, now: int) -> Any:
    """A state's value without ttl wrappers; ``None`` when it expired or is empty."""
    if kind == "list":
        items = [e.value if type(e) is _Expiring else e for e in held if _alive(e, now)]
        return items or None
    if kind == "map":
        entries = [
            (k, e.value if type(e) is _Expiring else e) for k, e in held.items() if _alive(e, now)
        ]
        return entries or None
    if type(held) is _Expiring:
        return held.value if held.expires_at > now else None
    return held


def _alive(entry: Any, now: int) -> bool:
    return type(entry) is not _Expiring or entry.expires_at > now


def _guess_kind(held: Any) -> str:
    # Checkpoints written before the kinds were recorded (format v2).
    if type(held) is list:
        return "list"
    if type(held) is dict:
        return "map"
    return "value"


def _process_table(
    info: Mapping[str, Any], blobs: list[tuple[Any, ...]], state: str | None
) -> pa.Table:
    """One column per named state; with ``state`` (a name it has) only that one is
    converted, so a state Arrow cannot represent does not stop reading the others."""
    kinds: dict[str, str] = {}
    for blob in blobs:
        if len(blob) > 4:
            kinds.update(blob[4])
    now = processing_time()
    keys: list[Hashable] = []
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        for key, named in blob[1].items():
            row: dict[str, Any] = {}
            for name, held in named.items():
                kind = kinds.setdefault(name, _guess_kind(held))
                value = _live(held, kind, now)
                if value is not None or (kind == "value" and type(held) is not _Expiring):
                    row[name] = value
            if row:
                keys.append(key)
                rows.append(row)
    table = _key_table(info, keys)
    names = [state] if state in kinds else sorted(kinds)
    for name in names:
        values = [row.get(name) for row in rows]
        what = f"{kinds[name]} state {name!r}"
        if kinds[name] == "map":
            column = _map_column(values, info, what)
        else:
            column = _column(values, None, info, what)
        table = table.append_column(name, column)
    return table


def _map_column(values: list[Any], info: Mapping[str, Any], what: str) -> Any:
    """``values``: per row a list of (user key, value) pairs, or ``None``."""
    entries = [pair for pairs in values if pairs for pair in pairs]
    if not entries:
        return pa.nulls(len(values))
    key_type = _column([k for k, _ in entries], None, info, what).type
    value_type = _column([v for _, v in entries], None, info, what).type
    if pa.types.is_null(value_type):
        value_type = pa.null()
    try:
        return pa.array(values, type=pa.map_(key_type, value_type))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise CheckpointError(
            f"{_what(info)}: {what} holds entries Arrow cannot represent as a map ({exc}); "
            "pass state= to read another state"
        ) from exc


# ---- reduce and Python windows ----------------------------------------------


def _rows_table(info: Mapping[str, Any], prefix: pa.Table, rows: list[dict[str, Any]]) -> pa.Table:
    if not rows or not any(rows):
        return prefix
    try:
        rest = pa.Table.from_pylist(rows)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError) as exc:
        raise CheckpointError(
            f"{_what(info)}: the accumulated rows hold values Arrow cannot represent ({exc})"
        ) from exc
    for name, column in zip(rest.column_names, rest.columns, strict=True):
        prefix = prefix.append_column(name, column)
    return prefix


def _reduce_table(info: Mapping[str, Any], blobs: list[dict[Any, Any]]) -> pa.Table:
    key_names = {name for name, _ in _key_fields(info)}
    keys: list[Hashable] = []
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        for key, row in blob.items():
            keys.append(key)
            rows.append(
                {k: v for k, v in row.items() if k not in key_names}
                if isinstance(row, dict)
                else {"value": row}
            )
    return _rows_table(info, _key_table(info, keys), rows)


def _window_table(info: Mapping[str, Any], blobs: list[tuple[Any, ...]]) -> pa.Table:
    meta = next((blob[4] for blob in blobs if len(blob) > 4), None)
    if meta is None:
        raise CheckpointError(
            f"{_what(info)}: its Python window state was written by an eddyline version that "
            "did not record the window size; read a checkpoint written since"
        )
    size, _slide, time_column = meta
    schema: pa.Schema | None = next((blob[2] for blob in blobs if blob[2] is not None), None)
    time_type = pa.int64()
    if schema is not None and time_column in schema.names:
        time_type = schema.field(time_column).type
    key_names = {name for name, _ in _key_fields(info)}
    keys: list[Hashable] = []
    starts: list[int] = []
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        for start, accs in sorted(blob[3].items()):
            for key, acc in accs.items():
                keys.append(key)
                starts.append(int(start))
                if isinstance(acc, dict):
                    rows.append({k: v for k, v in acc.items() if k not in key_names})
                else:
                    rows.append({"rows": list(acc)})
    table = _key_table(info, keys)
    for name, offset in (("window_start", 0), ("window_end", int(size))):
        millis = pa.array([s + offset for s in starts], type=pa.int64())
        table = table.append_column(name, _as_time(millis, time_type))
    return _rows_table(info, table, rows)


def _session_table(info: Mapping[str, Any], blobs: list[tuple[Any, ...]]) -> pa.Table:
    """A Python session window's open sessions (``_exec/session.py``: per key
    ``[start, end, accumulator]``), one row each, as ``_window_table``'s."""
    schema: pa.Schema | None = next((blob[2] for blob in blobs if blob[2] is not None), None)
    meta = next((blob[4] for blob in blobs if len(blob) > 4), None)
    time_type = pa.int64()
    if schema is not None and meta is not None and meta[2] in schema.names:
        time_type = schema.field(meta[2]).type
    key_names = {name for name, _ in _key_fields(info)}
    keys: list[Hashable] = []
    bounds: list[tuple[int, int]] = []
    rows: list[dict[str, Any]] = []
    for blob in blobs:
        for key, sessions in blob[3].items():
            for start, end, acc in sorted(sessions, key=lambda s: s[0]):
                keys.append(key)
                bounds.append((int(start), int(end)))
                if isinstance(acc, dict):
                    rows.append({k: v for k, v in acc.items() if k not in key_names})
                else:
                    rows.append({"rows": list(acc)})
    table = _key_table(info, keys)
    for name, at in (("window_start", 0), ("window_end", 1)):
        millis = pa.array([b[at] for b in bounds], type=pa.int64())
        table = table.append_column(name, _as_time(millis, time_type))
    return _rows_table(info, table, rows)


def _as_time(millis: pa.Array, time_type: pa.DataType) -> Any:
    if not pa.types.is_timestamp(time_type):
        return millis.cast(time_type)
    return millis.cast(pa.timestamp("ms", time_type.tz)).cast(time_type, safe=False)
