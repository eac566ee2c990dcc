"""A case as a self-contained Python job script: what the tester runs (in a
subprocess, so it can be SIGKILLed) and what it prints as the reproducer.

The script takes one argument: ``run`` (execute to the end; ``run latest``
restores from the newest checkpoint, as after a SIGKILL) or ``stop`` (execute,
stop with a savepoint or cancel mid-run, restore at the other parallelism). Its
last stdout line is a JSON object with the run's restarts and checkpoints.
"""

from __future__ import annotations

from pathlib import Path

from . import (
    aggs,
    ansi,
    bcast,
    chained,
    deltaopts,
    fnlib,
    loops,
    overs,
    ptimers,
    pyops,
    sparksink,
    sqlgen,
    sqlmore,
    usersrc,
)
from .case import Case, Op, Source

HEADER = '''\
"""eddyline chaos case {seed} (tools/chaos.py --seed {seed} --cases 1).
Features: {features}
Fault: {fault}
"""

import atexit
import json
import os
import sys

{prelude}import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import eddyline as ed
import eddyline.functions as F
from eddyline.spark import SparkTableSink

# the fault helpers of eddyline's tests (tests/support), here and in worker processes
TESTS = {tests!r}
sys.path.insert(0, TESTS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
from support.faults import FailOnce, SleepPerBatch, wait_until  # noqa: E402

KAFKA, TOPIC = os.environ.get("CHAOS_KAFKA", ""), os.environ.get("CHAOS_TOPIC", "")
HERE = {here!r}
IN, OUT = HERE + "/in", HERE + "/out"
# checkpoints, the savepoint and the file sinks: on an S3 API server in an S3 case
ROOT = {root}
CHK, STORE = ROOT + "/chk", ROOT + "/out"
SOURCES = ROOT + "/in"  # the Parquet sources' files (the others read IN)
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])
# what the error says when ANSI mode may fail this job ("": it may not; ansi.py)
EXPECT = {expect!r}


def spark():
    """One local Spark session per job run (from_spark sources)."""
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.warehouse.dir", HERE + "/spark-warehouse")
        # C1 only and the serial collector: the JVM starts in half the time, and
        # a case's data is small (a Spark case runs its job up to three times)
        .config(
            "spark.driver.extraJavaOptions",
            "-Dderby.system.home=" + HERE + " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


class AddV:
    """Python per-record map: v + a."""

    def __init__(self, a):
        self.a = a

    def __call__(self, row):
        return {{"id": row["id"], "k": row["k"], "ts": row["ts"], "v": row["v"] + self.a}}


class VModNot:
    """Python per-record filter: v % a != b."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __call__(self, row):
        return row["v"] % self.a != self.b


class AddVBatch:
    """Python map_batches: v + a."""

    def __init__(self, a):
        self.a = a

    def __call__(self, batch):
        v = pc.add(batch.column("v"), pa.scalar(self.a, pa.int64()))
        return pa.RecordBatch.from_arrays(
            [batch.column("id"), batch.column("k"), batch.column("ts"), v], schema=SCHEMA
        )


class LoopUntil:
    """A bounded loop: a row with v < b goes around again with v + a."""

    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag

    def __call__(self, s):
        feedback = (
            s.filter(ed.col("v") < self.b).name(self.tag + "_low").uid(self.tag + "_low")
            .with_columns(v=ed.col("v") + self.a).name(self.tag + "_add").uid(self.tag + "_add")
        )
        done = s.filter(ed.col("v") >= self.b).name(self.tag + "_done").uid(self.tag + "_done")
        return feedback, done


WINDOW_SCHEMA = pa.schema(
    [(c, pa.int64()) for c in ("k", "window_start", "window_end", "v", "n", "fired")]
)


class Windowed:
    """Per key: value, list and map state; a timer per tumbling window emits it."""

    def __init__(self, size):
        self.size = size

    def add(self, row, ctx, state, amount):
        start = row["ts"] - row["ts"] % self.size
        sums = ctx.get_map_state(state)
        sums.put(start, sums.get(start, 0) + amount)
        ctx.get_list_state("times").add(row["ts"])
        ctx.timer_service.register_event_time_timer(start + self.size - 1)

    def on_timer(self, timestamp, ctx):
        start = timestamp + 1 - self.size
        out = {{"k": ctx.key, "window_start": start, "window_end": start + self.size}}
        for state, column in (("left", "v"), ("right", "n")):
            sums = ctx.get_map_state(state)
            out[column] = sums.get(start, 0)
            sums.remove(start)
        times = ctx.get_list_state("times")
        kept = [t for t in times.get() if not start <= t < start + self.size]
        if self.count_rows:
            out["n"] = len(times.get()) - len(kept)
        times.update(kept)
        fired = ctx.get_state("fired")
        out["fired"] = (fired.value() or 0) + 1
        fired.update(out["fired"])
        return [out]


class WindowSums(Windowed, ed.ProcessFunction):
    """Per key and tumbling window: the sum of v and the number of rows."""

    count_rows = True

    def process_element(self, row, ctx):
        self.add(row, ctx, "left", row["v"])


class CoWindowSums(Windowed, ed.CoProcessFunction):
    """Per key and tumbling window: the left's sum of v, the right's row count."""

    count_rows = False

    def process_element1(self, row, ctx):
        self.add(row, ctx, "left", row["v"])

    def process_element2(self, row, ctx):
        self.add(row, ctx, "right", 1)

'''

