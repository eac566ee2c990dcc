"""A real S3 API server for the storage tests: ``moto_server`` (the
``moto[server]`` package) on a free loopback port, one per test session, with
a fresh bucket per test. Jobs reach it through the standard environment
variables, which object_store reads (``AWS_ENDPOINT_URL``, ...)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from support.faults import wait_until

boto3 = pytest.importorskip("boto3", reason="the storage tests need moto[server] (test extra)")
pytest.importorskip("moto", reason="the storage tests need moto[server] (test extra)")


@dataclass(frozen=True)
class S3:
    endpoint: str
    bucket: str
    client: object

    @property
    def env(self) -> dict[str, str]:
        """Environment variables that point object_store at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def options(self) -> dict[str, str]:
        """The same as ``storage_options``."""
        return {
            "aws_endpoint_url": self.endpoint,
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
        }

    def keys(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(  # type: ignore[attr-defined]
            Bucket=self.bucket, Prefix=prefix
        )
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _accepts(port: int) -> bool:
    """True once something accepts TCP connections on the loopback ``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def moto_server(env: dict[str, str] | None = None) -> Iterator[str]:
    """A ``moto_server`` on a free loopback port (with ``env`` added to its
    environment, e.g. ``INITIAL_NO_AUTH_ACTION_COUNT`` to check credentials);
    yields its endpoint and stops it by pid."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: _accepts(port) or proc.poll() is not None,
            timeout=30,
            what=f"moto_server to accept connections on port {port}",
            interval=0.1,
        )
        if proc.poll() is not None:
            raise RuntimeError(f"moto_server exited with {proc.returncode} before it started")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    try:
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> S3:
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket=bucket)
    store = S3(s3_endpoint, bucket, client)
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)
    return store


def run_env(s3: S3) -> dict[str, str]:
    """The environment of a job subprocess that reaches the server."""
    return {**os.environ, **s3.env}
