"""Nexmark queries on eddyline, each paired with the same query in DuckDB SQL.

The queries follow the nexmark-flink project's SQL (``queries/q*.sql``) over
the tables of :mod:`generator` (columns ``snake_case``: ``date_time``, not
``dateTime``):

- ``q0`` passthrough: every bid's ``auction, bidder, price, date_time, extra``;
- ``q1`` currency conversion: the same with ``price * 908 // 1000`` (dollars to
  euros in integer arithmetic; nexmark-flink multiplies by the decimal 0.908);
- ``q2`` selection: ``auction, price`` of the bids with ``auction % 123 == 0``;
- ``q3`` local item suggestion: ``name, city, state, id`` of the persons
  in OR, ID or CA joined with their auctions in category 10
  (``auction.seller = person.id``): an unbounded inner equi-join;
- ``q4`` average price for a category: per category, the average of the
  closing prices (the largest bid between an auction's ``date_time`` and its
  ``expires``, both included) of its auctions that had a bid: ``category,
  avg``. The stream is the running average, one row per closed auction;
  :func:`final` keeps each category's last one (its ``num`` counts every closed
  auction), the row the SQL computes;
- ``q5`` hot items: per sliding window of 10 s every 2 s (epoch-aligned, on
  the bids' event time), the auction(s) with the most bids (ties all kept):
  ``auction, num, window_start, window_end``. nexmark-flink's SQL outputs
  ``auction, num`` only; the window bounds are kept here so that the rows can
  be compared exactly;
- ``q6`` average selling price by seller: for each closed auction (q4's), the
  average closing price of its seller's last 10 closed auctions, this one included,
  in the order they closed (``expires``, then ``id``): ``seller, avg``, one row per
  closed auction (an event-time over window, ``keyed.over_rows``);
- ``q7`` highest bid: the bids whose price is the largest of their tumbling
  10 s window: ``auction, price, bidder, date_time, extra``. As in
  nexmark-flink, a window's max is timed at its ``TUMBLE_ROWTIME`` (the
  window's last millisecond, ``window_end - 1 ms``) and a bid matches when its
  time is in ``[rowtime - 10 s, rowtime]`` (inclusive): a bid at the last
  millisecond of a window also matches the next window's max when its price
  equals it (then it is output twice);
- ``q11`` user sessions: per bidder and session window of gap 10 s, the number
  of bids: ``bidder, bid_count, starttime, endtime`` (``starttime`` the
  session's first bid, ``endtime`` its last bid + 10 s). Bids exactly 10 s
  apart are in two sessions here (eddyline's :class:`eddyline.Session`); Flink's
  session windows merge windows that only touch, so they put them in one.

q5 is faithful (the auctions of the largest count per window, ties
included) but built differently from the SQL (which takes the max per
window and joins it back): a native sliding-window count per auction; a
vectorised ``map_batches`` combiner that drops, within each batch, the rows
below their window's largest count in that batch; then, with the window start
as a new event time, one 2 s tumbling window per sliding window (keyed by its
start) whose Python ``apply`` function keeps the rows of the largest count.

q7 takes the windowed max on a constant key (one subtask, as Flink's global
window aggregate), then interval-joins the bids with the maxes on the price.
q3 and q11 are the native join and session window as they are; q8 counts the
auctions per seller and tumbling window, then window-joins them with the persons.

q4 closes auctions in event time, as Nexmark's original (Beam)
``WinningBids``: an interval join of each auction with the bids in its time
(bounded by the generator's longest auction), a native running max per
auction, and a Python process function that emits the max once the watermark
passes the auction's ``expires``: no bid can change it then. Flink's SQL
instead updates (retracts) its averages as later bids raise a max; the final
rows are the same.

q6 closes the auctions as q4 does, keeping ``expires``, times them by it (each
subtask closes its auctions in ``expires`` order) and averages each seller's last
10 with the native over window.

The other Nexmark queries are not here yet: q9 ranks the bids of each
auction (a top-1 with every column of the winning bid), q10 writes files per
time partition, q12 needs processing-time windows.

Every ``qN(sources, parallelism)`` runs the query with eddyline and returns the
collected rows as a ``pyarrow.Table``; ``duckdb_query(name, sources)`` runs the SQL;
:func:`compare` checks the two as multisets of rows. ``sources`` maps the table
names (``"person"``, ``"auction"``, ``"bid"``) to ``pyarrow`` tables or Parquet
paths; a lone table or path is the ``bid`` table. :data:`TABLES` names the tables
each query reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from generator import DEFAULT_EVENTS_PER_SECOND, max_auction_duration_ms

import eddyline as ed
import eddyline.functions as F

__all__ = [
    "QUERIES",
    "SQL",
    "TABLES",
    "build",
    "build_q0",
    "build_q1",
    "build_q2",
    "build_q3",
    "build_q4",
    "build_q5",
    "build_q6",
    "build_q7",
    "build_q8",
    "build_q11",
    "compare",
    "duckdb_query",
    "final",
    "inputs",
    "q0",
    "q1",
    "q2",
    "q3",
    "q4",
    "q5",
    "q6",
    "q7",
    "q8",
    "q11",
    "run_query",
]

Source: TypeAlias = pa.Table | str
"""One input table: a ``pyarrow.Table``, or the path of its Parquet file."""
Sources: TypeAlias = Source | Mapping[str, Source]
"""A query's inputs by table name (``"person"``, ``"auction"``, ``"bid"``); a lone
:data:`Source` is the ``bid`` table."""

Q5_SIZE = "10s"
Q5_SLIDE = "2s"
Q3_STATES = ("OR", "ID", "CA")
Q3_CATEGORY = 10
Q7_SIZE_MS = 10_000
Q8_SIZE_MS = 10_000
Q11_GAP = "10s"
_TS = pa.timestamp("ms")

# ---- the queries as eddyline streams -------------------------------------------------------


def build_q0(bids: ed.DataStream) -> ed.DataStream:
    """q0 passthrough: ``SELECT auction, bidder, price, date_time, extra FROM bid``."""
    return bids.select("auction", "bidder", "price", "date_time", "extra")


def build_q1(bids: ed.DataStream) -> ed.DataStream:
    """q1 currency conversion: the price in euros, ``price * 908 // 1000``."""
    return bids.select(
        "auction",
        "bidder",
        (ed.col("price") * 908 // 1000).alias("price"),
        "date_time",
        "extra",
    )


def build_q2(bids: ed.DataStream) -> ed.DataStream:
    """q2 selection: ``SELECT auction, price FROM bid WHERE auction % 123 = 0``."""
    return bids.filter(ed.col("auction") % 123 == 0).select("auction", "price")


Q5_SCHEMA = pa.schema(
    [
        ("starttime", _TS),
        ("window_start", _TS),
        ("window_end", _TS),
        ("auction", pa.int64()),
        ("num", pa.int64()),
        ("endtime", _TS),
    ]
)
"""The second stage's output: the key (``starttime``), its 2 s window, then the fields."""


def _hottest(key: Any, window: ed.TimeWindow, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of one sliding window with the largest bid count (all of them on a tie)."""
    top = max(row["num"] for row in rows)
    return [
        {"auction": row["auction"], "num": row["num"], "endtime": row["endtime"]}
        for row in rows
        if row["num"] == top
    ]


def _batch_top(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Keeps the rows whose count is the largest of their window within this batch.

    A combiner: a count below its window's largest in one batch is below the
    window's overall largest, so dropping it changes no result.
    """
    if batch.num_rows == 0:
        return batch
    start = batch.column("starttime").cast(pa.int64()).to_numpy()
    num = batch.column("num").to_numpy()
    windows, index = np.unique(start, return_inverse=True)
    top = np.zeros(len(windows), dtype=num.dtype)
    np.maximum.at(top, index, num)
    return batch.filter(pa.array(num == top[index]))


def build_q5(bids: ed.DataStream) -> ed.DataStream:
    """q5 hot items: per sliding window (10 s, every 2 s) the auction(s) with the most bids."""
    counts = (
        bids.select("auction", "date_time")
        .assign_timestamps("date_time")
        .key_by("auction")
        .window(ed.Sliding(Q5_SIZE, Q5_SLIDE))
        .count()
        .name("q5_bids_per_auction")
    )
    # One row per (auction, sliding window), emitted in window order by each subtask once
    # the watermark passes the window's end. Their window start is the event time of the
    # second stage: a 2 s tumbling window holds exactly one sliding window's rows. The bound
    # only adds slack (each window subtask emits its windows in order).
    per_window = counts.select(
        "auction",
        ed.col("count").alias("num"),
        ed.col("window_start").alias("starttime"),
        ed.col("window_end").alias("endtime"),
    )
    per_window = per_window.map_batches(_batch_top, schema=per_window.schema).name("q5_batch_top")
    per_window = per_window.assign_timestamps("starttime", max_out_of_orderness=Q5_SIZE)
    hottest = (
        per_window.key_by("starttime")
        .window(ed.Tumbling(Q5_SLIDE))
        .apply(_hottest, schema=Q5_SCHEMA)
        .name("q5_max_per_window")
    )
    return hottest.select(
        "auction",
        "num",
        ed.col("starttime").alias("window_start"),
        ed.col("endtime").alias("window_end"),
    )


def build_q3(auctions: ed.DataStream, persons: ed.DataStream) -> ed.DataStream:
    """q3 local item suggestion: the sellers in OR, ID or CA of the auctions in category 10.

    An unbounded inner join (every person and auction kept: an auction may
    come before its seller, whose id may run ahead of the last person's).
    """
    in_states = ed.col("state") == Q3_STATES[0]
    for state in Q3_STATES[1:]:
        in_states = in_states | (ed.col("state") == state)
    sellers = persons.filter(in_states).select("id", "name", "city", "state")
    items = auctions.filter(ed.col("category") == Q3_CATEGORY).select("id", "seller")
    # output: seller (the key, left's name), id (the auction's), then name, city, state
    joined = items.join(sellers, left_on="seller", right_on="id").name("q3_join")
    return joined.select("name", "city", "state", "id")


def build_q7(bids: ed.DataStream) -> ed.DataStream:
    """q7 highest bid: the bids priced at their tumbling 10 s window's max (ties all kept)."""
    # only the columns the query outputs: the join keeps its bids for 10 s of event time
    timed = bids.select("auction", "bidder", "price", "date_time", "extra")
    timed = timed.assign_timestamps("date_time")
    maxes = (
        timed.select(ed.lit(0).alias("all"), "price", "date_time")
        .key_by("all")
        .window(ed.Tumbling(f"{Q7_SIZE_MS}ms"))
        .max("price")
        .name("q7_max_per_window")
        .set_parallelism(1)
        .select(ed.col("price").alias("maxprice"), "window_end")
        .set_parallelism(1)
        .assign_timestamps("window_end")
        .set_parallelism(1)
    )
    # The maxes run at parallelism 1: their assign_timestamps makes the watermark from the
    # rows it sees, so a subtask that sees none (all but the one of the constant key) would
    # hold the join's watermark back to the end, and the join would keep every bid.
    # The SQL's condition rowtime - 10 s <= bid.t <= rowtime with rowtime = window_end - 1 ms
    # is window_end in [bid.t + 1 ms, bid.t + 10 s + 1 ms]: an interval join on the maxes'
    # window_end. A window's max row comes when the watermark passes its end; until then
    # the join's watermark (the smaller of its inputs') keeps the bids it can match.
    joined = timed.join(
        maxes,
        left_on="price",
        right_on="maxprice",
        within=("1ms", f"{Q7_SIZE_MS + 1}ms"),
    ).name("q7_join")
    return joined.select("auction", "price", "bidder", "date_time", "extra")


def build_q8(persons: ed.DataStream, auctions: ed.DataStream) -> ed.DataStream:
    """q8 monitor new users: the persons who opened an auction in the tumbling 10 s
    window in which they registered (id, name, and the window's start).

    The auctions are first counted per seller and window (one row per seller and
    window, as the SQL's GROUP BY), timed at their window's start, then window-joined
    with the persons: one row per person and window.
    """
    window = ed.Tumbling(f"{Q8_SIZE_MS}ms")
    sellers = (
        auctions.select("seller", "date_time")
        .assign_timestamps("date_time")
        .key_by("seller")
        .window(window)
        .count()
        .name("q8_sellers")
        .select("seller", ed.col("window_start").alias("t"))
        .assign_timestamps("t")
    )
    people = persons.select("id", "name", "date_time").assign_timestamps("date_time")
    joined = people.window_join(sellers, left_on="id", right_on="seller", window=window)
    return joined.name("q8_join").select("id", "name", ed.col("window_start").alias("starttime"))


def build_q11(bids: ed.DataStream) -> ed.DataStream:
    """q11 user sessions: the bids per bidder and session window (gap 10 s)."""
    sessions = (
        bids.select("bidder", "date_time")
        .assign_timestamps("date_time")
        .key_by("bidder")
        .window(ed.Session(Q11_GAP))
        .count()
        .name("q11_sessions")
    )
    return sessions.select(
        "bidder",
        ed.col("count").alias("bid_count"),
        ed.col("window_start").alias("starttime"),
        ed.col("window_end").alias("endtime"),
    )


# ---- q4: auctions closed in event time -------------------------------------------------

WINNING_SCHEMA = pa.schema(
    [("id", pa.int64()), ("category", pa.int64()), ("seller", pa.int64()), ("final", pa.int64())]
)
"""A closed auction (with a bid): its id, category, seller and closing price."""


def _expiry_ms(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The running maxes with ``expires`` as int64 ms (cheaper per row in Python)."""
    index = batch.schema.get_field_index("expires")
    column = batch.column(index).cast(pa.int64())
    return batch.set_column(index, pa.field("expires", pa.int64()), column)


class _CloseAuction(ed.ProcessFunction):
    """Keeps an auction's largest bid and its ``fields``; emits them and the bid as
    ``final`` when the watermark passes ``expires`` (timers fire in time order, so
    each subtask emits its closed auctions in ``expires`` order)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = fields

    def process_element(self, row: dict[str, Any], ctx: ed.ProcessContext) -> None:
        state = ctx.state
        held = state.value()
        if held is None:
            ctx.timer_service.register_event_time_timer(row["expires"])
            state.update((*(row[f] for f in self.fields), row["price"]))
        elif row["price"] > held[-1]:
            state.update((*held[:-1], row["price"]))

    def on_timer(self, timestamp: int, ctx: ed.ProcessContext) -> list[dict[str, Any]]:
        *kept, price = ctx.state.value()
        ctx.state.clear()
        return [{"id": ctx.key, **dict(zip(self.fields, kept, strict=True)), "final": price}]


def closed_auctions(
    auctions: ed.DataStream,
    bids: ed.DataStream,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
    *,
    query: str = "q4",
    fields: tuple[str, ...] = ("category", "seller"),
    schema: pa.Schema = WINNING_SCHEMA,
) -> ed.DataStream:
    """Every auction with a bid in its time, with its id, its ``fields`` (``expires``
    as int64 ms) and its closing price ``final`` (as ``schema``), once it closed; the
    operators named after ``query``."""
    longest = max_auction_duration_ms(events_per_second)
    carried = [f for f in fields if f != "expires"]
    items = auctions.select("id", *carried, "date_time", "expires")
    items = items.assign_timestamps("date_time")
    offers = bids.select("auction", "price", ed.col("date_time").alias("bid_time"))
    offers = offers.assign_timestamps("bid_time")
    # bid_time in [date_time, date_time + longest]; expires bounds it further
    joined = items.join(
        offers, left_on="id", right_on="auction", within=("0ms", f"{longest}ms")
    ).name(f"{query}_auction_bids")
    valid = joined.filter(ed.col("bid_time") <= ed.col("expires"))
    # one row per auction and input batch: the Python function sees few rows
    maxes = (
        valid.select("id", *carried, "expires", "price")
        .key_by(["id", *carried, "expires"])
        .max("price")
        .name(f"{query}_max_bid")
    )
    index = maxes.schema.get_field_index("expires")
    maxes = maxes.map_batches(
        _expiry_ms, schema=maxes.schema.set(index, pa.field("expires", pa.int64()))
    ).name(f"{query}_expiry_ms")
    return maxes.key_by("id").process(_CloseAuction(fields), schema=schema).name(f"{query}_close")


Q6_LAST = 10
"""q6 averages a seller's last this many closed auctions."""

CLOSED_SCHEMA = pa.schema(
    [("id", pa.int64()), ("seller", pa.int64()), ("expires", pa.int64()), ("final", pa.int64())]
)
"""A closed auction for q6: its id, seller, expires (int64 ms) and closing price."""


def build_q6(
    auctions: ed.DataStream,
    bids: ed.DataStream,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
) -> ed.DataStream:
    """q6 average selling price by seller: per closed auction, the average closing
    price of its seller's last 10 closed auctions (an event-time over window)."""
    closed = closed_auctions(
        auctions,
        bids,
        events_per_second,
        query="q6",
        fields=("seller", "expires"),
        schema=CLOSED_SCHEMA,
    )
    # closed in expires order per subtask: timed by it, nothing is late
    closed = closed.assign_timestamps("expires")
    average = F.avg("final").alias("avg")
    over = closed.key_by("seller").over_rows(average, preceding=Q6_LAST - 1, order_by="id")
    return over.name("q6_average").select("seller", "avg")


def _running_average(acc: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    return {**row, "total": acc["total"] + row["total"], "num": acc["num"] + 1}


def build_q4(
    auctions: ed.DataStream,
    bids: ed.DataStream,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
) -> ed.DataStream:
    """q4 average price for a category: the running average of its closing prices."""
    closed = closed_auctions(auctions, bids, events_per_second)
    sums = (
        closed.select("category", ed.col("final").alias("total"), ed.lit(1).alias("num"))
        .key_by("category")
        .reduce(_running_average)
        .name("q4_average")
    )
    return sums.select("category", (ed.col("total") / ed.col("num")).alias("avg"), "num")


BUILDERS: dict[str, Callable[..., ed.DataStream]] = {
    "q0": build_q0,
    "q1": build_q1,
    "q2": build_q2,
    "q3": build_q3,
    "q4": build_q4,
    "q5": build_q5,
    "q6": build_q6,
    "q7": build_q7,
    "q8": build_q8,
    "q11": build_q11,
}
"""Each query's builder: called with one stream per table of :data:`TABLES`, in order."""

TABLES: dict[str, tuple[str, ...]] = {name: ("bid",) for name in BUILDERS}
TABLES["q3"] = ("auction", "person")
TABLES["q8"] = ("person", "auction")
TABLES["q4"] = ("auction", "bid")
TABLES["q6"] = ("auction", "bid")
"""The tables each query reads, in the order its builder takes them."""


def inputs(name: str, sources: Sources) -> dict[str, Source]:
    """The tables query ``name`` reads, taken from ``sources`` (a lone table is ``bid``).

    Raises:
        KeyError: ``name`` is no query here.
        ValueError: A table the query reads is not in ``sources``.
    """
    given = dict(sources) if isinstance(sources, Mapping) else {"bid": sources}
    missing = [table for table in TABLES[name] if table not in given]
    if missing:
        raise ValueError(f"{name} reads the tables {list(TABLES[name])}; missing: {missing}")
    return {table: given[table] for table in TABLES[name]}


RATE_BOUND = frozenset({"q4", "q6"})
"""The queries whose builder takes the generator's ``events_per_second`` (it bounds
how long an auction runs)."""


def build(
    name: str,
    env: ed.StreamEnvironment,
    sources: Sources,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
) -> ed.DataStream:
    """Query ``name`` as a stream of ``env`` reading ``sources`` (generated at
    ``events_per_second``)."""
    streams = [
        env.from_parquet(source) if isinstance(source, str) else env.from_arrow(source)
        for source in inputs(name, sources).values()
    ]
    if name in RATE_BOUND:
        return BUILDERS[name](*streams, events_per_second=events_per_second)
    return BUILDERS[name](*streams)


def final(name: str, table: pa.Table) -> pa.Table:
    """The rows of query ``name`` that its SQL computes: for q4, whose stream is the
    running average per category, each category's last row (the largest ``num``),
    without ``num``; the collected rows as they are for the other queries."""
    if name != "q4":
        return table
    last = table.group_by("category").aggregate([("num", "max")])
    joined = table.join(
        last, keys=["category", "num"], right_keys=["category", "num_max"], join_type="inner"
    )
    return joined.select(["category", "avg"])


def run_query(
    name: str,
    sources: Sources,
    parallelism: int = 1,
    batch_size: int = 8192,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
) -> pa.Table:
    """Runs query ``name`` on eddyline over ``sources`` and returns its rows (:func:`final`)."""
    env = ed.StreamEnvironment(parallelism=parallelism, batch_size=batch_size)
    handle = build(name, env, sources, events_per_second).collect()
    env.execute(f"nexmark-{name}")
    return final(name, handle.to_arrow())


def _runner(name: str) -> Callable[..., pa.Table]:
    def run(
        sources: Sources,
        parallelism: int = 1,
        events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
    ) -> pa.Table:
        return run_query(name, sources, parallelism, events_per_second=events_per_second)

    run.__name__ = run.__qualname__ = name
    run.__doc__ = f"{name} on eddyline (see :func:`build_{name}`)."
    return run


q0 = _runner("q0")
q1 = _runner("q1")
q2 = _runner("q2")
q3 = _runner("q3")
q4 = _runner("q4")
q5 = _runner("q5")
q6 = _runner("q6")
q7 = _runner("q7")
q8 = _runner("q8")
q11 = _runner("q11")

QUERIES: dict[str, Callable[..., pa.Table]] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q6": q6,
    "q7": q7,
    "q8": q8,
    "q11": q11,
}

# ---- the same queries in DuckDB SQL --------------------------------------------------------

SQL: dict[str, str] = {
    "q0": "SELECT auction, bidder, price, date_time, extra FROM bid",
    "q1": """
        SELECT auction, bidder, price * 908 // 1000 AS price, date_time, extra FROM bid
    """,
    "q2": "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    # HOP(size 10 s, slide 2 s): a bid at t ms is in the 5 windows starting at
    # t - t % 2000 - i * 2000 for i in 0..4.
    "q5": """
        WITH hops AS (
            SELECT auction, epoch_ms(date_time::TIMESTAMP) AS t FROM bid
        ),
        counts AS (
            SELECT auction, t - t % 2000 - i * 2000 AS ws, count(*) AS num
            FROM hops, range(0, 5) AS r(i)
            GROUP BY ALL
        ),
        maxes AS (
            SELECT ws, max(num) AS maxn FROM counts GROUP BY ws
        )
        SELECT c.auction, c.num,
               epoch_ms(c.ws)::TIMESTAMP_MS AS window_start,
               epoch_ms(c.ws + 10000)::TIMESTAMP_MS AS window_end
        FROM counts AS c JOIN maxes AS m ON c.ws = m.ws AND c.num >= m.maxn
    """,
    # the closing price of an auction: its largest bid in [date_time, expires]
    "q4": """
        SELECT Q.category, avg(Q.final) AS avg
        FROM (
            SELECT A.id, A.category, max(B.price) AS final
            FROM auction AS A JOIN bid AS B ON A.id = B.auction
            WHERE B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.category
        ) AS Q
        GROUP BY Q.category
    """,
    # the average of each seller's last 10 closed auctions, in closing order (ties by id)
    "q6": """
        SELECT Q.seller,
               avg(Q.final) OVER (
                   PARTITION BY Q.seller ORDER BY Q.expires, Q.id
                   ROWS BETWEEN 9 PRECEDING AND CURRENT ROW
               ) AS avg
        FROM (
            SELECT A.id, A.seller, A.expires, max(B.price) AS final
            FROM auction AS A JOIN bid AS B ON A.id = B.auction
            WHERE B.date_time BETWEEN A.date_time AND A.expires
            GROUP BY A.id, A.seller, A.expires
        ) AS Q
    """,
    "q3": """
        SELECT P.name, P.city, P.state, A.id
        FROM auction AS A JOIN person AS P ON A.seller = P.id
        WHERE A.category = 10 AND P.state IN ('OR', 'ID', 'CA')
    """,
    # TUMBLE(10 s): the window of a bid at t ms ends at t - t % 10000 + 10000; its
    # TUMBLE_ROWTIME is that end - 1 ms.
    "q7": """
        WITH maxes AS (
            SELECT max(price) AS maxprice,
                   epoch_ms(date_time::TIMESTAMP) // 10000 * 10000 + 9999 AS rowtime
            FROM bid
            GROUP BY rowtime
        )
        SELECT B.auction, B.price, B.bidder, B.date_time, B.extra
        FROM bid AS B JOIN maxes AS M ON B.price = M.maxprice
        WHERE epoch_ms(B.date_time::TIMESTAMP) BETWEEN M.rowtime - 10000 AND M.rowtime
    """,
    "q8": """
        SELECT P.id, P.name,
               epoch_ms(epoch_ms(P.date_time::TIMESTAMP) // 10000 * 10000)::TIMESTAMP_MS
                   AS starttime
        FROM person AS P
        JOIN (
            SELECT DISTINCT seller,
                   epoch_ms(date_time::TIMESTAMP) // 10000 * 10000 AS ws
            FROM auction
        ) AS A
        ON P.id = A.seller AND epoch_ms(P.date_time::TIMESTAMP) // 10000 * 10000 = A.ws
    """,
    # SESSION(10 s): per bidder in time order, a bid 10 s or more after the previous
    # one opens a new session.
    "q11": """
        WITH times AS (
            SELECT bidder, epoch_ms(date_time::TIMESTAMP) AS t FROM bid
        ),
        opens AS (
            SELECT bidder, t,
                   CASE WHEN t - lag(t) OVER (PARTITION BY bidder ORDER BY t) < 10000
                        THEN 0 ELSE 1 END AS opens
            FROM times
        ),
        sessions AS (
            SELECT bidder, t,
                   sum(opens) OVER (
                       PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING
                   ) AS session
            FROM opens
        )
        SELECT bidder, count(*) AS bid_count,
               epoch_ms(min(t))::TIMESTAMP_MS AS starttime,
               epoch_ms(max(t) + 10000)::TIMESTAMP_MS AS endtime
        FROM sessions
        GROUP BY bidder, session
    """,
}


def duckdb_query(name: str, sources: Sources) -> pa.Table:
    """Runs query ``name`` in DuckDB over ``sources`` (tables or Parquet paths)."""
    import duckdb

    con = duckdb.connect()
    try:
        for table, source in inputs(name, sources).items():
            if isinstance(source, str):
                escaped = source.replace("'", "''")
                con.execute(f"CREATE VIEW {table} AS SELECT * FROM read_parquet('{escaped}')")
            else:
                con.register(table, source)
        return con.sql(SQL[name]).to_arrow_table()
    finally:
        con.close()


# ---- comparing results ---------------------------------------------------------------------


def _canonical(table: pa.Table) -> pa.Table:
    """Timestamps as int64 ms, integers as int64, rows sorted by every column."""
    columns = []
    for column in table.columns:
        t = column.type
        if pa.types.is_timestamp(t):
            column = pc.cast(column, _TS).cast(pa.int64())
        elif pa.types.is_integer(t):
            column = column.cast(pa.int64())
        columns.append(column)
    canonical = pa.table(columns, names=table.column_names).combine_chunks()
    return canonical.sort_by([(name, "ascending") for name in canonical.column_names])


def compare(got: pa.Table, expected: pa.Table) -> str:
    """``"ok"`` when the tables hold the same rows (any order, same column names), else
    ``"MISMATCH ..."`` saying how they differ."""
    if got.column_names != expected.column_names:
        return f"MISMATCH columns {got.column_names} != {expected.column_names}"
    if got.num_rows != expected.num_rows:
        return f"MISMATCH rows {got.num_rows} != {expected.num_rows}"
    a, b = _canonical(got), _canonical(expected)
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        if not x.equals(y):
            differs = pc.invert(pc.fill_null(pc.equal(x, y), False))
            first = pc.index(differs, True).as_py()
            return (
                f"MISMATCH column {name!r} at sorted row {first}: "
                f"{a.slice(first, 1).to_pylist()} != {b.slice(first, 1).to_pylist()}"
            )
    return "ok"
