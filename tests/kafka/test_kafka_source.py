"""env.from_kafka against a tansu broker: exact windows at parallelism 1 and 2 (one
watermark per partition), raw messages, a partition added while running, and the
error cases (unreachable broker, missing topic, a message that does not decode)."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import eddyline as ed
from eddyline.kafka import KafkaSource
from support.faults import wait_until
from support.kafka_broker import _free_port, new_topic, produce_each

pytestmark = pytest.mark.kafka

SCHEMA = pa.schema(
    [("id", pa.int64()), ("user", pa.string()), ("amount", pa.int64()), ("ts", pa.int64())]
)
# Partition p holds every id with id % 3 == p; partitions advance through event
# time at different rates (partition 0 has half the messages of the others).
N = 600


def _events() -> list[dict[str, int | str]]:
    return [
        {"id": i, "user": f"u{i % 7}", "amount": i % 13, "ts": i * 10}
        for i in range(N)
        if not (i % 3 == 0 and i % 2 == 1)
    ]


def _feed(
    broker: str, topic: str, events: list[dict[str, int | str]]
) -> dict[tuple[str, int], int]:
    produce_each(
        broker,
        topic,
        [(int(e["id"]) % 3, str(e["user"]).encode(), json.dumps(e).encode()) for e in events],
    )
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for e in events:
        counts[(topic, int(e["id"]) % 3)] += 1
    return dict(counts)


def _window_sums(rows: list[dict[str, int | str]]) -> dict[tuple[str, int], int]:
    sums: dict[tuple[str, int], int] = defaultdict(int)
    for r in rows:
        sums[(str(r["user"]), int(r["ts"]) // 1000 * 1000)] += int(r["amount"])
    return dict(sums)


@pytest.fixture(scope="module")
def events_topic(broker: str) -> tuple[str, dict[tuple[str, int], int]]:
    topic = new_topic(broker, 3)
    return topic, _feed(broker, topic, _events())


@pytest.mark.parametrize("parallelism", [1, 2])
def test_keyed_windows_over_three_partitions_are_exact(
    broker: str, events_topic: tuple[str, dict[tuple[str, int], int]], parallelism: int
) -> None:
    topic, ends = events_topic
    env = ed.StreamEnvironment(parallelism, batch_size=16)
    events = env.from_kafka(broker, topic, schema=SCHEMA, stopping_offsets=ends)
    win = events.assign_timestamps("ts").key_by("user").window(ed.Tumbling("1s"))
    out = win.sum("amount").name("win").collect()
    result = env.execute("kafka-windows")
    table = out.to_arrow()
    got = dict(
        zip(
            zip(
                table["user"].to_pylist(),
                table["window_start"].cast(pa.int64()).to_pylist(),
                strict=True,
            ),
            table["amount"].to_pylist(),
            strict=True,
        )
    )
    assert len(got) == table.num_rows, "a window fired twice"
    # One watermark per partition: partitions read interleaved at different
    # event-time rates make no record late.
    assert result.metrics["operators"]["win"]["late_records"] == 0
    assert got == _window_sums(_events())


def test_raw_format_has_key_value_and_metadata_columns(broker: str) -> None:
    topic = new_topic(broker, 2)
    produce_each(broker, topic, [(1, b"k1", b"\x00\x01"), (0, None, b"plain"), (1, b"k2", b"")])
    env = ed.StreamEnvironment(1)
    s = env.from_kafka(
        broker, [topic], format="raw", stopping_offsets={(topic, 0): 1, (topic, 1): 2}
    )
    out = s.collect()
    env.execute()
    rows = sorted(out.to_pylist(), key=lambda r: (r["_partition"], r["_offset"]))
    assert [(r["key"], r["value"], r["_topic"], r["_partition"], r["_offset"]) for r in rows] == [
        (None, b"plain", topic, 0, 0),
        (b"k1", b"\x00\x01", topic, 1, 0),
        (b"k2", b"", topic, 1, 1),
    ]
    assert all(r["_timestamp"] is not None for r in rows)


class Revealed(KafkaSource):
    """tansu 0.6 does not implement CreatePartitions (KIP-195), so a partition is
    "added" by revealing it: splits() lists the real partitions named in a file."""

    def __init__(self, visible: Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.visible = visible

    def splits(self) -> list[tuple[str, int]]:
        shown = {int(p) for p in self.visible.read_text().split()}
        return [s for s in super().splits() if s[1] in shown]


def test_a_partition_added_while_running_is_read(broker: str, tmp_path: Path) -> None:
    topic = new_topic(broker, 3)
    produce_each(broker, topic, [(i % 2, None, _json(i)) for i in range(20)])
    visible = tmp_path / "visible"
    visible.write_text("0 1")
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="50ms"))
    source = Revealed(visible, broker, topic, schema=SCHEMA, discovery_interval="100ms")
    out = env.from_source(source).name("kafka").collect()
    client = env.execute_async("discovery")
    wait_until(lambda: _read(client) == 20, timeout=30, what="the first 20 messages")
    produce_each(broker, topic, [(2, None, _json(i)) for i in range(100, 105)])
    visible.write_text("0 1 2")  # partition 2 appears
    wait_until(lambda: _read(client) == 25, timeout=30, what="the new partition's messages")
    client.stop_with_savepoint(tmp_path / "sp", drain=True)
    client.wait(timeout=30)
    rows = out.to_pylist()
    assert sorted(r["id"] for r in rows) == list(range(20)) + list(range(100, 105))
    assert {r["_partition"] for r in rows if r["id"] >= 100} == {2}


def test_an_unreachable_broker_fails_with_a_kafka_error() -> None:
    env = ed.StreamEnvironment(1)
    env.from_kafka(f"127.0.0.1:{_free_port()}", "t", schema=SCHEMA, timeout="1s").collect()
    with pytest.raises(ed.EddylineError) as info:
        env.execute()
    assert _kafka_cause(info.value, "cannot reach the Kafka broker")


def test_a_missing_topic_fails_naming_it(broker: str) -> None:
    env = ed.StreamEnvironment(1)
    env.from_kafka(broker, "no-such-topic", schema=SCHEMA).collect()
    with pytest.raises(ed.EddylineError) as info:
        env.execute()
    assert _kafka_cause(info.value, "topic 'no-such-topic' does not exist")


def _kafka_cause(err: BaseException, text: str) -> bool:
    """The error or one of its causes is a KafkaError of operator from_kafka saying ``text``."""
    chain: BaseException | None = err
    while chain is not None:
        if isinstance(chain, ed.KafkaError):
            return text in str(chain) and chain.operator == "from_kafka"
        chain = chain.__cause__
    return text in str(err) and "from_kafka" in str(err)


def test_a_message_that_does_not_decode_is_named_or_skipped(
    broker: str, capfd: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(broker, 1)
    good = {"id": 1, "user": "a", "amount": 2, "ts": 3}
    bad = {"id": 2, "user": "a", "amount": "lots", "ts": 4}
    produce_each(
        broker,
        topic,
        [
            (0, None, json.dumps(good).encode()),
            (0, None, json.dumps(bad).encode()),
            (0, None, b"{not json"),
            (0, None, json.dumps(good | {"id": 3}).encode()),
        ],
    )
    stop = {(topic, 0): 4}

    env = ed.StreamEnvironment(1)
    env.from_kafka(broker, topic, schema=SCHEMA, stopping_offsets=stop).collect()
    with pytest.raises(ed.EddylineError) as info:
        env.execute()
    message = str(info.value)
    assert f"topic '{topic}' partition 0 offset 1" in message
    assert "field 'amount'" in message

    env = ed.StreamEnvironment(1)
    out = env.from_kafka(
        broker, topic, schema=SCHEMA, stopping_offsets=stop, skip_invalid=True
    ).collect()
    capfd.readouterr()
    env.execute()
    assert [r["id"] for r in out.to_pylist()] == [1, 3]
    assert "(2 skipped by this subtask so far)" in capfd.readouterr().err


def test_settings_are_checked_when_the_graph_is_built() -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.GraphError, match="needs schema"):
        env.from_kafka("h:1", "t")
    with pytest.raises(ed.GraphError, match="format"):
        env.from_kafka("h:1", "t", format="avro")
    with pytest.raises(ed.GraphError, match="starting_offsets"):
        env.from_kafka("h:1", "t", schema=SCHEMA, starting_offsets="middle")
    with pytest.raises(ed.GraphError, match="at_least_once"):
        ed.KafkaSink("h:1", "t", delivery="exactly_once")


def test_restore_at_another_parallelism_continues_every_partition(
    broker: str, tmp_path: Path
) -> None:
    topic = new_topic(broker, 3)
    produce_each(broker, topic, [(i % 3, None, _json(i)) for i in range(30)])
    env = ed.StreamEnvironment(2, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="1h"))
    first = env.from_kafka(broker, topic, schema=SCHEMA).name("kafka").uid("kafka").collect()
    client = env.execute_async("before")
    wait_until(lambda: _read(client) == 30, timeout=30, what="the first 30 messages")
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    client.wait(timeout=30)
    produce_each(broker, topic, [(i % 3, None, _json(i)) for i in range(30, 45)])

    env = ed.StreamEnvironment(3, checkpoint=ed.CheckpointConfig(tmp_path / "chk", interval="1h"))
    second = env.from_kafka(broker, topic, schema=SCHEMA).name("kafka").uid("kafka").collect()
    client = env.execute_async("after", restore_from=savepoint)
    wait_until(lambda: _read(client) == 15, timeout=30, what="the 15 new messages")
    client.stop_with_savepoint(tmp_path / "sp2", drain=True)
    client.wait(timeout=30)
    assert sorted(r["id"] for r in first.to_pylist()) == list(range(30))
    assert sorted(r["id"] for r in second.to_pylist()) == list(range(30, 45))


def _json(i: int) -> bytes:
    return json.dumps({"id": i, "user": "a", "amount": 1, "ts": i}).encode()


def _read(client: ed.JobClient) -> int:
    return int(client.metrics()["operators"]["kafka"]["records_out"])
