"""A real S3 API server: ``moto_server`` (the ``moto[server]`` package, a test
extra) on a free loopback port. The storage tests (tests/storage) and the
randomized tester (tools/chaos_lib) start it; jobs reach it through the
standard environment variables object_store reads (``AWS_ENDPOINT_URL``, ...,
see :func:`s3_env`)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator

from support.faults import wait_until


def s3_env(endpoint: str) -> dict[str, str]:
    """Environment variables that point object_store (and boto3) at ``endpoint``."""
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ALLOW_HTTP": "true",
    }


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