FOOTER = """

def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    if mode == "run":
        restore = "latest" if sys.argv[2:] == ["latest"] else None
        env, collects = build(PARALLELISM, SLEEP_S)
        result = env.execute("chaos", restore_from=restore, **RUNNER)
        for name, handle in collects.items():
            pq.write_table(handle.to_arrow(), f"{{OUT}}/{{name}}.parquet")
        print(json.dumps({{"restarts": result.restarts, "checkpoints": len(result.checkpoints)}}))
        return
    env, _ = build(PARALLELISM, SLEEP_S)
    client = env.execute_async("chaos-first", **RUNNER)
    total = {total_main}
    wait_until(
        lambda: client.metrics()["operators"]["{main}"]["records_out"] >= total * {fraction},
        timeout=120,
        what="part of the input to be read",
    )
    if {savepoint}:
        try:
            restore = client.stop_with_savepoint(ROOT + "/savepoint")
        except ed.CheckpointError as e:
            if "the job ended before" not in str(e):
                raise
            # it ended before the savepoint completed: its output is complete,
            # and the fault did not fire (as a cancel that comes too late)
            first = client.wait(timeout=120)
            print(json.dumps({{"read_at_stop": total, "total": total, "checkpoints_before": 0,
                              "restarts": first.restarts, "checkpoints": len(first.checkpoints)}}))
            return
        first = client.wait(timeout=120)
        read, done = first.metrics["operators"]["{main}"]["records_out"], len(first.checkpoints)
    else:
        done = len(client.checkpoints)
        wait_until(lambda: len(client.checkpoints) > done, timeout=120, what="a checkpoint")
        read = client.metrics()["operators"]["{main}"]["records_out"]
        client.cancel()
        try:
            first = client.wait(timeout=120)
        except ed.JobCancelledError:
            pass
        else:
            # it ended before the cancel reached it: its output is complete, and the
            # fault did not fire (read_at_stop == total)
            print(json.dumps({{"read_at_stop": total, "total": total, "checkpoints_before": done,
                              "restarts": first.restarts, "checkpoints": len(first.checkpoints)}}))
            return
        restore = "latest"
    env, _ = build(RESTORE_PARALLELISM, 0.0)
    result = env.execute("chaos-second", restore_from=restore, **RUNNER)
    print(json.dumps({{"read_at_stop": read, "total": total, "checkpoints_before": done,
                      "restarts": result.restarts, "checkpoints": len(result.checkpoints)}}))


if __name__ == "__main__":
    try:
        main()
    except ed.JobFailedError as e:
        if not EXPECT or EXPECT not in str(e):
            raise
        # ANSI mode failed the job as the case allows: the tester checks that
        # the reference has a failing value and what was committed before
        with open(HERE + "/failed", "w") as f:
            f.write(str(e))
        print(json.dumps({{"failed": str(e)[:300]}}))
    # The job ended and its output is committed. Run the exit hooks (worker
    # processes, temporary folders), then skip the interpreter's teardown: it
    # takes about half a second a run, and a case runs its job up to three times.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    os._exit(0)
"""


