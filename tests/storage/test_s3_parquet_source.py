"""``from_parquet`` over an object store prefix: objects are listed
under the prefix (``_``/``.`` names skipped), read by byte ranges, and a job
killed mid-run restores from checkpoints on the same store exactly."""

from __future__ import annotations

import io
import random
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, kill_after_checkpoints

from .conftest import S3

FILES = 4
ROWS = 30_000


def _upload(s3: S3, prefix: str) -> pa.Table:
    """Writes FILES Parquet objects (several row groups each) plus objects a
    reader must skip; returns all the rows that count."""
    parts = []
    for i in range(FILES):
        ids = pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64())
        part = pa.table({"id": ids, "k": pa.compute.remainder(ids, 5)})
        sink = io.BytesIO()
        pq.write_table(part, sink, row_group_size=7_000)
        sub = "nested/" if i == FILES - 1 else ""
        s3.client.put_object(  # type: ignore[attr-defined]
            Bucket=s3.bucket, Key=f"{prefix}/{sub}part-{i}.parquet", Body=sink.getvalue()
        )
        parts.append(part)
    for skipped in ("_SUCCESS", ".part-9.parquet.crc", "_staging/part-9.parquet"):
        s3.client.put_object(Bucket=s3.bucket, Key=f"{prefix}/{skipped}", Body=b"not parquet")  # type: ignore[attr-defined]
    return pa.concat_tables(parts)


@pytest.mark.parametrize("parallelism", [1, 2])
def test_from_parquet_reads_every_object_under_the_prefix(s3: S3, parallelism: int) -> None:
    expected = _upload(s3, "data")
    env = ed.StreamEnvironment(parallelism, batch_size=1_000)
    stream = env.from_parquet(f"s3://{s3.bucket}/data")
    assert stream.schema == pa.schema({"id": pa.int64(), "k": pa.int64()})
    handle = stream.collect()
    env.execute("s3-parquet")
    got = handle.to_arrow()
    assert_exact_ids(got["id"].to_pylist(), expected["id"].to_pylist(), "from_parquet(s3://)")


def test_from_parquet_columns_on_the_store(s3: S3) -> None:
    """Projection on an object store: only the named column comes back."""
    expected = _upload(s3, "cols")
    env = ed.StreamEnvironment(2, batch_size=1_000)
    stream = env.from_parquet(f"s3://{s3.bucket}/cols", columns=["k"])
    assert stream.schema == pa.schema({"k": pa.int64()})
    handle = stream.collect()
    env.execute("s3-parquet-columns")
    got = sorted(handle.to_arrow()["k"].to_pylist())
    assert got == sorted(expected["k"].to_pylist())


def test_from_parquet_single_object_and_storage_options(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    _upload(s3, "one")
    for key in s3.env:
        monkeypatch.delenv(key)
    env = ed.StreamEnvironment(1)
    handle = env.from_parquet(
        f"s3://{s3.bucket}/one/part-0.parquet", storage_options=s3.options
    ).collect()
    env.execute("s3-one-object")
    assert sorted(handle.to_arrow()["id"].to_pylist()) == list(range(ROWS))


def test_from_parquet_empty_prefix_and_missing_bucket_are_clear_errors(s3: S3) -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.GraphError, match="no data files"):
        env.from_parquet(f"s3://{s3.bucket}/nothing-here")
    missing = f"s3://missing-{s3.bucket}/data"
    with pytest.raises(ed.StorageError) as info:
        env.from_parquet(missing)
    assert missing in str(info.value)


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    src, out, chk = sys.argv[1], sys.argv[2], sys.argv[3]
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=500
    )
    rows = env.from_parquet(src).name("rows").uid("rows")
    slow = rows.map_batches(SleepPerBatch(0.01)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    env.execute("s3-parquet-killable", restore_from="latest")
    """
)


@pytest.mark.timeout(180)
def test_sigkill_and_restore_reading_s3_parquet_is_exact(s3: S3, tmp_path: Path) -> None:
    expected = _upload(s3, "killed-src")
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", f"s3://{s3.bucket}/killed-chk"
    command = [sys.executable, str(script), f"s3://{s3.bucket}/killed-src", str(out), chk]
    kill_after_checkpoints(command, chk, kills=2, rng=random.Random(7), timeout=90)
    assert_exact_ids(
        read_parquet_dir(out)["id"].to_pylist(), expected["id"].to_pylist(), "ParquetSink"
    )
