"""Files of a DeltaSink table with and without ``compact_every`` (docs/DESIGN.md
"Compacting a Delta table"): 400,000 int64 rows, p=2, 100 ms checkpoints, the
source slowed to ~10 ms a batch of 500 so that each checkpoint commits a small file.

Run: ``python benches/python/bench_delta_files.py [work dir]``.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import deltalake
import pyarrow as pa

import eddyline as ed

# the fault helpers the tests use (tests/support, not shipped with eddyline)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.faults import SleepPerBatch


def main(root: str) -> None:
    for every in (None, 10):
        work = f"{root}/compact-{every}"
        shutil.rmtree(work, ignore_errors=True)
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(f"{work}/chk", interval="100ms"), batch_size=500
        )
        numbers = env.from_sequence(0, 400_000).map_batches(SleepPerBatch(0.01))
        numbers.sink_to(ed.DeltaSink(f"{work}/t", compact_every=every)).name("delta")
        start = time.monotonic()
        result = env.execute("bench-delta-files")
        table = deltalake.DeltaTable(f"{work}/t")
        operations = [h["operation"] for h in table.history()]
        sizes = pa.table(table.get_add_actions())["size_bytes"].to_pylist()
        print(
            f"compact_every={every}: {time.monotonic() - start:.1f} s, "
            f"{len(result.checkpoints)} checkpoints, {operations.count('WRITE')} writes, "
            f"{operations.count('OPTIMIZE')} compactions, {len(sizes)} files of "
            f"{sum(sizes) / len(sizes) / 1024:.1f} KiB on average, "
            f"{table.to_pyarrow_table().num_rows} rows"
        )


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/bench-delta-files")
