"""Restoring an unaligned checkpoint's channel state at another parallelism.

FLIP-76 rescaling of channel state (docs/DESIGN.md "Unaligned checkpoints",
``core/src/checkpoint/channel_rescale.rs``): a job runs with ``unaligned=True``
under backpressure, SIGKILLs itself right after a checkpoint that holds
channel state completed (the newest one, so nothing later was committed), and
is restored with ``restore_from="latest"`` at another parallelism (2 -> 3,
2 -> 1, 1 -> 4, 3 -> 2) through a keyed exchange after a union or a connect.
The same across worker processes (ProcessRunner, 2 -> 3), with rows in flight
between the workers. The "order" shape keys runs of consecutive values: each key's values must
reach the keyed operator increasing, replayed ones before new ones. The
committed ParquetSink rows are exactly the input, and the checkpoint restored
provably held in-flight rows: its manifest has "(channel state)" entries whose
state files hold Arrow rows (``support.checkpoints.channel_state_rows``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eddyline.testing import read_parquet_dir
from support.checkpoints import channel_state_rows
from support.faults import assert_exact_ids, completed_checkpoints

N = 6_000
RUN_TIMEOUT_S = 90.0

SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys

    import eddyline as ed
    from support.faults import SleepPerBatch, completed_checkpoints

    out, chk, n, p, shape, mode, checkpoints, runner = sys.argv[1:9]
    n, p, unaligned = int(n), int(p), checkpoints == "unaligned"


    def same(batch):
        return batch


    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=unaligned),
        batch_size=20,
    )
    a = env.from_sequence(0, n).name("a").uid("a")
    b = env.from_sequence(n, 2 * n).name("b").uid("b")
    if shape == "order":
        import pyarrow as pa
        import pyarrow.compute as pc

        def with_run(batch):
            return batch.append_column("k", pc.divide(batch.column(0), 100))

        def check(row, ctx):
            # Runs of 100 values, each inside one source range, read in
            # order: a key's values arrive increasing unless replayed rows
            # were overtaken by new ones.
            last = ctx.state.value()
            ctx.state.update(row["value"])
            return [{"value": row["value"], "bad": int(last is not None and row["value"] < last)}]

        runs = a.union(b).map_batches(
            with_run, schema=pa.schema([("value", pa.int64(), False), ("k", pa.int64())])
        )
        out_schema = pa.schema([("value", pa.int64()), ("bad", pa.int64())])
        unique = runs.key_by("k").process(check, schema=out_schema).name("unique").uid("unique")
    else:
        if shape == "union":
            both = a.union(b)
        else:
            both = a.connect(b).map_batches(same, same).name("both").uid("both")
        # Unique keys: the keyed reduce emits every record once (a keyed exchange).
        unique = both.key_by("value").reduce(lambda x, y: x).name("unique").uid("unique")
    slow = unique.map_batches(SleepPerBatch(0.002)).name("slow").uid("slow")
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    runner = ed.ProcessRunner(workers=2) if runner == "process" else None
    client = env.execute_async("unaligned-rescale", restore_from="latest", runner=runner)
    if mode == "finish":
        client.wait(timeout=120)
        print("finished", flush=True)
        sys.exit(0)
    # Kill this process as soon as the newest completed checkpoint holds
    # channel state (aligned: completed): the restore then starts from
    # exactly that checkpoint.
    seen = 0
    while client.status == "running":
        newest = max(completed_checkpoints(chk), default=0)
        if newest > seen:
            seen = newest
            manifest = os.path.join(chk, f"chk-{newest}", "_manifest.json")
            try:
                text = open(manifest).read()
            except OSError:
                continue
            held = "(channel state)" in text and '"file"' in text.split("(channel state)", 1)[1]
            if held or not unaligned:
                print(f"killed after chk-{newest}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    print("ended before a checkpoint with channel state", flush=True)
    sys.exit(3)
    """
)


def _run(
    script: Path,
    out: Path,
    chk: Path,
    p: int,
    shape: str,
    mode: str,
    checkpoints: str,
    runner: str = "local",
) -> str:
    command = [sys.executable, str(script), str(out), str(chk), str(N), str(p), shape, mode]
    command += [checkpoints, runner]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if mode == "kill":
        assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    else:
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
    return proc.stdout


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("before", "after", "shape"),
    [
        (2, 3, "union"),
        (2, 1, "connect"),
        (1, 4, "union"),
        (1, 4, "connect"),
        (2, 3, "order"),
        (3, 2, "order"),
    ],
)
def test_unaligned_channel_state_restores_at_another_parallelism_exactly(
    before: int, after: int, shape: str, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    killed = _run(script, out, chk, before, shape, "kill", "unaligned")
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    # Non-vacuity: the checkpoint restored holds in-flight rows.
    rows = channel_state_rows(chk / f"chk-{newest}")
    assert sum(rows.values()) > 0, rows
    assert "finished" in _run(script, out, chk, after, shape, "finish", "unaligned")
    table = read_parquet_dir(out)
    assert_exact_ids(table["value"].to_pylist(), range(2 * N), "ParquetSink")
    if shape == "order":
        # Per-key order kept across the rescale: replayed rows first.
        assert sum(table["bad"].to_pylist()) == 0


@pytest.mark.timeout(120)
def test_aligned_restore_at_a_lower_parallelism_commits_every_subtasks_files(
    tmp_path: Path,
) -> None:
    # Regression: at 2 -> 1 the ParquetSink subtask dealt both old subtasks'
    # pre-committed files of one checkpoint kept only one of them.
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    assert "killed after chk-" in _run(script, out, chk, 2, "union", "kill", "aligned")
    assert "finished" in _run(script, out, chk, 1, "union", "finish", "aligned")
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(2 * N), "ParquetSink")


@pytest.mark.timeout(180)
def test_unaligned_channel_state_restores_at_another_parallelism_across_processes(
    tmp_path: Path,
) -> None:
    # ProcessRunner(workers=2) at 2 and then 3: half the keyed exchange's
    # channels cross processes in both runs; each worker deals out the
    # channel state of the subtasks it now runs.
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    killed = _run(script, out, chk, 2, "union", "kill", "unaligned", "process")
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    rows = channel_state_rows(chk / f"chk-{newest}")
    # Channel c of "unique" comes from producer c % 2 (edges a, b), which ran
    # in worker c % 2; subtask s ran in worker s % 2.
    remote = [k for k in rows if k[0].startswith("unique") and k[2] % 2 != k[1] % 2]
    assert remote, rows
    assert "finished" in _run(script, out, chk, 3, "union", "finish", "unaligned", "process")
    assert_exact_ids(read_parquet_dir(out)["value"].to_pylist(), range(2 * N), "ParquetSink")
