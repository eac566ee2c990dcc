"""Each Nexmark query in SQL against its hand-written DSL twin, interleaved, one process per run.

    python benches/nexmark/sql_vs_dsl.py [--queries q0,q1,...] [--events 10M] [--runs 5]
        [--sink discard] [--json-out FILE]

For every round and every query this runs ``run.py --frontend dsl`` then ``--frontend sql``
(the order alternates between rounds so that neither side always runs second), each in a
fresh interpreter inheriting this process's niceness (``nice -n 10 python ...`` nices both
sides equally). It prints one JSON line per run (``run.py``'s line plus ``round`` and the
1-minute load average at its start) and then a Markdown table of the medians of ``seconds``
and the ratio SQL / DSL of the medians, with the median of the per-round ratios beside it
(on a shared machine the paired ratio is the steadier figure), and the medians of
``cpu_s``, the CPU time the job's threads used, which other processes on the machine
disturb less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUN = os.path.join(HERE, "run.py")
SQL_DIR = os.path.join(HERE, "sql")


def one_run(query: str, frontend: str, args: argparse.Namespace) -> dict[str, object]:
    """``run.py`` once; its JSON line with the load average at the start."""
    load = os.getloadavg()[0]
    cmd = [sys.executable, RUN, "--query", query, "--events", args.events]
    cmd += ["--sink", args.sink, "--frontend", frontend]
    cmd += ["--parallelism", str(args.parallelism), "--batch-size", str(args.batch_size)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    line["loadavg_1m"] = round(load, 2)
    return line


def main() -> None:
    names = (p[:-4] for p in os.listdir(SQL_DIR) if p.endswith(".sql"))
    queries = sorted(names, key=lambda q: int(q[1:]))
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--queries", default=",".join(queries))
    ap.add_argument("--events", default="10M")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--sink", choices=["collect", "discard"], default="discard")
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=8192)
    ap.add_argument("--json-out", help="also append every run's JSON line to this file")
    args = ap.parse_args()

    seconds: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    ratios: dict[str, list[float]] = {}
    loads: list[float] = []
    for round_ in range(args.runs):
        order = ("dsl", "sql") if round_ % 2 == 0 else ("sql", "dsl")
        for query in args.queries.split(","):
            pair: dict[str, float] = {}
            for frontend in order:
                line = one_run(query, frontend, args)
                line["round"] = round_
                print(json.dumps(line), flush=True)
                if args.json_out:
                    with open(args.json_out, "a") as f:
                        f.write(json.dumps(line) + "\n")
                pair[frontend] = float(line["seconds"])  # type: ignore[arg-type]
                seconds.setdefault((query, frontend), []).append(pair[frontend])
                cpu.setdefault((query, frontend), []).append(float(line["cpu_s"]))  # type: ignore[arg-type]
                loads.append(float(line["loadavg_1m"]))  # type: ignore[arg-type]
            ratios.setdefault(query, []).append(pair["sql"] / pair["dsl"])

    print()
    print(
        f"load average (1 min) at the runs' starts: {min(loads):.2f}-{max(loads):.2f}, "
        f"median {statistics.median(loads):.2f}"
    )
    print(
        "| query | DSL median (s) | SQL median (s) | SQL / DSL (medians) | median paired ratio "
        "| DSL CPU median (s) | SQL CPU median (s) | SQL / DSL CPU |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for query in args.queries.split(","):
        dsl = statistics.median(seconds[(query, "dsl")])
        sql = statistics.median(seconds[(query, "sql")])
        paired = statistics.median(ratios[query])
        dsl_cpu = statistics.median(cpu[(query, "dsl")])
        sql_cpu = statistics.median(cpu[(query, "sql")])
        print(
            f"| {query} | {dsl:.3f} | {sql:.3f} | {sql / dsl:.2f} | {paired:.2f} "
            f"| {dsl_cpu:.3f} | {sql_cpu:.3f} | {sql_cpu / dsl_cpu:.2f} |"
        )


if __name__ == "__main__":
    main()
