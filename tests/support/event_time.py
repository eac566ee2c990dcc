"""Input for the event-time tests: Parquet files over one hour whose rows are
in time order up to a few seconds of disorder (DESIGN.md "Event time per
split": one watermark per file keeps every row on time)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HOUR_MS = 3_600_000
#: The files' columns: a unique ``id``, the key ``k``, the event time ``ts``
#: (ms) and a value ``v``.
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def write_hour_files(
    directory: Path,
    seed: int,
    *,
    files: int,
    rows: int,
    keys: int,
    row_group_size: int | None = None,
) -> list[dict[str, Any]]:
    """``files`` files of ``rows`` rows each over the same hour, each in time
    order up to 3 s of disorder, with ``keys`` keys drawn from ``seed``; the
    rows written, in order."""
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    written: list[dict[str, Any]] = []
    for f in range(files):
        part = [
            {
                "id": f * rows + i,
                "k": rng.randrange(keys),
                "ts": i * HOUR_MS // rows + rng.randrange(-3_000, 3_000),
                "v": 1 + i % 7,
            }
            for i in range(rows)
        ]
        pq.write_table(
            pa.Table.from_pylist(part, schema=SCHEMA),
            directory / f"part-{f}.parquet",
            row_group_size=row_group_size,
        )
        written.extend(part)
    return written
