"""``ed.read_state`` and ``eddyline checkpoints --state`` on an object store:
a parallelism-2 job's final checkpoint on S3 (moto_server) reads back as the job's
final keyed sums, through the environment variables and through
``storage_options``; a savepoint on S3 too."""

from __future__ import annotations

import pytest

import eddyline as ed
from eddyline.client.cli import main
from support.faults import SleepPerBatch, wait_until

from .conftest import S3

KEYS = 5
N = 5_000


def _sums(n: int) -> dict[int, int]:
    sums = {k: sum(v for v in range(n) if v % KEYS == k) for k in range(KEYS)}
    return {k: v for k, v in sums.items() if k < n}


def test_read_state_from_s3_checkpoint(
    s3: S3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    root = f"s3://{s3.bucket}/rs/chk"
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(root), batch_size=100)
    rows = env.from_sequence(0, 2_000).with_columns(k=ed.col("value") % KEYS)
    rows.key_by("k").sum("value").uid("sums").collect()
    result = env.execute("s3-read-state")
    final = result.checkpoints[-1].path
    assert str(final).startswith(root)

    state = ed.read_state(final, "sums")
    assert {r["k"]: r["value"] for r in state.to_pylist()} == _sums(2_000)

    # explicit storage_options, no environment: the root reads its newest checkpoint
    for key in s3.env:
        monkeypatch.delenv(key)
    state = ed.read_state(root, "sums", storage_options=s3.options)
    assert {r["k"]: r["value"] for r in state.to_pylist()} == _sums(2_000)

    args = [f"--storage-option={k}={v}" for k, v in s3.options.items()]
    assert main(["checkpoints", root, "--state", "sums", *args]) == 0
    out = capsys.readouterr().out
    assert f"in checkpoint {result.checkpoints[-1].id}" in out and "5 rows" in out, out
    with pytest.raises(ed.CheckpointError, match="no operator with uid 'nope'"):
        ed.read_state(final, "nope", storage_options=s3.options)


def test_read_state_from_s3_savepoint(s3: S3) -> None:
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(f"s3://{s3.bucket}/sp/chk", interval="1h"), batch_size=20
    )
    rows = (
        env.from_sequence(0, N)
        .name("numbers")
        .uid("numbers")
        .set_parallelism(1)
        .map_batches(SleepPerBatch(0.01))
        .with_columns(k=ed.col("value") % KEYS)
    )
    rows.key_by("k").sum("value").uid("sums").collect()
    client = env.execute_async("s3-savepoint")
    wait_until(
        lambda: client.metrics()["operators"]["numbers"]["records_out"] >= 200,
        timeout=30.0,
        what="200 rows to be read",
    )
    savepoint = client.stop_with_savepoint(f"s3://{s3.bucket}/sp/savepoint")
    read = int(client.wait(timeout=30.0).metrics["operators"]["numbers"]["records_out"])
    assert 200 <= read < N
    state = ed.read_state(savepoint, "sums")
    assert {r["k"]: r["value"] for r in state.to_pylist()} == _sums(read)
