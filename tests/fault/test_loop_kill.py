"""Loops under faults (FLIP-16's test plan; FLIP-147 for the input that finished).

(e) A Collatz job with a loop writes (x, steps) to a ParquetSink with frequent
checkpoints; it is SIGKILLed at random moments (each after a new checkpoint
completed) and restored with ``restore_from="latest"``: the committed output is
exactly the failure-free output. The loop's in-flight feedback at each
checkpoint lives in the FLIP-16 loop log and is re-emitted on restore, so no
record is lost or iterated twice.

(f) A loop whose input finished early keeps checkpointing (the coordinator
triggers the loop head directly once its input tasks finished) and terminates.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

import eddyline as ed
from eddyline._core import inspect_checkpoint
from eddyline.testing import read_parquet_dir
from support.faults import (
    SleepPerBatch,
    completed_checkpoints,
    killable_script,
    run_killed,
    wait_until,
)
from support.loops import collatz_steps

N = 6000
KILLS = 3
RUN_TIMEOUT_S = 90.0

SCRIPT = killable_script(
    """
    def body(s):
        done = s.filter(ed.col("x") == 1)
        odd = ed.col("x") % 2
        step = (
            s.filter(ed.col("x") > 1)
            .map_batches(SleepPerBatch(0.0005))
            .with_columns(
                x=odd * (ed.col("x") * 3 + 1) + (ed.lit(1) - odd) * (ed.col("x") // 2),
                steps=ed.col("steps") + 1,
            )
        )
        return step, done

    numbers = env.from_sequence(1, n + 1).name("numbers").uid("numbers")
    start = numbers.with_columns(x=ed.col("value"), steps=ed.lit(0))
    out_stream = start.iterate(body).name("collatz").uid("collatz")
    out_stream.select("value", "steps").sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("collatz", restore_from="latest")
    print("started", flush=True)
    result = client.wait()
    print(f"checkpoints {result.checkpoint_ids}", flush=True)
    print("finished", flush=True)
    """,
    batch_size=100,
)


@pytest.mark.timeout(300)
def test_loop_sigkill_and_restore_latest_is_exact(seed: int, tmp_path: Path) -> None:
    outputs, out = run_killed(
        SCRIPT,
        tmp_path,
        N,
        kills=KILLS,
        rng=random.Random(seed),
        timeout=RUN_TIMEOUT_S,
        max_delay=0.3,
        allow_early_end=True,
    )
    assert len(outputs) > 1, "the job was never killed mid-run; make it longer"
    assert "finished" in outputs[-1]

    table = read_parquet_dir(out)
    got = sorted(zip(table["value"].to_pylist(), table["steps"].to_pylist(), strict=True))
    expected = [(x, collatz_steps(x)) for x in range(1, N + 1)]
    assert len(got) == len(expected), f"{len(got)} rows committed for {N} inputs"
    assert got == expected


def test_loop_whose_input_finished_early_checkpoints_and_terminates(tmp_path: Path) -> None:
    chk = tmp_path / "chk"
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="30ms", retained=1000), batch_size=50
    )

    def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
        nxt = s.map_batches(SleepPerBatch(0.002)).with_columns(n=ed.col("n") - 1)
        return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

    src = env.from_sequence(0, 400).name("numbers").uid("numbers")
    looped = src.with_columns(n=ed.col("value") % 40 + 1).iterate(body).uid("looped")
    out = looped.collect()
    result = env.execute("early-input")

    assert sorted(r["value"] for r in out.to_pylist()) == list(range(400))
    after_input = []
    for checkpoint in completed_checkpoints(chk):
        manifest = inspect_checkpoint(str(chk / f"chk-{checkpoint}"))
        flags = {op["uid"]: bool(op["finished"]) for op in manifest["operators"]}
        if flags.get("numbers") and not flags.get("looped"):
            after_input.append(checkpoint)
    assert after_input, (
        "no checkpoint completed while the loop ran after its input finished; "
        f"checkpoints: {result.checkpoint_ids}"
    )
    assert set(after_input) <= set(result.checkpoint_ids)


def test_loop_logs_are_in_checkpoints_and_restore_exactly(tmp_path: Path) -> None:
    """Fail mid-run after two checkpoints completed, restore ``latest`` in a new
    environment: the committed output is exact."""
    chk = tmp_path / "chk"
    go = tmp_path / "go"
    files = tmp_path / "files"

    def build(fail: bool) -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(chk, interval="1h", retained=5), batch_size=20
        )

        def stop_when_told(batch):  # type: ignore[no-untyped-def]
            if fail and go.exists():
                raise RuntimeError("stop here")
            time.sleep(0.005)  # throttle, not a wait: the loop still runs when the kill comes
            return batch

        def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            nxt = s.map_batches(stop_when_told).with_columns(n=ed.col("n") - 1)
            return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

        src = env.from_sequence(0, 1500).uid("numbers")
        looped = src.with_columns(n=ed.col("value") % 20 + 1).iterate(body).uid("looped")
        looped.sink_to(ed.ParquetSink(files)).uid("files")
        return env

    client = build(True).execute_async("first")
    first = client.trigger_checkpoint()
    second = client.trigger_checkpoint()
    assert second > first
    go.write_text("fail now")
    with pytest.raises(ed.JobFailedError, match="stop here"):
        client.wait(timeout=60)
    partial = read_parquet_dir(files).num_rows
    assert partial < 1500, "the first run failed before it committed everything"

    build(False).execute("second", restore_from="latest")
    table = read_parquet_dir(files)
    assert sorted(table["value"].to_pylist()) == list(range(1500))
    assert set(table["n"].to_pylist()) == {0}


@pytest.mark.parametrize("drain", [False, True])
def test_loop_stop_with_savepoint_then_resume_is_exact(tmp_path: Path, drain: bool) -> None:
    """Stop a job with a loop with a savepoint mid-run (the savepoint holds the
    loop's feedback log); resuming from it commits exactly the rest."""
    chk, files = tmp_path / "chk", tmp_path / "files"

    def build() -> ed.StreamEnvironment:
        env = ed.StreamEnvironment(
            2, checkpoint=ed.CheckpointConfig(chk, interval="1h"), batch_size=20
        )

        def body(s: ed.DataStream) -> tuple[ed.DataStream, ed.DataStream]:
            nxt = s.map_batches(SleepPerBatch(0.003)).with_columns(n=ed.col("n") - 1)
            return nxt.filter(ed.col("n") > 0), nxt.filter(ed.col("n") <= 0)

        src = env.from_sequence(0, 1000).name("numbers").uid("numbers")
        looped = src.with_columns(n=ed.col("value") % 15 + 1).iterate(body)
        looped.name("looped").uid("looped").sink_to(ed.ParquetSink(files)).uid("files")
        return env

    client = build().execute_async("first")
    # mid-run: some records left the loop while others are still going round
    wait_until(
        lambda: client.metrics()["operators"]["looped"]["records_out"] > 100,
        timeout=30,
        what="records leaving the loop",
    )
    savepoint = client.stop_with_savepoint(str(tmp_path / "sp"), drain=drain)
    result = client.wait(timeout=60)
    first = read_parquet_dir(files)
    if drain:
        # draining ends the input and lets the loop run empty: every record read
        # before the stop went round to the end and is committed exactly once
        read = int(result.metrics["operators"]["numbers"]["records_out"])
        assert 0 < read < 1000
        values = first["value"].to_pylist()
        assert len(values) == len(set(values)) == read
        assert set(first["n"].to_pylist()) == {0}
        return
    assert first.num_rows < 1000, "the job was stopped before it finished"
    build().execute("second", restore_from=savepoint)
    table = read_parquet_dir(files)
    assert sorted(table["value"].to_pylist()) == list(range(1000))
    assert set(table["n"].to_pylist()) == {0}
