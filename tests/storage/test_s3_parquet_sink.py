"""``ParquetSink`` on an object store: files are uploaded under
names readers ignore and copied to their final names when their checkpoint
completes; SIGKILL and restore from checkpoints on the same store loses and
duplicates nothing."""

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
from support.faults import assert_exact_ids, kill_after_checkpoints

from .conftest import S3


def _committed(s3: S3, prefix: str) -> pa.Table:
    """The rows of the committed files (names not starting with ``_`` or ``.``)."""
    tables = []
    for key in s3.keys(prefix + "/"):
        name = key.rsplit("/", 1)[-1]
        if name.startswith(("_", ".")):
            continue
        body = s3.client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()  # type: ignore[attr-defined]
        tables.append(pq.read_table(io.BytesIO(body)))
    return pa.concat_tables(tables) if tables else pa.table({"value": pa.array([], pa.int64())})


def test_parquet_sink_commits_objects_on_checkpoint_completion(s3: S3) -> None:
    n = 50_000
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(f"s3://{s3.bucket}/chk", interval="50ms"),
        batch_size=1_000,
    )
    env.from_sequence(0, n).sink_to(ed.ParquetSink(f"s3://{s3.bucket}/out"))
    result = env.execute("s3-sink")
    assert len(result.checkpoints) >= 1
    assert_exact_ids(_committed(s3, "out")["value"].to_pylist(), range(n), "ParquetSink(s3://)")
    names = [k.rsplit("/", 1)[-1] for k in s3.keys("out/")]
    assert names and all(name.startswith("part-") for name in names), names


def test_parquet_sink_storage_options_per_sink(s3: S3, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in s3.env:
        monkeypatch.delenv(key)
    env = ed.StreamEnvironment(1)
    env.from_sequence(0, 1_000).sink_to(
        ed.ParquetSink(f"s3://{s3.bucket}/opts-out", storage_options=s3.options)
    )
    env.execute("s3-sink-options")
    assert sorted(_committed(s3, "opts-out")["value"].to_pylist()) == list(range(1_000))


KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    env.execute("s3-sink-killable", restore_from="latest")
    """
)


@pytest.mark.timeout(180)
def test_sigkill_and_restore_into_s3_parquet_sink_is_exact(s3: S3, tmp_path: Path) -> None:
    n = 80_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = f"s3://{s3.bucket}/killed-out", f"s3://{s3.bucket}/killed-chk"
    command = [sys.executable, str(script), out, chk, str(n)]
    kill_after_checkpoints(command, chk, kills=2, rng=random.Random(21), timeout=90)
    assert_exact_ids(_committed(s3, "killed-out")["value"].to_pylist(), range(n), "ParquetSink")
    # A run killed between a pre-commit and its checkpoint's completion leaves a
    # .pending- object that the next run (restored from an older run's checkpoint)
    # does not know of; the last run sweeps those of the job's killed runs.
    leftovers = [k for k in s3.keys("killed-out/") if "/.pending-" in k]
    assert not leftovers, f"pending objects of committed or aborted checkpoints: {leftovers}"
