"""A case's input rows, and the files its job script reads them from.

Rows are made from each source's own seed, split by split, in the order the
engine reads each split. Event time: row ``i`` of a split sits at
``i * span / rows`` moved by at most ``jitter_ms`` either way, and
``2 * jitter_ms < bound_ms``, so every row is above its split's watermark when
it arrives (watermark = largest timestamp so far minus the bound minus 1 ms):
within a split any row's timestamp is at least its place minus the jitter, the
largest before it at most that place plus the jitter. This holds for any
subsequence of a split too (row groups dealt to several subtasks, batches dealt
by stride), so no row is late whatever the parallelism, the interleaving of
splits, or a restore: the reference needs no arrival order.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .case import Case, Source

SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])
Row = dict[str, int]
# kinds whose rows come in ``files`` splits (files, Kafka partitions)
FILE_KINDS = ("parquet", "spark", "kafka", "user")
LATE_KEY = 1_000_000_000
"""Above every generated key: a late candidate's own key is this plus its id."""


def sequence_step(source: Source) -> int:
    """The event-time step between two values of a sequence source."""
    return max(1, source.span_ms // max(1, source.rows))


_SPLITS: dict[tuple[object, ...], list[list[Row]]] = {}


def splits_of(source: Source) -> list[list[Row]]:
    """The rows of ``source``, one list per split (a file; one list for the others).

    Cached by the source's fields (the inputs, the job script, the reference
    and the late candidates of a case all ask for them); callers must not
    change the lists."""
    key = dataclasses.astuple(source)
    if key not in _SPLITS:
        if len(_SPLITS) >= 16:
            _SPLITS.clear()
        _SPLITS[key] = _make_splits(source)
    return _SPLITS[key]


def _make_splits(source: Source) -> list[list[Row]]:
    if source.kind == "sequence":
        step = sequence_step(source)
        return [
            [
                {"id": source.id_base + n, "k": n % source.keys, "ts": n * step, "v": n % 7 + 1}
                for n in range(source.rows)
            ]
        ]
    rng = random.Random(source.seed)
    files = source.files if source.kind in FILE_KINDS else 1
    per_file = [source.rows // files + (1 if f < source.rows % files else 0) for f in range(files)]
    out: list[list[Row]] = []
    next_id = source.id_base
    for count in per_file:
        split = []
        for i in range(count):
            place = i * source.span_ms // max(1, count)
            ts = max(0, place + rng.randint(-source.jitter_ms, source.jitter_ms))
            split.append(
                {"id": next_id, "k": rng.randrange(source.keys), "ts": ts, "v": rng.randint(1, 20)}
            )
            next_id += 1
        if source.late_rows and source.late_join:
            next_id = _insert_candidates(source, rng, split, len(out), next_id)
        elif source.late_rows:
            far = source.span_ms + 10 * source.bound_ms
            split.append({"id": next_id, "k": 0, "ts": far, "v": 1})
            next_id += 1
            for _ in range(source.late_rows):
                ts = rng.randrange(0, max(1, source.span_ms // 2))
                k = rng.randrange(source.keys)
                split.append(
                    {
                        "id": next_id,
                        "k": LATE_KEY + next_id if source.late_keys else k,
                        "ts": ts,
                        "v": 1,
                    }
                )
                next_id += 1
        out.append(split)
    return out


def _insert_candidates(
    source: Source, rng: random.Random, split: list[Row], index: int, next_id: int
) -> int:
    """``late_join`` candidates (late_session.py), inserted among the split's
    rows: each behind the rows before it by more than the bound (so behind its
    split's watermark; around the watermark of its key group, or far behind), the n-th of the
    source with key n while there are keys (one candidate a key), then a key of
    its own. Their ids come after the split's others. Returns the next id."""
    for j in range(source.late_rows):
        at = rng.randrange(1, max(2, len(split)))
        # how far behind: log-uniform from 0.1 s to half the span, as the
        # watermark lags a batch or more behind the rows when a row arrives
        behind = int(math.exp(rng.uniform(math.log(100), math.log(max(200, source.span_ms // 2)))))
        ts = max(0, split[at - 1]["ts"] - source.bound_ms - behind)
        n = index * source.late_rows + j
        k = n if n < source.keys else LATE_KEY + next_id
        split.insert(at, {"id": next_id, "k": k, "ts": ts, "v": 1})
        next_id += 1
        for b in range(1, source.late_burst):  # more of its key right after it (late_burst.py)
            # still behind the row before it by more than the bound
            room = max(0, split[at - 1]["ts"] - source.bound_ms - 1 - ts)
            later = rng.randint(0, min(source.late_spread_ms, room))
            split.insert(at + b, {"id": next_id, "k": k, "ts": ts + later, "v": 1})
            next_id += 1
    return next_id


def late_candidates(source: Source) -> set[int]:
    """The ids of the late candidates: the last ``late_rows`` ids of each split
    (rows placed after a far-ahead row of their split, or ``late_join``'s
    inserted among its rows)."""
    if not source.late_rows:
        return set()
    count = source.late_rows * max(1, source.late_burst)  # a burst's rows too (late_burst.py)
    return {i for split in splits_of(source) for i in sorted(row["id"] for row in split)[-count:]}


def rows_of(source: Source) -> list[Row]:
    return [row for split in splits_of(source) for row in split]


def write_inputs(case: Case, directory: Path) -> None:
    """Writes each Parquet source's files under ``directory/<name>/`` and each
    in-memory source's rows to ``directory/<name>.parquet`` (the job script
    loads those into memory and hands them to ``from_arrow``/``from_collection``)."""
    directory.mkdir(parents=True, exist_ok=True)
    if "kafka" in case.sinks:
        from support.kafka_broker import new_topic

        new_topic(os.environ["CHAOS_KAFKA"], 2, os.environ["CHAOS_TOPIC"] + "out")
    for source in case.sources:
        if source.kind == "sequence":
            continue
        splits = splits_of(source)
        if source.kind == "kafka":
            _produce(source, splits)
            continue
        if source.kind in ("parquet", "spark", "user"):
            folder = directory / source.name
            folder.mkdir(exist_ok=True)
            for index, split in enumerate(splits):
                group = max(1, -(-len(split) // source.row_groups))
                pq.write_table(
                    pa.Table.from_pylist(split, schema=SCHEMA),
                    folder / f"part-{index:03d}.parquet",
                    row_group_size=group,
                )
        else:
            pq.write_table(
                pa.Table.from_pylist(splits[0], schema=SCHEMA), directory / f"{source.name}.parquet"
            )


def topic_of(source: Source) -> str:
    """A Kafka source's topic: the run's prefix (``CHAOS_TOPIC``, fresh per
    run of a case) and the source's name."""
    return os.environ["CHAOS_TOPIC"] + source.name


def _produce(source: Source, splits: list[list[Row]]) -> None:
    """Each split to its own partition of a new topic, in order, one message a batch."""
    from support.kafka_broker import new_topic, produce_each

    broker = os.environ["CHAOS_KAFKA"]
    topic = new_topic(broker, len(splits), topic_of(source))
    produce_each(
        broker,
        topic,
        ((p, None, json.dumps(row).encode()) for p, split in enumerate(splits) for row in split),
    )
