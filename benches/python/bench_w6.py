"""W6: recovery. W3 killed (SIGKILL) at 50% of its input, restored from the latest checkpoint.

BENCHMARKS.md W6: W3 (W2 at K = 1,000,000 keys, checkpoint every 1 s to local
disk) killed at 50% of its input and restored from the latest checkpoint;
report the time from the restart to the first record processed and the total
time; the final sums equal W2's.

Each run is a job process (this script with ``--child``) that generates the W2
data (numpy ``default_rng(42)``, 65,536-row batches, as ``bench_engine.py``)
and runs W3 with ``execute_async(restore_from="latest")``. Its sink is W3's
(the newest sum per key, a two-phase-commit sink) made durable across the
kill: each commit also saves the subtask's committed view (newest sum and seen
flag per key) atomically to a file, and ``open`` loads it back, so what the
killed run committed survives and the restored run goes on from it (commits
are idempotent and come in checkpoint order). The parent

1. runs the job once without a kill (the reference time, same sink),
2. starts it again, SIGKILLs the process once its source has read half of the
   input and a checkpoint has completed,
3. restarts it from the latest checkpoint and reports: from the restart
   (spawning the new process) and from ``execute_async`` to the first record
   the sink processed, the restored run's time, and the total time (start of
   the killed run to the end of the restored one); then checks the sums.

Rounds alternate the reference and the killed run. Run with a release build:
``python benches/python/bench_w6.py --n 30000000 --rounds 3``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np
import pyarrow as pa

import eddyline as ed

GEN_BATCH = 65_536


def make_data(n: int, k: int) -> list[pa.RecordBatch]:
    """N rows of (key in [0, k), value in [0, 1000)), numpy default_rng(42), 65,536-row batches."""
    rng = np.random.default_rng(42)
    batches = []
    for start in range(0, n, GEN_BATCH):
        m = min(GEN_BATCH, n - start)
        key = rng.integers(0, k, m, dtype=np.int64)
        value = rng.integers(0, 1000, m, dtype=np.int64)
        batches.append(pa.record_batch({"key": key, "value": value}))
    return batches


_SAY = threading.Lock()


def say(what: str, **kw: Any) -> None:
    """One event line of a job process, with its wall-clock time (for the parent);
    the sink's subtasks and the main thread write whole lines, one at a time."""
    line = json.dumps({"event": what, "t": time.time(), **kw}) + "\n"
    with _SAY:
        sys.stdout.write(line)
        sys.stdout.flush()


