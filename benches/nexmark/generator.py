"""A vectorised, seeded generator of the Nexmark event model (persons, auctions, bids).

The rules follow the reference generator of the nexmark-flink project
(``GeneratorConfig``, ``NexmarkGenerator``, ``PersonGenerator``,
``AuctionGenerator``, ``BidGenerator``, ``PriceGenerator``,
``StringsGenerator``), itself derived from Apache Beam's Nexmark suite, with
its default configuration:

- events are numbered ``0 .. n-1``; event ``e`` is a person when ``e % 50 == 0``,
  an auction when ``e % 50`` is 1, 2 or 3, else a bid (the 1:3:46 proportion);
- person and auction ids start at 1000 and count up in event order;
- event time is ``BASE_TIME_MS + e * 1000 // events_per_second`` (the
  reference's constant inter-event delay, 100 us at its default 10,000
  events/s), so it never decreases with the event number;
- a bid is for the hot auction (the first of the latest batch of 100
  auctions) with probability 1 - 1/2 (``hotAuctionRatio``), else for one of
  the last 100 auctions in flight or up to 10 ids ahead; its bidder is the hot
  bidder (the second person of the latest batch of 100) with probability
  1 - 1/4 (``hotBiddersRatio``), else one of the last 1,000 active persons or
  up to 10 ahead; an auction's seller is the hot seller (first person of the
  latest batch of 100) with probability 1 - 1/4 (``hotSellersRatio``);
- prices are ``round(10 ** (u * 6) * 100)`` cents for a uniform ``u``
  (``PriceGenerator``); an auction's reserve is its initial bid plus another
  price; its ``expires`` is its time plus ``1 + uniform[0, 2 * horizon)`` ms,
  where the horizon is the event time 100 auctions (1,666 events) later;
  its category is one of 10..14;
- person names, cities and states come from the reference's small lists;
  e-mail addresses, item names and descriptions are random lower-case
  strings with occasional blanks (trimmed), as in ``StringsGenerator``;
  credit cards are four blank-separated groups of four digits;
- a bid's channel is one of four hot channels (with their fixed URLs) with
  probability 1/2, else one of 10,000 ``channel-N`` entries, each with a URL
  ``https://www.nexmark.com/xxx/xxx/xxx/item.htm?query=1`` that mostly ends in
  a ``&channel_id=`` (the bit-reversed channel number).

Where this simplifies the reference:

- the random numbers come from numpy (PCG64) drawn per chunk of 1,000,000
  events, not from Java's ``SplittableRandom`` per event: the tables follow the
  same rules and distributions, not the same values; the same seed gives the
  same tables;
- ``extra`` is always the empty string (the reference pads every event to an
  average byte size: 200/500/100 bytes), which keeps memory small;
- ``date_time`` starts at a fixed epoch (``BASE_TIME_MS``, 2024-01-01 UTC)
  instead of the wall clock when the generator starts, and there is one
  generator (no split into parallel timelines), no out-of-order groups and no
  rate changes;
- the reference adds ``FIRST_PERSON_ID`` to a bid's bidder twice (so bidders
  are not person ids); here it is added once;
- the hot channels' URLs and the channel URL cache come from a fixed seed of
  their own (the reference makes them from an unseeded static random).

Usage::

    tables = generate(1_000_000, seed=42)
    write_parquet(tables, "/tmp/nexmark")
    python benches/nexmark/generator.py --events 10M --out /tmp/nexmark
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = [
    "AUCTION_SCHEMA",
    "BASE_TIME_MS",
    "BID_SCHEMA",
    "PERSON_SCHEMA",
    "generate",
    "generate_to_parquet",
    "max_auction_duration_ms",
    "parse_count",
    "write_parquet",
]

# ---- the reference's configuration (defaults) ----------------------------------------------

PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5

HOT_AUCTION_RATIO = 2  # P(bid on the hot auction) = 1 - 1/2
HOT_BIDDERS_RATIO = 4  # P(bid by the hot bidder) = 1 - 1/4
HOT_SELLERS_RATIO = 4  # P(auction by the hot seller) = 1 - 1/4
HOT_BATCH = 100  # hot ids are the first (second for bidders) of the latest batch of 100
NUM_IN_FLIGHT_AUCTIONS = 100
NUM_ACTIVE_PEOPLE = 1000
ID_LEAD = 10  # random ids may run this far ahead of the last generated one

HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
HOT_CHANNELS_RATIO = 2  # P(hot channel) = 1 - 1/2
NUM_CHANNELS = 10_000

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = [
    "Phoenix",
    "Los Angeles",
    "San Francisco",
    "Boise",
    "Portland",
    "Bend",
    "Redmond",
    "Seattle",
    "Kent",
    "Cheyenne",
]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah"]
FIRST_NAMES += ["Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones"]
LAST_NAMES += ["Noris"]

BASE_TIME_MS = 1_704_067_200_000
"""Event time of event 0: 2024-01-01T00:00:00Z, in ms since the epoch."""

DEFAULT_EVENTS_PER_SECOND = 10_000
CHUNK_EVENTS = 1_000_000
"""Events generated per chunk (a multiple of 50); each chunk has its own random stream."""

_CHANNEL_SEED = 20_240_101

_TS = pa.timestamp("ms")
PERSON_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("email_address", pa.string()),
        ("credit_card", pa.string()),
        ("city", pa.string()),
        ("state", pa.string()),
        ("date_time", _TS),
        ("extra", pa.string()),
    ]
)
AUCTION_SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("item_name", pa.string()),
        ("description", pa.string()),
        ("initial_bid", pa.int64()),
        ("reserve", pa.int64()),
        ("date_time", _TS),
        ("expires", _TS),
        ("seller", pa.int64()),
        ("category", pa.int64()),
        ("extra", pa.string()),
    ]
)
BID_SCHEMA = pa.schema(
    [
        ("auction", pa.int64()),
        ("bidder", pa.int64()),
        ("price", pa.int64()),
        ("channel", pa.string()),
        ("url", pa.string()),
        ("date_time", _TS),
        ("extra", pa.string()),
    ]
)
SCHEMAS = {"person": PERSON_SCHEMA, "auction": AUCTION_SCHEMA, "bid": BID_SCHEMA}


# ---- helpers -------------------------------------------------------------------------------


def parse_count(text: str | int) -> int:
    """``"10M"``, ``"1m"``, ``"100k"``, ``"2_000"`` or an int, as an int.

    >>> parse_count("10M"), parse_count("100k"), parse_count("20000")
    (10000000, 100000, 20000)
    """
    if isinstance(text, int):
        return text
    s = text.strip().replace("_", "").lower()
    scale = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000, "b": 1_000_000_000}.get(s[-1:], 1)
    if scale != 1:
        s = s[:-1]
    value = float(s) * scale
    if value < 0 or value != int(value):
        raise ValueError(f"not a count of events: {text!r}")
    return int(value)


def max_auction_duration_ms(events_per_second: int) -> int:
    """An upper bound of every auction's ``expires - date_time`` (ms) at this rate:
    ``1 + uniform[0, 2 * horizon)`` with the horizon at most 1,666 events' time."""
    events_ahead = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
    return 2 * -(-events_ahead * 1000 // events_per_second) + 1


def event_time_ms(event: np.ndarray, events_per_second: int) -> np.ndarray:
    """Event time (ms since the epoch) of the events numbered ``event``."""
    return BASE_TIME_MS + event * 1000 // events_per_second


def _last_person(event: np.ndarray) -> np.ndarray:
    """The last person id (base 0) generated at or before ``event``."""
    return event // TOTAL_PROPORTION  # one person opens every block of 50


def _last_auction(event: np.ndarray) -> np.ndarray:
    """The last auction id (base 0) generated at or before ``event`` (-1 before the first)."""
    block, offset = np.divmod(event, TOTAL_PROPORTION)
    in_block = np.clip(offset - PERSON_PROPORTION, -1, AUCTION_PROPORTION - 1)
    return block * AUCTION_PROPORTION + in_block


def _random_person(rng: np.random.Generator, event: np.ndarray) -> np.ndarray:
    """A person among the last ``NUM_ACTIVE_PEOPLE`` (base 0), or up to ``ID_LEAD`` ahead."""
    people = _last_person(event) + 1
    active = np.minimum(people, NUM_ACTIVE_PEOPLE)
    return people - active + rng.integers(0, active + ID_LEAD)


def _random_auction(rng: np.random.Generator, event: np.ndarray) -> np.ndarray:
    """An auction likely still in flight (base 0), or up to ``ID_LEAD`` ahead."""
    last = _last_auction(event)
    low = np.maximum(last - NUM_IN_FLIGHT_AUCTIONS, 0)
    return low + rng.integers(0, last - low + 1 + ID_LEAD)


def _prices(rng: np.random.Generator, n: int) -> np.ndarray:
    """Prices in cents: ``round(10 ** (u * 6) * 100)`` (half up, as Java's ``Math.round``)."""
    return np.floor(10.0 ** (rng.random(n) * 6.0) * 100.0 + 0.5).astype(np.int64)


def _strings(data: np.ndarray, lengths: np.ndarray) -> pa.StringArray:
    """A string array from a byte matrix (one row per string) and each row's length."""
    n, width = data.shape
    keep = np.arange(width) < lengths[:, None]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.ascontiguousarray(data[keep], dtype=np.uint8)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(flat))


