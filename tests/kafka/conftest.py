"""A tansu Kafka-API broker for tests/kafka, and helpers to feed and read topics.

``tansu`` is built once per machine by ``.ci/run`` into
``$EDDYLINE_TOOL_CACHE/tansu`` (default ``/work/.cache``), outside the
repository. Every message is produced in its own batch (``produce_each``, see
``support.kafka_broker`` for tansu's bug), which ``test_harness.py`` checks.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

# These suites need the native extension and the client: missing ones must fail.
import confluent_kafka as ck
import pytest

import eddyline._core  # noqa: F401
from support.kafka_broker import tansu_broker, tansu_path

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a tansu broker with in-memory storage, for the whole session."""
    if not tansu_path().exists():
        why = (
            f"no tansu broker at {tansu_path()}: .ci/run builds it (cargo install tansu "
            f"--locked --features dynostore --root {tansu_path().parent.parent})"
        )
        if os.environ.get("CI"):
            pytest.fail(why)  # in CI a missing install step fails, never skips
        pytest.skip(why)
    with tansu_broker(tmp_path_factory.mktemp("tansu") / "broker.log") as address:
        yield address


def consume_all(broker: str, topic: str, expected: int, timeout: float = 30.0) -> list[Any]:
    """Reads every partition of ``topic`` from its start until ``expected`` messages came
    (``timeout`` is a harness limit), then one more poll round for any extra ones."""
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker,
            "group.id": f"check-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
        }
    )
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    # Offset 0, not OFFSET_BEGINNING: tansu answers "earliest" with its oldest
    # batch by write time (support.kafka_broker), which skips a batch another
    # producer was given a lower offset for but stored later.
    consumer.assign([ck.TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(out) < expected and time.monotonic() < deadline:
        for m in consumer.consume(num_messages=1000, timeout=0.2):
            assert m.error() is None, m.error()
            out.append(m)
    out += [m for m in consumer.consume(num_messages=1000, timeout=0.5) if m.error() is None]
    consumer.close()
    return out