def _event_time(src: Source) -> str:
    """``assign_timestamps``, or its other spelling ``with_watermark``."""
    if src.watermark:
        return f'.with_watermark("ts", "{src.bound_ms} milliseconds")'
    return f'.assign_timestamps("ts", max_out_of_orderness="{src.bound_ms}ms")'


def _assign_line(src: Source) -> str:
    return f'        {_event_time(src)}.name("{src.name}_ts").uid("{src.name}_ts")'


def _source_lines(src: Source, assign: bool = True) -> list[str]:
    """The lines making source ``src`` (as a stream named after it), with its event
    time assigned unless not ``assign``."""
    n = src.name
    if src.kind == "parquet":
        head = f'env.from_parquet(SOURCES + "/{n}")'
    elif src.kind == "user":
        head = usersrc.head(src)
    elif src.kind == "spark":
        head = f'env.from_spark(spark().read.parquet(IN + "/{n}"))'
    elif src.kind == "kafka":
        from .data import splits_of

        ends = {p: len(split) for p, split in enumerate(splits_of(src))}
        stops = ", ".join(f'(TOPIC + "{n}", {p}): {end}' for p, end in ends.items())
        head = (
            f'env.from_kafka(KAFKA, TOPIC + "{n}", schema=SCHEMA, stopping_offsets={{{stops}}})'
            f'.name("{n}_read").uid("{n}_read").select("id", "k", "ts", "v")'
        )
    elif src.kind == "arrow":
        head = f'env.from_arrow(pq.ParquetFile(IN + "/{n}.parquet").read())'
    elif src.kind == "collection":
        rows = f'pq.ParquetFile(IN + "/{n}.parquet").read().to_pylist()'
        head = f"env.from_collection({rows}, schema=SCHEMA)"
    else:
        from .data import sequence_step

        lines = [
            f"    {n} = (",
            f"        env.from_sequence(0, {src.rows}).name({n!r}).uid({n!r})",
            "        .with_columns(",
            f'            id=ed.col("value") + {src.id_base},',
            f'            k=ed.col("value") % {src.keys},',
            f'            ts=ed.col("value") * {sequence_step(src)},',
            '            v=ed.col("value") % 7 + 1,',
            "        )",
            f'        .name("{n}_cols").uid("{n}_cols")',
            f'        .select("id", "k", "ts", "v").name("{n}_sel").uid("{n}_sel")',
            *([_assign_line(src)] if assign else []),
            "    )",
        ]
        return lines
    return [
        f"    {n} = (",
        f"        {head}.name({n!r}).uid({n!r})",
        *([_assign_line(src)] if assign else []),
        "    )",
    ]


def _posexplode_lines(i: int, op: Op) -> list[str]:
    """``_explode_lines`` with positions: an array of ``a`` copies of ``v``,
    each element's position ``j`` makes id ``4 * id + j`` and ``v + j`` (``b``
    2: ``stream.posexplode``; 3: ``F.posexplode(...).alias(pos, col)`` in ``select``)."""
    tag = f"op{i}_explode"
    copies = ", ".join(['F.col("v")'] * op.a)
    array = f"F.array({copies})"
    if op.b == 2:
        exploded = f'posexplode("e", pos="p").name("{tag}").uid("{tag}")'
    else:
        parts = '"id", "k", "ts", F.posexplode("e").alias("p", "e")'
        exploded = f'select({parts}).name("{tag}").uid("{tag}")'
    return [
        "    main = (",
        f'        main.with_columns(e={array}).name("{tag}_array").uid("{tag}_array")',
        f"        .{exploded}",
        '        .with_columns(id=F.col("id") * 4 + F.col("p"), v=F.col("e") + F.col("p"))',
        f'        .name("{tag}_ids").uid("{tag}_ids")',
        f'        .select("id", "k", "ts", "v").name("{tag}_sel").uid("{tag}_sel")',
        "    )",
    ]


