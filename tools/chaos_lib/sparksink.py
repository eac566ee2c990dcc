"""``SparkTableSink`` in the generator: a case's output appended to a Spark
table, exactly once, checked like every other sink.

The sink (``spark`` in ``case.sinks``) writes a Parquet table at
``out/spark`` whose ``_spark_metadata`` log says which files Spark reads. The
output is read here as Spark reads it, from the log alone, written from
Spark's file sink log format (a ``v1`` line, then one JSON entry per file;
batch ``n.compact`` repeats every batch up to ``n``), never through
eddyline's reader of it: a file the log lists twice is read twice, so a
duplicate commit shows up as duplicate rows.

The draw costs a JVM per job run (the job script creates or checks the table
through a local Spark session), so it is drawn for a few cases only, and for
every case that starts Spark anyway for a ``from_spark`` source.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from urllib.parse import unquote, urlparse

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .case import Case

CHANCE = 0.03
"""How often a case without a Spark source gets the sink."""


def schema_known(case: Case) -> bool:
    """Whether the stream's schema is known when the sink is attached (the
    sink creates the table from it): a Python map without ``schema=`` makes
    it known only at run time."""
    return not any(op.kind in ("pmap", "pbatch") and not op.schema for op in case.ops)


def widen(rng: random.Random, case: Case) -> None:
    """Draws the sink: after every older draw (generate.py), so the cases of
    earlier seeds stay the same."""
    pick = rng.random()
    spark = any(s.kind == "spark" for s in case.sources)
    # a worker-process kill picks a child of the job: the JVM must not be one
    if case.fault.kind == "wkill" or not schema_known(case):
        return
    if spark or pick < CHANCE:
        case.sinks.append("spark")


def sink_line(tag: str) -> str:
    """The job script's line that attaches the sink (render.py)."""
    return f'    out.sink_to(SparkTableSink(spark(), "chaos_out", path=OUT + "/spark")){tag}'


def _batches(log: Path) -> dict[int, Path]:
    found: dict[int, Path] = {}
    for path in log.iterdir() if log.is_dir() else []:
        stem = path.name.removesuffix(".compact")
        if stem.isdigit():
            found[int(stem)] = path
    return found


def _entries(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0] != "v1":
        raise AssertionError(f"{path}: not a v1 file sink log batch")
    paths = []
    for line in lines[1:]:
        if line.strip():
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                paths.append(entry["path"])
    return paths


def listed_files(table: Path) -> list[str]:
    """The files a Spark reader of ``table`` reads, by local path, in log
    order: the newest compaction batch's, then each later batch's."""
    batches = _batches(table / "_spark_metadata")
    compacted = [n for n, p in batches.items() if p.name.endswith(".compact")]
    start = max(compacted, default=0)
    listed = []
    for n in sorted(b for b in batches if b >= start):
        for uri in _entries(batches[n]):
            parsed = urlparse(uri)
            listed.append(unquote(parsed.path) if parsed.scheme == "file" else uri)
    return listed


def read_table(table: Path) -> pd.DataFrame:
    """The rows a Spark reader of the table sees (empty before the first batch)."""
    parts = [pq.read_table(path) for path in listed_files(table)]
    if not parts:
        return pd.DataFrame()
    return pa.concat_tables(parts, promote_options="default").to_pandas()
