"""``ed.DeltaSink`` on an object store: a Delta table on S3
(moto_server), written exactly once across a SIGKILL and a restore from
checkpoints on the same store, read back with delta-rs."""

from __future__ import annotations

import json
import random
import sys
import textwrap
from pathlib import Path

import pytest

from support.faults import assert_exact_ids, kill_after_checkpoints

from .conftest import S3

deltalake = pytest.importorskip(
    "deltalake", reason="the S3 Delta tests need deltalake (test extra)"
)


def _delta_options(s3: S3) -> dict[str, str]:
    # One writer per table here (sink parallelism 1): delta-rs may then
    # commit on S3 without a lock provider.
    return {**s3.env, "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}


KILL_SCRIPT = textwrap.dedent(
    """
    import json
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    table, chk, n, options = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms"), batch_size=200
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    sink = ed.DeltaSink(table, storage_options=options)
    slow.sink_to(sink).name("delta").uid("delta").set_parallelism(1)
    env.execute("delta-s3-killable", restore_from="latest")
    """
)


@pytest.mark.timeout(180)
def test_delta_table_on_s3_sigkill_and_restore_is_exact(s3: S3, tmp_path: Path) -> None:

    n = 40_000
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    table, chk = f"s3://{s3.bucket}/delta/t", f"s3://{s3.bucket}/delta/chk"
    options = _delta_options(s3)
    command = [sys.executable, str(script), table, chk, str(n), json.dumps(options)]
    kill_after_checkpoints(command, chk, kills=2, rng=random.Random(3), timeout=90)
    rows = deltalake.DeltaTable(table, storage_options=options).to_pyarrow_table()
    assert_exact_ids(rows["value"].to_pylist(), range(n), "DeltaSink(s3://)")
    assert any(k.startswith("delta/t/_delta_log/") for k in s3.keys("delta/t/"))


def test_delta_sink_takes_the_environments_storage_options(
    s3: S3, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # API.md: storage_options are "given once", on the environment; without
    # them reaching the sink, delta-rs fell back to instance metadata and failed.
    for key in s3.env:
        monkeypatch.delenv(key)
    import eddyline as ed

    table, n = f"s3://{s3.bucket}/env/t", 5_000
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="50ms"),
        storage_options=s3.options,
        batch_size=500,
    )
    env.from_sequence(0, n).sink_to(ed.DeltaSink(table)).name("delta")
    result = env.execute("delta-env-options")
    rows = deltalake.DeltaTable(table, storage_options=s3.options).to_pyarrow_table()
    assert_exact_ids(rows["value"].to_pylist(), range(n), "DeltaSink(s3://)")
    assert result.restarts == 0, result
    assert not [k for k in s3.keys("env/t/_eddyline_staging/") if k.endswith(".arrow")]
