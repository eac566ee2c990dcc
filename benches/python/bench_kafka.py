"""Messages/s read from Kafka (JSON W2 rows) into a keyed sum: eddyline vs bytewax.

The W2 rows (``bench_engine.make_data``: key in [0, K), value in [0, 1000)) are
produced once as JSON messages ``{"key": k, "value": v}`` to a topic of
``--partitions`` partitions on a local tansu broker (started here unless
``--broker`` is given). Then, alternating, ``--repeat`` times each:

- ``eddyline``: ``env.from_kafka(..., schema=..., stopping_offsets=ends)``
  (JSON decoded by pyarrow.json a batch at a time) -> ``key_by("key").sum("value")``
  -> the W2 sink (newest sum per key), at ``--parallelism``;
- ``bytewax``: bytewax's own ``KafkaSource`` (``tail=False``) -> ``json.loads``
  per message -> ``stateful_map`` running sum -> a sink keeping the newest per
  key, one worker, run by ``--bytewax-python`` (bytewax is not a dependency).

Both check the final sums against ``np.bincount`` and print one JSON line per run
(``engine``, ``n``, ``seconds``, ``messages_per_s``, ``check``).

    python benches/python/bench_kafka.py --n 1000000 --bytewax-python /path/venv/bin/python
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the tansu broker helpers the tests use (tests/support, not shipped with eddyline)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

import eddyline as ed
from bench_engine import LatestPerKeySink, make_data, w2_check
from support.kafka_broker import new_topic, tansu_broker

SCHEMA = pa.schema([("key", pa.int64()), ("value", pa.int64())])

BYTEWAX = r"""
import json, sys, time
import numpy as np
from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.connectors.kafka import KafkaSource
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

broker, topic, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
latest = {}

class Part(StatelessSinkPartition):
    def write_batch(self, items):
        for key, total in items:
            latest[key] = total

class Latest(DynamicSink):
    def build(self, step_id, worker_index, worker_count):
        return Part()

flow = Dataflow("kafka-w2")
msgs = op.input("in", flow, KafkaSource([broker], [topic], tail=False))
rows = op.map("parse", msgs, lambda m: json.loads(m.value))
keyed = op.key_on("key", rows, lambda r: str(r["key"]))

def add(acc, r):
    acc = (acc or 0) + r["value"]
    return acc, acc

sums = op.stateful_map("sum", keyed, add)
op.output("out", sums, Latest())
start = time.perf_counter()
run_main(flow)
seconds = time.perf_counter() - start
out = np.zeros(k, dtype=np.int64)
for key, total in latest.items():
    out[int(key)] = total
np.save(sys.argv[4], out)
print(json.dumps({"seconds": seconds}))
"""


def produce(broker: str, topic: str, batches: list[pa.RecordBatch], partitions: int) -> dict:
    import confluent_kafka as ck

    producer = ck.Producer(
        {"bootstrap.servers": broker, "linger.ms": 20, "queue.buffering.max.messages": 500_000}
    )
    counts = [0] * partitions
    i = 0
    for b in batches:
        for key, value in zip(b["key"].to_pylist(), b["value"].to_pylist(), strict=True):
            p = i % partitions
            while True:
                try:
                    producer.produce(
                        topic, json.dumps({"key": key, "value": value}).encode(), partition=p
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            counts[p] += 1
            i += 1
        producer.poll(0)
    assert producer.flush(120) == 0
    return {(topic, p): c for p, c in enumerate(counts)}


def run_eddyline(broker: str, topic: str, ends: dict, parallelism: int, k: int) -> float:
    LatestPerKeySink.reset(k)
    env = ed.StreamEnvironment(parallelism)
    s = env.from_kafka(broker, topic, schema=SCHEMA, stopping_offsets=ends)
    s.key_by("key").sum("value").sink_to(LatestPerKeySink())
    start = time.perf_counter()
    env.execute("kafka-w2")
    return time.perf_counter() - start


def run_bytewax(python: str, broker: str, topic: str, k: int, expected: np.ndarray) -> tuple:
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "bw.py", Path(tmp) / "out.npy"
        script.write_text(BYTEWAX)
        proc = subprocess.run(
            [python, str(script), broker, topic, str(k), str(out)],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-3000:])
        seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
        return seconds, bool(np.array_equal(np.load(out), expected))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--broker")
    ap.add_argument("--bytewax-python")
    args = ap.parse_args()
    batches = make_data(args.n, args.k)
    expected = np.zeros(args.k, dtype=np.int64)
    for b in batches:
        expected += np.bincount(
            b["key"].to_numpy(), weights=b["value"].to_numpy(), minlength=args.k
        ).astype(np.int64)
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        broker = args.broker or stack.enter_context(tansu_broker(Path(tmp) / "tansu.log"))
        topic = new_topic(broker, args.partitions)
        start = time.perf_counter()
        ends = produce(broker, topic, batches, args.partitions)
        print(f"# produced {args.n} messages in {time.perf_counter() - start:.1f}s", flush=True)
        for _ in range(args.repeat):
            seconds = run_eddyline(broker, topic, ends, args.parallelism, args.k)
            line = {
                "engine": "eddyline",
                "parallelism": args.parallelism,
                "n": args.n,
                "seconds": round(seconds, 3),
                "messages_per_s": round(args.n / seconds),
                "check": w2_check(batches, args.k),
            }
            print(json.dumps(line), flush=True)
            if args.bytewax_python:
                seconds, ok = run_bytewax(args.bytewax_python, broker, topic, args.k, expected)
                line = {
                    "engine": "bytewax",
                    "n": args.n,
                    "seconds": round(seconds, 3),
                    "messages_per_s": round(args.n / seconds),
                    "check": ok,
                }
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
