"""What one generated case is: sources, a chain of operators, a terminal stage,
sinks, the execution settings and the fault schedule. Plain data (JSON round
trip), so a case can be printed, saved, shrunk and rendered into a job script.

Every stream between operators carries the columns ``id``, ``k``, ``ts``, ``v``
(all int64): ``id`` unique per input row, ``k`` the key, ``ts`` event time in
milliseconds, ``v`` a positive value. Keeping one row shape lets any operator
follow any other and keeps the reference a few lines of pandas per operator.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any


@dataclasses.dataclass
class Source:
    """One source. ``kind``: parquet | sequence | arrow | collection.

    ``rows`` rows in ``files`` splits (Parquet files; for the in-memory kinds the
    rows form one ordered list), ids from ``id_base``; event time spans
    ``[0, span_ms)`` with each row within ``jitter_ms`` of its place, and
    ``2 * jitter_ms < bound_ms`` so no row is ever late (docs/CHAOS.md).
    ``late_rows``: each split ends with a row far ahead in event time, then
    that many rows from the first half of the span: late candidates, late or
    not depending on the other splits (only before a tumbling, sliding or
    session window with a late output, where the reference can follow
    either). ``late_keys``: each candidate has a key of its own, which no other
    row has (before a session window: docs/CHAOS.md). ``watermark``: event
    time spelled ``with_watermark("ts", "<bound> milliseconds")`` instead of
    ``assign_timestamps`` (the same operator, docs/API.md). ``late_join``
    (before a session window): the candidates are inserted among their
    split's rows instead (no far-ahead row) and share keys with the other
    rows, one candidate a key (``late_session.py``): a candidate may join an
    open session, or bridge to one that fired.
    """

    name: str
    kind: str
    rows: int
    id_base: int
    keys: int
    span_ms: int
    bound_ms: int
    jitter_ms: int
    files: int = 1
    row_groups: int = 1
    seed: int = 0
    late_rows: int = 0
    late_keys: bool = False
    watermark: bool = False
    late_join: bool = False
    variant: str = ""
    """A user source's (kind ``user``) spelling: usersrc.py."""
    late_burst: int = 0
    """With ``late_join``: each candidate comes with ``late_burst - 1`` more of
    its key right after it, up to ``late_spread_ms`` later (late_burst.py)."""
    late_spread_ms: int = 0


@dataclasses.dataclass
class Op:
    """One operator of the chain. ``kind``: nfilter (native
    ``v % a != b``), nwith (native ``v = v * a + b``), nselect (native
    ``with_columns(w=...)`` then ``select`` of the four columns), pmap
    (Python per-record ``v + a``), pfilter (Python ``v % a != b``), pbatch
    (Python ``map_batches`` ``v + a``), loop (``iterate``: a row with
    ``v < b`` is fed back with ``v + a`` until ``v >= b``), explode (native:
    each row becomes ``a`` rows, the ``j``-th with id ``4 * id + j`` and
    ``v + j``, from an array built with ``F.array`` and ``stream.explode`` when
    ``b`` is 0, with ``F.split`` of a ``concat_ws`` string and ``F.explode`` in
    ``with_columns`` when ``b`` is 1, with ``stream.posexplode`` (2) or
    ``F.posexplode`` in ``select`` (3) of an array of ``a`` copies of ``v``,
    the position giving ``j``). ``schema``: pass ``schema=`` to a
    Python map (always before a join). ``variant``: a loop's other settings
    (loops.py)."""

    kind: str
    a: int = 1
    b: int = 0
    schema: bool = True
    variant: str = ""


