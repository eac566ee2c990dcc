"""Kafka: a replayable source (``env.from_kafka``) and an at-least-once sink (:class:`KafkaSink`).

Both use ``confluent-kafka`` (librdkafka in its wheels, so nothing to build):
the per-message work of a Kafka client is librdkafka's, and what Python does
per message is handing over its bytes; JSON is then decoded a batch at a time
by ``pyarrow.json`` (C++) against the declared schema.

The source is an :class:`eddyline.Source` whose splits are the topics'
partitions: the partition offsets are its checkpointed state (a restore
rewinds to them exactly), partitions are spread over the source's subtasks
and dealt again on a restore at another parallelism, each partition is its
own split for per-split watermarks (``assign_timestamps(...,
idle_timeout=...)`` after the source), and partitions added to a topic are
found every ``discovery_interval`` and read from their beginning. Consumer
group offsets are committed only when a checkpoint completes, for monitoring.
With ``stopping_offsets`` the source is bounded (:attr:`Source.bounded`): its
checkpoints are those of the unbounded source, so either restores the other's
(DESIGN.md "Kafka: a bounded end").

Example:
    >>> import pyarrow as pa
    >>> import eddyline as ed
    >>> env = ed.StreamEnvironment()
    >>> s = env.from_kafka("127.0.0.1:9092", "clicks",
    ...                    schema=pa.schema([("user", pa.string()), ("n", pa.int64())]))
    >>> s.schema.names
    ['user', 'n', '_topic', '_partition', '_offset', '_timestamp']
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pj

from ..config import parse_duration
from ..errors import GraphError, KafkaError, SchemaError
from ..sinks import TwoPhaseCommitSink
from ..sources import Source

__all__ = ["KafkaSink", "KafkaSource", "end_offsets"]

META = [
    pa.field("_topic", pa.string()),
    pa.field("_partition", pa.int32()),
    pa.field("_offset", pa.int64()),
    pa.field("_timestamp", pa.timestamp("ms")),
]
RAW = [pa.field("key", pa.binary()), pa.field("value", pa.binary())]


def _client() -> Any:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - a dependency of eddyline
        raise GraphError("Kafka needs confluent-kafka: pip install confluent-kafka") from exc
    return confluent_kafka


def _seconds(value: str | float | int, what: str) -> float:
    seconds = parse_duration(value, what=what)
    if seconds <= 0:
        raise ValueError(f"{what} must be positive, got {value!r}")
    return float(seconds)


class KafkaSource(Source):
    """The source behind ``env.from_kafka`` (see :meth:`StreamEnvironment.from_kafka`)."""

    def __init__(
        self,
        bootstrap_servers: str,
        topics: str | Sequence[str],
        *,
        schema: pa.Schema | None = None,
        format: str = "json",
        starting_offsets: str | Mapping[tuple[str, int], int] = "earliest",
        properties: Mapping[str, Any] | None = None,
        skip_invalid: bool = False,
        discovery_interval: str | float = "10s",
        timeout: str | float = "30s",
        stopping_offsets: Mapping[tuple[str, int], int] | None = None,
        operator: str = "from_kafka",
    ) -> None:
        self.operator_name = operator
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise GraphError(
                f"{operator}(): bootstrap_servers must be 'host:port[,host:port...]', "
                f"got {bootstrap_servers!r}"
            )
        self.topics = [topics] if isinstance(topics, str) else list(topics)
        if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
            raise GraphError(f"{operator}(): topics must be a topic name or a list of them")
        if format not in ("json", "raw"):
            raise GraphError(f"{operator}(): format must be 'json' or 'raw', got {format!r}")
        if format == "json":
            if not isinstance(schema, pa.Schema):
                raise GraphError(
                    f"{operator}(): format='json' needs schema=pyarrow.schema([...]) "
                    "(the fields to decode from every message)"
                )
            clash = [n for n in schema.names if n in {f.name for f in META}]
            if clash:
                raise GraphError(f"{operator}(): schema field(s) {clash} clash with {META}")
        elif schema is not None:
            raise GraphError(f"{operator}(): format='raw' has a fixed schema; drop schema=")
        if isinstance(starting_offsets, str):
            if starting_offsets not in ("earliest", "latest"):
                raise GraphError(
                    f"{operator}(): starting_offsets must be 'earliest', 'latest' or "
                    f"{{(topic, partition): offset}}, got {starting_offsets!r}"
                )
        else:
            starting_offsets = _offsets(starting_offsets, operator, "starting_offsets") or {}
        self.bootstrap_servers = bootstrap_servers
        self.format = format
        self.declared = schema
        self.starting_offsets = starting_offsets
        self.properties = dict(properties or {})
        self.skip_invalid = bool(skip_invalid)
        self.stopping_offsets = _offsets(stopping_offsets, operator, "stopping_offsets")
        if self.stopping_offsets is not None:
            foreign = sorted({t for t, _ in self.stopping_offsets} - set(self.topics))
            if foreign:
                raise GraphError(
                    f"{operator}(): stopping_offsets names topic(s) {foreign}, which are not "
                    f"among the topics read {self.topics}"
                )
        # Partitions are splits named by id, bounded or not: both read (and
        # restore) the same checkpoints, so a job restored with stopping_offsets
        # ends where they say and one restored without them reads on. A bounded
        # read lists its partitions only when it starts or is restored, as Flink's.
        self.discovery_interval = _seconds(discovery_interval, "discovery_interval")
        self.bounded = self.stopping_offsets is not None
        self.timeout = _seconds(timeout, "timeout")
        self.skipped = 0
        self._consumer: Any = None
        self._buffers: dict[tuple[str, int], list[Any]] = {}
        self._next: dict[tuple[str, int], int] = {}  # where each assigned partition's buffer ends

    # -- Source -----------------------------------------------------------------

    def schema(self) -> pa.Schema:
        fields = RAW if self.format == "raw" else list(self.declared or [])
        return pa.schema([*fields, *META])

    def splits(self) -> list[tuple[str, int]]:
        metadata = self._list_topics()
        out: list[tuple[str, int]] = []
        for topic in self.topics:
            t = metadata.topics.get(topic)
            if t is None or (t.error is not None and t.error.code() != 0):
                raise KafkaError(
                    f"source '{self.operator_name}': topic '{topic}' does not exist on "
                    f"{self.bootstrap_servers}" + (f" ({t.error})" if t is not None else ""),
                    operator=self.operator_name,
                )
            out.extend((topic, p) for p in sorted(t.partitions))
        return out

    def split_id(self, split: tuple[str, int]) -> int:
        topic, partition = split
        return (zlib.crc32(topic.encode()) << 24) | partition

    def initial_offset(self, split: tuple[str, int]) -> Any:
        if isinstance(self.starting_offsets, str):
            return self.starting_offsets
        return self.starting_offsets.get(split, "earliest")

    def discovered_offset(self, split: tuple[str, int]) -> Any:
        return "earliest"  # a partition added while running is read whole

    def read(
        self, split: tuple[str, int], offset: Any, max_rows: int
    ) -> tuple[pa.RecordBatch | None, Any] | None:
        stop = None if self.stopping_offsets is None else self.stopping_offsets.get(split)
        if self.stopping_offsets is not None and (
            stop is None or stop == 0 or (isinstance(offset, int) and offset >= stop)
        ):
            # A bounded read reached its end; a partition without a stopping
            # offset ends where it is (DESIGN.md "Kafka: a bounded end").
            return None
        consumer = self._connect()
        if self._next.get(split) != offset:
            self._position(consumer, split, offset)
        buf = self._buffers[split]
        if not buf:
            self._fetch(consumer, max_rows)
        if not buf:
            return None, offset
        messages, self._buffers[split] = buf[:max_rows], buf[max_rows:]
        if stop is not None:
            messages = [m for m in messages if m.offset() < stop]
            if not messages:
                return None
        next_offset = messages[-1].offset() + 1
        self._next[split] = next_offset  # the offset the next read() passes back
        return self._batch(split, messages), next_offset

    def checkpoint_complete(self, offsets: dict[Any, Any]) -> None:
        if self._consumer is None:
            return
        ck = _client()
        committed = [
            ck.TopicPartition(t, p, o) for (t, p), o in offsets.items() if isinstance(o, int)
        ]
        if committed:
            # For monitoring only (consumer lag): the checkpoint holds the truth.
            self._consumer.commit(offsets=committed, asynchronous=True)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_consumer=None, _buffers={}, _next={})
        return state

    # -- the consumer -------------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "group.id": f"eddyline-{self.operator_name}",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "socket.timeout.ms": int(self.timeout * 1000),
        }
        config.update(self.properties)
        # Offsets are the checkpoint's; the group's are written on completion only.
        config.update({"enable.auto.commit": False, "enable.auto.offset.store": False})
        return config

    def _connect(self) -> Any:
        if self._consumer is None:
            ck = _client()
            try:
                self._consumer = ck.Consumer(self._config())
            except ck.KafkaException as exc:
                raise KafkaError(
                    f"source '{self.operator_name}': invalid consumer properties: {exc}",
                    operator=self.operator_name,
                ) from exc
        return self._consumer

    def _list_topics(self) -> Any:
        ck = _client()
        try:
            return self._connect().list_topics(timeout=self.timeout)
        except ck.KafkaException as exc:
            self.close()  # its threads would retry (and log) for as long as the process lives
            raise KafkaError(
                f"source '{self.operator_name}': cannot reach the Kafka broker(s) "
                f"{self.bootstrap_servers} within {self.timeout:g}s: {exc}",
                operator=self.operator_name,
            ) from exc

    def _position(self, consumer: Any, split: tuple[str, int], offset: Any) -> None:
        """Starts (or moves) the fetch of ``split`` at ``offset``."""
        ck = _client()
        if offset == "earliest":
            where = ck.OFFSET_BEGINNING
        elif offset == "latest":
            where = ck.OFFSET_END
        else:
            where = int(offset)
        tp = ck.TopicPartition(split[0], split[1], where)
        if split in self._next:
            consumer.incremental_unassign([ck.TopicPartition(split[0], split[1])])
        consumer.incremental_assign([tp])
        self._buffers[split] = []
        self._next[split] = offset

    def _fetch(self, consumer: Any, max_rows: int) -> None:
        ck = _client()
        for msg in consumer.consume(num_messages=max(1, max_rows), timeout=0):
            err = msg.error()
            if err is not None:
                if err.code() == ck.KafkaError._PARTITION_EOF:
                    continue
                raise KafkaError(
                    f"source '{self.operator_name}': reading topic '{msg.topic()}' "
                    f"partition {msg.partition()} failed: {err}",
                    operator=self.operator_name,
                )
            buf = self._buffers.get((msg.topic(), msg.partition()))
            if buf is not None:
                buf.append(msg)

    # -- decoding -------------------------------------------------------------------

    def _batch(self, split: tuple[str, int], messages: list[Any]) -> pa.RecordBatch:
        topic, partition = split
        if self.format == "raw":
            columns = [
                pa.array([m.key() for m in messages], pa.binary()),
                pa.array([m.value() for m in messages], pa.binary()),
            ]
        else:
            messages, columns = self._decode(split, messages)
        n = len(messages)
        columns += [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array([m.offset() for m in messages], pa.int64()),
            pa.array([m.timestamp()[1] for m in messages], pa.int64()).cast(pa.timestamp("ms")),
        ]
        return pa.RecordBatch.from_arrays(columns, schema=self.schema())

    def _decode(
        self, split: tuple[str, int], messages: list[Any]
    ) -> tuple[list[Any], list[pa.Array]]:
        schema = self.declared
        assert schema is not None
        values = [m.value() or b"" for m in messages]
        data = b"\n".join(values)
        if data.count(b"\n") != len(values) - 1:
            # A raw newline can only be whitespace between JSON tokens.
            data = b"\n".join(v.replace(b"\n", b" ").replace(b"\r", b" ") for v in values)
        table = _parse(data, schema)
        if table is not None and table.num_rows == len(messages):
            return messages, [c.combine_chunks() for c in table.columns]
        good = []
        for m, v in zip(messages, values, strict=True):
            problem = _problem(v, schema)
            if problem is None:
                good.append(m)
            elif self.skip_invalid:
                self.skipped += 1
                # The count is reported where the job's operators log: stderr.
                print(
                    f"eddyline: source '{self.operator_name}' skipped the message at topic "
                    f"'{split[0]}' partition {split[1]} offset {m.offset()}: it {problem} "
                    f"({self.skipped} skipped by this subtask so far)",
                    file=sys.stderr,
                    flush=True,
                )
            else:
                raise SchemaError(
                    f"source '{self.operator_name}': the message at topic '{split[0]}' "
                    f"partition {split[1]} offset {m.offset()} {problem}",
                    operator=self.operator_name,
                )
        table = _parse(b"\n".join(m.value() for m in good), schema) if good else None
        columns = (
            [c.combine_chunks() for c in table.columns]
            if table is not None
            else [pa.array([], f.type) for f in schema]
        )
        return good, columns


def end_offsets(
    bootstrap_servers: str,
    topics: str | Sequence[str],
    *,
    properties: Mapping[str, Any] | None = None,
    timeout: str | float = "30s",
) -> dict[tuple[str, int], int]:
    """The current end (next offset to be written) of every partition of ``topics``.

    Pass it as ``stopping_offsets`` to read what the topics hold now and end.

    Raises:
        KafkaError: The broker cannot be reached or a topic does not exist.
    """
    source = KafkaSource(
        bootstrap_servers,
        topics,
        format="raw",
        properties=properties,
        timeout=timeout,
        operator="end_offsets",
    )
    ck = _client()
    try:
        consumer = source._connect()
        out = {}
        for topic, partition in source.splits():
            _, high = consumer.get_watermark_offsets(
                ck.TopicPartition(topic, partition), timeout=source.timeout
            )
            out[(topic, partition)] = int(high)
        return out
    except ck.KafkaException as exc:
        raise KafkaError(
            f"end_offsets(): the broker(s) {bootstrap_servers} did not answer: {exc}",
            operator="end_offsets",
        ) from exc
    finally:
        source.close()


def _offsets(
    offsets: Mapping[tuple[str, int], int] | None, operator: str, what: str
) -> dict[tuple[str, int], int] | None:
    if offsets is None:
        return None
    out = {}
    for k, v in dict(offsets).items():
        if not (
            isinstance(k, tuple)
            and len(k) == 2
            and isinstance(k[0], str)
            and isinstance(k[1], int)
            and isinstance(v, int)
            and v >= 0
        ):
            raise GraphError(
                f"{operator}(): {what} entry {k!r}: {v!r} is not (topic, partition): offset >= 0"
            )
        out[k] = v
    return out


def _parse(data: bytes, schema: pa.Schema) -> pa.Table | None:
    if not data:
        return None
    try:
        return pj.read_json(
            pa.BufferReader(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=len(data) + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="ignore"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _problem(value: bytes, schema: pa.Schema) -> str | None:
    """Why one message does not decode against ``schema`` (``None``: it does)."""
    if not value.strip():
        return "is empty, not a JSON object"
    try:
        obj = json.loads(value)
    except ValueError as exc:
        return f"is not valid JSON ({exc})"
    if not isinstance(obj, dict):
        return f"is a JSON {type(obj).__name__}, not an object"
    for f in schema:
        if (
            f.name in obj
            and _parse(json.dumps({f.name: obj[f.name]}).encode(), pa.schema([f])) is None
        ):
            return f"has field '{f.name}' = {obj[f.name]!r}, which is not {f.type}"
    if _parse(value.replace(b"\n", b" "), schema) is None:
        return "does not decode against the schema"
    return None


class KafkaSink(TwoPhaseCommitSink):
    """Writes a stream to a Kafka topic, at least once.

    Every row is produced as one message (``format="json"``: the row as a
    JSON object; ``"raw"``: the ``value`` column's bytes or string) with the
    ``key`` column's value as its key, through an idempotent producer (no
    duplicates from the producer's own retries). When a checkpoint is taken
    the sink flushes and waits for the broker to acknowledge every message
    produced before the barrier, so that checkpoint completes only once all
    of them are in Kafka; a delivery error fails the job with its cause.
    After a failure the rows produced since the last completed checkpoint
    are produced again: duplicates are possible, losses are not.

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topic: The topic to write to.
        format: ``"json"`` or ``"raw"``.
        key: The column whose value keys each message (``None``: no key).
        delivery: ``"at_least_once"`` (the only guarantee offered; an
            exactly-once sink needs Kafka transactions).
        properties: librdkafka producer properties over the sink's defaults.
        timeout: How long a checkpoint waits for acknowledgements before the
            job fails.

    Example:
        >>> import eddyline as ed
        >>> ed.KafkaSink("127.0.0.1:9092", "out", key="user")
        KafkaSink('127.0.0.1:9092', 'out', format='json', key='user')
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        format: str = "json",
        key: str | None = None,
        delivery: str = "at_least_once",
        properties: Mapping[str, Any] | None = None,
        timeout: str | float = "30s",
    ) -> None:
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise GraphError(f"KafkaSink: bad bootstrap_servers {bootstrap_servers!r}")
        if not isinstance(topic, str) or not topic:
            raise GraphError(f"KafkaSink: bad topic {topic!r}")
        if format not in ("json", "raw"):
            raise GraphError(f"KafkaSink: format must be 'json' or 'raw', got {format!r}")
        if delivery != "at_least_once":
            raise GraphError(
                f"KafkaSink: delivery={delivery!r} is not supported; 'at_least_once' is the "
                "only guarantee (exactly-once would need Kafka transactions)"
            )
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.format = format
        self.key = key
        self.delivery = delivery
        self.properties = dict(properties or {})
        self.timeout = _seconds(timeout, "timeout")
        self._producer: Any = None
        self._errors: list[str] = []
        self._name = "KafkaSink"

    def __repr__(self) -> str:
        return (
            f"KafkaSink({self.bootstrap_servers!r}, {self.topic!r}, format={self.format!r}, "
            f"key={self.key!r})"
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_producer=None, _errors=[])
        return state

    def open(self, ctx: dict[str, Any]) -> None:
        self._name = str(ctx.get("name", self._name))
        ck = _client()
        config: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap_servers,
            "linger.ms": 5,
        }
        config.update(self.properties)
        config.update({"enable.idempotence": True, "acks": "all"})
        try:
            self._producer = ck.Producer(config)
        except ck.KafkaException as exc:
            raise KafkaError(
                f"sink '{self._name}': invalid producer properties: {exc}", operator=self._name
            ) from exc

    def begin_transaction(self) -> Any:
        return None

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"{err} (topic '{msg.topic()}')")

    def write(self, txn: Any, batch: pa.RecordBatch) -> None:
        producer = self._producer
        names = batch.schema.names
        if self.key is not None and self.key not in names:
            raise SchemaError(
                f"sink '{self._name}': key column '{self.key}' is not in {names}",
                operator=self._name,
            )
        keys = batch.column(self.key).to_pylist() if self.key is not None else None
        if self.format == "json":
            values = [
                json.dumps(row, default=str, separators=(",", ":")).encode()
                for row in batch.to_pylist()
            ]
        else:
            if "value" not in names:
                raise SchemaError(
                    f"sink '{self._name}': format='raw' needs a 'value' column, got {names}",
                    operator=self._name,
                )
            values = batch.column("value").to_pylist()
        for i, value in enumerate(values):
            key = None if keys is None or keys[i] is None else _bytes(keys[i])
            while True:
                try:
                    producer.produce(
                        self.topic,
                        value=None if value is None else _bytes(value),
                        key=key,
                        on_delivery=self._delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # the local queue is full: let acks drain it
                except _client().KafkaException as exc:
                    raise KafkaError(
                        f"sink '{self._name}': producing to topic '{self.topic}' failed: {exc}",
                        operator=self._name,
                    ) from exc
        producer.poll(0)
        self._raise_errors()

    def pre_commit(self, txn: Any) -> None:
        left = self._producer.flush(self.timeout)
        self._raise_errors()
        if left:
            raise KafkaError(
                f"sink '{self._name}': {left} message(s) to topic '{self.topic}' were not "
                f"acknowledged within {self.timeout:g}s",
                operator=self._name,
            )

    def commit(self, txn: Any) -> None:
        """Nothing to do: every message was acknowledged in :meth:`pre_commit`."""

    def abort(self, txn: Any) -> None:
        """Nothing to undo: produced messages stay (at-least-once)."""

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None

    def _raise_errors(self) -> None:
        if self._errors:
            errors, self._errors = self._errors, []
            raise KafkaError(
                f"sink '{self._name}': {len(errors)} message(s) could not be delivered; "
                f"first: {errors[0]}",
                operator=self._name,
            )


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
