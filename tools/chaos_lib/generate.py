"""A random case from a seed. Everything random about a case (its data, its
pipeline, its execution settings, its fault schedule) is drawn here from one
``random.Random(seed)``, so the seed alone reproduces it.

Adding a feature: give it a field or a kind in ``case.py``, draw it here, render
it in ``render.py``, compute it in ``reference.py`` (docs/CHAOS.md).
"""

from __future__ import annotations

import random

from . import (
    aggs,
    ansi,
    bcast,
    chained,
    deltaopts,
    floordiv,
    fnaggs,
    fnextra,
    fnlib,
    fnmore,
    late_burst,
    late_groupby,
    late_session,
    loops,
    nanvl,
    overframes,
    overs,
    ptimers,
    pyops,
    s3,
    sparksink,
    sqlgen,
    sqlmore,
    state,
    state_ops,
    usersrc,
    wtime,
)
from .case import Case, Execution, Fault, Op, Source, Stage

SOURCE_KINDS = ["parquet", "parquet", "sequence", "arrow", "collection"]
OP_KINDS = ["nfilter", "nwith", "nselect", "pmap", "pfilter", "pbatch"]
STAGES = ["none", "running", "tumbling", "sliding", "session", "ijoin"]
AGGS = ["sum", "count", "min", "max"]
FAULTS = ["none", "exception", "sigkill", "savepoint", "cancel"]
ID_STRIDE = 10_000_000