def _explode_lines(i: int, op: Op) -> list[str]:
    """Each row as ``a`` rows: id ``4 * id + j``, ``v + j`` (``b`` 0: ``F.array``
    and ``stream.explode``; 1: ``F.split`` of a string and ``F.explode``; 2
    and 3: ``_posexplode_lines``; 4: a Python ``flat_map``, pyops.py)."""
    if op.b == pyops.FLAT_MAP:
        return pyops.flat_map_lines(i, op)
    if op.b >= 2:
        return _posexplode_lines(i, op)
    ids = [f'F.col("id") * 4 + {j}' for j in range(op.a)]
    tag = f"op{i}_explode"
    if op.b == 0:
        array = f"F.array({', '.join(ids)})"
        made = f'with_columns(e={array}).name("{tag}_array").uid("{tag}_array")'
        exploded = f'explode("e").name("{tag}").uid("{tag}")'
        element = 'F.col("e")'
    else:
        text = ", ".join(f'({x}).cast("string")' for x in ids)
        made = f'with_columns(e=F.split(F.concat_ws(",", {text}), ",")).name("{tag}_split")'
        made += f'.uid("{tag}_split")'
        exploded = f'with_columns(e=F.explode("e")).name("{tag}").uid("{tag}")'
        element = 'F.col("e").cast("bigint")'
    return [
        "    main = (",
        f"        main.{made}",
        f"        .{exploded}",
        f'        .with_columns(id={element}, v=F.col("v") + {element} % 4)',
        f'        .name("{tag}_ids").uid("{tag}_ids")',
        f'        .select("id", "k", "ts", "v").name("{tag}_sel").uid("{tag}_sel")',
        "    )",
    ]


def _op_line(i: int, op: Op) -> str:
    if op.kind == "explode":
        return "\n".join(_explode_lines(i, op))
    tag = f'.name("op{i}_{op.kind}").uid("op{i}_{op.kind}")'
    schema = ", schema=SCHEMA" if op.schema else ""
    call = {
        "nfilter": f'filter(ed.col("v") % {op.a} != {op.b})',
        "nwith": f'with_columns(v=ed.col("v") * {op.a} + {op.b})',
        "nselect": 'with_columns(w=ed.col("v") + ed.col("k")).select("id", "k", "ts", "v")',
        "pmap": f"map(AddV({op.a}){schema})",
        "pfilter": f"filter(VModNot({op.a}, {op.b}))",
        "pbatch": f"map_batches(AddVBatch({op.a}){schema})",
        "loop": loops.call(i, op),
    }[op.kind]
    return f"    main = main.{call}{tag}"


def _fn_lines(case: Case) -> list[str]:
    """The function library: base columns, a filter, half the expressions in
    ``with_columns`` and the rest in ``select`` (docs/CHAOS.md)."""
    where, exprs = fnlib.split(case.stage.exprs)
    first, second = fnlib.BASE
    lines = [
        "    out = (",
        f"        main.{first}",
        '        .name("fn_base").uid("fn_base")',
        f'        .{second}.name("fn_f").uid("fn_f")',
    ]
    if where is not None:
        lines.append(f'        .filter({fnlib.dsl(where)}).name("fn_filter").uid("fn_filter")')
    half = len(exprs) // 2
    if half:
        lines.append("        .with_columns(")
        lines += [f"            c{i}={fnlib.dsl(e)}," for i, e in enumerate(exprs[:half])]
        lines.append('        ).name("fn_with").uid("fn_with")')
    cols = ['"id"', *(f'"c{i}"' for i in range(half))]
    cols += [f'{fnlib.dsl(e)}.alias("c{half + i}")' for i, e in enumerate(exprs[half:])]
    lines.append("        .select(")
    lines += [f"            {c}," for c in cols]
    lines += ['        ).name("fn_select").uid("fn_select")', "    )"]
    return lines


def _fagg_lines(case: Case) -> list[str]:
    return aggs.lines(case)


def _sql_lines(case: Case) -> list[str]:
    st = case.stage
    ttl = f'state_ttl="{st.ttl_ms}ms"' if st.ttl_ms else ""
    view_ttl = f", {ttl}" if ttl and st.spelling == "view" else ""
    lines = [f'    main.create_temporary_view("t"{view_ttl})']
    if st.right:
        lines.append(f'    {sqlmore.right_view(st)}.create_temporary_view("u"{view_ttl})')
    query_ttl = f", {ttl}" if ttl and st.spelling == "query" else ""
    lines.append(f'    out = env.sql("{sqlgen.query(st)}"{query_ttl}).name("sql").uid("sql")')
    return lines


