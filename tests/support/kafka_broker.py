"""Test helpers for Kafka jobs: a local tansu broker and topics to feed.

``tansu`` (Apache-2.0) is a Kafka-API broker written in Rust; ``cargo install
tansu --locked --features dynostore --root DIR`` builds it (``.ci/run`` does,
into ``$EDDYLINE_TOOL_CACHE/tansu``, default ``/work/.cache/tansu``). Its
in-memory storage (0.6.0) has a bug: a fetch from an offset inside a batch
of several messages skips the rest of that batch. :func:`produce_each`
therefore sends every message in its own batch, so that a correct restore
from the middle of a partition does not look like data loss. It also answers
a request for a partition's earliest offset (a consumer assigned at
``OFFSET_BEGINNING``) with the batch written first by the clock, not the one
with the lowest offset: when two producers write one partition, the batch
given the lower offset can be stored second, and a read from "earliest"
starts past it. Read-backs of whole topics (``consume_all`` in tests/kafka,
the tester's ``_read_topic``) therefore start at offset 0; the topics are
new and nothing is deleted from them.

Example:
    >>> from support.kafka_broker import tansu_path
    >>> tansu_path().name
    'tansu'
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["add_partitions", "new_topic", "produce_each", "tansu_broker", "tansu_path"]


def tansu_path() -> Path:
    """Where ``.ci/run`` builds tansu: ``$EDDYLINE_TOOL_CACHE/tansu/bin/tansu``."""
    cache = Path(os.environ.get("EDDYLINE_TOOL_CACHE", "/work/.cache"))
    return cache / "tansu" / "bin" / "tansu"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def tansu_broker(log: str | os.PathLike[str], *, timeout: float = 30.0) -> Iterator[str]:
    """Runs a tansu broker with in-memory storage on a free port; yields ``host:port``.

    Raises:
        FileNotFoundError: tansu is not built at :func:`tansu_path`.
        RuntimeError: It exited or did not answer within ``timeout`` (its log attached).
    """
    import confluent_kafka as ck
    import confluent_kafka.admin

    exe = tansu_path()
    if not exe.exists():
        raise FileNotFoundError(f"no tansu broker at {exe} (.ci/run builds it)")
    url = f"tcp://127.0.0.1:{_free_port()}"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(exe),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    address = url.removeprefix("tcp://")
    try:
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": address})
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"tansu exited with {proc.returncode}: {Path(log).read_text()}")
            try:
                admin.list_topics(timeout=1)
                break
            except ck.KafkaException:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not answer: {Path(log).read_text()}") from None
        yield address
    finally:
        proc.kill()  # in-memory storage: nothing to shut down cleanly (SIGTERM takes 5 s)
        proc.wait(timeout=10)


def new_topic(broker: str, partitions: int, name: str | None = None) -> str:
    """Creates a topic (a fresh name unless ``name``) with ``partitions`` partitions."""
    import confluent_kafka.admin as admin

    name = name or f"t-{uuid.uuid4().hex[:10]}"
    client = admin.AdminClient({"bootstrap.servers": broker})
    client.create_topics([admin.NewTopic(name, partitions, 1)])[name].result(timeout=30)
    return name


def add_partitions(broker: str, topic: str, total: int) -> None:
    """Grows ``topic`` to ``total`` partitions."""
    import confluent_kafka.admin as admin

    client = admin.AdminClient({"bootstrap.servers": broker})
    client.create_partitions([admin.NewPartitions(topic, total)])[topic].result(timeout=30)


def produce_each(broker: str, topic: str, messages: Iterable[tuple[int, Any, bytes]]) -> None:
    """Produces ``(partition, key, value)`` messages, each in its own batch (tansu's bug).

    Raises:
        RuntimeError: A message was not delivered.
    """
    import confluent_kafka as ck

    producer = ck.Producer({"bootstrap.servers": broker, "linger.ms": 0, "batch.num.messages": 1})
    errors: list[str] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    for partition, key, value in messages:
        producer.produce(topic, value=value, key=key, partition=partition, on_delivery=delivered)
        producer.flush(30)
    if errors:
        raise RuntimeError(f"{len(errors)} message(s) not delivered to {topic}: {errors[0]}")
