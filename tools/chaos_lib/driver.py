"""The loop over cases: generate, run, check, report; the JSON summary."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import deltaopts, overs, s3
from .ansi import marker, must_fail
from .case import Case
from .check import compare, compare_partial
from .execute import root_of, run_case
from .generate import generate
from .reference import expected
from .render import render
from .shrink import shrink
from .state import check_state

_ERROR = "the job failed: "
_TESTER = "the tester failed: "
_BROKER = contextlib.ExitStack()
atexit.register(_BROKER.close)
atexit.register(s3.close)


def uses_kafka(case: Case) -> bool:
    return "kafka" in case.sinks or any(s.kind == "kafka" for s in case.sources)


def kafka_ready() -> bool:
    """Whether a Kafka broker serves this run (``CHAOS_KAFKA``), starting a
    tansu broker once when the tool cache has one (tests/kafka)."""
    if os.environ.get("CHAOS_KAFKA"):
        return True
    from support.kafka_broker import tansu_broker, tansu_path

    if not tansu_path().exists():
        return False
    log = Path(tempfile.mkdtemp(prefix="eddyline-chaos-tansu-")) / "broker.log"
    os.environ["CHAOS_KAFKA"] = _BROKER.enter_context(tansu_broker(log))
    return True


def check_case(case: Case, workdir: Path) -> tuple[list[str], bool, int]:
    """Runs ``case`` once in ``workdir``: its problems (empty: it matched),
    whether its fault fired, and how many rows its late output committed.

    An exception of the tester itself (reading an output, the reference, the
    comparison) is a problem of the case too, with its traceback: it fails
    the case, reported with its seed and reproducer, and the run goes on."""
    try:
        return _check_case(case, workdir)
    except Exception:  # reported as the case's problem, never dropped
        return [_TESTER + traceback.format_exc()], False, 0


def kind_of(problem: str) -> str:
    """What failed: ``job`` (the job or its harness), ``tester`` or ``output``."""
    if problem.startswith(_ERROR):
        return "job"
    return "tester" if problem.startswith(_TESTER) else "output"


def _check_case(case: Case, workdir: Path) -> tuple[list[str], bool, int]:
    if uses_kafka(case) and not kafka_ready():
        return ["the job failed: no Kafka broker (tansu) for a Kafka case"], False, 0
    if case.execution.s3 and not s3.ready():
        return ["the job failed: no S3 API server (moto[server]) for an S3 case"], False, 0
    outcome = run_case(case, workdir)
    if outcome.error is not None:
        return [_ERROR + outcome.error], outcome.fired, 0
    late = outcome.outputs.get("late")
    late_ids = set() if late is None or late.empty else {int(i) for i in late["id"]}
    if overs.is_over(case.stage):  # no late output: what no sink holds (overs.py)
        late_ids = overs.dropped(case, outcome.outputs)
    want = expected(case, late_ids)
    problems = _failure(case, outcome.failed, outcome.refused)
    if problems:
        return problems, outcome.fired, 0
    logs = deltaopts.log_problems(case, root_of(case, workdir))
    if outcome.refused:
        return compare_partial(case, outcome.outputs, want) + logs, outcome.fired, 0
    problems = compare(case, outcome.outputs, want) + logs
    if case.read_state:
        problems += check_state(case, workdir, outcome, want)
    if overs.is_over(case.stage):  # the candidates it dropped as late
        return problems, outcome.fired, len(late_ids)
    return problems, outcome.fired, 0 if late is None else len(late)


def _failure(case: Case, failed: str | None, refused: bool) -> list[str]:
    """ANSI mode fails the job exactly when the reference has a value that
    does not convert or a sum that leaves bigint's range (ansi.py); a run
    whose restore was refused may have stopped before it got there."""
    must = must_fail(case)
    if failed is not None and not must:
        return [f"the job failed in ANSI mode, but no reference value fails: {failed[:600]}"]
    if must and failed is None and not refused:
        return [f"the job did not fail, but a reference value fails it ({marker(case)})"]
    return []


class _Fails:
    """Whether a shrunk candidate still fails (each try in a fresh directory)."""

    def __init__(self, root: Path) -> None:
        self.root, self.tries = root, 0

    def __call__(self, candidate: Case) -> bool:
        self.tries += 1
        where = self.root / f"try-{self.tries}"
        found, _, _ = check_case(candidate, where)
        shutil.rmtree(where, ignore_errors=True)
        # the same kind of failure: a wrong output stays a wrong output, not a job error
        return bool(found) and kind_of(found[0]) == self.kind

    kind = "output"


def _report(case: Case, problems: list[str], small: Case | None, workdir: Path) -> None:
    out = sys.stderr
    what = "TESTER ERROR" if kind_of(problems[0]) == "tester" else "MISMATCH"
    print(
        f"\n=== {what} seed={case.seed} "
        f"(rerun: python tools/chaos.py --seed {case.seed} --cases 1)",
        file=out,
    )
    for problem in problems:
        print(f"  - {problem}", file=out)
    print(f"fault schedule: {case.fault}", file=out)
    print(f"case: {case.to_json()}", file=out)
    print(f"--- reproducer: {workdir}/job.py (its inputs in {workdir}/in, kept) ---", file=out)
    print(render(case, workdir), file=out)
    if small is not None and small.to_json() != case.to_json():
        saved = workdir / "shrunk.json"
        saved.write_text(small.to_json())
        print(f"--- shrunk case (rerun: python tools/chaos.py --case {saved}) ---", file=out)
        print(f"case: {small.to_json()}", file=out)
        print(render(small, workdir / "shrunk"), file=out)


def _shrink_and_report(
    case: Case, problems: list[str], root: Path, workdir: Path, do_shrink: bool
) -> None:
    small = None
    if do_shrink:
        fails = _Fails(root / f"shrink-{case.seed}")
        fails.kind = kind_of(problems[0])
        small = shrink(case, fails)
    try:
        _report(case, problems, small, workdir)
    except Exception:  # its seed and status are on its line above
        print(f"chaos: reporting case {case.seed} failed:", file=sys.stderr)
        traceback.print_exc()


def _excluded(case: Case, without: Sequence[str]) -> bool:
    features = set(case.features())
    return any(set(combo.split("+")) <= features for combo in without)


def run(
    cases: int,
    seed: int | None,
    minutes: float | None,
    *,
    do_shrink: bool = True,
    keep: Path | None = None,
    without: Sequence[str] = (),
    first: int = 0,
) -> dict[str, Any]:
    """Runs up to ``cases`` cases (fewer if ``minutes`` run out) from ``seed``
    (fresh when ``None``); returns the summary printed as the last line.

    ``without``: feature combinations (``"sink:delta+fault:sigkill"``) whose cases
    are skipped (counted in ``skipped``), to look past a known open defect.
    ``first``: the index (as printed) of the first case to run; the cases
    before it are drawn but not run, so ``--seed S --from-case 197 --cases 1``
    reruns case 197 of run ``S`` alone."""
    if seed is None:
        seed = random.SystemRandom().randrange(2**31)
    print(f"chaos: seed {seed}", flush=True)
    master = random.Random(seed)
    started = time.monotonic()
    mix: Counter[str] = Counter()
    mismatches: list[int] = []
    tester_errors: list[int] = []  # of mismatches: the tester failed, not the engine
    unfired = 0
    late_seen = 0
    skipped = 0
    done = 0
    position = 0  # the index of the next case drawn and not skipped
    root = keep or Path(tempfile.mkdtemp(prefix="eddyline-chaos-"))
    interrupted = False
    try:
        while done < cases:
            if minutes is not None and time.monotonic() - started > minutes * 60:
                break
            case_seed = seed if cases == 1 and not first else master.randrange(2**31)
            case = generate(case_seed)
            if _excluded(case, without) or (uses_kafka(case) and not kafka_ready()):
                skipped += 1
                if cases == 1 and not first:
                    break
                continue
            index, position = position, position + 1
            if index < first:
                continue
            workdir = root / f"case-{case_seed}"
            t0 = time.monotonic()
            problems, fired, late_rows = check_case(case, workdir)
            done += 1
            late_seen += late_rows
            mix.update(case.features())
            unfired += 0 if fired else 1
            status = (
                ("TESTER-ERROR" if kind_of(problems[0]) == "tester" else "MISMATCH")
                if problems
                else "ok"
            )
            print(
                f"case {index} seed={case_seed} {status} {time.monotonic() - t0:.1f}s "
                f"fault={case.fault.kind}"
                f"{'' if fired else ' (fault did not fire)'} {' '.join(case.features())}",
                flush=True,
            )
            if problems:
                mismatches.append(case_seed)
                if kind_of(problems[0]) == "tester":
                    tester_errors.append(case_seed)
                _shrink_and_report(case, problems, root, workdir, do_shrink)
            elif keep is None:
                shutil.rmtree(workdir, ignore_errors=True)
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (main): the case in progress is dropped, the
        # summary of the finished ones is still printed
        interrupted = True
        print("chaos: interrupted, the case in progress is not counted", flush=True)
    if keep is None and not mismatches:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "cases": done,
        "mismatches": len(mismatches),
        "mismatch_seeds": mismatches,
        "tester_errors": tester_errors,
        "seed": seed,
        "seconds": round(time.monotonic() - started, 1),
        "faults_not_fired": unfired,
        "late_rows_seen": late_seen,
        "skipped": skipped,
        "without": list(without),
        "mix": dict(sorted(mix.items())),
        "workdir": str(root) if (keep or mismatches) else None,
        "interrupted": interrupted,
    }


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="tools/chaos.py", description=__doc__)
    parser.add_argument("--cases", type=int, default=10)
    parser.add_argument(
        "--seed", type=int, default=None, help="the run's seed (with --cases 1: the case's)"
    )
    parser.add_argument(
        "--minutes", type=float, default=None, help="stop starting cases after this long"
    )
    parser.add_argument(
        "--from-case",
        type=int,
        default=0,
        metavar="INDEX",
        help="start at the case of this index (as printed) of the run's seed",
    )
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--keep", type=Path, default=None, help="keep every case's directory here")
    parser.add_argument(
        "--without",
        action="append",
        default=[],
        metavar="F1+F2",
        help="skip cases with all these features (repeatable), e.g. sink:delta+fault:sigkill",
    )
    parser.add_argument(
        "--case", type=Path, default=None, help="run one case from its JSON (a shrunk case)"
    )
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    if args.case is not None:
        case = Case.from_json(args.case.read_text())
        workdir = Path(tempfile.mkdtemp(prefix="eddyline-chaos-case-"))
        problems, fired, _ = check_case(case, workdir)
        if problems:
            _report(case, problems, None, workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
        print(
            json.dumps(
                {
                    "cases": 1,
                    "mismatches": int(bool(problems)),
                    "seed": case.seed,
                    "fired": fired,
                    "workdir": str(workdir),
                }
            )
        )
        return 1 if problems else 0
    summary = run(
        args.cases,
        args.seed,
        args.minutes,
        do_shrink=not args.no_shrink,
        keep=args.keep,
        without=args.without,
        first=args.from_case,
    )
    print(json.dumps(summary, sort_keys=True), flush=True)
    return 1 if summary["mismatches"] else 0
