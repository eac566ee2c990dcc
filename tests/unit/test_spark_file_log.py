"""The `_spark_metadata` log that SparkTableSink publishes checkpoints with (no Spark needed).

Two processes committing the same checkpoint race to list its files; a file
must end up in exactly one batch, or Spark readers see its rows twice.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from eddyline.connectors.spark._filelog import SinkLog


def _files(root: Path, n: int) -> list[str]:
    out = []
    for i in range(n):
        path = root / f"part-{i}.parquet"
        path.write_bytes(b"x")
        out.append(str(path))
    return out


def test_a_batch_written_between_reading_and_claiming_is_seen(tmp_path: Path) -> None:
    """Another writer lists the files after this writer read the log but before
    it claimed a batch id: this writer must not list them again."""
    files = _files(tmp_path, 3)
    log = SinkLog(str(tmp_path))
    other = SinkLog(str(tmp_path))
    original = log.files_upto
    raced = []

    def files_upto_then_race(batch: int) -> list[str]:
        listed = original(batch)
        if not raced:
            raced.append(other.append_missing(files))
        return listed

    log.files_upto = files_upto_then_race  # type: ignore[method-assign]
    assert log.append_missing(files) is None, "nothing was missing once the other writer listed it"
    assert raced == [0]
    view = _spark_view(SinkLog(str(tmp_path)))
    assert sorted(view) == sorted(os.path.abspath(f) for f in files)


def _commit(root: str, files: list[str], barrier: object) -> None:
    barrier.wait()  # type: ignore[attr-defined]
    SinkLog(root).append_missing(files)


def test_concurrent_processes_list_every_file_exactly_once(tmp_path: Path) -> None:
    root = str(tmp_path)
    for round_ in range(15):
        files = [str(p) for p in _round_files(tmp_path, round_, 4)]
        barrier = multiprocessing.get_context("fork").Barrier(3)
        procs = [
            multiprocessing.get_context("fork").Process(target=_commit, args=(root, files, barrier))
            for _ in range(3)
        ]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
            assert p.exitcode == 0
    view = _spark_view(SinkLog(root))
    assert len(view) == len(set(view)) == 15 * 4


def _spark_view(log: SinkLog) -> list[str]:
    """The files as Spark's reader lists them: the latest compaction batch plus the
    plain batches after it, duplicates included."""
    view: list[str] = []
    for batch in range(log.latest() + 1):
        read = log._entries(batch)
        if read is None:
            continue
        files, compact = read
        view = list(files) if compact else view + list(files)
    return view


def _round_files(root: Path, round_: int, n: int) -> list[Path]:
    out = []
    for i in range(n):
        path = root / f"r{round_}-part-{i}.parquet"
        path.write_bytes(b"x")
        out.append(path)
    return out
