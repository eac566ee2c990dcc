"""The Nexmark queries written in SQL (``q*.sql`` beside this file), run with
``env.sql`` over the generator's tables registered as views (``run.py
--frontend sql``). Each file says where it differs from Nexmark's reference SQL.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pyarrow as pa

import eddyline as ed

HERE = Path(__file__).resolve().parent

QUERIES: dict[str, str] = {p.stem: p.read_text() for p in sorted(HERE.glob("q*.sql"))}
"""The SQL text of each query written in SQL, by name (``"q0"``, ...)."""


def build_sql(
    name: str, env: ed.StreamEnvironment, sources: Mapping[str, pa.Table | str]
) -> ed.DataStream:
    """Query ``name`` as ``env.sql`` over ``sources`` (table name to a Parquet path or
    an Arrow table), each registered as the view of its table name; a query over
    windows gets the tables' event time, ``date_time``."""
    timed = "DESCRIPTOR(" in QUERIES[name].upper()
    for table, source in sources.items():
        stream = env.from_parquet(source) if isinstance(source, str) else env.from_arrow(source)
        if timed:
            stream = stream.assign_timestamps("date_time")
        stream.create_temporary_view(table)
    return env.sql(QUERIES[name])
