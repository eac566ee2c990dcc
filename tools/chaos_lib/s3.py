"""S3 storage in the generator: a case whose checkpoints, savepoint and file
sinks (Parquet, Delta append and upsert, the late output) live on an S3 API
server (``storage:s3``), and its Parquet sources read their files from it.

The server is ``moto_server`` (tests/support/s3_server.py), started once per
tester run when the first S3 case comes (``ready``); the tester's process and
every job it starts reach it through the standard ``AWS_*`` environment
variables. Each case run gets a bucket of its own (``CHAOS_S3_BUCKET``). The
faults are the same as on a disk: the SIGKILL waits and ``FailOnce`` read the
completed checkpoints from the store, a corrupt newest checkpoint is damaged
in place on the server. The outputs are read back through pyarrow's and
delta-rs's own S3 clients, never eddyline's storage layer.
"""

from __future__ import annotations

import contextlib
import os
import random
import uuid
from pathlib import Path
from typing import Any

import pandas as pd

from .case import Case

CHANCE = 0.1
"""How often a case runs on S3."""

_SERVER = contextlib.ExitStack()


def widen(rng: random.Random, case: Case) -> None:
    """Draws S3 storage, after every older draw (generate.py); not with a
    ``from_spark`` source: it pins its DataFrame as a snapshot under the
    checkpoint directory, which the local Spark cannot write on S3 without
    Hadoop's S3A jars (docs/CHAOS.md "Not covered yet"; chaos seed 272046980)."""
    spark = any(s.kind == "spark" for s in case.sources)
    if rng.random() < CHANCE and not spark:
        case.execution.s3 = True


def ready() -> bool:
    """Whether an S3 API server serves this run (``CHAOS_S3``), starting one
    when ``moto[server]`` is installed."""
    if os.environ.get("CHAOS_S3"):
        return True
    try:
        import boto3  # noqa: F401
        import moto  # noqa: F401
    except ImportError:
        return False
    from support.s3_server import moto_server, s3_env

    endpoint = _SERVER.enter_context(moto_server())
    os.environ.update(s3_env(endpoint))
    os.environ["CHAOS_S3"] = endpoint
    return True


def close() -> None:
    """Stops the server this process started (atexit, driver.py)."""
    _SERVER.close()


def _client() -> Any:
    import boto3

    return boto3.client("s3", endpoint_url=os.environ["CHAOS_S3"])


def new_bucket(seed: int) -> str:
    """A fresh bucket for one run of a case, in ``CHAOS_S3_BUCKET``."""
    bucket = f"chaos-{seed}-{uuid.uuid4().hex[:8]}"
    _client().create_bucket(Bucket=bucket)
    os.environ["CHAOS_S3_BUCKET"] = bucket
    return f"s3://{bucket}"


def _keys(root: str, prefix: str) -> list[tuple[str, int]]:
    bucket = root.removeprefix("s3://")
    pages = _client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [(o["Key"], o["Size"]) for page in pages for o in page.get("Contents", [])]


def read_texts(root: str, prefix: str, suffix: str) -> list[str]:
    """The text of each object under ``prefix`` whose name ends with ``suffix``, by name."""
    client, bucket = _client(), root.removeprefix("s3://")
    keys = sorted(key for key, _ in _keys(root, prefix) if key.endswith(suffix))
    return [client.get_object(Bucket=bucket, Key=k)["Body"].read().decode() for k in keys]


def upload_inputs(root: str, inputs: Path, case: Case) -> None:
    """The Parquet sources' files, written under ``inputs`` (data.py), put
    under ``in/`` in the bucket, where the job reads them."""
    client, bucket = _client(), root.removeprefix("s3://")
    for source in case.sources:
        if source.kind != "parquet":
            continue
        for path in sorted((inputs / source.name).iterdir()):
            client.upload_file(str(path), bucket, f"in/{source.name}/{path.name}")


def damage_newest(root: str, newest: int) -> bool:
    """Flips bytes in the middle of checkpoint ``newest``'s largest object on the
    server (as execute.py does to a file on a disk)."""
    objects = _keys(root, f"chk/chk-{newest}/")
    if not objects:
        return False
    key = max(objects, key=lambda o: (o[1], o[0]))[0]
    client, bucket = _client(), root.removeprefix("s3://")
    data = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    middle = len(data) // 2
    for i in range(middle, min(len(data), middle + 8)):
        data[i] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(data))
    return True


def read_parquet(root: str, name: str) -> pd.DataFrame:
    """The committed rows of the Parquet sink ``name``: its objects whose names
    do not start with ``_`` or ``.``, as pyarrow.dataset reads a directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyarrow import fs

    bucket = root.removeprefix("s3://")
    endpoint = os.environ["CHAOS_S3"]
    store = fs.S3FileSystem(
        access_key="testing",
        secret_key="testing",
        region="us-east-1",
        endpoint_override=endpoint,
        scheme="http",
    )
    files = [
        key
        for key, _ in _keys(root, f"out/{name}/")
        if not any(part.startswith(("_", ".")) for part in key.split("/")[2:])
    ]
    if not files:
        return pd.DataFrame()
    tables = [pq.read_table(f"{bucket}/{key}", filesystem=store) for key in sorted(files)]
    return pa.concat_tables(tables, promote_options="default").to_pandas()


def has_delta_commit(root: str, name: str) -> bool:
    from .execute import DELTA_COMMIT

    return any(
        DELTA_COMMIT.fullmatch(key.rsplit("/", 1)[-1])
        for key, _ in _keys(root, f"out/{name}/_delta_log/")
    )


def read_delta(root: str, name: str) -> pd.DataFrame:
    """The Delta table ``name``'s rows, read by delta-rs (empty before its first commit)."""
    from deltalake import DeltaTable

    if not has_delta_commit(root, name):
        return pd.DataFrame()
    from support.s3_server import s3_env

    options = s3_env(os.environ["CHAOS_S3"])
    return DeltaTable(f"{root}/out/{name}", storage_options=options).to_pyarrow_table().to_pandas()
