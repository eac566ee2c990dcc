"""Recovery by recomputation (FLINK-4120): persist vs recompute mode.

Keyed sliding windows over event-time data with 1,000,000 distinct keys:
``from_sequence(0, N)`` with ``key = value % 1_000_000`` and the int64
millisecond timestamp ``ts = value // per_ms`` (so every event-time second
holds each key once at the default ``per_ms`` of 1000), ``assign_timestamps``,
``key_by("key").window(ed.Sliding(size, slide)).sum("value")`` into a
two-phase-commit sink that keeps no rows, only the committed row count and sum
per window end, which are checked against the exact result (``check``: every
committed window exact, none missing). Source and timestamps run at
parallelism 1 (one contiguous, in-order range), windows and sink at 2.

For each mode (``recovery="latest"``: persist, ``"recompute"``) and repetition:

1. a failure-free run with checkpoints: its time, and per checkpoint the bytes
   and duration from ``JobResult.checkpoints`` (medians over the periodic
   checkpoints; the final checkpoint taken after the input ended holds almost
   no window state and is left out of the medians);
2. a run SIGKILLed once the source has read ``--kill-at`` of its input and at
   least ``--min-checkpoints`` checkpoints completed, then a
   ``restore_from="latest"`` run in a new process, timed from just before the
   job is built to the first row reaching the sink, to the first row of a
   window ending after the kill point ("caught up": a result the failed run
   never made) and to completion; with how many records its source read,
   where it rewound to (from the checkpoint manifests) and how many records
   were read a second time (read before the kill and again after it).

Every job runs in its own subprocess (this file with ``--worker``). A run
without checkpointing is measured too, as the baseline for the failure-free
times. Prints one JSON line per job, a JSON summary of medians per mode, and a
Markdown table.

    python benches/python/bench_recompute.py            # N = 20M, 3 repetitions: ~4 min
    python benches/python/bench_recompute.py --quick    # N = 4M, 1 repetition: ~25 s

One failure-free job of the default size takes ~14 s on 2 cores.
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
import time
from pathlib import Path
from typing import Any, ClassVar, Literal, cast

import numpy as np
import pyarrow as pa

import eddyline as ed

# the fault helpers the tests use (tests/support, not shipped with eddyline)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from support.faults import completed_checkpoints

SOURCE_UID = "numbers"
WINDOWS_UID = "windows"
MODES = ("latest", "recompute")
CONFIG_KEYS = (
    "n",
    "keys",
    "per_ms",
    "size",
    "slide",
    "interval",
    "batch_size",
    "parallelism",
    "repeats",
    "kill_at",
    "min_checkpoints",
)
LABEL = {"off": "no checkpoints", "latest": "persist", "recompute": "recompute"}


class WindowCheckSink(ed.TwoPhaseCommitSink):
    """Keeps no rows: per window end, the committed row count and sum of ``value``.

    Also notes when the first row arrives, and when the first row of a window
    ending after ``catch_up_ts`` arrives (a result the failed run never made).
    """

    committed: ClassVar[dict[int, list[int]]] = {}
    started = 0.0
    catch_up_ts: int | None = None
    first_output: tuple[float, int] | None = None
    caught_up: float | None = None

    def begin_transaction(self) -> dict[int, list[int]]:
        return {}

    def write(self, txn: dict[int, list[int]], batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        ends = batch.column("window_end").to_numpy()
        values = batch.column("value").to_numpy()
        now = time.perf_counter() - WindowCheckSink.started
        if WindowCheckSink.first_output is None:
            WindowCheckSink.first_output = (now, int(ends[0]))
        late = WindowCheckSink.catch_up_ts
        if WindowCheckSink.caught_up is None and late is not None and int(ends.max()) > late:
            WindowCheckSink.caught_up = now
        for end in np.unique(ends):
            mask = ends == end
            acc = txn.setdefault(int(end), [0, 0])
            acc[0] += int(np.count_nonzero(mask))
            acc[1] += int(values[mask].sum())

    def pre_commit(self, txn: dict[int, list[int]]) -> None:
        pass

    def commit(self, txn: dict[int, list[int]]) -> None:
        for end, (rows, total) in txn.items():
            acc = WindowCheckSink.committed.setdefault(end, [0, 0])
            acc[0] += rows
            acc[1] += total
        txn.clear()

    def abort(self, txn: dict[int, list[int]]) -> None:
        txn.clear()


def expected_windows(args: argparse.Namespace) -> dict[int, tuple[int, int]]:
    """Per window end: (rows, sum of value) of the failure-free result."""
    assigner = ed.Sliding(args.size, args.slide)
    size, slide = assigner.size_ms, assigner.slide_ms
    last_ts = (args.n - 1) // args.per_ms
    want = {}
    start = -(size - slide) // slide * slide  # the first window holding ts = 0
    while start <= last_ts:
        lo = max(0, start * args.per_ms)
        hi = min(args.n, (start + size) * args.per_ms)
        if hi > lo:
            want[start + size] = (min(args.keys, hi - lo), (lo + hi - 1) * (hi - lo) // 2)
        start += slide
    return want


def check_windows(
    args: argparse.Namespace, committed: dict[int, list[int]], must_from_end: int | None
) -> dict[str, Any]:
    """Every committed window is exact (no row lost or doubled within the run); every
    window ending after ``must_from_end`` (all, if None) was committed."""
    want = expected_windows(args)
    wrong = sorted(e for e, got in committed.items() if tuple(got) != want.get(e))
    required = {e for e in want if must_from_end is None or e > must_from_end}
    missing = sorted(required - committed.keys())
    return {"check": not wrong and not missing, "wrong_windows": wrong, "missing_windows": missing}


# ---------------------------------------------------------------------------
# Worker: one job in this process


def build(args: argparse.Namespace, mode: str, chk: str) -> ed.StreamEnvironment:
    checkpoint = None
    if mode != "off":
        recovery = cast(Literal["latest", "recompute"], mode)
        checkpoint = ed.CheckpointConfig(chk, interval=args.interval, recovery=recovery)
    env = ed.StreamEnvironment(args.parallelism, checkpoint=checkpoint, batch_size=args.batch_size)
    numbers = env.from_sequence(0, args.n).name(SOURCE_UID).uid(SOURCE_UID).set_parallelism(1)
    keyed = numbers.with_columns(
        key=ed.col("value") % args.keys, ts=ed.col("value") // args.per_ms
    ).uid("cols")
    timed = keyed.set_parallelism(1).assign_timestamps("ts").uid("ts").set_parallelism(1)
    windows = timed.key_by("key").window(ed.Sliding(args.size, args.slide)).sum("value")
    windows.name(WINDOWS_UID).uid(WINDOWS_UID).sink_to(WindowCheckSink()).uid("sink")
    return env


def checkpoint_rows(checkpoints: list[ed.CheckpointStats]) -> list[dict[str, Any]]:
    return [
        {
            "id": c.id,
            "bytes": c.bytes,
            "duration_ms": round(c.duration_ms, 1),
            "alignment_ms": round(c.alignment_ms, 1),
            "null_state_checkpoint": c.null_state_checkpoint,
            "window_bytes": c.operators[WINDOWS_UID].bytes,
            "window_recomputes": c.operators[WINDOWS_UID].recomputes,
        }
        for c in checkpoints
        if c.kind == "checkpoint"
    ]


def worker(args: argparse.Namespace) -> None:
    WindowCheckSink.started = time.perf_counter()
    env = build(args, args.mode, args.chk)
    if args.worker == "killed":
        client = env.execute_async("recompute-bench-killed")
        while True:
            try:
                client.wait(timeout=args.poll)
                print(json.dumps({"finished": True}), flush=True)
                return
            except TimeoutError:
                pass
            records = client.metrics()["operators"][SOURCE_UID]["records_out"]
            done = len(client.checkpoints)
            print(json.dumps({"records": records, "checkpoints": done}), flush=True)
    restore = "latest" if args.worker == "restore" else None
    WindowCheckSink.catch_up_ts = args.catch_up_ts
    result = env.execute(f"recompute-bench-{args.worker}", restore_from=restore)
    seconds = time.perf_counter() - WindowCheckSink.started
    first = WindowCheckSink.first_output
    caught_up = WindowCheckSink.caught_up
    print(
        json.dumps(
            {
                "seconds": round(seconds, 3),
                "first_output_s": None if first is None else round(first[0], 3),
                "first_window_end": None if first is None else first[1],
                "caught_up_s": None if caught_up is None else round(caught_up, 3),
                "source_records": result.metrics["operators"][SOURCE_UID]["records_out"],
                "committed_rows": sum(rows for rows, _ in WindowCheckSink.committed.values()),
                **check_windows(args, WindowCheckSink.committed, args.must_from_end),
                "checkpoints": checkpoint_rows(result.checkpoints),
            }
        ),
        flush=True,
    )


# ---------------------------------------------------------------------------
# Driver


def worker_command(args: argparse.Namespace, kind: str, mode: str, chk: str) -> list[str]:
    command = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--mode", mode]
    command += ["--chk", chk, "--n", str(args.n), "--keys", str(args.keys)]
    command += ["--per-ms", str(args.per_ms), "--size", args.size, "--slide", args.slide]
    command += ["--interval", args.interval, "--batch-size", str(args.batch_size)]
    command += ["--parallelism", str(args.parallelism), "--poll", str(args.poll)]
    return command


def run_worker(
    args: argparse.Namespace, kind: str, mode: str, chk: str, extra: list[str] | None = None
) -> dict[str, Any]:
    done = subprocess.run(
        worker_command(args, kind, mode, chk) + (extra or []),
        capture_output=True,
        text=True,
        timeout=args.timeout,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{kind} run ({mode}) failed ({done.returncode}):\n{done.stderr}")
    out: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


def run_killed(args: argparse.Namespace, mode: str, chk: str) -> dict[str, Any]:
    """Starts a job and SIGKILLs it at ``kill_at`` of the input after some checkpoints."""
    command = worker_command(args, "killed", mode, chk)
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        last: dict[str, Any] = {}
        started = time.perf_counter()
        try:
            for line in proc.stdout:
                last = json.loads(line)
                if last.get("finished"):
                    raise SystemExit(f"{mode}: the job finished before it was killed: {last}")
                if (
                    last["records"] >= args.kill_at * args.n
                    and last["checkpoints"] >= args.min_checkpoints
                ):
                    proc.send_signal(signal.SIGKILL)
                    break
                if time.perf_counter() - started > args.timeout:
                    raise SystemExit(f"{mode}: no kill point within {args.timeout} s: {last}")
            proc.wait(timeout=args.timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        if proc.returncode != -signal.SIGKILL:
            err.seek(0)
            raise SystemExit(f"{mode}: killed run ended with {proc.returncode}:\n{err.read()}")
    return {"killed_at_records": last["records"], "checkpoints_before_kill": last["checkpoints"]}


def read_manifest(chk: str, checkpoint_id: int) -> dict[str, Any]:
    with open(os.path.join(chk, f"chk-{checkpoint_id}", "_manifest.json")) as f:
        manifest: dict[str, Any] = json.load(f)
    return manifest


def source_entry(manifest: dict[str, Any]) -> dict[str, Any]:
    entry: dict[str, Any] = next(o for o in manifest["operators"] if o["uid"] == SOURCE_UID)
    return entry


def source_offset(chk: str, checkpoint_id: int) -> int:
    """The source's offset in a checkpoint (0 for "checkpoint 0", the start of the job)."""
    if checkpoint_id == 0:
        return 0
    (subtask,) = source_entry(read_manifest(chk, checkpoint_id))["subtasks"]
    return int(sum(s["offset"] for s in subtask["source_offsets"]))


