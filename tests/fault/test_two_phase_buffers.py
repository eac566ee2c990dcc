"""Pending transactions that hold Arrow data, checkpointed by reference.

A two-phase-commit sink whose transactions keep the batches they received
(as the W3 benchmark's sink does) puts a second of rows into each checkpoint.
The runner pickles a pending transaction with protocol 5 and hands its
read-only buffers to the engine by reference; a writer thread copies them into
the state file (``_exec/two_phase.py``, ``python/src/entries.rs``). These tests
check the entry format both ways and, under SIGKILL, that a restored
transaction commits exactly the rows it held.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

import eddyline as ed
from eddyline._exec.two_phase import decode_pending, encode_pending
from support.faults import assert_exact_ids, kill_after_checkpoints

N = 300_000
KILLS = 2
RUN_TIMEOUT_S = 60.0


def _join(entry: bytes | tuple[bytes | memoryview, ...]) -> bytes:
    return entry if isinstance(entry, bytes) else b"".join(bytes(p) for p in entry)


def test_large_read_only_buffers_go_out_of_band_and_round_trip() -> None:
    batch = pa.record_batch({"x": np.arange(50_000, dtype=np.int64), "s": ["a", "bc"] * 25_000})
    view = batch.column("x").to_numpy()  # read-only, zero-copy
    writable = np.arange(10_000, dtype=np.int64)
    txn = {"batches": [batch], "view": view, "writable": writable, "n": 7}
    entry = encode_pending(12, txn)
    assert isinstance(entry, tuple), "large Arrow buffers should be referenced, not copied"
    referenced = [p for p in entry if isinstance(p, memoryview)]
    assert any(p.obj is not None and p.nbytes == 400_000 for p in referenced)
    assert all(p.readonly for p in referenced)
    checkpoint, back = decode_pending("sink", _join(entry))
    assert checkpoint == 12
    assert back["batches"][0].equals(batch)
    assert np.array_equal(back["view"], view)
    assert np.array_equal(back["writable"], writable)
    assert back["writable"].flags.writeable, "a writable array came back read-only"
    assert back["n"] == 7


def test_transactions_without_large_read_only_buffers_stay_plain_pickles() -> None:
    small = encode_pending(3, [pa.record_batch({"x": [1, 2, 3]})])
    writable = encode_pending(4, np.zeros(100_000))
    assert isinstance(small, bytes) and isinstance(writable, bytes)
    # checkpoints written before the out-of-band layout hold plain pickles
    old = pickle.dumps((5, ["a"]), protocol=pickle.HIGHEST_PROTOCOL)
    assert decode_pending("sink", old) == (5, ["a"])
    assert decode_pending("sink", small)[1][0].column("x").to_pylist() == [1, 2, 3]


def test_a_damaged_out_of_band_entry_names_the_operator() -> None:
    entry = _join(encode_pending(1, [pa.record_batch({"x": np.arange(10_000)})]))
    with pytest.raises(ed.CheckpointError, match=r"operator 'out'.*header describes"):
        decode_pending("out", entry[:-8])
    with pytest.raises(ed.CheckpointError, match=r"operator 'out'.*truncated"):
        decode_pending("out", entry[:20])


SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    import pyarrow as pa
    import pyarrow.ipc as ipc

    import eddyline as ed
    from support.faults import SleepPerBatch


    class BufferingSink(ed.TwoPhaseCommitSink):
        '''Keeps the batches in the transaction; commit writes them to one file per
        (checkpoint, subtask that wrote it), replacing it (idempotent), and logs whether the
        transaction was restored from a checkpoint (pre-committed by another process).'''

        def __init__(self, out):
            self.out = out

        def open(self, ctx):
            self.subtask = ctx["subtask_index"]

        def begin_transaction(self):
            return {"pid": os.getpid(), "subtask": self.subtask, "checkpoint": None, "batches": []}

        def write(self, txn, batch):
            txn["batches"].append(batch)

        def on_checkpoint(self, txn, checkpoint_id):
            txn["checkpoint"] = checkpoint_id

        def pre_commit(self, txn):
            pass

        def commit(self, txn):
            if not txn["batches"]:
                return
            name = f"{txn['checkpoint']:020d}-{txn['subtask']}"
            tmp = os.path.join(self.out, "." + name)
            with ipc.new_file(tmp, txn["batches"][0].schema) as w:
                for b in txn["batches"]:
                    w.write_batch(b)
            os.replace(tmp, os.path.join(self.out, name + ".arrow"))
            restored = txn["pid"] != os.getpid()
            print(f"commit {name} restored={restored}", flush=True)

        def abort(self, txn):
            txn["batches"].clear()


    out, chk, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    env = ed.StreamEnvironment(
        2, checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3), batch_size=1000
    )
    numbers = env.from_sequence(0, n).name("numbers").uid("numbers")
    slow = numbers.map_batches(SleepPerBatch(0.01)).name("slow").uid("slow")
    slow.sink_to(BufferingSink(out)).name("buffered").uid("buffered")
    env.execute("buffered-2pc", restore_from="latest")
    print("finished", flush=True)
    """
)


@pytest.mark.timeout(120)
def test_sigkill_restores_pending_transactions_holding_batches_exactly(
    seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    out, chk = tmp_path / "out", tmp_path / "chk"
    out.mkdir()
    command = [sys.executable, str(script), str(out), str(chk), str(N)]
    outputs = kill_after_checkpoints(
        command, chk, kills=KILLS, rng=rng, timeout=RUN_TIMEOUT_S, max_delay=0.25
    )
    assert "finished" in outputs[-1]
    ids: list[int] = []
    for name in sorted(os.listdir(out)):
        if name.startswith("."):
            continue  # a commit cut short by the kill (done again on restore)
        with pa.memory_map(str(out / name)) as source:
            ids.extend(ipc.open_file(source).read_all().column("value").to_pylist())
    # exactly once: every id committed once (a re-committed transaction
    # replaced its own file with the same rows), none missing
    assert_exact_ids(ids, range(N), "buffering two-phase-commit sink")
    # every restore committed the restored checkpoint's pending transactions
    # again, from the bytes the checkpoint held (out of band: Arrow buffers)
    restored = [
        line for text in outputs[1:] for line in text.splitlines() if "restored=True" in line
    ]
    assert len(restored) >= KILLS, json.dumps(outputs)