@dataclasses.dataclass
class Stage:
    """The terminal stage. ``kind``: none | running | tumbling | sliding |
    session | ijoin | wjoin | ujoin. ``agg``: sum | count | min | max. Windows: ``size_ms``,
    ``slide_ms``, ``gap_ms``, ``late`` (a late output, expected empty). ijoin:
    the main stream joined on ``k`` with source ``right`` within
    ``(lower_ms, upper_ms)``; wjoin: a window join on ``k`` in sliding windows
    (``size_ms``, ``slide_ms``; equal: tumbling; ``gap_ms`` > 0: session windows
    formed from both sides' rows); ujoin: an unbounded join on ``k``; ``how``:
    inner | left | right | outer (ijoin), inner | left (tjoin). tjoin: a
    temporal join of the main stream with the versions of source ``right``.
    process: a keyed ``ProcessFunction`` with value, list and map state that
    sums ``v`` per key in tumbling windows of ``size_ms`` with event-time
    timers; coprocess: the same over ``main.connect(right)`` keyed on both
    (left sum, right count per window); comap: ``main.connect(right).map``
    (``v + a`` on the main stream, ``v + b`` on the right).

    fn: the native function library (``fnlib.py``): base columns with nulls,
    a filter and the expressions ``exprs`` (``[name, *params]`` each), output
    as ``id, c0, c1, ...``. fagg: ``keyed.agg`` of ``F`` aggregates (``exprs``:
    their names; ``count("*")`` as ``n`` always) running (``form`` "") or in
    ``form`` tumbling or sliding windows. sql: ``env.sql`` over a temporary view
    of the main stream; ``form`` select (``exprs``: ``sqlgen.py`` templates),
    group (running ``GROUP BY k`` with ``agg``), tumble or hop (the windowing
    table functions with ``agg``), session (the SESSION table function, no
    WHERE), union (``UNION ALL`` of two selects), ijoin / tjoin / wjoin /
    ujoin (SQL joins of ``t`` with the view ``u`` of source ``right``; ujoin
    with ``state_ttl`` of ``ttl_ms``, ``spelling`` query or view says where);
    ``exprs`` may hold ``["having", op, c]`` and ``["src", "with" | "sub",
    a]`` (the query reads a CTE or a subquery with ``v + a``). wrjoin and
    wrijoin join windowed ``GROUP BY`` results (``sqlgen._window_results_join``;
    ``spelling`` spark: Spark's ``window`` struct, sqlmore.py); closing: Nexmark
    q4's closing groups (sqlmore.py).
    fagg also: ``form`` session (``gap_ms``),
    ``late`` (tumbling and session: a late output), ``spelling`` group_by
    (Spark's ``group_by("k", F.window(...))``) or group_by_window_first
    (``group_by(F.window(...), "k")``); ``exprs`` entries are
    ``[name, *params]`` (``approx_percentile``'s percentage).
    tumbling, sliding and session also: ``spelling`` reduce or apply (a Python
    window function, pyops.py); tumbling: ``a`` > 0 windows the results again
    in windows ``a`` times as long (chained.py)."""

    kind: str
    agg: str = "sum"
    size_ms: int = 0
    slide_ms: int = 0
    gap_ms: int = 0
    late: bool = False
    right: str = ""
    lower_ms: int = 0
    upper_ms: int = 0
    how: str = "inner"
    a: int = 0
    b: int = 0
    exprs: list[list[Any]] = dataclasses.field(default_factory=list)
    form: str = ""
    spelling: str = ""
    ttl_ms: int = 0
    wtime: bool = False
    """A column ``wt``, Spark's ``window_time`` of the window (wtime.py)."""


@dataclasses.dataclass
class Execution:
    """How the job runs: parallelism (the first run's, and after a stop the
    restore's), batch size, checkpoint settings, a per-batch sleep that makes
    faults land mid-run; ``workers`` > 0 runs it under
    ``ed.ProcessRunner(workers=...)`` (0: the default in-process runner);
    ``python_workers`` > 0 moves per-record Python operators to that many
    worker processes per subtask after a few batches (0: the default, auto);
    ``aligned_timeout_ms`` > 0 (with ``unaligned``) starts checkpoints aligned
    and switches after that long; ``recompute``: ``recovery="recompute"``;
    ``ansi``: ``StreamEnvironment(ansi=True)`` (a ``fn`` stage none of whose
    expressions may fail on the generated rows); ``s3``: checkpoints, the
    savepoint and the file sinks on an S3 API server (s3.py)."""

    parallelism: int
    restore_parallelism: int
    batch_size: int
    interval_ms: int
    unaligned: bool
    incremental: bool
    sleep_s: float
    workers: int = 0
    python_workers: int = 0
    aligned_timeout_ms: int = 0
    recompute: bool = False
    ansi: bool = False
    s3: bool = False