def recovery_run(args: argparse.Namespace, mode: str, root: str) -> dict[str, Any]:
    chk = os.path.join(root, f"recover-{mode}")
    killed = run_killed(args, mode, chk)
    latest = max(completed_checkpoints(chk))
    rewind_id = latest
    if mode == "recompute":
        declared = source_entry(read_manifest(chk, latest)).get("null_state_checkpoint")
        rewind_id = latest if declared is None else int(declared)
    latest_offset = source_offset(chk, latest)
    rewind_offset = source_offset(chk, rewind_id)
    # Windows ending at or before the newest event time read before the latest
    # checkpoint's barrier fired before it: the restored run must commit the rest.
    must_from_end = (latest_offset - 1) // args.per_ms
    catch_up_ts = (killed["killed_at_records"] - 1) // args.per_ms
    extra = ["--must-from-end", str(must_from_end), "--catch-up-ts", str(catch_up_ts)]
    restored = run_worker(args, "restore", mode, chk, extra)
    return {
        **killed,
        "latest_checkpoint": latest,
        "latest_offset": latest_offset,
        "rewind_checkpoint": rewind_id,
        "rewind_offset": rewind_offset,
        "restore_source_records": restored["source_records"],
        "reread_records": killed["killed_at_records"] - rewind_offset,
        "replay_before_latest": latest_offset - rewind_offset,
        "restore_first_output_s": restored["first_output_s"],
        "restore_first_window_end": restored["first_window_end"],
        "restore_caught_up_s": restored["caught_up_s"],
        "restore_seconds": restored["seconds"],
        "restore_committed_rows": restored["committed_rows"],
        "check": restored["check"],
        "wrong_windows": restored["wrong_windows"],
        "missing_windows": restored["missing_windows"],
    }


