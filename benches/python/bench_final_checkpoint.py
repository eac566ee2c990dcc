"""Extra time a bounded job spends on its final checkpoint: interval 1 s vs none.

python benches/python/bench_final_checkpoint.py
"""

from __future__ import annotations

import json
import tempfile
import time

import numpy as np
import pyarrow as pa

import eddyline as ed


def make_batches() -> list[pa.RecordBatch]:
    rng = np.random.default_rng(42)
    return [
        pa.record_batch(
            {"key": rng.integers(0, 10_000, 65_536), "value": rng.integers(0, 1_000, 65_536)}
        )
        for _ in range(40)
    ]


def run(batches: list[pa.RecordBatch], checkpointing: bool) -> tuple[float, list[tuple]]:
    with tempfile.TemporaryDirectory() as d:
        cfg = ed.CheckpointConfig(d, interval="1s") if checkpointing else None
        env = ed.StreamEnvironment(2, checkpoint=cfg, batch_size=65_536)
        env.from_arrow(batches).key_by("key").sum("value").sink_to(ed.ParquetSink(d + "/out"))
        t = time.perf_counter()
        result = env.execute("final-checkpoint")
        seconds = time.perf_counter() - t
        return seconds, [(c.id, round(c.duration_ms, 1)) for c in result.checkpoints]


def main() -> None:
    batches = make_batches()
    for _ in range(3):
        off, _ = run(batches, False)
        on, cps = run(batches, True)
        print(
            json.dumps(
                {
                    "no_checkpointing_s": round(off, 4),
                    "interval_1s_s": round(on, 4),
                    "extra_ms": round((on - off) * 1000, 1),
                    "checkpoints": cps,
                }
            )
        )


if __name__ == "__main__":
    main()
