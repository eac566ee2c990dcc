"""Extra time a bounded job spends on its final checkpoint (issue 5), interval 1 s vs none."""

import json
import tempfile
import time

import numpy as np
import pyarrow as pa

import eddyline as ed

rng = np.random.default_rng(42)
batches = [
    pa.record_batch({"key": rng.integers(0, 10000, 65536), "value": rng.integers(0, 1000, 65536)})
    for _ in range(40)
]


def run(ckpt):
    with tempfile.TemporaryDirectory() as d:
        cfg = ed.CheckpointConfig(d, interval="1s") if ckpt else None
        env = ed.StreamEnvironment(2, checkpoint=cfg, batch_size=65536)
        env.from_arrow(batches).key_by("key").sum("value").sink_to(ed.ParquetSink(d + "/out"))
        t = time.perf_counter()
        r = env.execute("x")
        dt = time.perf_counter() - t
        cps = r.checkpoints
        return dt, [(c.id, round(c.duration_ms, 1)) for c in cps]


for i in range(3):
    off = run(False)
    on = run(True)
    print(
        json.dumps(
            {
                "no_checkpointing_s": round(off[0], 4),
                "interval_1s_s": round(on[0], 4),
                "extra_ms": round((on[0] - off[0]) * 1000, 1),
                "checkpoints": on[1],
            }
        )
    )