def full_run(args: argparse.Namespace, mode: str, root: str) -> dict[str, Any]:
    chk = os.path.join(root, f"full-{mode}")
    out = run_worker(args, "full", mode, chk)
    periodic = out["checkpoints"][:-1]  # the last is the final checkpoint after the input ended
    return {
        "seconds": out["seconds"],
        "committed_rows": out["committed_rows"],
        "check": out["check"],
        "checkpoints": len(out["checkpoints"]),
        "checkpoint_bytes_median": median([c["bytes"] for c in periodic]),
        "checkpoint_ms_median": median([c["duration_ms"] for c in periodic]),
        "checkpoint_alignment_ms_median": median([c["alignment_ms"] for c in periodic]),
        "window_bytes_median": median([c["window_bytes"] for c in periodic]),
        "checkpoint_bytes_total": sum(c["bytes"] for c in out["checkpoints"]),
        "window_recomputes": sorted({c["window_recomputes"] for c in out["checkpoints"]}),
        "null_state_lag_median": median([c["id"] - c["null_state_checkpoint"] for c in periodic]),
        "per_checkpoint": [(c["id"], c["bytes"], c["duration_ms"]) for c in out["checkpoints"]],
    }


def median(values: list[float]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def fmt(value: float | None, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def summarize(
    runs: dict[str, list[dict[str, Any]]], recov: dict[str, list[dict[str, Any]]]
) -> None:
    summary: dict[str, dict[str, Any]] = {}
    for mode, items in runs.items():
        s: dict[str, Any] = {"mode": mode, "repetitions": len(items)}
        s["failure_free_s"] = median([r["seconds"] for r in items])
        s["check"] = all(r["check"] for r in items + recov.get(mode, []))
        if mode != "off":
            for key in (
                "checkpoint_bytes_median",
                "checkpoint_ms_median",
                "window_bytes_median",
                "checkpoint_bytes_total",
                "null_state_lag_median",
            ):
                s[key] = median([r[key] for r in items])
            for key in (
                "restore_first_output_s",
                "restore_caught_up_s",
                "restore_seconds",
                "restore_source_records",
                "reread_records",
                "replay_before_latest",
                "killed_at_records",
            ):
                s[key] = median([r[key] for r in recov[mode]])
        summary[mode] = s
        print(json.dumps({"summary": s}))
    print()
    print(
        "| mode | failure-free run | checkpoint size | of it window state | checkpoint duration "
        "| written per run | null-state lag | restore: first output | restore: caught up "
        "| restore: finished | records read by restore | records read twice | check |"
    )
    print("| --- |" + " --- |" * 12)
    for mode, s in summary.items():
        if mode == "off":
            print(
                f"| {LABEL[mode]} | {s['failure_free_s']:.2f} s |" + " |" * 10 + f" {s['check']} |"
            )
            continue
        print(
            f"| {LABEL[mode]} | {s['failure_free_s']:.2f} s "
            f"| {fmt_bytes(s['checkpoint_bytes_median'])} "
            f"| {fmt_bytes(s['window_bytes_median'])} "
            f"| {fmt(s['checkpoint_ms_median'], '{:.0f} ms')} "
            f"| {fmt_bytes(s['checkpoint_bytes_total'])} "
            f"| {fmt(s['null_state_lag_median'], '{:.0f}')} "
            f"| {fmt(s['restore_first_output_s'], '{:.2f} s')} "
            f"| {fmt(s['restore_caught_up_s'], '{:.2f} s')} "
            f"| {fmt(s['restore_seconds'], '{:.2f} s')} "
            f"| {fmt(s['restore_source_records'], '{:,.0f}')} "
            f"| {fmt(s['reread_records'], '{:,.0f}')} | {s['check']} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="N = 4M, interval 500ms, 1 repetition")
    ap.add_argument("--n", type=int, default=None, help="input records (default 20,000,000)")
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--per-ms", type=int, default=1000, help="records per event-time ms")
    ap.add_argument("--size", default="2s", help="window size")
    ap.add_argument("--slide", default="1s", help="window slide")
    ap.add_argument("--interval", default=None, help="checkpoint interval (default 1s)")
    ap.add_argument("--batch-size", type=int, default=65_536)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=None, help="repetitions (default 3)")
    ap.add_argument("--kill-at", type=float, default=0.5, help="fraction of the input read")
    ap.add_argument("--min-checkpoints", type=int, default=3)
    ap.add_argument("--no-baseline", action="store_true", help="skip the run without checkpoints")
    ap.add_argument("--checkpoint-dir", default=None, help="parent of the checkpoint dirs")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per job at most")
    ap.add_argument("--poll", type=float, default=0.01, help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=["full", "killed", "restore"], help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=["off", *MODES], help=argparse.SUPPRESS)
    ap.add_argument("--chk", help=argparse.SUPPRESS)
    ap.add_argument("--must-from-end", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--catch-up-ts", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.n is None:
        args.n = 4_000_000 if args.quick else 20_000_000
    if args.interval is None:
        args.interval = "500ms" if args.quick else "1s"
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.worker:
        worker(args)
        return

    print(
        json.dumps(
            {
                "config": {k: getattr(args, k) for k in CONFIG_KEYS},
                "loadavg": os.getloadavg(),
            }
        ),
        flush=True,
    )
    modes = MODES if args.no_baseline else ("off", *MODES)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    recov: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    for rep in range(args.repeats):
        for mode in modes:  # interleaved, so that load from other jobs spreads over both modes
            with tempfile.TemporaryDirectory(dir=args.checkpoint_dir) as root:
                row = full_run(args, mode, root) if mode != "off" else None
                if row is None:
                    chk = os.path.join(root, "none")
                    out = run_worker(args, "full", "off", chk)
                    row = {k: out[k] for k in ("seconds", "committed_rows", "check")}
                runs[mode].append(row)
                print(json.dumps({"run": "failure-free", "rep": rep, "mode": mode, **row}))
                if mode != "off":
                    rec = recovery_run(args, mode, root)
                    recov[mode].append(rec)
                    print(json.dumps({"run": "kill+restore", "rep": rep, "mode": mode, **rec}))
                print(json.dumps({"loadavg": os.getloadavg()}), flush=True)
    summarize(runs, recov)


if __name__ == "__main__":
    main()
