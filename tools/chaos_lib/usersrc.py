"""User sources in the generator: ``env.from_source`` of an ``ed.Source``
written the way a user would (``source:user``).

A Parquet source may become a user source (kind ``user``) that reads the same
files, one split per file, from a row offset it defines and reports: the
engine checkpoints the offsets, deals the splits left over to the subtasks of
a restore at another parallelism, and keeps one watermark per split
(docs/API.md "Event time per split"), so the rows, their event time and the
reference are the Parquet source's. ``variant`` says how it is written:

- ``fixed``: the splits are the file names, fixed when the job starts; an
  offset is the next row's index (an int).
- ``discovery``: ``discovery_interval`` and ``bounded = True``, each split
  named by ``split_id`` (its file's number), so split ``i`` is read by
  subtask ``i % parallelism``, also after a restore; an offset is a tuple
  ``("row", index)`` (any picklable value is an offset).

``:stall`` (either): every third ``read`` answers ``(None, offset)``,
"nothing available yet", which the engine must ask again about without
losing its place. ``read`` returns at most ``max_rows`` rows of its file, and
``None`` at its end.

Drawn after every older draw (generate.py), so earlier seeds keep their cases.
"""

from __future__ import annotations

import random

from .case import Case, Source

VARIANTS = ["fixed", "fixed:stall", "discovery", "discovery:stall"]

CLASSES = '''

class FileRows(ed.Source):
    """A user source: one split per Parquet file of a folder, read from a row offset."""

    def __init__(self, folder, variant):
        self.folder = folder
        self.discovery = variant.startswith("discovery")
        self.stall = variant.endswith(":stall")
        if self.discovery:
            self.discovery_interval, self.bounded = 0.05, True
        self.files = sorted(f for f in os.listdir(folder) if f.endswith(".parquet"))
        self.tables = {}
        self.calls = 0

    def schema(self):
        return SCHEMA

    def splits(self):
        return list(self.files)

    def split_id(self, split):
        return int(split.removeprefix("part-").removesuffix(".parquet"))

    def initial_offset(self, split):
        return ("row", 0) if self.discovery else 0

    def read(self, split, offset, max_rows):
        self.calls += 1
        if self.stall and self.calls % 3 == 0:
            return None, offset
        table = self.tables.get(split)
        if table is None:
            table = self.tables[split] = pq.read_table(self.folder + "/" + split, schema=SCHEMA)
        at = offset[1] if self.discovery else offset
        if at >= table.num_rows:
            return None
        rows = table.slice(at, max_rows)
        batch = pa.record_batch([c.combine_chunks() for c in rows.columns], schema=SCHEMA)
        end = at + batch.num_rows
        return batch, (("row", end) if self.discovery else end)
'''
"""The job script's source class (render.py appends it)."""


def widen(rng: random.Random, case: Case) -> None:
    """A Parquet source becomes a user source, three in ten, with a variant."""
    for source in case.sources:
        pick = rng.random()
        if source.kind == "parquet" and pick < 0.3:
            source.kind = "user"
            source.variant = rng.choice(VARIANTS)


def head(src: Source) -> str:
    """The source's call (render.py): it reads the files the Parquet source would."""
    return f'env.from_source(FileRows(IN + "/{src.name}", "{src.variant}"))'
