"""A real S3 API server for the storage tests: ``moto_server`` (the
``moto[server]`` package) on a free loopback port, one per test session, with
a fresh bucket per test. Jobs reach it through the standard environment
variables, which object_store reads (``AWS_ENDPOINT_URL``, ...)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from support.s3_server import moto_server, s3_env

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
        return s3_env(self.endpoint)

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
