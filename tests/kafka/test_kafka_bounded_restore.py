"""A Kafka job given a bounded end on restore, and back (DESIGN.md "Kafka: a bounded end").

An unbounded ``env.from_kafka`` job is stopped with a savepoint; restored with
``stopping_offsets`` (at its own and at other parallelisms) it reads every
partition from its savepoint offset up to its stopping offset, once, and
ends; a partition not in ``stopping_offsets`` reads nothing more (Flink's
``OffsetsInitializer.offsets``). The reverse: a bounded job's savepoint,
taken while a partition still waited for its stopping offset, restored
without ``stopping_offsets`` reads on from where each partition stopped.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

import eddyline as ed
from support.faults import wait_until
from support.kafka_broker import new_topic, produce_each

from .test_kafka_source import SCHEMA

pytestmark = pytest.mark.kafka

PARTITIONS = 4


def _message(i: int) -> tuple[int, None, bytes]:
    """Message ``i`` goes to partition ``i % 4``, at offset ``i // 4`` of a fresh topic."""
    body = {"id": i, "user": f"u{i % 5}", "amount": 1, "ts": i}
    return i % PARTITIONS, None, json.dumps(body).encode()


def _ids(handle: ed.CollectHandle) -> list[int]:
    ids = [int(r["id"]) for r in handle.to_pylist()]
    duplicated = [i for i, n in Counter(ids).items() if n > 1]
    assert not duplicated, f"read twice: {duplicated[:10]}"
    return sorted(ids)


def _records_out(client: ed.JobClient) -> int:
    return int(client.metrics()["operators"]["kafka"]["records_out"])


def _job(
    parallelism: int, chk: Path, broker: str, topic: str, **kwargs: object
) -> tuple[ed.StreamEnvironment, ed.CollectHandle]:
    env = ed.StreamEnvironment(
        parallelism, checkpoint=ed.CheckpointConfig(chk, interval="1h"), batch_size=8
    )
    src = env.from_kafka(broker, topic, schema=SCHEMA, **kwargs)  # type: ignore[arg-type]
    return env, src.name("kafka").uid("kafka").collect()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("restored_at", [1, 2, 3], ids=lambda p: f"p2_to_p{p}")
def test_an_unbounded_savepoint_restored_with_stopping_offsets_ends_there(
    broker: str, tmp_path: Path, restored_at: int
) -> None:
    topic = new_topic(broker, PARTITIONS)
    produce_each(broker, topic, [_message(i) for i in range(40)])  # offsets 0..9 each
    env, first = _job(2, tmp_path / "chk", broker, topic)
    client = env.execute_async("unbounded")
    wait_until(lambda: _records_out(client) == 40, timeout=30, what="the first 40 messages")
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    client.wait(timeout=30)
    assert _ids(first) == list(range(40))

    produce_each(broker, topic, [_message(i) for i in range(40, 120)])  # offsets 10..29
    # Partition 0 stops in the new messages, 1 at their end, 2 where the
    # savepoint left it, 3 is not named: it reads nothing more (as Flink).
    stops = {(topic, 0): 17, (topic, 1): 30, (topic, 2): 10}
    env, second = _job(restored_at, tmp_path / "chk2", broker, topic, stopping_offsets=stops)
    result = env.execute("bounded", restore_from=savepoint)
    expected = [i for i in range(40, 120) if i // PARTITIONS < stops.get((topic, i % 4), 0)]
    assert _ids(second) == expected
    assert result.metrics["operators"]["kafka"]["records_out"] == len(expected)


@pytest.mark.timeout(120)
def test_a_bounded_savepoint_restored_unbounded_reads_on(broker: str, tmp_path: Path) -> None:
    topic = new_topic(broker, PARTITIONS)
    produce_each(broker, topic, [_message(i) for i in range(80)])  # offsets 0..19 each
    # Partitions 0 and 2 (subtask 0) end; partition 3 waits for offsets 20..24.
    stops = {(topic, 0): 5, (topic, 1): 8, (topic, 2): 11, (topic, 3): 25}
    env, first = _job(2, tmp_path / "chk", broker, topic, stopping_offsets=stops)
    client = env.execute_async("bounded")
    bounded = [i for i in range(80) if i // PARTITIONS < stops[(topic, i % 4)]]
    wait_until(lambda: _records_out(client) == len(bounded), timeout=30, what="the bound")
    savepoint = client.stop_with_savepoint(tmp_path / "sp")
    client.wait(timeout=30)
    assert _ids(first) == bounded

    env, second = _job(3, tmp_path / "chk2", broker, topic)
    client = env.execute_async("unbounded", restore_from=savepoint)
    produce_each(broker, topic, [_message(i) for i in range(80, 88)])  # offsets 20 and 21
    rest = sorted(set(range(88)) - set(bounded))
    wait_until(lambda: _records_out(client) == len(rest), timeout=30, what=f"{len(rest)} rows")
    client.stop_with_savepoint(tmp_path / "sp2", drain=True)
    client.wait(timeout=30)
    assert _ids(second) == rest


def test_stopping_offsets_of_a_topic_not_read_are_refused() -> None:
    env = ed.StreamEnvironment(1)
    with pytest.raises(ed.GraphError, match=r"stopping_offsets names topic\(s\) \['other'\]"):
        env.from_kafka("h:1", "t", schema=SCHEMA, stopping_offsets={("other", 0): 3})
