"""Object-store figures: Parquet read throughput from S3 against a local
disk, and the checkpoint overhead of W3 (W2 native, K keys, a checkpoint every
second) with checkpoints on S3 against a local disk.

The S3 endpoint is ``moto_server`` on loopback (a Python S3 server: the figures
bound what eddyline adds on top of a slow server, not what a real S3 gives).
Runs alternate between the variants; the medians are printed as JSON lines.

    python benches/python/bench_storage.py --rows 10000000 --w3-rows 100000000 --runs 3
    python benches/python/bench_storage.py --files 1 --parallelism 1 --no-w3  # one file
"""

from __future__ import annotations

import argparse
import io
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import eddyline as ed


def _moto() -> tuple[subprocess.Popen[bytes], str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    return proc, f"http://127.0.0.1:{port}"


def _options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint_url": endpoint,
        "aws_access_key_id": "bench",
        "aws_secret_access_key": "bench",
        "aws_region": "us-east-1",
        "aws_allow_http": "true",
    }


def _read(location: str, options: dict[str, str], parallelism: int = 2) -> float:
    env = ed.StreamEnvironment(parallelism, storage_options=options)
    handle = env.from_parquet(location).filter(ed.col("id") < 0).collect()
    start = time.perf_counter()
    env.execute("bench-read")
    elapsed = time.perf_counter() - start
    assert handle.to_arrow().num_rows == 0
    return elapsed


def _w3(chk: str | None, rows: int, keys: int, options: dict[str, str]) -> float:
    checkpoint = ed.CheckpointConfig(chk, interval="1s") if chk else None
    env = ed.StreamEnvironment(2, checkpoint=checkpoint, batch_size=65_536, storage_options=options)
    numbers = env.from_sequence(0, rows)
    sums = numbers.with_columns(k=ed.col("value") % keys).key_by("k").sum("value")
    sums.filter(ed.col("value") < 0).collect()
    start = time.perf_counter()
    env.execute("bench-w3")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--w3-rows", type=int, default=100_000_000, help="W3 input rows")
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--parallelism", type=int, default=2, help="of the Parquet read (row groups are splits)"
    )
    ap.add_argument("--no-w3", action="store_true", help="only the Parquet read")
    args = ap.parse_args()

    import boto3

    proc, endpoint = _moto()
    try:
        options = _options(endpoint)
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        )
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory() as tmp:
            local = Path(tmp) / "in"
            local.mkdir()
            per = args.rows // args.files
            total_bytes = 0
            for i in range(args.files):
                ids = np.arange(i * per, (i + 1) * per, dtype=np.int64)
                table = pa.table({"id": ids, "v": ids * 3})
                buf = io.BytesIO()
                pq.write_table(table, buf, row_group_size=1 << 20)
                data = buf.getvalue()
                total_bytes += len(data)
                (local / f"part-{i}.parquet").write_bytes(data)
                s3.put_object(Bucket=bucket, Key=f"in/part-{i}.parquet", Body=data)
            times: dict[str, list[float]] = {"local": [], "s3": []}
            for _ in range(args.runs):
                times["local"].append(_read(str(local), {}, args.parallelism))
                times["s3"].append(_read(f"s3://{bucket}/in", options, args.parallelism))
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                json.dumps(
                    {
                        "bench": "parquet_read",
                        "rows": args.files * per,
                        "files": args.files,
                        "parallelism": args.parallelism,
                        "mb": round(total_bytes / 1e6, 1),
                        "seconds": {k: [round(t, 3) for t in v] for k, v in times.items()},
                        "rows_per_s": {k: round(args.files * per / t) for k, t in med.items()},
                        "s3_over_local": round(med["s3"] / med["local"], 2),
                    }
                ),
                flush=True,
            )
            if args.no_w3:
                return
            w3: dict[str, list[float]] = {"off": [], "local": [], "s3": []}
            for run in range(args.runs):
                n = args.w3_rows
                w3["off"].append(_w3(None, n, args.keys, {}))
                w3["local"].append(_w3(str(Path(tmp) / f"chk-{run}"), n, args.keys, {}))
                w3["s3"].append(_w3(f"s3://{bucket}/chk-{run}", n, args.keys, options))
            m: dict[str, Any] = {k: statistics.median(v) for k, v in w3.items()}
            print(
                json.dumps(
                    {
                        "bench": "W3_checkpoint_overhead",
                        "rows": args.w3_rows,
                        "keys": args.keys,
                        "seconds": {k: [round(t, 3) for t in v] for k, v in w3.items()},
                        "overhead_local": round(m["local"] / m["off"], 3),
                        "overhead_s3": round(m["s3"] / m["off"], 3),
                    }
                ),
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
