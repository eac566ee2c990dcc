"""Sinks on an object store they cannot write (docs/DESIGN.md "Where the data
lives"): a missing bucket, wrong credentials or an unreachable endpoint is an
``ed.StorageError`` naming the sink, the URI and the endpoint, raised before
any record is read, as for checkpoints and ``from_parquet``; a storage failure
of a built-in sink while the job runs is a ``StorageError`` too, never a "user
function" failing."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

import eddyline as ed

from .conftest import S3, moto_server

pytest.importorskip("deltalake", reason="the DeltaSink S3 errors need deltalake (test extra)")

SinkFactory = Callable[[str], Any]
SINKS: dict[str, SinkFactory] = {
    "ParquetSink": lambda uri: ed.ParquetSink(uri),
    "DeltaSink": lambda uri: ed.DeltaSink(uri),
}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _options(endpoint: str, key: str = "testing") -> dict[str, str]:
    return {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": key,
        "aws_secret_access_key": key,
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }


def _refused_before_reading(
    kind: str, uri: str, options: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> ed.StorageError:
    """Runs a job into ``kind`` at ``uri``, with restarts allowed; returns the error
    after checking that no record was read and no attempt was restarted."""
    for var in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(var, raising=False)
    seen: list[int] = []
    env = ed.StreamEnvironment(
        1, storage_options=options, restart=ed.RestartStrategy.fixed_delay(3, "10ms")
    )
    numbers = env.from_sequence(0, 100).map(lambda row: seen.append(1) or row).name("count")
    numbers.sink_to(SINKS[kind](uri)).name("out")
    with pytest.raises(ed.StorageError) as info:
        env.execute("unwritable-sink")
    assert seen == [], "the sink's storage must be checked before any record is read"
    message = str(info.value)
    assert f"{kind} 'out'" in message, message
    assert repr(uri) in message, message
    assert info.value.uri == uri
    assert info.value.operator == "out"
    assert "user function" not in message, message
    assert info.value.__cause__ is not None
    return info.value


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_sink_on_a_missing_bucket_is_a_storage_error_before_running(
    s3: S3, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"s3://no-such-bucket-{s3.bucket}/out"
    err = _refused_before_reading(kind, uri, _options(s3.endpoint), monkeypatch)
    assert str(err).endswith(
        f"cannot write to {uri!r} at endpoint {s3.endpoint}: "
        "NoSuchBucket (the bucket does not exist)"
    ), str(err)


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_sink_on_an_unreachable_endpoint_is_a_storage_error_before_running(
    s3: S3, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    uri = f"s3://{s3.bucket}/out"
    err = _refused_before_reading(kind, uri, _options(endpoint), monkeypatch)
    assert str(err).endswith(
        f"cannot write to {uri!r} at endpoint {endpoint}: "
        "the endpoint cannot be reached (nothing answers there)"
    ), str(err)


@pytest.fixture(scope="module")
def checked_s3() -> Iterator[tuple[str, str]]:
    """A moto server that checks credentials after its first request, which
    makes the bucket; yields (endpoint, bucket)."""
    with moto_server({"INITIAL_NO_AUTH_ACTION_COUNT": "1"}) as endpoint:
        client = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        client.create_bucket(Bucket="guarded")
        yield endpoint, "guarded"


@pytest.mark.parametrize("kind", sorted(SINKS))
def test_sink_with_wrong_credentials_is_a_storage_error_before_running(
    checked_s3: tuple[str, str], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, bucket = checked_s3
    uri = f"s3://{bucket}/out-{kind}"
    err = _refused_before_reading(kind, uri, _options(endpoint, key="wrong"), monkeypatch)
    assert str(err).endswith(
        f"cannot write to {uri!r} at endpoint {endpoint}: InvalidAccessKeyId "
        "(the access key is not known to the store: check the credentials)"
    ), str(err)


def test_delta_sink_storage_failure_while_running_is_a_storage_error(s3: S3) -> None:
    # The bucket vanishes after the probe passed: the first checkpoint's
    # staged part cannot be written.
    uri = f"s3://{s3.bucket}/t"
    gone = threading.Event()

    def drop_bucket(row: dict[str, int]) -> dict[str, int]:
        if row["value"] == 10 and not gone.is_set():
            for key in s3.keys(""):
                s3.client.delete_object(Bucket=s3.bucket, Key=key)  # type: ignore[attr-defined]
            s3.client.delete_bucket(Bucket=s3.bucket)  # type: ignore[attr-defined]
            gone.set()
        return row

    env = ed.StreamEnvironment(1, storage_options=s3.options, batch_size=10)
    env.from_sequence(0, 100).map(drop_bucket).name("drop").sink_to(ed.DeltaSink(uri)).name("delta")
    with pytest.raises(ed.StorageError) as info:
        env.execute("bucket-vanishes")
    assert gone.is_set()
    message = str(info.value)
    assert "user function" not in message, message
    assert f"DeltaSink 'delta': cannot write to {uri!r} at endpoint {s3.endpoint}" in message
    assert "NoSuchBucket" in message, message
