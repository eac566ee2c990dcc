"""The ``eddyline`` command line: ``demo``, ``run script.py`` and ``checkpoints DIR [--state UID]``.

Example:
    >>> main(["checkpoints", "/nonexistent/dir"])
    2
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["main"]

DEMO_ROWS = 1_000_000
DEMO_KEYS = 1000


def _demo(rows: int, parallelism: int, seed: int) -> int:
    import numpy as np
    import pyarrow as pa

    import eddyline as ed
    from eddyline.testing import last_by_key

    rng = np.random.default_rng(seed)
    keys = rng.integers(0, DEMO_KEYS, rows, dtype=np.int64)
    values = rng.integers(0, 1000, rows, dtype=np.int64)
    table = pa.table({"key": keys, "value": values})

    env = ed.StreamEnvironment(parallelism=parallelism)
    doubled = env.from_arrow(table).with_columns(value=ed.col("value") * 2)
    tagged = doubled.map(lambda r: {**r, "even": r["key"] % 2 == 0}).name("tag_even")
    sums = tagged.key_by("key").sum("value").collect()

    started = time.perf_counter()
    result = env.execute("demo")
    wall = time.perf_counter() - started

    final = last_by_key(sums, "key")
    expected = np.bincount(keys, weights=values * 2, minlength=DEMO_KEYS).astype(np.int64)
    top = sorted(final.values(), key=lambda r: (-r["value"], r["key"]))[:5]

    print(f"eddyline demo: {rows:,} rows in, parallelism {parallelism}")
    print("pipeline: with_columns(value*2) -> map(tag_even) -> key_by(key).sum(value) -> collect")
    print(f"distinct keys: {len(final)}")
    print("top 5 keys by sum:")
    for row in top:
        print(f"  key {row['key']:>4}  sum {row['value']:,}")
    print(f"wall time: {wall:.2f} s ({result.wall_time_s:.2f} s in the job)")
    print(f"throughput: {rows / wall:,.0f} rows/s")
    counts = np.bincount(keys, minlength=DEMO_KEYS)
    present = {k: int(expected[k]) for k in range(DEMO_KEYS) if counts[k] > 0}
    got = {k: row["value"] for k, row in final.items()}
    if got == present:
        print("check: ok")
        return 0
    wrong = sorted(k for k in set(got) | set(present) if got.get(k) != present.get(k))
    print(
        f"check: FAILED for {len(wrong)} keys, e.g. key {wrong[0]}: got {got.get(wrong[0])}, "
        f"expected {present.get(wrong[0])}"
    )
    return 1


def _run(script: str, args: Sequence[str], dashboard: int | None = None) -> int:
    from .. import environment

    if not os.path.isfile(script):
        print(f"eddyline run: no such file: {script}", file=sys.stderr)
        return 2
    environment.RUN_DASHBOARD[0] = dashboard
    saved = sys.argv[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        environment.RUN_DASHBOARD[0] = None
        sys.argv = saved
        sys.path.pop(0)
    return 0


def _size(count: float) -> str:
    """Formats a byte count.

    Example:
        >>> _size(512), _size(2048), _size(3 * 1024**3)
        ('512 B', '2.0 KiB', '3.0 GiB')
    """
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{int(count)} B"


def _when(ms: object) -> str:
    if not isinstance(ms, int | float) or isinstance(ms, bool) or ms <= 0:
        return "-"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000))
    return f"{stamp}.{int(ms) % 1000:03d}"


def _ms(value: object) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.1f} ms"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart.

    Example:
        >>> for line in _table(["id", "size"], [["1", "10 B"], ["12", "2.0 KiB"]]):
        ...     print(line)
        id  size
        1   10 B
        12  2.0 KiB
    """
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=False)]
    lines = []
    for row in [header, *rows]:
        cells = [str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append((indent + "  ".join(cells)).rstrip())
    return lines


def _max_alignment(core: Any, path: str, options: dict[str, str]) -> str:
    try:
        alignments = core.inspect_checkpoint(path, options).get("alignments") or []
    except Exception:
        return "-"
    return _ms(max((float(a.get("alignment_ms", 0.0)) for a in alignments), default=0.0))


def _list_checkpoints(directory: str, options: dict[str, str]) -> int:
    from .. import _core

    found: list[dict[str, Any]] = list(_core.list_checkpoints(directory, options))
    if not found:
        print(f"no checkpoints found in {directory}")
        return 0
    rows = []
    problems = []
    for info in found:
        valid = bool(info.get("valid"))
        alignment = (
            _ms(info["alignment_ms"])
            if "alignment_ms" in info
            else (_max_alignment(_core, str(info.get("path")), options) if valid else "-")
        )
        rows.append(
            [
                str(info.get("id")),
                str(info.get("kind", "checkpoint")),
                _when(info.get("trigger_time_ms")),
                _size(int(info.get("bytes") or 0)),
                _ms(info.get("duration_ms")),
                alignment,
                _null_state(info),
                "yes" if valid else "NO",
            ]
        )
        if not valid:
            problems.append(f"  chk-{info.get('id')}: {info.get('error') or 'invalid'}")
    print(f"{len(found)} checkpoints in {directory} (newest first):")
    header = ["id", "kind", "triggered", "size", "duration", "alignment", "null-state", "valid"]
    print("\n".join(_table(header, rows, indent="  ")))
    if problems:
        print("invalid checkpoints:")
        print("\n".join(problems))
    return 0


def _null_state(info: dict[str, Any]) -> str:
    """The null-state checkpoint column: ``-`` when it is the checkpoint itself.

    Example:
        >>> _null_state({"id": 5, "null_state_checkpoint": 2}), _null_state({"id": 5})
        ('2', '-')
    """
    ns = info.get("null_state_checkpoint")
    if ns is None or ns == info.get("id"):
        return "-"
    return str(ns)


def _key_groups(ranges: Sequence[Sequence[int]]) -> str:
    """Formats half-open key-group ranges ``[start, end)``.

    Example:
        >>> _key_groups([[0, 32], [64, 65]]), _key_groups([])
        ('[0, 32), [64, 65)', '-')
    """
    parts = [f"[{start}, {end})" for start, end in ranges]
    return ", ".join(parts) if parts else "-"


def _written(info: dict[str, Any]) -> str:
    """What an incremental checkpoint wrote itself, when it reuses state.

    Example:
        >>> _written({"bytes": 4096, "written_bytes": 100}), _written({"bytes": 9})
        (' (100 B written by it, the rest shared with earlier checkpoints)', '')
    """
    written = info.get("written_bytes")
    if written is None or written == info.get("bytes"):
        return ""
    return f" ({_size(int(written))} written by it, the rest shared with earlier checkpoints)"


def _file(sub: dict[str, Any]) -> str:
    """A subtask's state file, and how many earlier files it reuses key groups of.

    Example:
        >>> _file({"file": "1-a.state", "shared": True, "reused": [{}, {}]})
        'shared/1-a.state + 2 reused'
        >>> _file({"file": None}), _file({"file": "a.state"})
        ('-', 'a.state')
    """
    name = sub.get("file")
    text = "-" if name is None else (f"shared/{name}" if sub.get("shared") else str(name))
    reused = sub.get("reused") or []
    return f"{text} + {len(reused)} reused" if reused else text


def _inspect_checkpoint(path: str, options: dict[str, str]) -> int:
    from .. import _core

    info: dict[str, Any] = _core.inspect_checkpoint(path, options)
    print(f"{info.get('kind', 'checkpoint')} {info.get('id')} at {info.get('path', path)}")
    print(
        f"  triggered {_when(info.get('trigger_time_ms'))}, "
        f"completed {_when(info.get('completion_time_ms'))}, "
        f"duration {_ms(info.get('duration_ms'))}, size {_size(int(info.get('bytes') or 0))}"
        f"{_written(info)}"
    )
    ns = info.get("null_state_checkpoint")
    if ns is not None and ns != info.get("id"):
        print(
            f"  null-state checkpoint {ns}: a recompute recovery rewinds the sources to it and "
            "replays the later barriers"
        )
        if info.get("final"):
            print(
                "  final checkpoint: it also stores the recomputing operators' final state "
                "(read it with --state UID; a restore from it replays nothing)"
            )
    alignments = info.get("alignments") or []
    if alignments:
        worst = max(alignments, key=lambda a: float(a.get("alignment_ms", 0.0)))
        print(
            f"  alignment: max {_ms(worst.get('alignment_ms'))} "
            f"(task '{worst.get('task')}' subtask {worst.get('subtask')})"
        )
    operators = info.get("operators") or []
    print(f"  operators: {len(operators)}")
    for op in operators:
        subtasks = op.get("subtasks") or []
        total = sum(int(sub.get("bytes") or 0) for sub in subtasks)
        finished = ", finished" if op.get("finished") else ""
        if op.get("recomputes"):
            how = f"recomputes from checkpoint {op.get('null_state_checkpoint')}"
        else:
            how = "persisted"
        print(
            f"    {op.get('uid')} ('{op.get('name')}'): {len(subtasks)} subtasks, "
            f"{_size(total)}, {how}{finished}"
        )
        rows = [
            [
                str(sub.get("subtask")),
                _size(int(sub.get("bytes") or 0)),
                _key_groups(sub.get("key_groups") or []),
                _file(sub),
            ]
            for sub in subtasks
        ]
        if rows:
            print("\n".join(_table(["subtask", "size", "key groups", "file"], rows, "      ")))
    return 0


def _cell(value: object) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _print_state(path: str, uid: str, state: str | None, options: dict[str, str]) -> int:
    """Prints the keyed state of operator ``uid`` (``--state UID``) as a table."""
    from ..state_reader import read_state_info

    table, about = read_state_info(path, uid, state=state, storage_options=options)
    print(
        f"keyed state of operator '{about['name']}' (uid '{about['uid']}') in checkpoint "
        f"{about['checkpoint_id']} at {about['path']}: {table.num_rows} rows"
    )
    rows = [[_cell(v) for v in row.values()] for row in table.to_pylist()]
    print("\n".join(_table(table.column_names, rows, "  ")))
    return 0


def _is_checkpoint_path(path: str) -> bool:
    name = os.path.basename(os.path.normpath(path))
    return bool(re.fullmatch(r"chk-\d+", name)) or os.path.isfile(
        os.path.join(path, "_manifest.json")
    )


def _storage_options(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` arguments as storage options.

    Example:
        >>> _storage_options(["endpoint=http://127.0.0.1:9000", "region=us-east-1"])
        {'endpoint': 'http://127.0.0.1:9000', 'region': 'us-east-1'}
    """
    from ..errors import StorageError

    options: dict[str, str] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key:
            raise StorageError(f"--storage-option needs KEY=VALUE, got {pair!r}")
        options[key] = value
    return options


def _checkpoints(
    directory: str,
    checkpoint_id: int | None = None,
    storage_options: Sequence[str] = (),
    state_uid: str | None = None,
    state_name: str | None = None,
) -> int:
    """Lists or inspects checkpoints, or prints an operator's keyed state
    (``state_uid``: of the checkpoint ``checkpoint_id``, the ``chk-N`` path
    given, or the newest one); a missing path or a file is an error (exit
    code 2).

    An existing directory without checkpoints is listed as empty (exit code 0).
    An object store URI (``s3://bucket/chk``) is read with ``storage_options``
    (``KEY=VALUE``), else the standard environment variables; an unreachable
    endpoint, a missing bucket or bad credentials is an error (exit code 2).
    """
    from .._storage import is_object_store_uri, local_path
    from ..errors import CheckpointError, StorageError

    try:
        options = _storage_options(storage_options)
        if state_name is not None and state_uid is None:
            raise CheckpointError("--state-name NAME needs --state UID (the operator to read)")
        if state_uid is not None:
            base = directory.rstrip("/") if is_object_store_uri(directory) else directory
            if checkpoint_id is not None:
                base = f"{base}/chk-{checkpoint_id}"
            return _print_state(base, state_uid, state_name, options)
        if is_object_store_uri(directory):
            uri = directory.rstrip("/")
            if checkpoint_id is not None:
                return _inspect_checkpoint(f"{uri}/chk-{checkpoint_id}", options)
            if re.search(r"/chk-\d+$", uri):
                return _inspect_checkpoint(uri, options)
            return _list_checkpoints(uri, options)
        directory = local_path(directory, what="eddyline checkpoints")
        if not os.path.exists(directory):
            raise CheckpointError(f"'{directory}' does not exist")
        if not os.path.isdir(directory):
            raise CheckpointError(
                f"'{directory}' is a file, not a checkpoint directory (pass the checkpoint "
                "directory or one of its chk-<id> directories)"
            )
        if checkpoint_id is not None:
            return _inspect_checkpoint(os.path.join(directory, f"chk-{checkpoint_id}"), options)
        if _is_checkpoint_path(directory):
            return _inspect_checkpoint(directory, options)
        if not any(entry.startswith("chk-") for entry in os.listdir(directory)):
            print(f"no checkpoints found in {directory}")
            return 0
        return _list_checkpoints(directory, options)
    except (CheckpointError, StorageError) as exc:
        print(f"eddyline checkpoints: {exc}", file=sys.stderr)
        return 2


def _count(least: int) -> Callable[[str], int]:
    """An argparse type: an int of at least ``least`` (argparse turns the
    ``ArgumentTypeError`` into a usage error, exit code 2).

    Example:
        >>> _count(1)("3")
        3
        >>> _count(1)("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be an integer >= 1, got '0'
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least:
            raise argparse.ArgumentTypeError(f"must be an integer >= {least}, got {text!r}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="eddyline", description="eddyline: streaming dataflow with a Rust core."
    )
    parser.add_argument("--version", action="version", version=f"eddyline {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run the built-in example job and check its output")
    demo.add_argument("--rows", type=_count(0), default=DEMO_ROWS, help="number of input rows")
    demo.add_argument(
        "--parallelism",
        type=_count(1),
        default=min(4, os.cpu_count() or 1),
        help="parallel subtasks per operator (at least 1)",
    )
    demo.add_argument("--seed", type=_count(0), default=42)
    run = commands.add_parser("run", help="run a job script as __main__")
    run.add_argument(
        "--dashboard",
        action="store_true",
        help="serve each job's web dashboard on 127.0.0.1 (port 8081, see --dashboard-port)",
    )
    run.add_argument(
        "--dashboard-port",
        type=int,
        default=None,
        metavar="PORT",
        help="the dashboard's port (implies --dashboard; 0 picks a free one)",
    )
    run.add_argument("script")
    run.add_argument("args", nargs=argparse.REMAINDER)
    chk = commands.add_parser(
        "checkpoints",
        help="list the checkpoints in a directory, or inspect one (--id N, or a chk-N path)",
    )
    chk.add_argument(
        "dir",
        help="a checkpoint directory or URI (s3://...), or one checkpoint's chk-N directory",
    )
    chk.add_argument("--id", type=int, default=None, help="inspect the checkpoint with this id")
    chk.add_argument(
        "--state",
        default=None,
        metavar="UID",
        help="print the keyed state of the operator with this uid (of --id N, a chk-N path, "
        "or the newest checkpoint)",
    )
    chk.add_argument(
        "--state-name",
        default=None,
        metavar="NAME",
        help="with --state: only this named state (read_state's state=)",
    )
    chk.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an object store option for an s3:// (gs://, az://) dir, e.g. endpoint=URL "
        "(repeatable; default: the standard environment variables)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the command line; returns the exit code.

    Args:
        argv: The arguments (default: ``sys.argv[1:]``).
    """
    args = _parser().parse_args(argv)
    if args.command == "demo":
        return _demo(args.rows, args.parallelism, args.seed)
    if args.command == "run":
        port = args.dashboard_port
        if port is None and args.dashboard:
            port = 8081
        return _run(args.script, args.args, port)
    return _checkpoints(args.dir, args.id, args.storage_option, args.state, args.state_name)


if __name__ == "__main__":
    sys.exit(main())