def _source(rng: random.Random, index: int, scale: float, span_ms: int) -> Source:
    kind = rng.choice(SOURCE_KINDS)
    bound = rng.choice([200, 1_000, 5_000])
    return Source(
        name=f"s{index}",
        kind=kind,
        rows=max(20, int(rng.randint(500, 3_000) * scale)),
        id_base=index * ID_STRIDE,
        keys=rng.choice([3, 10, 40]),
        span_ms=span_ms,
        bound_ms=bound,
        jitter_ms=rng.randint(0, (bound - 1) // 2),
        files=rng.randint(1, 5) if kind == "parquet" else 1,
        row_groups=rng.choice([1, 1, 2, 4]) if kind == "parquet" else 1,
        seed=rng.getrandbits(32),
    )


def _op(rng: random.Random, schema_needed: bool) -> Op:
    kind = rng.choice(OP_KINDS)
    a = rng.randint(2, 5) if kind in ("nfilter", "pfilter") else rng.randint(1, 3)
    b = rng.randint(0, a - 1) if kind in ("nfilter", "pfilter") else rng.randint(0, 5)
    if kind == "nwith":
        a = rng.randint(1, 3)
    return Op(kind, a, b, schema=schema_needed or rng.random() < 0.5)


def _stage(rng: random.Random, span_ms: int, right: str) -> Stage:
    kind = rng.choice(STAGES)
    agg = rng.choice(AGGS)
    if kind == "tumbling":
        return Stage(
            kind, agg, size_ms=rng.choice([500, 2_000, 10_000, 60_000]), late=rng.random() < 0.5
        )
    if kind == "sliding":
        slide = rng.choice([500, 2_000, 10_000])
        return Stage(
            kind, agg, size_ms=slide * rng.randint(1, 4), slide_ms=slide, late=rng.random() < 0.5
        )
    if kind == "session":
        return Stage(kind, agg, gap_ms=rng.choice([200, 1_000, 5_000]), late=rng.random() < 0.5)
    if kind == "ijoin":
        lower = -rng.choice([0, 100, 500, 1_000])
        return Stage(kind, right=right, lower_ms=lower, upper_ms=rng.choice([0, 100, 500, 1_000]))
    return Stage(kind, agg)


def _other_join(
    rng: random.Random, stage: Stage, sources: list[Source], execution: Execution
) -> None:
    """Turns two interval joins in three into a window join or an unbounded join
    (drawn after everything else: the cases of earlier seeds stay as they were)."""
    pick = rng.random()
    if pick < 1 / 3:
        return
    if pick < 2 / 3:
        stage.kind = "wjoin"
        stage.slide_ms = rng.choice([200, 500, 1_000])
        stage.size_ms = stage.slide_ms * rng.choice([1, 1, 2])
        return
    # an unbounded join pairs every two rows of a key: fewer rows keep the output small
    stage.kind = "ujoin"
    for source in sources:
        source.rows = min(source.rows, 300)
    execution.batch_size = min(execution.batch_size, 30)
    if execution.sleep_s:
        execution.sleep_s = 0.08


def generate(seed: int, scale: float = 1.0) -> Case:
    """The case of ``seed``; ``scale`` multiplies its row counts (shrinking)."""
    rng = random.Random(seed)
    span_ms = rng.choice([60_000, 300_000, 600_000])
    count = rng.randint(1, 3)
    sources = [_source(rng, i, scale, span_ms) for i in range(count)]
    stage = _stage(rng, span_ms, right=sources[-1].name if count > 1 else "")
    if stage.kind == "ijoin" and count == 1:
        sources.append(_source(rng, 1, scale, span_ms))
        stage.right = "s1"
        count = 2
    others = [s.name for s in sources[1:] if s.name != stage.right]
    union = others if others and rng.random() < 0.7 else []
    used = {sources[0].name, *union, stage.right}
    sources = [s for s in sources if s.name in used]  # a source no sink reads is not a job
    ops = [_op(rng, stage.kind == "ijoin") for _ in range(rng.randint(0, 4))]
    if stage.kind == "tumbling" and stage.late and rng.random() < 0.6:
        for source in sources:
            if source.kind != "sequence":
                source.late_rows = rng.randint(1, 5)
    fault_kind = rng.choice(FAULTS)
    sinks = ["parquet", "delta"]
    if fault_kind in ("none", "exception"):
        sinks.append("collect")
    if stage.kind == "running":
        sinks.append("upsert")
    chosen = [s for s in sinks if rng.random() < 0.6] or [rng.choice(sinks)]
    parallelism = rng.randint(1, 4)
    main_rows = sources[0].rows
    # at least ten batches of the main source, so a fault lands mid-run
    batch_size = rng.choice([b for b in (37, 100, 256, 1_000) if b * 10 <= main_rows] or [10])
    batches = max(1, main_rows // batch_size)
    execution = Execution(
        parallelism=parallelism,
        restore_parallelism=rng.randint(1, 4),
        batch_size=batch_size,
        interval_ms=rng.choice([50, 100, 200]),
        unaligned=rng.random() < 0.4,
        incremental=rng.random() < 0.4,
        sleep_s=0.0
        if fault_kind == "none"
        # about 3 s of reading, so a checkpoint completes before the fault
        else round(min(0.08, max(0.002, 3.0 * parallelism / batches)), 4),
    )
    fault = Fault(
        kind=fault_kind,
        at=sources[0].id_base + rng.randint(0, main_rows - 1),
        kills=rng.randint(1, 2),
        delay_s=round(rng.uniform(0.0, 0.3), 3),
        fraction=round(rng.uniform(0.1, 0.6), 2),
    )
    # drawn last, so the cases of seeds reported before these draws stay the same
    if rng.random() < 0.2:
        execution.workers = rng.randint(1, min(2, parallelism, execution.restore_parallelism))
    per_record = any(op.kind in ("pmap", "pfilter") for op in ops)
    if per_record and not execution.workers and rng.random() < 0.3:
        execution.python_workers = 1
    if stage.kind == "ijoin":
        _other_join(rng, stage, sources, execution)
    case = Case(seed, sources, sources[0].name, union, ops, stage, chosen, execution, fault)
    widen(rng, case, scale)
    widen_functions(rng, case)
    aggs.widen(rng, case)
    widen_sql(rng, case, scale)
    if case.stage.kind == "fn" and rng.random() < 0.6:
        fnmore.widen(rng, case.stage.exprs)
    if case.stage.kind == "fn" and fnmore.ansi_safe(case.stage.exprs) and rng.random() < 0.3:
        execution.ansi = True
    if case.stage.kind == "ujoin" and rng.random() < 0.4:
        case.stage.ttl_ms = span_ms // rng.choice([2, 4, 8])  # the DSL join's state_ttl
    ansi.widen(rng, case)
    sqlgen.widen(rng, case)
    for op in case.ops:
        if op.kind == "explode" and rng.random() < 0.4:
            op.b = rng.choice([2, 3])  # posexplode (render.py)
    sparksink.widen(rng, case)
    s3.widen(rng, case)
    deltaopts.widen(rng, case)
    pyops.widen(rng, case, late_schema_ok=not {"spark", "delta2w"} & set(case.sinks))
    chained.widen(rng, case)
    loops.widen(rng, case)
    bcast.widen(rng, case)
    widen_window_results(rng, case, scale)
    if state.eligible(case) and rng.random() < 0.5:
        case.read_state = True  # read back after the run (state.py)
    main = case.source(case.main)
    if case.stage.kind == "session" and main.late_keys and main.late_rows and rng.random() < 0.5:
        # a candidate may join an open session of the DSL's (late_session.py)
        late_session.share_keys(case)
    fnextra.widen(rng, case)
    widen_newest(rng, case, scale)
    return case


LAST_DRAWS = (overs, wtime, floordiv, nanvl, fnaggs, late_burst, overframes)
"""The newest draws' modules, in the order they are drawn (each ``widen(rng,
case)``); a new one goes at the end. A test that a draw comes after every
older one undoes the draws after it on both sides (tests/chaos/hand.py)."""


def widen_newest(rng: random.Random, case: Case, scale: float = 1.0) -> None:
    """The draws added after ``fnextra``'s, in the order they were added:
    the last ones are over windows (overs.py), Spark's ``window_time``
    (wtime.py), Spark's ``floor(a / b)`` of integers (floordiv.py),
    ``nanvl`` (nanvl.py), aggregates of functions' outputs (fnaggs.py),
    bursts of late rows of one key before session windows (late_burst.py)
    and the newer frames of over windows (overframes.py)."""
    widen_sql_late(rng, case, scale)
    widen_last(rng, case)
    for module in LAST_DRAWS:
        module.widen(rng, case)


def widen_sql_late(rng: random.Random, case: Case, scale: float = 1.0) -> None:
    """Drawn after every older draw (earlier seeds keep their cases): q4's
    closing groups and Spark's spelling of window results (sqlmore.py), then
    late rows joining an ``fagg`` window's open sessions (late_session.py)."""
    sqlmore.widen(rng, case, scale)
    late_session.widen(rng, case)


def widen_last(rng: random.Random, case: Case) -> None:
    """The newest draws, after every older one (earlier seeds keep their
    cases): ``read_state`` of more operators (state_ops.py), then user
    sources (usersrc.py), processing-time timers (ptimers.py), late rows
    before the ``group_by`` spelling (late_groupby.py)."""
    state_ops.widen(rng, case, old=state.eligible(case))
    usersrc.widen(rng, case)
    ptimers.widen(rng, case)
    late_groupby.widen(rng, case)


def widen_window_results(rng: random.Random, case: Case, scale: float = 1.0) -> None:
    """SQL joins of windowed ``GROUP BY`` results (drawn after every older
    draw: earlier seeds keep their cases): Nexmark q8's shape (``wrjoin``, two
    windowed aggregates joined on their windows) and q7's (``wrijoin``, rows
    interval-joined with the max or min of their tumbling window). It takes
    the place of a select or a ``TUMBLE``/``HOP`` query only (each about one
    SQL stage in twelve), three in ten, so the other forms keep their share."""
    st = case.stage
    if st.kind != "sql" or st.form not in ("select", "tumble", "hop"):
        return
    if rng.random() >= 0.3:
        return
    form = rng.choice(["wrjoin", "wrijoin"])
    right = st.right
    case.stage = st = Stage("sql", agg=rng.choice(["sum", "count", "min", "max"]), form=form)
    if form == "wrjoin":
        st.right = right if right else _right_source(rng, case, scale)
        case.union = [n for n in case.union if n != st.right]
        st.slide_ms = rng.choice([1_000, 2_000])
        st.size_ms = st.slide_ms * rng.choice([1, 1, 2])
        st.how = rng.choice(["inner", "left", "right", "outer"])
        st.exprs = [["ragg", rng.choice(["sum", "count", "min", "max"])]]
    else:
        if right and right not in case.union:
            case.sources = [s for s in case.sources if s.name != right]
        st.agg = rng.choice(["max", "min"])
        st.size_ms = rng.choice([1_000, 2_000, 10_000])
        st.exprs = [["bound", rng.choice(["end", "start"])]]
        if rng.random() < 0.5:
            st.exprs.append(["keyed"])
    # no running aggregate: no upsert sink
    case.sinks = [s for s in case.sinks if s != "upsert"] or ["parquet"]


NEW_STAGES = ["process", "coprocess", "comap", "tjoin"]


def _right_source(rng: random.Random, case: Case, scale: float) -> str:
    """The stage's second input: the current one, or a new source."""
    if case.stage.right:
        return case.stage.right
    index = 1 + max(int(s.name[1:]) for s in case.sources)
    source = _source(rng, index, scale, case.sources[0].span_ms)
    case.sources.append(source)
    return source.name


def _new_stage(rng: random.Random, case: Case, scale: float) -> None:
    """Replaces the terminal stage with a process function, connect or a
    temporal join (late candidates go: a timer or a version does not follow
    them exactly; the upsert sink goes with the running aggregate)."""
    kind = rng.choice(NEW_STAGES)
    stage = Stage(kind, size_ms=rng.choice([500, 2_000, 10_000, 60_000]))
    if kind == "process":
        if case.stage.right and case.stage.right not in case.union:
            case.sources = [s for s in case.sources if s.name != case.stage.right]
    else:
        stage.right = _right_source(rng, case, scale)
        case.union = [n for n in case.union if n != stage.right]
    if kind == "comap":
        stage.a, stage.b = rng.randint(1, 3), rng.randint(1, 3)
    if kind == "tjoin":
        stage.how = rng.choice(["inner", "left"])
        for op in case.ops:
            op.schema = True  # a join's inputs have schemas known while the graph is built
        versions = case.source(stage.right)
        # one split without jitter: a key's versions have distinct times, so
        # "the newest version at or before" is one row (ties would be arrival order)
        versions.jitter_ms, versions.files = 0, 1
        versions.rows = min(versions.rows, versions.span_ms)
    for source in case.sources:
        source.late_rows = 0
    case.sinks = [s for s in case.sinks if s != "upsert"] or ["parquet"]
    case.stage = stage


def widen(rng: random.Random, case: Case, scale: float = 1.0) -> None:
    """The features added after the first generator (drawn after all of its
    draws, so the cases of earlier seeds keep their sources and operators):
    outer interval joins, session window joins, process functions, connect,
    temporal joins, loops, ``aligned_timeout``, recompute recovery, a worker
    process SIGKILL and a corrupt newest checkpoint."""
    st = case.stage
    if st.kind == "ijoin" and rng.random() < 0.5:
        st.how = rng.choice(["left", "right", "outer"])
    if st.kind == "wjoin" and rng.random() < 0.35:
        st.gap_ms = rng.choice([200, 500, 1_000])
    if st.kind != "ujoin" and rng.random() < 0.35:
        _new_stage(rng, case, scale)
    for source in case.sources:
        pick = rng.random()
        if source.kind == "parquet" and pick < 0.25:
            # Kafka: one partition per file; each message is produced on its own
            source.kind = "kafka"
            source.rows = min(source.rows, 600)
        elif source.kind == "parquet" and pick > 0.96:
            source.kind = "spark"
    if st.kind not in ("running", "ujoin") and rng.random() < 0.1:
        case.sinks.append("kafka")
    if case.stage.kind == "sliding" and case.stage.late and rng.random() < 0.6:
        # late candidates before a sliding window: counted (docs/CHAOS.md)
        case.stage.agg = "count"
        for source in case.sources:
            if source.kind != "sequence":
                source.late_rows = rng.randint(1, 5)
    if rng.random() < 0.15:
        at = rng.randint(0, len(case.ops))
        case.ops.insert(at, Op("loop", a=rng.randint(1, 3), b=rng.randint(5, 25)))
    ex = case.execution
    if ex.unaligned and rng.random() < 0.4:
        ex.aligned_timeout_ms = rng.choice([5, 20, 100])
    loops = any(op.kind == "loop" for op in case.ops)
    # recompute refuses loops (GraphError: in-flight loop records cannot be replayed)
    # nor Kafka: a replay must read the same batches, and Kafka's depend on fetch timing
    kafka = any(s.kind == "kafka" for s in case.sources)
    if not ex.unaligned and rng.random() < 0.25 and not loops and not kafka:
        ex.recompute = True
        if case.fault.kind == "cancel":
            # a recompute restore re-injects barriers at each source subtask's
            # offsets: it refuses another source parallelism (CheckpointError)
            ex.restore_parallelism = ex.parallelism
    fault = case.fault
    main_rows = case.source(case.main).rows
    batches = max(1, main_rows // ex.batch_size)
    pick = rng.random()
    # a Spark source's JVM is a child of the job too: only workers may be killed
    spark = any(s.kind == "spark" for s in case.sources)
    if (ex.workers or ex.python_workers) and pick < 0.4 and not spark:
        fault.kind = "wkill"
    elif pick > 0.92:
        fault.kind = "corrupt"
    if fault.kind in ("wkill", "corrupt"):
        case.sinks = [s for s in case.sinks if s != "collect"] or ["parquet"]
        if not ex.sleep_s:
            ex.sleep_s = round(min(0.08, max(0.002, 3.0 * ex.parallelism / batches)), 4)
    if case.stage.kind == "session" and case.stage.late and rng.random() < 0.6:
        # late candidates before a session window, each with a key of its own
        # (docs/CHAOS.md): its session is itself, late or not
        for source in case.sources:
            if source.kind != "sequence":
                source.late_rows, source.late_keys = rng.randint(1, 5), True
    lead = next((i for i, op in enumerate(case.ops) if op.kind == "loop"), len(case.ops))
    if not case.union and rng.random() < 0.3:
        # the main source's event time assigned behind Python operators: still one
        # watermark per split (docs/DESIGN.md "Event time per split")
        case.assign_after = rng.randint(0, lead)


FAGGS = [
    "sum",
    "avg",
    "min",
    "max",
    "count_distinct",
    "first",
    "last",
    "collect_list",
    "stddev",
    "variance",
    "stddev_pop",
    "var_pop",
]


def _function_stage(rng: random.Random, case: Case) -> None:
    """Replaces the terminal stage with the function library (``fn``), ``F``
    aggregates (``fagg``) or SQL (``sql``). The second input of a join or a
    connect goes (unless a union reads it), late candidates go (these stages
    have no late output), and the upsert sink stays only before a running
    aggregate; KafkaSink only after integer outputs of windows (its rows are
    JSON, and at-least-once)."""
    kind = rng.choice(["fn", "fagg", "sql"])
    stage = Stage(kind)
    if kind == "fn":
        stage.exprs = fnlib.draw(rng)
    elif kind == "fagg":
        stage.form = rng.choice(["", "tumbling", "sliding"])
        stage.exprs = [[n] for n in rng.sample(FAGGS, rng.randint(2, 6))]
    else:
        stage.form = rng.choice(["select", "group", "tumble", "hop"])
        stage.agg = rng.choice(["sum", "count", "min", "max"])
        stage.exprs = sqlgen.draw(rng)
        if stage.form != "select":  # aggregates: a WHERE only
            stage.exprs = [e for e in stage.exprs if e[0] == "where"]
        for op in case.ops:
            op.schema = True  # a view's schema is known while the graph is built
    if stage.form in ("tumbling", "tumble"):
        stage.size_ms = rng.choice([1_000, 2_000, 10_000, 60_000])
    if stage.form in ("sliding", "hop"):
        stage.slide_ms = rng.choice([1_000, 2_000, 5_000])
        stage.size_ms = stage.slide_ms * rng.randint(1, 3)
    right = case.stage.right
    if right and right not in case.union:
        case.sources = [s for s in case.sources if s.name != right]
    for source in case.sources:
        source.late_rows, source.late_keys = 0, False
    running = stage.form in ("", "group") and kind != "fn"
    sinks = [s for s in case.sinks if s != "upsert" or running]
    if kind in ("fn", "fagg") or stage.form in ("select", "group"):
        # KafkaSink is at-least-once: after a fault a running update may come
        # twice, which the running check counts as committed twice (as for
        # the DSL's running aggregates, which never get a KafkaSink)
        sinks = [s for s in sinks if s != "kafka"]
    if running and "upsert" not in sinks and rng.random() < 0.5:
        sinks.append("upsert")
    case.sinks = sinks or ["parquet"]
    case.stage = stage


def _explode(rng: random.Random) -> Op:
    return Op("explode", a=rng.randint(1, 3), b=rng.randint(0, 1))


def widen_functions(rng: random.Random, case: Case) -> None:
    """The function library, explode, ``F`` aggregates, ``with_watermark`` and
    SQL (drawn after every older draw: the cases of earlier seeds stay)."""
    if case.stage.kind not in ("ujoin",) and rng.random() < 0.3:
        _function_stage(rng, case)
    for source in case.sources:
        source.watermark = rng.random() < 0.3
    late = any(s.late_rows for s in case.sources)
    # explode gives rows new ids: not before late candidates (known by their ids)
    if not late and rng.random() < 0.15:
        # behind the main source's event time when that is assigned in the chain
        # (explode makes several rows of one: it does not pass split progress on)
        lo = min(max(0, case.assign_after), len(case.ops))
        case.ops.insert(rng.randint(lo, len(case.ops)), _explode(rng))


SQL_FORMS = ["session", "union", "ijoin", "tjoin", "wjoin", "ujoin"]


def _sql_form(rng: random.Random, case: Case, scale: float, form: str) -> None:
    """Turns a ``sql`` stage into the SESSION table function, a ``UNION ALL``
    or a join of ``t`` with a view ``u`` of a new source (docs/API.md "SQL")."""
    st = case.stage
    st.form, st.exprs = form, []
    sinks = [s for s in case.sinks if s != "upsert"]
    if form == "session":
        st.gap_ms = rng.choice([1_000, 2_000, 5_000])
    elif form == "union":
        st.exprs = sqlgen.draw(rng)
        sinks = [s for s in sinks if s != "kafka"]  # typed values, as select's
    else:
        st.right = _right_source(rng, case, scale)
        case.union = [n for n in case.union if n != st.right]
    if form == "ijoin":
        st.how = rng.choice(["inner", "left", "right", "outer"])
        st.lower_ms = -rng.choice([0, 100, 500, 1_000])
        st.upper_ms = rng.choice([0, 100, 500, 1_000])
    if form == "tjoin":
        st.how = rng.choice(["inner", "left"])
        versions = case.source(st.right)
        # one split without jitter: "the newest version at or before" is one row
        versions.jitter_ms, versions.files = 0, 1
        versions.rows = min(versions.rows, versions.span_ms)
    if form == "wjoin":
        st.slide_ms = rng.choice([1_000, 2_000])
        st.size_ms = st.slide_ms * rng.choice([1, 2])
    if form == "ujoin":
        # every pair of a key's rows within the TTL: fewer rows keep the output small
        st.ttl_ms = case.sources[0].span_ms // rng.choice([2, 4, 8])
        st.spelling = rng.choice(["query", "view"])
        for source in case.sources:
            source.rows = min(source.rows, 300)
        ex = case.execution
        ex.batch_size = min(ex.batch_size, 30)
        if ex.sleep_s:
            ex.sleep_s = 0.08
        sinks = [s for s in sinks if s != "kafka"]
    case.sinks = sinks or ["parquet"]


def _threshold(rng: random.Random, case: Case) -> int:
    """A HAVING threshold among the group values (so some groups pass and
    some do not): one of the reference's values without the HAVING, sorted
    (DuckDB returns groups in no fixed order: the seed alone must decide)."""
    from .reference import expected

    values = sorted(expected(case)["main"].iloc[:, -1].tolist())
    return int(rng.choice(values)) if values else 1


def widen_sql(rng: random.Random, case: Case, scale: float = 1.0) -> None:
    """The SQL drawn after the first SQL stages (so earlier seeds keep their
    cases): SESSION, UNION ALL, joins, HAVING, WITH and subqueries in FROM."""
    st = case.stage
    if st.kind != "sql":
        return
    if rng.random() < 0.6:
        _sql_form(rng, case, scale, rng.choice(SQL_FORMS))
    if st.form in ("group", "tumble", "hop", "session") and rng.random() < 0.4:
        # running: only the comparison its aggregate moves towards (sqlgen.HAVING_OPS)
        op = sqlgen.HAVING_OPS[st.agg] if st.form == "group" else rng.choice(["<", ">", ">="])
        st.exprs.append(["having", op, _threshold(rng, case)])
    if st.form in ("select", "group") and rng.random() < 0.3:
        st.exprs.append(["src", rng.choice(["with", "sub"]), rng.randint(1, 3)])
