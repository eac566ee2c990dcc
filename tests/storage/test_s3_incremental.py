"""Incremental checkpoints on an object store, against moto_server: a
SIGKILLed job restores from the latest incremental checkpoint exactly, the
objects under ``shared/`` are exactly those the retained manifests refer to,
and a corrupt shared object is named when the state is read."""

from __future__ import annotations

import random
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import eddyline as ed
from eddyline.testing import read_parquet_dir
from support.faults import kill_after_checkpoints

from .conftest import S3

KEYS = 5000

SCRIPT = textwrap.dedent(
    """
    import sys
    import time

    import numpy as np
    import pyarrow as pa

    import eddyline as ed

    KEYS = 5000


    class Keys:
        # Every key once, then slowly only the keys 0, 1 and 2.
        def __call__(self, batch):
            v = batch.column("value").to_numpy()
            k = np.where(v < KEYS, v, v % 3)
            if len(v) and v[-1] >= KEYS:
                time.sleep(0.004)  # throttle, not a wait: checkpoints complete mid-run
            return batch.append_column("k", pa.array(k, pa.int64()))


    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=2, incremental=True),
        batch_size=200,
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    keyed = numbers.map_batches(Keys()).name("keys").uid("keys").key_by("k")
    sums = keyed.sum("value").name("sum").uid("sum")
    sums.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    result = env.execute("s3-incremental", restore_from="latest")
    for c in result.checkpoints:
        print(f"checkpoint {c.id} wrote {c.bytes} of {c.state_bytes} at {c.path}", flush=True)
    """
)


def _expected_sums(n: int) -> dict[int, int]:
    sums: dict[int, int] = {}
    for v in range(n):
        k = v if v < KEYS else v % 3
        sums[k] = sums.get(k, 0) + v
    return sums


@pytest.mark.timeout(240)
def test_incremental_checkpoints_on_s3_restore_exactly_and_share_files(
    s3: S3, tmp_path: Path
) -> None:
    n = KEYS + 60_000
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", f"s3://{s3.bucket}/inc/chk"
    command = [sys.executable, str(script), str(out), chk, str(n)]
    outputs = kill_after_checkpoints(
        command, chk, kills=2, rng=random.Random(17), timeout=120, max_delay=0.25
    )
    table = read_parquet_dir(out)
    last: dict[int, int] = {}
    for k, v in zip(table["k"].to_pylist(), table["value"].to_pylist(), strict=True):
        last[k] = max(last.get(k, v), v)
    assert last == _expected_sums(n)
    final = outputs[-1]
    pattern = r"^checkpoint \d+ wrote (\d+) of (\d+) "
    written = [(int(w), int(s)) for w, s in re.findall(pattern, final, re.M)]
    assert any(w * 3 < s for w, s in written), written

    # The shared objects are exactly those the retained manifests name.
    listed = ed._core.list_checkpoints(chk)  # type: ignore[attr-defined]
    assert len(listed) == 2 and all(c["valid"] for c in listed), listed
    refs: dict[int, set[str]] = {}
    for c in listed:
        refs[c["id"]] = set()
        for op in ed._core.inspect_checkpoint(c["path"])["operators"]:  # type: ignore[attr-defined]
            for sub in op["subtasks"]:
                if sub["shared"]:
                    refs[c["id"]].add(sub["file"])
                refs[c["id"]].update(r["file"] for r in sub["reused"])
    referenced = set().union(*refs.values())
    prefix = "inc/chk/shared/"
    on_bucket = {k.removeprefix(prefix) for k in s3.keys(prefix)}
    assert on_bucket == referenced, (sorted(on_bucket - referenced), sorted(referenced - on_bucket))

    # read_state reads them; a corrupt one is named.
    newest_id = max(refs)
    newest = next(c["path"] for c in listed if c["id"] == newest_id)
    state = ed.read_state(newest, "sum")
    sums = dict(zip(state["k"].to_pylist(), state["value"].to_pylist(), strict=True))
    assert sums == _expected_sums(n)
    victim = sorted(refs[newest_id])[0]
    client: Any = s3.client
    body = client.get_object(Bucket=s3.bucket, Key=prefix + victim)["Body"].read()
    flipped = body[:-1] + bytes([body[-1] ^ 0xFF])
    client.put_object(Bucket=s3.bucket, Key=prefix + victim, Body=flipped)
    with pytest.raises(ed.CheckpointError, match=re.escape(victim)):
        ed.read_state(newest, "sum")