@dataclasses.dataclass
class Fault:
    """The fault schedule. ``kind``: none | exception (``FailOnce`` at id
    ``at`` once a checkpoint exists, a restart strategy recovers) | sigkill
    (``kills`` SIGKILLs of the job process, each ``delay_s`` after a new
    checkpoint, then restarts with ``restore_from="latest"``) | savepoint
    (``stop_with_savepoint`` once ``fraction`` of the input is read, restore at
    ``restore_parallelism``) | cancel (``cancel`` after one more checkpoint,
    restore ``"latest"`` at ``restore_parallelism``) | wkill (SIGKILL of a
    worker process of ``ed.ProcessRunner`` ``delay_s`` after a new checkpoint;
    the restart strategy recovers inside the run) | corrupt (a SIGKILL after a
    second checkpoint, then the newest checkpoint's largest file is damaged
    before the run with ``restore_from="latest"``: docs/DESIGN.md
    "Checkpoints" allows a fallback only where it commits nothing twice, else
    a ``CheckpointError``)."""

    kind: str
    at: int = 0
    kills: int = 1
    delay_s: float = 0.0
    fraction: float = 0.3


def _op_suffix(op: Op) -> str:
    """An explode with positions (``b`` 2 or 3) or as a Python ``flat_map``
    (4) is a feature of its own."""
    if op.kind == "loop" and op.variant:
        return f":{op.variant}"
    if op.kind != "explode" or op.b < 2:
        return ""
    return ":flat_map" if op.b == 4 else ":pos"