class DurableLatestPerKey(ed.TwoPhaseCommitSink):
    """W3's sink; its committed view is saved per subtask at each commit."""

    def __init__(self, k: int, out: str) -> None:
        self.k = k
        self.out = out
        self.first = False

    def open(self, ctx: dict[str, Any]) -> None:
        self.path = os.path.join(self.out, f"committed-{ctx['subtask_index']}.npz")
        if os.path.exists(self.path):
            saved = np.load(self.path)
            self.latest, self.seen = saved["latest"].copy(), saved["seen"].copy()
        else:
            self.latest = np.zeros(self.k, np.int64)
            self.seen = np.zeros(self.k, bool)

    def begin_transaction(self) -> list[tuple[np.ndarray, np.ndarray]]:
        return []

    def write(self, txn: list[tuple[np.ndarray, np.ndarray]], batch: pa.RecordBatch) -> None:
        if not self.first:
            self.first = True
            say("first_record")
        txn.append((batch.column("key").to_numpy(), batch.column("value").to_numpy()))

    def pre_commit(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        pass

    def commit(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        for keys, values in txn:
            self.latest[keys] = values
            self.seen[keys] = True
        txn.clear()
        tmp = self.path + ".tmp.npz"
        np.savez(tmp, latest=self.latest, seen=self.seen)
        os.replace(tmp, self.path)

    def abort(self, txn: list[tuple[np.ndarray, np.ndarray]]) -> None:
        txn.clear()


def child(args: argparse.Namespace) -> None:
    batches = make_data(args.n, args.k)
    say("data_ready")
    env = ed.StreamEnvironment(
        parallelism=args.parallelism,
        batch_size=GEN_BATCH,
        checkpoint=ed.CheckpointConfig(args.chk, interval="1s"),
    )
    src = env.from_arrow(batches).name("source").uid("source")
    sums = src.key_by("key").sum("value").name("sum").uid("sum")
    sums.sink_to(DurableLatestPerKey(args.k, args.out)).name("sink").uid("sink")
    say("execute")
    client = env.execute_async("W6", restore_from="latest")
    seen: set[int] = set()
    while True:
        try:
            result = client.wait(timeout=0.02)
            done = True
        except TimeoutError:
            done = False
        for stats in result.checkpoints if done else client.checkpoints:
            if stats.id not in seen:
                seen.add(stats.id)
                say("checkpoint", id=stats.id)
        if done:
            break
        rows = client.metrics()["operators"]["source"]["records_out"]
        say("progress", rows=rows)
    say("finished")


def check(n: int, k: int, out: str, parallelism: int) -> bool:
    expected = np.zeros(k, np.int64)
    present = np.zeros(k, bool)
    for b in make_data(n, k):
        keys = b.column("key").to_numpy()
        expected += np.bincount(keys, weights=b.column("value").to_numpy(), minlength=k).astype(
            np.int64
        )
        present[keys] = True
    latest = np.zeros(k, np.int64)
    seen = np.zeros(k, bool)
    for i in range(parallelism):
        saved = np.load(os.path.join(out, f"committed-{i}.npz"))
        latest[saved["seen"]] = saved["latest"][saved["seen"]]
        seen |= saved["seen"]
    return bool(
        np.array_equal(seen, present) and np.array_equal(latest[present], expected[present])
    )


def spawn(args: argparse.Namespace, chk: str, out: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, __file__, "--child", "--n", str(args.n), "--k", str(args.k)]
    cmd += ["--parallelism", str(args.parallelism), "--chk", chk, "--out", out]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def events(proc: subprocess.Popen[str]) -> Any:
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("{"):
            yield json.loads(line)


def run_once(args: argparse.Namespace, kill: bool) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as tmp:
        chk, out = os.path.join(tmp, "chk"), os.path.join(tmp, "out")
        os.makedirs(out)
        started = time.time()
        proc = spawn(args, chk, out)
        res: dict[str, Any] = {"workload": "W6" if kill else "W3-uninterrupted", "n": args.n}
        times: dict[str, float] = {}
        checkpoints = 0
        for ev in events(proc):
            times.setdefault(ev["event"], ev["t"])
            checkpoints += ev["event"] == "checkpoint"
            if kill and ev["event"] == "progress" and ev["rows"] >= args.n // 2 and checkpoints:
                proc.send_signal(signal.SIGKILL)
                res["killed_at_rows"] = ev["rows"]
                break
        killed_at = time.time()
        proc.wait()
        res["checkpoints_before_kill" if kill else "checkpoints"] = checkpoints
        if kill:
            res["killed_run_s"] = round(killed_at - times["execute"], 3)
            assert proc.returncode == -signal.SIGKILL, proc.returncode
            restart = time.time()
            proc = spawn(args, chk, out)
            times = {}
            for ev in events(proc):
                times.setdefault(ev["event"], ev["t"])
            proc.wait()
            assert proc.returncode == 0, proc.returncode
            res["restart_to_first_record_s"] = round(times["first_record"] - restart, 3)
            res["execute_to_first_record_s"] = round(times["first_record"] - times["execute"], 3)
            res["restored_run_s"] = round(times["finished"] - times["execute"], 3)
            res["total_s"] = round(times["finished"] - started, 3)
        else:
            assert proc.returncode == 0, proc.returncode
            res["total_s"] = round(times["finished"] - started, 3)
            res["job_s"] = round(times["finished"] - times["execute"], 3)
        res["check"] = check(args.n, args.k, out, args.parallelism)
        res["load_avg"] = round(os.getloadavg()[0], 2)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=30_000_000)
    ap.add_argument("--k", type=int, default=1_000_000)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--checkpoint-dir", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--chk", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    runs: dict[str, list[dict[str, Any]]] = {"ref": [], "kill": []}
    for _ in range(args.rounds):
        for kind in ("ref", "kill"):
            res = run_once(args, kill=kind == "kill")
            runs[kind].append(res)
            print(json.dumps(res), flush=True)
    med = {
        key: statistics.median(r[key] for r in runs["kill"])
        for key in ("restart_to_first_record_s", "execute_to_first_record_s", "total_s")
    }
    med["uninterrupted_total_s"] = statistics.median(r["total_s"] for r in runs["ref"])
    med["all_checked"] = all(r["check"] for rs in runs.values() for r in rs)
    print(json.dumps({"workload": "W6-median", **med}), flush=True)


if __name__ == "__main__":
    main()
