"""Kafka access for amends: client settings, watermarks, reading and producing.

Everything here talks to Kafka only through confluent-kafka and a bootstrap
address (``AMENDS_KAFKA_BOOTSTRAP``), so the development broker and a real
Kafka or Redpanda cluster are interchangeable. Driver errors are translated
into ``KafkaUnavailable`` / ``KafkaError`` here and nowhere else.

Source incarnation marker: ``amends provision`` writes one marker message per
source partition (header ``amends-marker``) carrying the namespace, source
incarnation and a random nonce that the manifest in PostgreSQL records. A
recreated topic (or another topic under the same name) cannot carry the same
nonce at the same offset, so it is refused instead of silently reprocessed.
Marker offsets are transport metadata: they are neither applied nor
quarantined, and readers skip them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import KafkaError as _DriverError

from amends_core.ledger import Coordinates, Record
from amends_pipeline.kafka.settings import KafkaRefused, merge, recent_refusal
from amends_pipeline.redaction import redact

MARKER_HEADER = "amends-marker"
DEFAULT_SOURCE_TOPIC = "amends-source"
DEFAULT_OUTPUT_TOPIC = "amends-output"


class KafkaError(Exception):
    """A Kafka operation failed; the message says which and why, in one line."""


class KafkaUnavailable(KafkaError):
    """The cluster could not be reached or did not answer in time."""


def consumer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Settings for explicit-assignment readers: no group management, no commits."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "amends-reader",  # required by librdkafka; never used for rebalancing
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 20,  # the development broker answers empty fetches only after this
        "enable.partition.eof": True,
        "socket.timeout.ms": 10_000,
        "session.timeout.ms": 10_000,
        "allow.auto.create.topics": False,
        "isolation.level": "read_committed",  # never an aborted upstream transaction's records
        "log_level": 4,  # warnings and worse; connection teardown chatter is informational
    }
    fixed = (
        "enable.auto.commit", "enable.auto.offset.store", "auto.offset.reset",
        "enable.partition.eof", "allow.auto.create.topics", "isolation.level",
    )
    return merge(cfg, extra, fixed)


def producer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 30_000,
        # a deleted topic must stay deleted: auto-creation would hide a recreated incarnation
        "allow.auto.create.topics": False,
        "log_level": 4,
    }
    return merge(cfg, extra, ("enable.idempotence", "acks", "allow.auto.create.topics"))


@dataclass(frozen=True, slots=True)
class Watermarks:
    low: int
    """First retained offset."""
    high: int
    """Next offset to be written (exclusive end)."""


@dataclass(frozen=True, slots=True)
class Marker:
    namespace: str
    source_incarnation: str
    nonce: str
    partition: int

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "amends_marker": 1,
                "namespace": self.namespace,
                "source_incarnation": self.source_incarnation,
                "nonce": self.nonce,
                "partition": self.partition,
            },
            separators=(",", ":"),
        ).encode("utf-8")

    @staticmethod
    def parse(value: bytes | None) -> Marker | None:
        try:
            obj = json.loads(value or b"")
            if obj.get("amends_marker") != 1:
                return None
            return Marker(
                obj["namespace"], obj["source_incarnation"], obj["nonce"], obj["partition"]
            )
        except (ValueError, AttributeError, KeyError, TypeError):
            return None


def is_marker(headers: list[tuple[str, bytes]] | None) -> bool:
    return any(k == MARKER_HEADER for k, _ in headers or [])


def _raise_from(what: str, e: KafkaException) -> Exception:
    """Our exception for a driver error: redacted, and a refusal (credentials, TLS) is not transient."""
    err = e.args[0] if e.args else None
    if isinstance(err, _DriverError):
        text = redact(f"{what}: {err.name()}: {err.str()}")
        unavailable = (
            _DriverError._TRANSPORT, _DriverError._ALL_BROKERS_DOWN, _DriverError._TIMED_OUT,
        )
        if err.code() in unavailable:
            refusal = recent_refusal()
            if refusal is not None:
                return KafkaRefused(redact(f"{what}: Kafka refused the connection: {refusal}"))
            return KafkaUnavailable(text)
        if err.code() in (
            _DriverError._AUTHENTICATION, _DriverError._SSL, _DriverError.SASL_AUTHENTICATION_FAILED,
            _DriverError.TOPIC_AUTHORIZATION_FAILED, _DriverError.CLUSTER_AUTHORIZATION_FAILED,
            _DriverError.GROUP_AUTHORIZATION_FAILED, _DriverError._INVALID_ARG,
        ):
            return KafkaRefused(text)
        return KafkaError(text)
    return KafkaError(redact(f"{what}: {e}"))


class Reader:
    """Explicit-assignment reader of one topic (no consumer group, no commits)."""

    def __init__(self, bootstrap: str, topic: str, **extra: Any) -> None:
        self.topic = topic
        try:
            self._c = Consumer(consumer_config(bootstrap, **extra))
        except KafkaException as e:
            msg = "cannot create a Kafka consumer"
            raise _raise_from(msg, e) from e

    def close(self) -> None:
        self._c.close()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def partitions(self, timeout: float = 10.0) -> int:
        """Number of partitions of the topic; KafkaError when it does not exist."""
        try:
            md = self._c.list_topics(self.topic, timeout=timeout)
        except KafkaException as e:
            msg = f"cannot read metadata of topic {self.topic!r}"
            raise _raise_from(msg, e) from e
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            why = t.error.str() if t is not None and t.error is not None else "unknown topic"
            msg = f"topic {self.topic!r} is not available: {why}"
            raise KafkaError(msg)
        return len(t.partitions)

    def watermarks(self, partition: int, timeout: float = 10.0) -> Watermarks:
        try:
            low, high = self._c.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as e:
            msg = f"cannot read watermarks of {self.topic}[{partition}]"
            raise _raise_from(msg, e) from e
        return Watermarks(low, high)

    def messages(
        self, partition: int, start: int, end: int, timeout: float = 30.0
    ) -> Iterator[Any]:
        """Every message of [start, end) in offset order (raw confluent-kafka messages)."""
        if start >= end:
            return
        self._c.assign([TopicPartition(self.topic, partition, start)])
        try:
            expected = start
            idle = 0.0
            while expected < end:
                batch = self._c.consume(num_messages=min(10_000, end - expected), timeout=0.5)
                if not batch:
                    idle += 0.5
                    if idle >= timeout:
                        msg = f"{self.topic}[{partition}] stopped answering at offset {expected}"
                        raise KafkaUnavailable(msg)
                    continue
                idle = 0.0
                for m in batch:
                    err = m.error()
                    if err is not None:
                        if err.code() == _DriverError._PARTITION_EOF:
                            continue
                        msg = f"reading {self.topic}[{partition}]: {err.name()}: {err.str()}"
                        raise KafkaError(msg)
                    off = m.offset()
                    if off < expected:
                        continue
                    if off >= end:
                        return
                    expected = off + 1
                    yield m
        except KafkaException as e:
            msg_0 = f"reading {self.topic}[{partition}]"
            raise _raise_from(msg_0, e) from e
        finally:
            self._c.unassign()

    def records(
        self, source: str, partition: int, start: int, end: int
    ) -> Iterator[tuple[Record | None, Any]]:
        """(Record, message) pairs of [start, end); markers give (None, message)."""
        for m in self.messages(partition, start, end):
            if is_marker(m.headers()):
                yield None, m
            else:
                value = m.value() or b""
                yield Record(value, m.key(), Coordinates(source, partition, m.offset())), m


class Writer:
    """Idempotent producer; ``flush`` raises when any message was not delivered."""

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        try:
            self._p = Producer(producer_config(bootstrap, **extra))
        except KafkaException as e:
            msg = "cannot create a Kafka producer"
            raise _raise_from(msg, e) from e
        self.failures: list[str] = []
        self.delivered: list[tuple[int, int]] = []
        """(partition, offset) of every delivered message, in delivery order."""

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(f"{err.name()}: {err.str()}")
        else:
            self.delivered.append((msg.partition(), msg.offset()))

    def produce(
        self,
        topic: str,
        partition: int,
        value: bytes,
        key: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Produce one message; its delivery lands in ``delivered`` or ``failures``."""
        self.produce_raw(topic, partition, value, key, self._on_delivery, headers)

    def produce_raw(
        self,
        topic: str,
        partition: int,
        value: bytes,
        key: bytes | None,
        on_delivery: Any,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Produce with a caller-supplied delivery callback (the relay tracks receipts)."""
        while True:
            try:
                self._p.produce(
                    topic, value=value, key=key, partition=partition, headers=headers,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                self._p.poll(0.1)
            except KafkaException as e:
                msg = f"producing to {topic}[{partition}]"
                raise _raise_from(msg, e) from e
        self._p.poll(0)

    def flush_quietly(self, timeout: float = 30.0) -> int:
        """Wait for delivery reports; returns how many messages are still undelivered."""
        return int(self._p.flush(timeout))

    def flush(self, timeout: float = 60.0) -> None:
        left = self._p.flush(timeout)
        if left:
            msg = f"{left} messages were not delivered within {timeout:.0f}s"
            raise KafkaUnavailable(msg)
        if self.failures:
            first = self.failures[0]
            n = len(self.failures)
            self.failures = []
            msg = f"{n} messages failed: {first}"
            raise KafkaError(msg)