@dataclasses.dataclass
class Case:
    """One generated case. ``assign_after``: -1 assigns the main source's event time
    right after it (as every other source's); ``n >= 0`` assigns it behind the slow
    Python ``map_batches`` and the first ``n`` ops (no union, no loop among them), as
    docs/DESIGN.md "Event time per split" allows. ``read_state``: after the run,
    ``ed.read_state`` reads the stage's keyed state from the final checkpoint
    (and the savepoint of a ``savepoint`` fault), checked by ``state.py``."""

    seed: int
    sources: list[Source]
    main: str
    union: list[str]
    ops: list[Op]
    stage: Stage
    sinks: list[str]
    execution: Execution
    fault: Fault
    assign_after: int = -1
    delta_options: dict[str, int] = dataclasses.field(default_factory=dict)
    """``DeltaSink`` keyword arguments of the Delta sinks (deltaopts.py)."""
    read_state: bool = False

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Case:
        raw: dict[str, Any] = json.loads(text)
        return Case(
            seed=raw["seed"],
            sources=[Source(**s) for s in raw["sources"]],
            main=raw["main"],
            union=list(raw["union"]),
            ops=[Op(**o) for o in raw["ops"]],
            stage=Stage(**raw["stage"]),
            sinks=list(raw["sinks"]),
            execution=Execution(**raw["execution"]),
            fault=Fault(**raw["fault"]),
            assign_after=raw.get("assign_after", -1),
            delta_options=dict(raw.get("delta_options", {})),
            read_state=raw.get("read_state", False),
        )

    def source(self, name: str) -> Source:
        return next(s for s in self.sources if s.name == name)

    def features(self) -> list[str]:
        """Names of what this case exercises, for the mix counts."""
        out = [f"source:{s.kind}" for s in self.sources]
        out += [f"source:user:{s.variant}" for s in self.sources if s.kind == "user"]
        out += [f"op:{o.kind}" + _op_suffix(o) for o in self.ops]
        stage = self.stage.kind
        if stage in ("running", "tumbling", "sliding", "session"):
            stage += f":{self.stage.agg}"
        if self.stage.kind in ("tumbling", "sliding", "session") and self.stage.spelling:
            stage += f":{self.stage.spelling}"  # a Python reduce or apply (pyops.py)
        if self.stage.kind == "tumbling" and self.stage.a:
            stage += ":chained"  # windowed again (chained.py)
        if stage == "fagg":
            stage += f":{self.stage.form or 'running'}"
            if self.stage.spelling:
                stage += ":group_by"
        if stage == "sql":
            stage += f":{self.stage.form}"
            if self.stage.form in ("group", "tumble", "hop", "session"):
                stage += f":{self.stage.agg}"
            elif self.stage.form in ("ijoin", "tjoin", "wrjoin") and self.stage.how != "inner":
                stage += f":{self.stage.how}"
            elif self.stage.form == "ujoin":
                stage += f":ttl_{self.stage.spelling}"
        if stage == "wjoin" and self.stage.gap_ms:
            stage += ":session"
        if stage == "ujoin" and self.stage.ttl_ms:
            stage += ":ttl"
        if stage in ("ijoin", "tjoin") and self.stage.how != "inner":
            stage += f":{self.stage.how}"
        if self.stage.kind in ("process", "coprocess") and self.stage.spelling:
            stage += f":{self.stage.spelling}"  # processing-time timers (ptimers.py)
        if self.stage.kind == "tjoin" and self.stage.spelling:
            stage += f":{self.stage.spelling}"  # broadcast state (bcast.py)
        if self.stage.late:
            stage += ":late"
        out.append(f"stage:{stage}")
        if self.stage.kind == "fn":
            out += sorted({f"fn:{e[0]}" for e in self.stage.exprs})
        if self.stage.kind == "fagg":
            out += [f"fagg:{e[0]}" for e in self.stage.exprs]
        if self.stage.kind == "sql":
            names = ("having", "src", "aggs", "gexpr", "regroup", "floordiv", "fnaggs")
            out += [f"sql:{e[0]}" for e in self.stage.exprs if e[0] in names]
            if self.stage.spelling == "spark":
                out.append("sql:window()")
            from .sqlmore import features

            out += features(self.stage)  # closing groups, Spark's window results
        from .overs import features as over_features
        from .wtime import features as wtime_features

        out += over_features(self.stage) + wtime_features(self.stage)
        if any(s.watermark for s in self.sources):
            out.append("with_watermark")
        if self.union:
            out.append("union")
        if self.assign_after >= 0:
            out.append("assign:after_python")
        out += [f"sink:{s}" for s in self.sinks]
        out += [f"delta:{option}" for option in sorted(self.delta_options)]
        ex = self.execution
        out.append(f"p:{ex.parallelism}")
        out.append(f"runner:process{ex.workers}" if ex.workers else "runner:threads")
        if ex.python_workers:
            out.append(f"python_workers:{ex.python_workers}")
        if self.fault.kind in ("savepoint", "cancel"):
            out.append(f"rescale:{ex.parallelism}->{ex.restore_parallelism}")
        out.append("checkpoint:" + ("unaligned" if ex.unaligned else "aligned"))
        if ex.aligned_timeout_ms:
            out.append("checkpoint:aligned_timeout")
        if ex.recompute:
            out.append("checkpoint:recompute")
        if ex.ansi:
            out.append("ansi")
        if any(s.late_rows for s in self.sources):
            out.append("late_rows")
        if any(s.late_rows for s in self.sources) and self.stage.spelling.startswith("group_by"):
            out.append("late_rows:dropped")  # no late output (late_groupby.py)
        if any(s.late_rows and s.late_join for s in self.sources):
            out.append("late_rows:session_join")
        if any(s.late_rows and s.late_join and s.late_burst > 1 for s in self.sources):
            out.append("late_rows:session_burst")
        if ex.incremental:
            out.append("checkpoint:incremental")
        if ex.s3:
            out.append("storage:s3")
        out.append(f"fault:{self.fault.kind}")
        if self.read_state:
            out.append("read_state" + (":savepoint" * (self.fault.kind == "savepoint")))
        return out
