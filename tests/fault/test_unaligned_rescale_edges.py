"""Rescaling channel state end to end through a rebalance and a broadcast edge.

``core/src/checkpoint/channel_rescale.rs`` deals in-flight data of a rebalance
edge as whole old channels round-robin over the new subtasks, and gives new
subtask ``i`` the broadcast channels of old subtask ``i mod p_old``, whose copy
of the broadcast state it restores. Its proptest covers the dealing; this test runs
it (docs/DESIGN.md "Unaligned checkpoints"): a job under backpressure with
``unaligned=True`` SIGKILLs itself right after the newest completed checkpoint
holds rows in flight on the edge under test, and is restored with
``restore_from="latest"`` at another parallelism.

* rebalance: two sources at parallelism 3 feed a union and a slow map at the
  job's parallelism (2 -> 4, 2 -> 1; and 2 -> 3, 3 -> 2, where the edges turn
  forward edges and back): the committed ParquetSink rows are exactly the input.
* chained: one source at parallelism 3 feeds a slow map rebalanced at 2; at 3
  the edge is a forward edge, which would chain the map behind the source:
  the restoring run keeps it unchained so its channel state is replayed into
  it, and the output is exact.
* broadcast: ``a.connect(b.broadcast()).process(fn)``; the broadcast side is
  emitted by every subtask, marked by whether it is subtask 0, and recorded in
  the broadcast state by every subtask. Every ``a`` row and every ``b`` row is
  committed exactly once, and no subtask ever sees a broadcast row twice (its
  broadcast state says so); restored at the same parallelism (2 -> 2), subtask
  1 sees every broadcast row exactly once too, whichever offsets of the
  broadcast stream the two subtasks checkpointed at.
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

N = 6000
RUN_TIMEOUT_S = 90.0

SCRIPT = textwrap.dedent(
    """
    import os
    import signal
    import sys
    import time

    import pyarrow as pa

    import eddyline as ed
    from support.faults import SleepPerBatch, completed_checkpoints
    from support.checkpoints import channel_state_rows

    out, chk, n, p, shape, mode = sys.argv[1:7]
    n, p = int(n), int(p)
    env = ed.StreamEnvironment(
        p,
        checkpoint=ed.CheckpointConfig(chk, interval="100ms", retained=3, unaligned=True),
        batch_size=20,
    )
    schema = pa.schema([("value", pa.int64()), ("side", pa.int64())])


    class Mark(ed.BroadcastProcessFunction):
        def process_element(self, row, ctx):
            return [{"value": row["value"], "side": 0}]

        def process_broadcast_element(self, row, ctx):
            time.sleep(0.0005)  # throttle, not a wait: barriers overtake buffered broadcast rows
            key = str(row["value"])
            # side 2: this subtask saw the broadcast row before (duplicated).
            dup = ctx.broadcast_state.get(key) is not None
            ctx.broadcast_state.put(key, 1)
            if dup:
                return [{"value": row["value"], "side": 2}]
            # side 1: subtask 0's copy; side 3: every other subtask's.
            return [{"value": row["value"], "side": 1 if ctx.subtask_index == 0 else 3}]


    if shape == "chained":
        # Rebalanced at parallelism 2, forwarded (and chained) at 3.
        a = env.from_sequence(0, 2 * n).set_parallelism(3).name("a").uid("a")
        slow = a.map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
        under_test = "slow"
    elif shape == "rebalance":
        a = env.from_sequence(0, n).set_parallelism(3).name("a").uid("a")
        b = env.from_sequence(n, 2 * n).set_parallelism(3).name("b").uid("b")
        slow = a.union(b).map_batches(SleepPerBatch(0.004)).name("slow").uid("slow")
        under_test = "union"  # the chain head reading the rebalance edges
    else:
        a = env.from_sequence(0, n).name("a").uid("a")
        b = env.from_sequence(n, 2 * n).set_parallelism(1).name("b").uid("b")
        marked = a.connect(b.broadcast()).process(Mark(), schema=schema)
        slow = marked.name("mark").uid("mark")
        under_test = "mark"
    slow.sink_to(ed.ParquetSink(out)).name("files").uid("files")
    client = env.execute_async("unaligned-rescale-edges", restore_from="latest")
    if mode == "finish":
        client.wait(timeout=120)
        print("finished", flush=True)
        sys.exit(0)


    def held(d):
        # Rows in flight into the operator under test on the edge under test
        # (broadcast: channel 1, from "b", of subtask 0, whose copy new subtask 0 gets).
        rows = channel_state_rows(d)
        if shape != "broadcast":
            return any(k[0].startswith(under_test) for k in rows)
        return any(k[0].startswith(under_test) and k[1:] == (0, 1) for k in rows)


    seen = 0
    while client.status == "running":
        newest = max(completed_checkpoints(chk), default=0)
        if newest > seen:
            seen = newest
            try:
                found = held(os.path.join(chk, f"chk-{newest}"))
            except Exception:
                continue  # deleted by retention meanwhile
            if found:
                print(f"killed after chk-{newest}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
    print("ended before a checkpoint with channel state on the edge", flush=True)
    sys.exit(3)
    """
)


def _run(script: Path, tmp: Path, p: int, shape: str, mode: str, code: int = 0) -> str:
    command = [sys.executable, str(script), str(tmp / "out"), str(tmp / "chk"), str(N), str(p)]
    command += [shape, mode]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if mode == "kill":
        assert proc.returncode == -9, (proc.returncode, proc.stdout, proc.stderr)
    else:
        assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc.stdout + proc.stderr


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("before", "after", "shape"),
    [
        (2, 4, "rebalance"),
        (2, 1, "rebalance"),
        # The union's edges from the sources at 3: rebalanced at 2, forwarded
        # at 3 (and back); the dealing follows the edge's old partitioning.
        (2, 3, "rebalance"),
        (3, 2, "rebalance"),
        (2, 3, "broadcast"),
        (2, 1, "broadcast"),
        # At its own parallelism too: subtask 1 restores its own broadcast
        # state and replays its own broadcast rows in flight, not subtask 0's.
        (2, 2, "broadcast"),
    ],
)
def test_channel_state_of_rebalance_and_broadcast_edges_restores_at_another_parallelism(
    before: int, after: int, shape: str, tmp_path: Path
) -> None:
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    killed = _run(script, tmp_path, before, shape, "kill")
    chk = tmp_path / "chk"
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    rows = channel_state_rows(chk / f"chk-{newest}")
    assert sum(n for k, n in rows.items() if k[0].startswith(("union", "mark"))) > 0, rows
    assert "finished" in _run(script, tmp_path, after, shape, "finish")
    table = read_parquet_dir(tmp_path / "out")
    values, sides = (
        table["value"].to_pylist(),
        table["side"].to_pylist() if shape != "rebalance" else None,
    )
    if sides is None:
        assert_exact_ids(values, range(2 * N), "ParquetSink")
        return
    assert [v for v, s in zip(values, sides, strict=True) if s == 2] == [], "a broadcast row twice"
    assert_exact_ids(
        [v for v, s in zip(values, sides, strict=True) if s == 0], range(N), "element side"
    )
    assert_exact_ids(
        [v for v, s in zip(values, sides, strict=True) if s == 1], range(N, 2 * N), "broadcast side"
    )
    if before == after == 2:
        # Subtask 1 saw every broadcast row once, across the kill and the restore.
        assert_exact_ids(
            [v for v, s in zip(values, sides, strict=True) if s == 3],
            range(N, 2 * N),
            "subtask 1's broadcast side",
        )


@pytest.mark.timeout(180)
def test_channel_state_of_an_operator_forwarded_after_the_rescale_is_replayed_into_it(
    tmp_path: Path,
) -> None:
    # At parallelism 2 "slow" reads a rebalance edge (its channel state holds
    # rows); at 3 that edge is a forward edge at equal parallelism, which
    # would chain "slow" behind its source. The restoring run keeps it
    # unchained (docs/DESIGN.md "Unaligned checkpoints", `Plan::for_restore`),
    # so its rows are replayed into it, first and in order: exactly once.
    script = tmp_path / "job.py"
    script.write_text(SCRIPT)
    killed = _run(script, tmp_path, 2, "chained", "kill")
    chk = tmp_path / "chk"
    newest = max(completed_checkpoints(chk))
    assert f"killed after chk-{newest}" in killed, killed
    rows = channel_state_rows(chk / f"chk-{newest}")
    assert sum(n for k, n in rows.items() if k[0].startswith("slow")) > 0, rows
    assert "finished" in _run(script, tmp_path, 3, "chained", "finish")
    assert_exact_ids(
        read_parquet_dir(tmp_path / "out")["value"].to_pylist(), range(2 * N), "ParquetSink"
    )
