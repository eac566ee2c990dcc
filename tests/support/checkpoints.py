"""What the tests read out of checkpoints and key groups beyond the public API."""

from __future__ import annotations

import json
import os

import pyarrow as pa


def channel_state_rows(checkpoint: str | os.PathLike[str]) -> dict[tuple[str, int, int], int]:
    """Rows of in-flight data in an unaligned checkpoint, per channel.

    Reads the "(channel state)" entries of the manifest of ``checkpoint`` (a
    local ``chk-N`` directory) and decodes each subtask's channel state
    (docs/DESIGN.md "Unaligned checkpoints"; the encoding of
    ``core/src/checkpoint/channel_state.rs``: ``EDCHST01`` | channels u32 | per
    channel: segments u32 | per segment: length u64 | an Arrow IPC stream).

    Returns:
        ``{(entry name, subtask, input channel): rows}`` for every channel that
        holds rows; empty for an aligned checkpoint.

    Example:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     _ = pathlib.Path(tmp, "_manifest.json").write_text('{"operators": []}')
        ...     channel_state_rows(tmp)
        {}
    """
    import struct

    root = os.fspath(checkpoint)
    with open(os.path.join(root, "_manifest.json")) as f:
        manifest = json.load(f)
    rows: dict[tuple[str, int, int], int] = {}
    for op in manifest["operators"]:
        if not op["name"].endswith(" (channel state)"):
            continue
        for sub in op["subtasks"]:
            if sub.get("state") is None:
                continue
            with open(os.path.join(root, sub["state"]["file"]), "rb") as f:
                data = f.read()
            at = data.index(b"EDCHST01") + 8
            (channels,) = struct.unpack_from("<I", data, at)
            at += 4
            for channel in range(channels):
                (segments,) = struct.unpack_from("<I", data, at)
                at += 4
                for _ in range(segments):
                    (length,) = struct.unpack_from("<Q", data, at)
                    at += 8
                    table = pa.ipc.open_stream(pa.py_buffer(data[at : at + length])).read_all()
                    at += length
                    if table.num_rows:
                        key = (op["name"], int(sub["subtask"]), channel)
                        rows[key] = rows.get(key, 0) + table.num_rows
    return rows


def int_key_group(key: int, max_parallelism: int = 128) -> int:
    """The key group of an ``Int64`` key, as the engine computes it (``keygroup::mix64``,
    the murmur3 finalizer, modulo ``max_parallelism``): for tests that pick keys
    falling in one key group.

    Example:
        >>> int_key_group(0), 0 <= int_key_group(12345) < 128
        (0, True)
    """
    mask = (1 << 64) - 1
    x = key & mask
    x ^= x >> 33
    x = (x * 0xFF51AFD7ED558CCD) & mask
    x ^= x >> 33
    x = (x * 0xC4CEB9FE1A85EC53) & mask
    x ^= x >> 33
    return x % max_parallelism
