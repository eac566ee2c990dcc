"""``DeltaSink``'s options and two writers of one table, in the generator.

- ``compact_every`` (feature ``delta:compact_every``): the committer compacts
  the table's small files after every 1-3 commits, a Delta commit of its own
  that changes no rows, running beside the next checkpoints and their faults.
- ``target_file_size`` (``delta:target_file_size``): 2 KB, so a commit writes
  several files and compaction finds none small, or 256 KB, so compaction
  packs every commit's files together.
- two writers (sink ``delta2w``): the output goes to one Delta table through
  two ``DeltaSink``s, each adding a column ``writer`` (1 or 2) that says which wrote
  the row. Their commits race for the table's versions (each job's app id, the
  conflict retries of docs/DESIGN.md); each writer's rows (``delta2w:1``,
  ``delta2w:2``) are compared with the reference on their own, so a commit one
  writer lost, or took twice, shows up.

The options apply to every Delta sink of the case (append, upsert, both
writers). A table's rows are read with delta-rs at its newest version, as any
other Delta sink's.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pandas as pd

from .case import Case

WRITERS = (1, 2)


def widen(rng: random.Random, case: Case) -> None:
    """Draws the options, after every older draw (generate.py)."""
    two, compact, size = rng.random(), rng.random(), rng.random()
    # the writers add a column with a native expression: the schema must be
    # known when the job is built (a Python map without schema= makes it late)
    late_schema = any(op.kind in ("pmap", "pbatch") and not op.schema for op in case.ops)
    if two < 0.12 and not late_schema and "upsert" not in case.sinks:
        case.sinks.append("delta2w")
    if not {"delta", "upsert", "delta2w"} & set(case.sinks):
        return
    if compact < 0.3:
        case.delta_options["compact_every"] = rng.choice([1, 2, 3])
    if size < 0.2:
        case.delta_options["target_file_size"] = rng.choice([2_048, 262_144])


def options(case: Case) -> str:
    """The keyword arguments of the case's Delta sinks, as source text."""
    return "".join(f", {k}={v}" for k, v in sorted(case.delta_options.items()))


def sink_lines(case: Case, tag: str) -> list[str]:
    """The two writers of one table (render.py)."""
    lines = []
    for w in WRITERS:
        writer_tag = tag.replace("sink_delta2w", f"sink_delta2w_{w}")
        lines.append(
            f"    out.with_columns(writer=ed.lit({w})).sink_to("
            f'ed.DeltaSink(STORE + "/delta2w"{options(case)})){writer_tag}'
        )
    return lines


def split(table: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """Each writer's rows of the shared table, without the ``writer`` column."""
    if table.empty:
        return {f"delta2w:{w}": table for w in WRITERS}
    unknown = set(table["writer"]) - set(WRITERS)
    if unknown:
        raise AssertionError(f"delta2w: rows of no writer (writer {sorted(unknown)})")
    return {
        f"delta2w:{w}": table[table["writer"] == w].drop(columns=["writer"]).reset_index(drop=True)
        for w in WRITERS
    }


def _commits(case: Case, root: str, name: str) -> list[str]:
    """The text of each JSON commit of table ``name``'s log (local or on S3)."""
    if root.startswith("s3://"):
        from . import s3

        return s3.read_texts(root, f"out/{name}/_delta_log/", suffix=".json")
    log = Path(root) / "out" / name / "_delta_log"
    return [p.read_text() for p in sorted(log.glob("*.json"))] if log.is_dir() else []


def log_problems(case: Case, root: str) -> list[str]:
    """A Delta table keeps the one id and schema its first commit gave it: a
    second ``metaData`` action (a create that lost version 0 and landed as
    version 1) makes readers that follow the table take it for another."""
    problems = []
    for name in sorted({"delta", "upsert", "delta2w"} & set(case.sinks)):
        ids = [
            json.loads(line)["metaData"]["id"]
            for text in _commits(case, root, name)
            for line in text.splitlines()
            if line.startswith('{"metaData"')
        ]
        if len(ids) > 1:
            problems.append(f"{name}: the table's log sets its metadata {len(ids)} times: {ids}")
    return problems
