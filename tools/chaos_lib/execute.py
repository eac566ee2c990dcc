"""Runs a case under its fault schedule, each run of the job in a subprocess,
and reads back every sink's committed output.

Faults (case.Fault): ``none`` and ``exception`` run once (a restart strategy
recovers the injected failure inside the run); ``sigkill`` SIGKILLs the job
process a random moment after a new checkpoint completes, ``kills`` times, and
each new run restores ``"latest"`` (``kill_after_checkpoints`` of tests/support/faults.py);
``savepoint`` and ``cancel`` stop the job mid-run in the script itself and
restore it at the other parallelism.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from . import deltaopts, s3, sparksink
from .case import Case
from .data import write_inputs
from .render import render

TIMEOUT_S = 240.0


@dataclasses.dataclass
class Outcome:
    """What a run produced: sink name -> committed rows; the runs' JSON notes;
    ``error`` when a run failed (its stderr's tail); ``fired``: whether the
    fault happened (False: the run proved nothing about recovery)."""

    outputs: dict[str, pd.DataFrame]
    notes: list[dict[str, Any]]
    error: str | None
    fired: bool
    refused: bool = False
    failed: str | None = None


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux /proc), oldest first."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(found)


def _kill_a_worker(command: list[str], case: Case, chk: str, env: dict[str, str]) -> bool:
    """Runs the job and SIGKILLs one of its worker processes (chosen and timed
    from the seed) once a checkpoint completed and a worker runs; the restart
    strategy must recover inside the run. Returns whether the kill landed."""
    import signal
    import time

    from support.faults import completed_checkpoints

    rng = random.Random(case.seed)
    delay = rng.uniform(0.0, case.fault.delay_s)
    fired = False
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    ) as proc:
        deadline = time.monotonic() + TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            workers = _children(proc.pid)
            if workers and completed_checkpoints(chk):
                time.sleep(delay)
                workers = _children(proc.pid)
                if workers and proc.poll() is None:
                    try:
                        os.kill(rng.choice(workers), signal.SIGKILL)
                        fired = True
                    except ProcessLookupError:
                        pass
                break
            time.sleep(0.01)
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    if proc.returncode != 0:
        raise AssertionError(f"the run with a killed worker failed:\n{stderr[-4000:]}")
    _ = stdout
    return fired


def _damage_newest(chk: str) -> bool:
    """Flips bytes in the middle of the newest completed checkpoint's largest
    file (its manifest when it has nothing else)."""
    from support.faults import completed_checkpoints

    ids = completed_checkpoints(chk)
    if not ids:
        return False
    if chk.startswith("s3://"):
        return s3.damage_newest(chk.removesuffix("/chk"), max(ids))
    folder = Path(chk) / f"chk-{max(ids)}"
    files = sorted((f for f in folder.rglob("*") if f.is_file()), key=lambda f: f.stat().st_size)
    if not files:
        return False
    target = files[-1]
    data = bytearray(target.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(len(data), middle + 8)):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))
    return True


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            note: dict[str, Any] = json.loads(line)
            return note
    return {}


DELTA_COMMIT = re.compile(r"\d{20}\.(json|checkpoint(\..+)?\.(parquet|json))")


def has_delta_commit(table: Path) -> bool:
    """Whether ``table``'s ``_delta_log`` holds a commit (or a checkpoint of commits).

    A job killed inside delta-rs's create of the table leaves ``_delta_log``
    without one: delta-rs makes the folder, writes ``00000000000000000000.json#1``
    and only then links it to ``00000000000000000000.json``. By the Delta protocol
    such a folder is no table: nothing was committed (delta-rs reads it as
    ``TableNotFoundError: No files in log segment``), and DeltaSink's next
    commit creates the table over it. Any other log, even a broken one, is read
    (and its error reported)."""
    log = table / "_delta_log"
    return log.is_dir() and any(DELTA_COMMIT.fullmatch(f.name) for f in log.iterdir())


def _read_outputs(case: Case, out: Path) -> dict[str, pd.DataFrame]:
    from deltalake import DeltaTable

    from eddyline.testing import read_parquet_dir

    outputs: dict[str, pd.DataFrame] = {}
    names = [*case.sinks, *(["late"] if case.stage.late else [])]
    root = root_of(case, out.parent)
    for name in names:
        if root.startswith("s3://") and name in ("parquet", "late"):
            outputs[name] = s3.read_parquet(root, name)
        elif root.startswith("s3://") and name in ("delta", "upsert"):
            outputs[name] = s3.read_delta(root, name)
        elif root.startswith("s3://") and name == "delta2w":
            outputs.update(deltaopts.split(s3.read_delta(root, name)))
        elif name in ("parquet", "late"):
            # committed files only: pyarrow.dataset skips names starting "_" or "."
            outputs[name] = read_parquet_dir(out / name).to_pandas()
        elif name in ("delta", "upsert", "delta2w"):
            path = out / name
            table = (
                DeltaTable(str(path)).to_pyarrow_table().to_pandas()
                if has_delta_commit(path)
                else pd.DataFrame()
            )
            if name == "delta2w":
                outputs.update(deltaopts.split(table))
            else:
                outputs[name] = table
        elif name == "kafka":
            outputs[name] = _read_topic(os.environ["CHAOS_TOPIC"] + "out")
        elif name == "spark":
            outputs[name] = sparksink.read_table(out / "spark")
        elif name == "collect":
            path = out / "collect.parquet"
            outputs[name] = pq.read_table(path).to_pandas() if path.exists() else pd.DataFrame()
    return outputs


def _read_topic(topic: str) -> pd.DataFrame:
    """Every message of ``topic`` (JSON rows): read from the start until each
    partition reports its end (the job has ended, so nothing more comes)."""
    import time

    import confluent_kafka as ck

    consumer = ck.Consumer(
        {
            "bootstrap.servers": os.environ["CHAOS_KAFKA"],
            "group.id": f"chaos-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    parts = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    # From offset 0: the test broker (tansu) answers OFFSET_BEGINNING with its
    # oldest batch by write time, which can lie past a batch stored later
    # (tests/support/kafka_broker.py); the tester's topics are new and whole.
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in parts])
    rows: list[dict[str, Any]] = []
    open_parts = set(parts)
    deadline = time.monotonic() + TIMEOUT_S
    while open_parts:
        if time.monotonic() > deadline:
            consumer.close()
            raise TimeoutError(f"topic {topic}: partitions {sorted(open_parts)} never ended")
        for message in consumer.consume(num_messages=1000, timeout=0.2):
            error = message.error()
            if error is None:
                rows.append(json.loads(message.value()))
            elif error.code() == ck.KafkaError._PARTITION_EOF:
                open_parts.discard(message.partition())
            else:
                consumer.close()
                raise RuntimeError(f"reading topic {topic}: {error}")
    consumer.close()
    return pd.DataFrame(rows)


def run_case(case: Case, workdir: Path) -> Outcome:
    """Writes the inputs and the job script under ``workdir`` and runs it.

    A job that ANSI mode failed as its case allows (ansi.py) left its error
    in ``workdir/failed``: the outcome has it as ``failed`` and is checked
    as a job that stopped early (``refused``)."""
    outcome = _run_case(case, workdir)
    failed = workdir / "failed"
    if outcome.error is None and failed.exists():
        outcome.failed, outcome.refused = failed.read_text(), True
    return outcome


def root_of(case: Case, workdir: Path) -> str:
    """Where the case's checkpoints, savepoint and file sinks live (render.py's ``ROOT``)."""
    if case.execution.s3:
        return "s3://" + os.environ["CHAOS_S3_BUCKET"]
    return str(workdir)


def _run_case(case: Case, workdir: Path) -> Outcome:
    from support.faults import kill_after_checkpoints

    os.environ["CHAOS_TOPIC"] = f"chaos-{case.seed}-{uuid.uuid4().hex[:8]}-"
    if case.execution.s3:
        s3.new_bucket(case.seed)
    chk = root_of(case, workdir) + "/chk"
    write_inputs(case, workdir / "in")
    if case.execution.s3:
        s3.upload_inputs(root_of(case, workdir), workdir / "in", case)
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    script = workdir / "job.py"
    script.write_text(render(case, workdir))
    python = [sys.executable, str(script)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kind = case.fault.kind
    notes: list[dict[str, Any]] = []
    fired = kind == "none"
    try:
        if kind == "wkill":
            fired = _kill_a_worker([*python, "run"], case, chk, env)
            return Outcome(_read_outputs(case, workdir / "out"), notes, None, fired)
        if kind == "corrupt":
            from support.faults import completed_checkpoints, sigkill_when

            killed = sigkill_when(
                [*python, "run", "latest"],
                lambda: len(completed_checkpoints(chk)) >= 2,
                timeout=TIMEOUT_S,
                what="two checkpoints",
                delay=random.Random(case.seed).uniform(0.0, case.fault.delay_s),
                allow_early_end=True,
            )
            # a run that ended before its kill is run once more (restoring its final
            # checkpoint, which replays nothing), so that its failure is seen too
            fired = killed is not None and _damage_newest(chk)
            done = subprocess.run(
                [*python, "run", "latest"],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                env=env,
            )
            if done.returncode != 0:
                if "CheckpointError" not in done.stderr:
                    return Outcome({}, [], done.stderr[-4000:], fired)
                # refused, as docs/DESIGN.md "Checkpoints" allows: nothing may be committed twice
                return Outcome(_read_outputs(case, workdir / "out"), [], None, fired, True)
            outputs = _read_outputs(case, workdir / "out")
            return Outcome(outputs, [_last_json(done.stdout)], None, fired)
        if kind == "sigkill":
            stdouts = kill_after_checkpoints(
                [*python, "run", "latest"],
                chk,
                kills=case.fault.kills,
                rng=random.Random(case.seed),
                timeout=TIMEOUT_S,
                max_delay=case.fault.delay_s,
                allow_early_end=True,
            )
            fired = len(stdouts) > 1
            notes = [_last_json(s) for s in stdouts[-1:]]
            notes[0]["kills"] = len(stdouts) - 1
        else:
            mode = "stop" if kind in ("savepoint", "cancel") else "run"
            done = subprocess.run(
                [*python, mode], capture_output=True, text=True, timeout=TIMEOUT_S, env=env
            )
            if done.returncode != 0:
                return Outcome({}, [], done.stderr[-4000:], False)
            note = _last_json(done.stdout)
            notes = [note]
            if kind == "exception":
                fired = (workdir / "fired").exists() and note.get("restarts", 0) >= 1
            elif mode == "stop":
                fired = 0 < note.get("read_at_stop", 0) < note.get("total", 0)
    except (AssertionError, subprocess.TimeoutExpired, TimeoutError) as exc:
        return Outcome({}, notes, f"{type(exc).__name__}: {str(exc)[-4000:]}", False)
    return Outcome(_read_outputs(case, workdir / "out"), notes, None, fired)