def _stage_lines(case: Case) -> list[str]:
    st = case.stage
    if st.kind == "fn":
        return _fn_lines(case)
    if st.kind == "fagg":
        return _fagg_lines(case)
    if st.kind == "sql":
        return _sql_lines(case)
    if st.kind == "over":
        return overs.dsl_lines(case)
    agg = {"sum": 'sum("v")', "count": "count()", "min": 'min("v")', "max": 'max("v")'}[st.agg]
    if st.kind == "none":
        return ["    out = main"]
    if st.kind == "running":
        return [f'    out = main.key_by("k").{agg}.name("agg").uid("agg")']
    if st.kind == "process":
        return [
            f'    out = main.key_by("k").process({ptimers.function(case)}, schema=WINDOW_SCHEMA)'
            '.name("process").uid("process")'
        ]
    if st.kind == "coprocess":
        return [
            f'    out = main.connect({st.right}).key_by("k", "k")'
            f".process({ptimers.function(case)}, schema=WINDOW_SCHEMA)"
            '.name("coprocess").uid("coprocess")'
        ]
    if st.kind == "comap":
        return [
            f"    out = main.connect({st.right}).map(AddV({st.a}), AddV({st.b}), schema=SCHEMA)"
            '.name("comap").uid("comap")'
        ]
    if st.kind == "tjoin" and st.spelling == "broadcast":
        return bcast.stage_lines(case)
    if st.kind == "tjoin":
        return [
            f'    out = main.temporal_join({st.right}, on="k", how="{st.how}")'
            '.name("tjoin").uid("tjoin")'
        ]
    if st.kind == "wjoin":
        window = f'ed.Sliding("{st.size_ms}ms", "{st.slide_ms}ms")'
        if st.gap_ms:
            window = f'ed.Session("{st.gap_ms}ms")'
        return [
            f'    out = main.window_join({st.right}, on="k", window={window})'
            '.name("wjoin").uid("wjoin")'
        ]
    if st.kind == "ujoin":
        ttl = f', state_ttl="{st.ttl_ms}ms"' if st.ttl_ms else ""
        return [f'    out = main.join({st.right}, on="k"{ttl}).name("ujoin").uid("ujoin")']
    if st.kind == "ijoin":
        return [
            f'    out = main.join({st.right}, on="k", '
            f'within=("{st.lower_ms}ms", "{st.upper_ms}ms"), how="{st.how}")'
            '.name("join").uid("join")'
        ]
    assigner = {
        "tumbling": f'ed.Tumbling("{st.size_ms}ms")',
        "sliding": f'ed.Sliding("{st.size_ms}ms", "{st.slide_ms}ms")',
        "session": f'ed.Session("{st.gap_ms}ms")',
    }[st.kind]
    late = ', late_output=ed.OutputTag("late")' if st.late else ""
    if st.spelling:  # a Python reduce or apply (pyops.py)
        agg = pyops.window_call(case)
    lines = [f'    out = main.key_by("k").window({assigner}{late}).{agg}.name("win").uid("win")']
    if st.late:
        lines.append(
            '    out.side_output(ed.OutputTag("late")).sink_to(ed.ParquetSink(STORE + "/late"))'
            '.name("sink_late").uid("sink_late")'
        )
    return lines + pyops.after_window(case) + chained.lines(case)


def _sink_lines(case: Case) -> list[str]:
    lines = ["    collects = {}"]
    for sink in case.sinks:
        tag = f'.name("sink_{sink}").uid("sink_{sink}")'
        if sink == "parquet":
            lines.append(f'    out.sink_to(ed.ParquetSink(STORE + "/parquet")){tag}')
        elif sink == "delta":
            delta = deltaopts.options(case)
            lines.append(f'    out.sink_to(ed.DeltaSink(STORE + "/delta"{delta})){tag}')
        elif sink == "upsert":
            lines.append(
                f'    out.sink_to(ed.DeltaSink(STORE + "/upsert", mode="upsert", key=["k"]'
                f"{deltaopts.options(case)})){tag}"
            )
        elif sink == "kafka":
            lines.append(f'    out.sink_to(ed.KafkaSink(KAFKA, TOPIC + "out")){tag}')
        elif sink == "collect":
            lines.append(f'    collects["collect"] = out.collect(){tag}')
        elif sink == "delta2w":
            lines += deltaopts.sink_lines(case, tag)
        elif sink == "spark":
            lines.append(sparksink.sink_line(tag))
    return lines


