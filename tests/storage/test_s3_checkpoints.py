"""Checkpoints and savepoints on an object store (API.md "Storage"),
against a real S3 API server (moto_server): the same guarantees as on a local
disk — a checkpoint exists once its manifest object is written, a SIGKILLed job
restores from the latest one exactly, retention deletes old ones, and a missing
bucket or an unreachable endpoint is an ``ed.StorageError`` naming the URI."""

from __future__ import annotations

import random
import re
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.compute as pc
import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import (
    SleepPerBatch,
    assert_exact_ids,
    completed_checkpoints,
    kill_after_checkpoints,
    wait_until,
)

from .conftest import S3, run_env

N = 120_000
KEYS = 7

KILL_SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch

    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=2),
        batch_size=200,
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    result = env.execute("s3-killable", restore_from="latest")
    for stats in result.checkpoints:
        print(f"checkpoint {stats.id} at {stats.path}", flush=True)
    records = result.metrics["operators"]["numbers"]["records_out"]
    print(f"source records {records}", flush=True)
    """
)


def _keyed_sum_job(env: ed.StreamEnvironment, n: int) -> ed.CollectHandle:
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    keyed = numbers.with_columns(k=ed.col("value") % KEYS).key_by("k")
    return keyed.sum("value").name("sum").uid("sum").collect()


def _expected_sums(n: int) -> dict[int, int]:
    sums: dict[int, int] = {}
    for v in range(n):
        sums[v % KEYS] = sums.get(v % KEYS, 0) + v
    return sums


def _final_sums(handle: ed.CollectHandle) -> dict[int, int]:
    table = handle.to_arrow()
    last: dict[int, int] = {}
    for k, v in zip(table["k"].to_pylist(), table["value"].to_pylist(), strict=True):
        last[k] = max(last.get(k, v), v)
    return last


def test_checkpoints_written_to_s3_with_manifest_last_and_retention(s3: S3) -> None:
    uri = f"s3://{s3.bucket}/jobs/chk"
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(uri, interval="50ms", retained=2), batch_size=500
    )
    handle = _keyed_sum_job(env, 200_000)
    result = env.execute("s3-checkpoints")
    assert _final_sums(handle) == _expected_sums(200_000)
    assert result.checkpoints, "no checkpoint completed"
    assert all(str(c.path).startswith(f"{uri}/chk-") for c in result.checkpoints)

    keys = s3.keys("jobs/chk/")
    manifests = sorted(int(m) for m in re.findall(r"chk-(\d+)/_manifest\.json", "\n".join(keys)))
    # retention kept the newest two completed checkpoints, and nothing older
    assert manifests == sorted(c.id for c in result.checkpoints)[-2:], keys
    for cid in manifests:
        state = [k for k in keys if k.startswith(f"jobs/chk/chk-{cid}/") and k.endswith(".state")]
        assert state, f"chk-{cid} has a manifest but no state files: {keys}"
    assert "jobs/chk/_started_ids" in keys
    assert not [k for k in keys if "probe" in k], "the writability probe was left behind"
    assert completed_checkpoints(uri) == manifests


@pytest.mark.timeout(180)
def test_sigkill_and_restore_latest_from_s3_is_exact(s3: S3, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", f"s3://{s3.bucket}/killed/chk"
    command = [sys.executable, str(script), str(out), chk, str(N)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(14), timeout=90, max_delay=0.25
    )
    final = outputs[-1]
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(N), "ParquetSink")
    records = int(re.search(r"^source records (\d+)$", final, re.M).group(1))  # type: ignore[union-attr]
    assert records < N, f"the last run re-read all {N} records: it did not restore from S3"
    assert re.search(rf"^checkpoint \d+ at {re.escape(chk)}/chk-\d+$", final, re.M), final


def test_storage_options_reach_the_store_without_environment(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in s3.env:
        monkeypatch.delenv(key)
    uri = f"s3://{s3.bucket}/opts/chk"
    env = ed.StreamEnvironment(
        1,
        checkpoint=ed.CheckpointConfig(uri, interval="50ms"),
        storage_options={**s3.options, "aws_allow_http": True},  # a bool is written as "true"
    )
    handle = _keyed_sum_job(env, 50_000)
    result = env.execute("s3-options")
    assert _final_sums(handle) == _expected_sums(50_000)
    assert result.checkpoints
    assert any(k.endswith("/_manifest.json") for k in s3.keys("opts/chk/"))


def test_savepoint_to_s3_and_resume_from_it_is_exact(s3: S3, tmp_path: Path) -> None:
    out = tmp_path / "out"
    n = 60_000

    def build() -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            2,
            checkpoint=ed.CheckpointConfig(f"s3://{s3.bucket}/sp/chk", interval="10min"),
            batch_size=200,
        )
        numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
        slow = numbers.map_batches(SleepPerBatch(0.01)).uid("slow")
        slow.sink_to(ed.ParquetSink(str(out))).uid("files")
        return env

    client = build().execute_async("s3-savepoint")
    wait_until(
        lambda: client.metrics()["operators"].get("numbers", {}).get("records_out", 0) > 0,
        timeout=60,
        what="the job to read its first rows",
    )
    savepoint = client.stop_with_savepoint(f"s3://{s3.bucket}/sp/savepoints")
    first = client.wait(timeout=60)
    assert savepoint.startswith(f"s3://{s3.bucket}/sp/savepoints/chk-"), savepoint
    assert any(k.endswith("/_manifest.json") for k in s3.keys("sp/savepoints/"))
    done_before = first.metrics["operators"]["numbers"]["records_out"]
    assert 0 < done_before < n, "stop the job mid-run: make it slower"

    resumed = build().execute("s3-resumed", restore_from=savepoint)
    assert resumed.metrics["operators"]["numbers"]["records_out"] == n - done_before
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(n), "ParquetSink")


def _assert_storage_error_names(uri: str) -> None:
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(uri))
    env.from_sequence(0, 10).collect()
    with pytest.raises(ed.StorageError) as info:
        env.execute("unusable-store")
    assert uri in str(info.value)


def test_missing_bucket_is_a_storage_error_naming_the_uri(s3: S3) -> None:
    _assert_storage_error_names(f"s3://no-such-bucket-{s3.bucket}/chk")


def test_unreachable_endpoint_is_a_storage_error_naming_the_uri(
    s3: S3, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    _assert_storage_error_names(f"s3://{s3.bucket}/unreachable")


def test_uris_without_a_store_are_refused_before_running() -> None:
    with pytest.raises(ed.StorageError, match="names no bucket"):
        ed.CheckpointConfig("s3:///chk")
    with pytest.raises(ed.StorageError, match="'hdfs'"):
        ed.CheckpointConfig("hdfs://namenode/chk")
    with pytest.raises(ed.StorageError, match="ParquetSink"):
        ed.ParquetSink("hdfs://namenode/out")


def test_a_job_subprocess_reaches_the_store_through_the_environment(s3: S3, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT)
    out, chk = tmp_path / "out", f"s3://{s3.bucket}/sub/chk"
    done = subprocess.run(
        [sys.executable, str(script), str(out), chk, "2000"],
        capture_output=True,
        text=True,
        timeout=60,
        env=run_env(s3),
    )
    assert done.returncode == 0, done.stderr
    assert pc.sum(read_parquet_dir(out)["value"]).as_py() == sum(range(2000))


def test_large_state_is_uploaded_in_parts_and_reads_back_verified(s3: S3) -> None:
    """A state file above the part size (8 MiB) goes up as a multipart upload;
    listing the checkpoints reads every file back and checks its checksums."""
    uri = f"s3://{s3.bucket}/big/chk"
    keys = 700_000
    env = ed.StreamEnvironment(1, checkpoint=ed.CheckpointConfig(uri, interval="10min"))
    numbers = env.from_sequence(0, keys).name("numbers").uid("numbers")
    handle = numbers.key_by("value").sum("value").name("sum").uid("sum").collect()
    env.execute("big-state")
    assert handle.to_arrow().num_rows == keys
    sizes = {
        key: s3.client.head_object(Bucket=s3.bucket, Key=key)["ContentLength"]  # type: ignore[attr-defined]
        for key in s3.keys("big/chk/")
        if key.endswith(".state")
    }
    assert max(sizes.values()) > 8 << 20, sizes
    listed = ed._core.list_checkpoints(uri)  # type: ignore[attr-defined]
    assert listed and all(c["valid"] for c in listed), listed


def test_the_checkpoints_cli_lists_and_inspects_checkpoints_on_s3(
    s3: S3, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eddyline.client.cli import main

    uri = f"s3://{s3.bucket}/cli/chk"
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(uri, interval="50ms", retained=2), batch_size=500
    )
    _keyed_sum_job(env, 100_000)
    result = env.execute("s3-cli")
    newest = max(c.id for c in result.checkpoints)
    # Through --storage-option only: no environment variables.
    for key in s3.env:
        monkeypatch.delenv(key)
    options = [f"--storage-option={k}={v}" for k, v in s3.options.items()]
    assert main(["checkpoints", uri, *options]) == 0
    listing = capsys.readouterr().out
    assert f"checkpoints in {uri} (newest first)" in listing
    assert re.search(rf"^\s+{newest}\s+checkpoint\s", listing, re.M), listing
    assert "invalid" not in listing
    assert main(["checkpoints", uri, "--id", str(newest), *options]) == 0
    inspected = capsys.readouterr().out
    assert f"checkpoint {newest} at {uri}/chk-{newest}" in inspected
    assert "sum ('sum'): 2 subtasks" in inspected, inspected
    assert main(["checkpoints", f"{uri}/chk-{newest}", *options]) == 0
    assert capsys.readouterr().out == inspected
    # An empty prefix lists nothing; a missing bucket is an error naming it.
    assert main(["checkpoints", f"s3://{s3.bucket}/nothing", *options]) == 0
    assert "no checkpoints found" in capsys.readouterr().out
    assert main(["checkpoints", "s3://no-such-bucket-here/chk", *options]) == 2
    err = capsys.readouterr().err
    assert "no-such-bucket-here" in err
    # Listing only reads: it never says the location cannot be written.
    assert "cannot list the checkpoint directory 's3://no-such-bucket-here/chk'" in err, err
    assert "written" not in err, err
    assert main(["checkpoints", uri, "--storage-option", "endpoint"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
