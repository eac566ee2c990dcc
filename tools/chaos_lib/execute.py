"""Runs a case under its fault schedule, each run of the job in a subprocess,
and reads back every sink's committed output.

Faults (case.Fault): ``none`` and ``exception`` run once (a restart strategy
recovers the injected failure inside the run); ``sigkill`` SIGKILLs the job
process a random moment after a new checkpoint completes, ``kills`` times, and
each new run restores ``"latest"`` (``eddyline.testing.kill_after_checkpoints``);
``savepoint`` and ``cancel`` stop the job mid-run in the script itself and
restore it at the other parallelism.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

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


def _last_json(stdout: str) -> dict[str, Any]:
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            note: dict[str, Any] = json.loads(line)
            return note
    return {}


def _read_outputs(case: Case, out: Path) -> dict[str, pd.DataFrame]:
    from deltalake import DeltaTable

    from eddyline.testing import read_parquet_dir

    outputs: dict[str, pd.DataFrame] = {}
    names = [*case.sinks, *(["late"] if case.stage.late else [])]
    for name in names:
        if name in ("parquet", "late"):
            # committed files only: pyarrow.dataset skips names starting "_" or "."
            outputs[name] = read_parquet_dir(out / name).to_pandas()
        elif name in ("delta", "upsert"):
            path = out / name
            outputs[name] = (
                DeltaTable(str(path)).to_pyarrow_table().to_pandas()
                if (path / "_delta_log").is_dir()
                else pd.DataFrame()
            )
        elif name == "collect":
            path = out / "collect.parquet"
            outputs[name] = pq.read_table(path).to_pandas() if path.exists() else pd.DataFrame()
    return outputs


def run_case(case: Case, workdir: Path) -> Outcome:
    """Writes the inputs and the job script under ``workdir`` and runs it."""
    from eddyline.testing import kill_after_checkpoints

    write_inputs(case, workdir / "in")
    (workdir / "out").mkdir(parents=True, exist_ok=True)
    script = workdir / "job.py"
    script.write_text(render(case, workdir))
    python = [sys.executable, str(script)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    kind = case.fault.kind
    notes: list[dict[str, Any]] = []
    fired = kind == "none"
    try:
        if kind == "sigkill":
            stdouts = kill_after_checkpoints(
                [*python, "run", "latest"],
                workdir / "chk",
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