def render(case: Case, here: Path) -> str:
    """The job script of ``case``, reading and writing under ``here``."""
    ex, fault = case.execution, case.fault
    prelude = ""
    if ex.python_workers:
        # per-record Python moves to worker processes after two batches (the hooks
        # tests/integration/test_python_workers.py uses), not after 100,000 rows
        prelude = (
            f'os.environ["EDDYLINE_PYTHON_WORKERS"] = "{ex.python_workers}"\n'
            "import eddyline._exec.pool as pool  # noqa: E402\n\n"
            f"pool.START_AFTER_ROWS = {2 * ex.batch_size}\n"
            "pool.START_AFTER_SECONDS = 0.0\n"
            "pool.WAIT_FOR_START = True\n\n"
        )
    text = HEADER.format(
        seed=case.seed,
        features=", ".join(case.features()),
        fault=fault,
        here=str(here),
        prelude=prelude,
        expect=ansi.marker(case),
        root='"s3://" + os.environ["CHAOS_S3_BUCKET"]' if ex.s3 else "HERE",
        tests=str(Path(__file__).resolve().parents[2] / "tests"),
    )
    text += (
        pyops.CLASSES + loops.CLASSES + bcast.CLASSES + usersrc.CLASSES + ptimers.CLASSES + "\n\n"
    )
    text += f"PARALLELISM, RESTORE_PARALLELISM = {ex.parallelism}, {ex.restore_parallelism}\n"
    text += f"SLEEP_S = {ex.sleep_s}\n"
    runner = f'{{"runner": ed.ProcessRunner(workers={ex.workers})}}' if ex.workers else "{}"
    text += f"RUNNER = {runner}\n\n\n"
    body = [
        "def build(parallelism, sleep_s):",
        "    env = ed.StreamEnvironment(",
        "        parallelism,",
        f'        checkpoint=ed.CheckpointConfig(CHK, interval="{ex.interval_ms}ms", '
        f"unaligned={ex.unaligned}, incremental={ex.incremental}"
        + (f', aligned_timeout="{ex.aligned_timeout_ms}ms"' if ex.aligned_timeout_ms else "")
        + (', recovery="recompute"' if ex.recompute else "")
        + "),",
        '        restart=ed.RestartStrategy.fixed_delay(attempts=3, delay="50ms"),',
        f"        batch_size={ex.batch_size},",
        *(["        ansi=True,"] if ex.ansi else []),
        "    )",
    ]
    late = case.assign_after >= 0  # the main source's event time behind Python operators
    for src in case.sources:
        body += _source_lines(src, assign=not (late and src.name == case.main))
    body.append(
        f"    main = {case.main}.map_batches(SleepPerBatch(sleep_s), schema=SCHEMA)"
        '.name("slow").uid("slow")'
    )
    first = max(0, case.assign_after)
    if late:
        body += [_op_line(i, op) for i, op in enumerate(case.ops[:first])]
        body.append("    main = main" + _assign_line(case.source(case.main)).strip())
    if case.union:
        body.append(f'    main = main.union({", ".join(case.union)}).name("union").uid("union")')
    if fault.kind == "exception":
        body.append(
            "    main = main.map_batches("
            f'FailOnce(None, HERE, column="id", at={fault.at}, armed_by=CHK), '
            'schema=SCHEMA).name("fail").uid("fail")'
        )
    body += [_op_line(i, op) for i, op in enumerate(case.ops) if i >= first]
    body += _stage_lines(case)
    body += _sink_lines(case)
    body.append("    return env, collects")
    total_main = case.source(case.main).rows
    text += "\n".join(body) + "\n"
    text += FOOTER.format(
        total_main=total_main,
        main=case.main,
        fraction=fault.fraction,
        savepoint=fault.kind == "savepoint",
    )
    return text
