"""The output schema an operator's subtasks agreed on survives a SIGKILL and a restore
at another parallelism (DESIGN.md "One schema per operator": every manifest records it).

The job's ``shape`` map returns ``v`` as an int in the first run, and as a whole
float in a restored run (it finds a completed checkpoint). Left to itself the
restored run would infer ``v: double`` and commit files of another schema than
the first run's; restored with the agreed ``v: int64`` it converts its floats to
it, as a single run converts later batches. Every committed file then has one
schema, and every value is committed exactly once.
"""

from __future__ import annotations

import random
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from support.faults import completed_checkpoints, kill_after_checkpoints

N = 30_000

SCRIPT = textwrap.dedent(
    """
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch, completed_checkpoints

    out, chk, n, runner = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    restored = bool(completed_checkpoints(chk))


    def shape(row):
        value = row["value"]
        return {"value": value, "v": float(value) if restored else value}


    env = ed.StreamEnvironment(
        3 if restored else 2,
        checkpoint=ed.CheckpointConfig(chk, interval="50ms"),
        batch_size=50,
    )
    (
        env.from_sequence(0, n).uid("numbers")
        .map_batches(SleepPerBatch(0.01)).uid("slow")
        .map(shape).name("shape").uid("shape")
        .sink_to(ed.ParquetSink(out)).name("files").uid("files")
    )
    workers = ed.ProcessRunner(workers=2) if runner == "processes" else None
    env.execute("schema-restore", restore_from="latest", runner=workers)
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("runner", ["threads", "processes"])
def test_the_agreed_schema_survives_a_kill_and_a_restore_at_another_parallelism(
    tmp_path: Path, seed: int, runner: str
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    command = [sys.executable, str(script), str(out), str(chk), str(N), runner]
    outputs = kill_after_checkpoints(
        command, chk, kills=1, rng=random.Random(seed), timeout=120, new_checkpoints=2
    )
    assert "finished" in outputs[-1]
    assert completed_checkpoints(chk), "the restored run had no checkpoint to start from"
    files = sorted(p for p in out.rglob("*.parquet") if not p.name.startswith(("_", ".")))
    schemas = {pq.read_schema(p).remove_metadata() for p in files}
    # int64: the first run's schema (the restored run alone would infer double).
    assert schemas == {pa.schema([("value", pa.int64()), ("v", pa.int64())])}, schemas
    table = pa.concat_tables(pq.read_table(p) for p in files)
    rows = sorted(zip(table["value"].to_pylist(), table["v"].to_pylist(), strict=True))
    assert rows == [(i, i) for i in range(N)]
