"""Self-test of the harness: tansu serves a fetch from the middle of a partition exactly
when every message was produced in its own batch (``produce_each``)."""

from __future__ import annotations

import uuid

import confluent_kafka as ck
import pytest

from support.kafka_broker import new_topic, produce_each

pytestmark = pytest.mark.kafka


def test_fetch_from_an_offset_inside_the_partition_returns_exactly_the_rest(broker: str) -> None:
    topic = new_topic(broker, 1)
    produce_each(broker, topic, [(0, None, f"m{i}".encode()) for i in range(6)])
    consumer = ck.Consumer({"bootstrap.servers": broker, "group.id": f"h-{uuid.uuid4().hex[:6]}"})
    consumer.assign([ck.TopicPartition(topic, 0, 2)])
    got: list[tuple[int, bytes]] = []
    for _ in range(100):  # bounded by the poll timeouts: a harness limit
        got += [(m.offset(), m.value()) for m in consumer.consume(10, timeout=0.2) if not m.error()]
        if len(got) >= 4:
            break
    consumer.close()
    assert got == [(i, f"m{i}".encode()) for i in range(2, 6)]