def _random_strings(
    rng: np.random.Generator, n: int, max_length: int, special: str = " "
) -> pa.StringArray:
    """Random strings of 3 to ``max_length - 1`` characters: ``a``-``z``, and ``special``
    with probability 1/13 per character; blanks are trimmed at both ends."""
    width = max_length - 1
    lengths = 3 + rng.integers(0, max_length - 3, n)
    draw = rng.integers(0, 26 * 13, (n, width), dtype=np.uint16)
    chars = (ord("a") + draw // 13).astype(np.uint8)
    chars[draw % 13 == 0] = ord(special)
    out = _strings(chars, lengths)
    return pc.utf8_trim(out, " ") if special == " " else out


def _credit_cards(rng: np.random.Generator, n: int) -> pa.StringArray:
    """Four blank-separated groups of four digits (``"%04d"`` each)."""
    groups = rng.integers(0, 10_000, (n, 4))
    chars = np.full((n, 19), ord(" "), dtype=np.uint8)
    for g in range(4):
        for d in range(4):
            digit = groups[:, g] // 10 ** (3 - d) % 10
            chars[:, g * 5 + d] = ord("0") + digit
    return _strings(chars, np.full(n, 19, dtype=np.int64))


def _empty_strings(n: int) -> pa.StringArray:
    return pa.StringArray.from_buffers(
        n, pa.py_buffer(np.zeros(n + 1, dtype=np.int32)), pa.py_buffer(b"")
    )


def _join(*parts: pa.Array | str) -> pa.Array:
    """Concatenates strings element-wise (plain ``str`` parts are broadcast)."""
    return pc.binary_join_element_wise(*parts, "")


def _timestamps(ms: np.ndarray) -> pa.Array:
    return pa.array(ms.astype(np.int64), type=pa.int64()).cast(_TS)


def _bit_reverse32(values: np.ndarray) -> np.ndarray:
    """Java's ``Math.abs(Integer.reverse(i))`` (as int64, so ``abs`` does not overflow)."""
    v = values.astype(np.uint32)
    out = np.zeros_like(v)
    for bit in range(32):
        out |= ((v >> np.uint32(bit)) & np.uint32(1)) << np.uint32(31 - bit)
    return np.abs(out.view(np.int32).astype(np.int64))


def _channels() -> tuple[pa.Array, pa.Array]:
    """Channel names and URLs: the hot channels first, then ``channel-0`` .. ``channel-9999``."""
    rng = np.random.default_rng(_CHANNEL_SEED)
    n = len(HOT_CHANNELS) + NUM_CHANNELS

    def base_urls() -> pa.Array:
        parts = [_random_strings(rng, n, 5, "_") for _ in range(3)]
        return _join(
            "https://www.nexmark.com/", parts[0], "/", parts[1], "/", parts[2], "/item.htm?query=1"
        )

    urls = base_urls()
    numbers = np.arange(NUM_CHANNELS)
    with_id = rng.integers(0, 10, NUM_CHANNELS) > 0
    suffix = pa.array(
        np.where(with_id, np.char.add("&channel_id=", _bit_reverse32(numbers).astype(str)), ""),
        pa.string(),
    )
    hot = len(HOT_CHANNELS)
    cache_urls = _join(urls.slice(hot), suffix)
    all_urls = pa.concat_arrays([urls.slice(0, hot), cache_urls])
    names = pa.array(HOT_CHANNELS + [f"channel-{i}" for i in range(NUM_CHANNELS)], pa.string())
    return names, all_urls


# ---- the three kinds of events -------------------------------------------------------------


def _persons(rng: np.random.Generator, event: np.ndarray, eps: int) -> pa.RecordBatch:
    n = len(event)
    names = pa.array([f"{f} {last}" for f in FIRST_NAMES for last in LAST_NAMES], pa.string())
    name_index = rng.integers(0, len(FIRST_NAMES), n) * len(LAST_NAMES)
    name_index += rng.integers(0, len(LAST_NAMES), n)
    email = _join(_random_strings(rng, n, 7), "@", _random_strings(rng, n, 5), ".com")
    cities = pa.array(US_CITIES, pa.string()).take(rng.integers(0, len(US_CITIES), n))
    states = pa.array(US_STATES, pa.string()).take(rng.integers(0, len(US_STATES), n))
    return pa.record_batch(
        [
            pa.array(_last_person(event) + FIRST_PERSON_ID, pa.int64()),
            names.take(name_index),
            email,
            _credit_cards(rng, n),
            cities,
            states,
            _timestamps(event_time_ms(event, eps)),
            _empty_strings(n),
        ],
        schema=PERSON_SCHEMA,
    )


def _auctions(rng: np.random.Generator, event: np.ndarray, eps: int) -> pa.RecordBatch:
    n = len(event)
    hot_seller = _last_person(event) // HOT_BATCH * HOT_BATCH
    seller = np.where(
        rng.integers(0, HOT_SELLERS_RATIO, n) > 0, hot_seller, _random_person(rng, event)
    )
    category = FIRST_CATEGORY_ID + rng.integers(0, NUM_CATEGORIES, n)
    initial_bid = _prices(rng, n)
    now = event_time_ms(event, eps)
    events_ahead = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
    horizon = event_time_ms(event + events_ahead, eps) - now
    expires = now + 1 + rng.integers(0, np.maximum(horizon * 2, 1))
    item_name = _random_strings(rng, n, 20)
    description = _random_strings(rng, n, 100)
    reserve = initial_bid + _prices(rng, n)
    return pa.record_batch(
        [
            pa.array(_last_auction(event) + FIRST_AUCTION_ID, pa.int64()),
            item_name,
            description,
            pa.array(initial_bid, pa.int64()),
            pa.array(reserve, pa.int64()),
            _timestamps(now),
            _timestamps(expires),
            pa.array(seller + FIRST_PERSON_ID, pa.int64()),
            pa.array(category, pa.int64()),
            _empty_strings(n),
        ],
        schema=AUCTION_SCHEMA,
    )


def _bids(
    rng: np.random.Generator, event: np.ndarray, eps: int, channels: tuple[pa.Array, pa.Array]
) -> pa.RecordBatch:
    n = len(event)
    hot_auction = _last_auction(event) // HOT_BATCH * HOT_BATCH
    auction = np.where(
        rng.integers(0, HOT_AUCTION_RATIO, n) > 0, hot_auction, _random_auction(rng, event)
    )
    hot_bidder = _last_person(event) // HOT_BATCH * HOT_BATCH + 1
    bidder = np.where(
        rng.integers(0, HOT_BIDDERS_RATIO, n) > 0, hot_bidder, _random_person(rng, event)
    )
    price = _prices(rng, n)
    hot = rng.integers(0, HOT_CHANNELS_RATIO, n) > 0
    channel = np.where(
        hot,
        rng.integers(0, len(HOT_CHANNELS), n),
        len(HOT_CHANNELS) + rng.integers(0, NUM_CHANNELS, n),
    )
    names, urls = channels
    return pa.record_batch(
        [
            pa.array(auction + FIRST_AUCTION_ID, pa.int64()),
            pa.array(bidder + FIRST_PERSON_ID, pa.int64()),
            pa.array(price, pa.int64()),
            names.take(channel),
            urls.take(channel),
            _timestamps(event_time_ms(event, eps)),
            _empty_strings(n),
        ],
        schema=BID_SCHEMA,
    )


def iter_chunks(
    n_events: int, seed: int = 42, events_per_second: int = DEFAULT_EVENTS_PER_SECOND
) -> Iterator[dict[str, pa.RecordBatch]]:
    """The events ``0 .. n_events - 1`` as one batch per table per chunk of ``CHUNK_EVENTS``.

    Chunk ``c`` draws from ``numpy.random.default_rng([seed, c])``.
    """
    if n_events < 0:
        raise ValueError(f"n_events must be >= 0, got {n_events}")
    if events_per_second < 1:
        raise ValueError(f"events_per_second must be >= 1, got {events_per_second}")
    channels = _channels()
    for chunk, start in enumerate(range(0, n_events, CHUNK_EVENTS)):
        rng = np.random.default_rng([seed, chunk])
        event = np.arange(start, min(start + CHUNK_EVENTS, n_events), dtype=np.int64)
        offset = event % TOTAL_PROPORTION
        is_auction = (offset >= PERSON_PROPORTION) & (
            offset < PERSON_PROPORTION + AUCTION_PROPORTION
        )
        yield {
            "person": _persons(rng, event[offset < PERSON_PROPORTION], events_per_second),
            "auction": _auctions(rng, event[is_auction], events_per_second),
            "bid": _bids(
                rng,
                event[offset >= PERSON_PROPORTION + AUCTION_PROPORTION],
                events_per_second,
                channels,
            ),
        }


def generate(
    n_events: int, seed: int = 42, events_per_second: int = DEFAULT_EVENTS_PER_SECOND
) -> dict[str, pa.Table]:
    """Generates Nexmark events ``0 .. n_events - 1``.

    Returns:
        ``{"person": ..., "auction": ..., "bid": ...}``, each table in event order.
        The same arguments give the same tables.
    """
    batches: dict[str, list[pa.RecordBatch]] = {name: [] for name in SCHEMAS}
    for chunk in iter_chunks(n_events, seed, events_per_second):
        for name, batch in chunk.items():
            batches[name].append(batch)
    return {
        name: pa.Table.from_batches(batches[name], schema=schema)
        for name, schema in SCHEMAS.items()
    }


ROW_GROUP_SIZE = 131_072
"""Rows per Parquet row group: the row groups are the splits ``from_parquet`` deals to subtasks."""


def write_parquet(tables: dict[str, pa.Table], directory: str) -> dict[str, str]:
    """Writes ``person.parquet``, ``auction.parquet`` and ``bid.parquet`` into ``directory``.

    Returns:
        The path of each table's file.
    """
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for name, table in tables.items():
        path = os.path.join(directory, f"{name}.parquet")
        pq.write_table(table, path, row_group_size=ROW_GROUP_SIZE)
        paths[name] = path
    return paths


def generate_to_parquet(
    n_events: int,
    directory: str,
    seed: int = 42,
    events_per_second: int = DEFAULT_EVENTS_PER_SECOND,
) -> dict[str, str]:
    """Like ``write_parquet(generate(...), directory)``, one chunk in memory at a time."""
    os.makedirs(directory, exist_ok=True)
    paths = {name: os.path.join(directory, f"{name}.parquet") for name in SCHEMAS}
    writers = {name: pq.ParquetWriter(paths[name], SCHEMAS[name]) for name in SCHEMAS}
    try:
        for chunk in iter_chunks(n_events, seed, events_per_second):
            for name, batch in chunk.items():
                writers[name].write_table(
                    pa.Table.from_batches([batch]), row_group_size=ROW_GROUP_SIZE
                )
    finally:
        for writer in writers.values():
            writer.close()
    return paths


def main() -> None:
    ap = argparse.ArgumentParser(description="Writes Nexmark events as Parquet files.")
    ap.add_argument("--events", default="1M", help="how many events: 10M, 100k, 20000, ...")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--events-per-second", type=int, default=DEFAULT_EVENTS_PER_SECOND)
    ap.add_argument("--out", required=True, help="the directory to write the files into")
    args = ap.parse_args()
    generate_to_parquet(parse_count(args.events), args.out, args.seed, args.events_per_second)


if __name__ == "__main__":
    main()
