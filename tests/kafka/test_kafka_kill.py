"""SIGKILL of a job reading Kafka, then ``restore_from="latest"``: the partition
offsets are the checkpointed state, so the records (a ParquetSink) and a keyed
running sum (state, in a second ParquetSink) are exact: no loss, no duplicate."""

from __future__ import annotations

import json
import random
import sys
import textwrap
from collections import defaultdict
from pathlib import Path

import pytest

from eddyline.testing import read_parquet_dir
from support.faults import assert_exact_ids, kill_after_checkpoints
from support.kafka_broker import new_topic, produce_each

pytestmark = pytest.mark.kafka

N = 1_500
KILLS = 2

SCRIPT = textwrap.dedent(
    """
    import json, sys

    import pyarrow as pa
    import eddyline as ed
    from support.faults import SleepPerBatch

    broker, topic, ends, out, chk = sys.argv[1:6]
    stop = {(topic, int(p)): n for p, n in json.loads(ends).items()}
    schema = pa.schema([("id", pa.int64()), ("user", pa.string()), ("amount", pa.int64())])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3), batch_size=20
    )
    rows = env.from_kafka(broker, topic, schema=schema, stopping_offsets=stop)
    rows = rows.name("kafka").uid("kafka").map_batches(SleepPerBatch(0.01)).uid("slow")
    rows.select("id").sink_to(ed.ParquetSink(out + "/rows")).uid("rows")
    sums = rows.key_by("user").sum("amount").uid("sums")
    sums.select("user", "amount").sink_to(ed.ParquetSink(out + "/sums")).uid("sum-files")
    env.execute("kafka-kill", restore_from="latest")
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_sigkill_and_restore_latest_is_exact(broker: str, tmp_path: Path, seed: int) -> None:
    topic = new_topic(broker, 3)
    events = [{"id": i, "user": f"u{i % 7}", "amount": 1 + i % 13} for i in range(N)]
    produce_each(
        broker, topic, [(i % 3, None, json.dumps(e).encode()) for i, e in enumerate(events)]
    )
    ends = {str(p): len(range(p, N, 3)) for p in range(3)}
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), broker, topic, json.dumps(ends), str(out), str(chk)]
    outputs = kill_after_checkpoints(
        command, chk, kills=KILLS, rng=random.Random(seed), timeout=60, max_delay=0.3
    )
    assert "finished" in outputs[-1]
    assert_exact_ids(read_parquet_dir(out / "rows")["id"].to_pylist(), range(N), "ParquetSink")

    # State: the running sums a user's rows carried (one per batch of the key)
    # are distinct prefix sums (amounts are positive) and the last is the
    # total: a record counted twice or lost would show in it.
    sums = read_parquet_dir(out / "sums").to_pylist()
    per_user: dict[str, list[int]] = defaultdict(list)
    for r in sums:
        per_user[r["user"]].append(r["amount"])
    totals: dict[str, int] = defaultdict(int)
    for e in events:
        totals[str(e["user"])] += int(e["amount"])
    for user, values in per_user.items():
        assert len(values) == len(set(values)), f"{user}: a running sum committed twice"
        assert max(values) == totals[user], f"{user}: {max(values)} != {totals[user]}"
    assert set(per_user) == set(totals)


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    value = random.SystemRandom().randrange(2**32)
    print(f"{request.node.nodeid}: seed {value}")
    return value
