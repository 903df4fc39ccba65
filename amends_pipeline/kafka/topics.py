"""Kafka access for amends: client settings, watermarks, reading and producing.

Everything here talks to Kafka only through confluent-kafka and a bootstrap
address (``AMENDS_KAFKA_BOOTSTRAP``), so the development broker and a real
Kafka or Redpanda cluster are interchangeable. Driver errors are translated
into ``KafkaUnavailable`` / ``KafkaError`` here and nowhere else.

Source incarnation: on a cluster that reports topic IDs, ``amends provision``
records the source topic's ID and ``Reader.topic_id`` is compared with it. For
clusters without topic IDs (librdkafka's mock cluster) provision also writes
one marker message per source partition (header ``amends-marker``) carrying
the namespace, source incarnation and a random nonce that the manifest
records; a recreated topic cannot carry the same nonce at the same offset.
Only that recorded marker (its offset and its content) is skipped by readers;
any other message carrying the header becomes a record flagged
``reserved_header``, which both the worker and the oracle reject.

Offsets are not contiguous on a real broker: transaction control records,
aborted transactional records (never delivered to these read-committed
readers) and compaction leave gaps. A read of [start, end) therefore ends at
``end`` when the partition says so (a message at or past ``end``, or the end
of the partition at or past it), never by counting delivered messages.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import enum
import itertools
import json
import operator
import time
from collections.abc import Generator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka import KafkaError as _DriverError
from confluent_kafka.admin import AdminClient

from amends_core.ledger import Coordinates, Record
from amends_pipeline.kafka.errors import (
    KafkaError as KafkaError,  # re-exported: callers import them from here
)
from amends_pipeline.kafka.errors import KafkaUnavailable as KafkaUnavailable
from amends_pipeline.kafka.errors import OffsetLost as OffsetLost
from amends_pipeline.kafka.settings import (
    CONNECTION_SETUP_TIMEOUT_MS,
    KafkaRefused,
    merge,
    recent_refusal,
)
from amends_pipeline.redaction import redact

MARKER_HEADER = "amends-marker"
_NO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
"""The all-zero UUID as confluent-kafka prints it: no topic ID."""
WAIT_FETCH_MAX_MS = 10
"""``fetch.wait.max.ms`` of a reader that roles only wait in (``Reader.wait``) on librdkafka's
mock cluster, which answers a waiting fetch only after it: there it bounds how late an idle
role notices new data."""
BROKER_WAIT_FETCH_MAX_MS = 500
"""``fetch.wait.max.ms`` of such a reader on a Kafka broker, which answers a waiting fetch as
soon as data arrives: there it only sets how often an idle role renews its fetch. At 10 ms
an idle waiter cost the broker about a tenth of a CPU in fetches (measured on the tests'
broker); a role's wait is cut into slices of 0.2 s anyway, each with a fetch of its own."""
POLL_EVERY = 1000
"""A producer serves its delivery reports after this many messages, and at every flush."""
DEFAULT_SOURCE_TOPIC = "amends-source"
DEFAULT_OUTPUT_TOPIC = "amends-output"


def consumer_config(bootstrap: str, **extra: Any) -> dict[str, Any]:
    """Settings for explicit-assignment readers: no group management, no commits."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "group.id": "amends-reader",  # required by librdkafka; never used for rebalancing
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "fetch.wait.max.ms": 20,  # the development broker answers empty fetches only after this
        # Once a long read has queued queued.min.messages (100,000) ahead of the reader,
        # librdkafka stops fetching and by default waits 1 s before it looks again: a
        # reader that catches up idles for most of that second, about once per 250,000
        # messages (docs/benchmarks.md, 'verify memory'). Look again soon instead.
        "fetch.queue.backoff.ms": 10,
        "enable.partition.eof": True,
        "socket.timeout.ms": 10_000,
        "socket.connection.setup.timeout.ms": CONNECTION_SETUP_TIMEOUT_MS,
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
        "socket.connection.setup.timeout.ms": CONNECTION_SETUP_TIMEOUT_MS,
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


class Unreadable(enum.Enum):
    """Marks headers that could not be read (a header name that is not UTF-8)."""

    HEADERS = "unreadable"


UNREADABLE = Unreadable.HEADERS


_UNREADABLE_HEADERS = (SystemError, UnicodeError, ValueError, TypeError)
"""What ``Message.headers()`` raises on a header it cannot convert (confluent-kafka 2.16
decodes header names as UTF-8 and raises SystemError when one is not)."""


_HEADERS = operator.methodcaller("headers")
"""``m.headers()``, called so that a failed conversion always raises.

confluent-kafka converts a header name that is not UTF-8 into a list holding a
NULL entry, caches that list in the message and returns it with the decoding
error still set. A call through the C API's generic path (this one) checks the
result and raises SystemError. A plain ``m.headers()`` does so only until the
interpreter specializes its call site (after a few calls: any busy reader);
from then on the broken list comes back as if nothing happened, and touching
it crashes the process (segmentation fault)."""


def read_headers(m: Any) -> list[tuple[str, bytes]] | None | Unreadable:
    """The message's headers, or ``UNREADABLE`` when the driver cannot convert them.

    Called at most once per message: after a failed conversion confluent-kafka
    caches a list holding a NULL entry, which must never be touched (``_HEADERS``).
    """
    try:
        headers: list[tuple[str, bytes]] | None = _HEADERS(m)
    except _UNREADABLE_HEADERS:
        return UNREADABLE
    return headers


_UNAVAILABLE = (
    _DriverError._TRANSPORT, _DriverError._ALL_BROKERS_DOWN, _DriverError._TIMED_OUT,
    # A broker that stops, restarts or hands over leadership answers with these
    # for a while; retrying reaches the partition's leader once it is back.
    _DriverError._DESTROY_BROKER, _DriverError.NOT_LEADER_FOR_PARTITION,
    _DriverError.LEADER_NOT_AVAILABLE, _DriverError.BROKER_NOT_AVAILABLE,
    _DriverError.REQUEST_TIMED_OUT, _DriverError.NETWORK_EXCEPTION,
    _DriverError.FENCED_LEADER_EPOCH, _DriverError.UNKNOWN_LEADER_EPOCH,
    _DriverError.OFFSET_NOT_AVAILABLE,
)
"""Driver errors that mean "not reachable right now" (KafkaUnavailable, retried by the roles)."""

_UNDELIVERED = frozenset({*_UNAVAILABLE, _DriverError._MSG_TIMED_OUT})
"""Delivery failures that mean the cluster did not take the message in time (not a refusal)."""


def _raise_from(what: str, e: KafkaException, bootstrap: str | None = None) -> Exception:
    """Our exception for a driver error: redacted, and a refusal (credentials, TLS) is not transient.

    ``bootstrap``: named in a KafkaUnavailable, so that the line says which cluster did not answer.
    """
    err = e.args[0] if e.args else None
    if isinstance(err, _DriverError):
        text = redact(f"{what}: {err.name()}: {err.str()}")
        if err.code() in _UNAVAILABLE:
            refusal = recent_refusal()
            if refusal is not None:
                return KafkaRefused(redact(f"{what}: Kafka refused the connection: {refusal}"))
            return KafkaUnavailable(text + _at(bootstrap))
        if err.code() in (
            _DriverError._AUTHENTICATION, _DriverError._SSL, _DriverError.SASL_AUTHENTICATION_FAILED,
            _DriverError.TOPIC_AUTHORIZATION_FAILED, _DriverError.CLUSTER_AUTHORIZATION_FAILED,
            _DriverError.GROUP_AUTHORIZATION_FAILED, _DriverError._INVALID_ARG,
        ):
            return KafkaRefused(text)
        return KafkaError(text)
    return KafkaError(redact(f"{what}: {e}"))


def _at(bootstrap: str | None) -> str:
    return "" if bootstrap is None else f" (Kafka at {bootstrap})"


def _offset(m: Message) -> int:
    """A fetched message's offset. The driver gives None only for a negative offset, which
    neither a message nor an end-of-partition event from ``consume`` carries."""
    off = m.offset()
    if off is None:
        msg = f"{m.topic()}[{m.partition()}]: the driver delivered a message without an offset"
        raise KafkaError(msg)
    return off


class Reader:
    """Explicit-assignment reader of one topic (no consumer group, no commits)."""

    def __init__(self, bootstrap: str, topic: str, **extra: Any) -> None:
        self.topic = topic
        self.bootstrap = bootstrap
        try:
            self._c = Consumer(consumer_config(bootstrap, **extra))
        except KafkaException as e:
            msg = "cannot create a Kafka consumer"
            raise _raise_from(msg, e, self.bootstrap) from e
        self._admin_config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "log_level": 4,
            "socket.connection.setup.timeout.ms": CONNECTION_SETUP_TIMEOUT_MS,
            **extra,
        }
        self._admin: AdminClient | None = None

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
            raise _raise_from(msg, e, self.bootstrap) from e
        t = md.topics.get(self.topic)
        if t is None or t.error is not None or not t.partitions:
            why = t.error.str() if t is not None and t.error is not None else "unknown topic"
            msg = f"topic {self.topic!r} is not available: {why}"
            raise KafkaError(msg)
        return len(t.partitions)

    def topic_id(self, timeout: float = 10.0) -> str | None:
        """The topic's ID, or None when the cluster reports no topic IDs.

        Raises KafkaError when the topic does not exist, KafkaUnavailable when
        the cluster does not answer.
        """
        if self._admin is None:
            self._admin = AdminClient(self._admin_config)
        what = f"cannot describe topic {self.topic!r}"
        try:
            md = self._admin.list_topics(self.topic, timeout=timeout)
        except KafkaException as e:
            raise _raise_from(what, e, self.bootstrap) from e
        if md.controller_id not in md.brokers:
            # librdkafka's mock cluster names no controller among its brokers and
            # cannot answer DescribeTopics: a cluster without topic IDs.
            return None
        fut = self._admin.describe_topics(
            TopicCollection([self.topic]), request_timeout=timeout
        )[self.topic]
        try:
            desc = fut.result(timeout=timeout + 5.0)
        except KafkaException as e:
            err = e.args[0] if e.args else None
            if isinstance(err, _DriverError) and err.code() in (
                _DriverError.UNSUPPORTED_VERSION, _DriverError._UNSUPPORTED_FEATURE,
            ):
                return None
            raise _raise_from(what, e, self.bootstrap) from e
        except concurrent.futures.TimeoutError:
            msg = f"{what}: no answer within {timeout + 5.0:.0f}s"
            raise KafkaUnavailable(msg + _at(self.bootstrap)) from None
        tid = str(desc.topic_id) if desc.topic_id is not None else ""
        return None if tid in ("", _NO_TOPIC_ID) else tid

    def answers_waiting_fetches(self, timeout: float = 10.0) -> bool:
        """Whether the cluster answers a waiting fetch as soon as data arrives (a Kafka broker).

        librdkafka's mock cluster names no controller among its brokers and
        answers a fetch only after its full ``fetch.wait.max.ms``.
        """
        try:
            md = self._c.list_topics(self.topic, timeout=timeout)
        except KafkaException as e:
            msg = "cannot read cluster metadata"
            raise _raise_from(msg, e, self.bootstrap) from e
        return md.controller_id in md.brokers

    def watermarks(self, partition: int, timeout: float = 10.0) -> Watermarks:
        try:
            low, high = self._c.get_watermark_offsets(
                TopicPartition(self.topic, partition), timeout=timeout, cached=False
            )
        except KafkaException as e:
            msg = f"cannot read watermarks of {self.topic}[{partition}]"
            err = e.args[0] if e.args else None
            if isinstance(err, _DriverError) and err.code() == _DriverError._UNKNOWN_PARTITION:
                # librdkafka says "unknown partition" both for a partition that does not
                # exist and for one whose leader it cannot reach (broker down or
                # restarting): ask the cluster, which raises KafkaUnavailable when it
                # cannot be reached and KafkaError when the topic is really gone.
                if partition < self.partitions(timeout):
                    msg_1 = f"{msg}: no reachable leader for the partition"
                    raise KafkaUnavailable(msg_1 + _at(self.bootstrap)) from e
            raise _raise_from(msg, e, self.bootstrap) from e
        return Watermarks(low, high)

    def wait(self, positions: Mapping[int, int], timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a message at or past ``positions`` (partition -> offset).

        Only a wake-up for an idle role: True as soon as any of the partitions
        delivers a message there, or the fetch meets anything but the end of the
        partition (an error the next read reports itself); False when the time is
        up. Nothing is returned or consumed: the next read fetches from its own
        frontier. The broker answers a waiting fetch as soon as data arrives
        (librdkafka's mock cluster only after ``fetch.wait.max.ms``).
        """
        if not positions:
            return False
        deadline = time.monotonic() + timeout
        try:
            self._c.assign([TopicPartition(self.topic, p, off) for p, off in positions.items()])
            try:
                while (left := deadline - time.monotonic()) > 0:
                    for m in self._c.consume(num_messages=1, timeout=left):
                        err = m.error()
                        if err is None or err.code() != _DriverError._PARTITION_EOF:
                            return True
            finally:
                self._c.unassign()
        except KafkaException:
            return True  # the next read meets it and says what it is
        return False

    def messages(
        self,
        partition: int,
        start: int,
        end: int,
        timeout: float = 30.0,
        limit: int | None = None,
    ) -> Generator[Any, None, None]:
        """Every message of [start, end) in offset order (raw confluent-kafka messages).

        ``scan`` one message at a time; the same range, limit and errors.
        """
        with contextlib.closing(self.scan(partition, start, end, timeout, limit)) as scan:
            for run in scan:
                yield from run

    def scan(
        self,
        partition: int,
        start: int,
        end: int,
        timeout: float = 30.0,
        limit: int | None = None,
    ) -> Generator[list[Any], None, None]:
        """Every message of [start, end) in offset order, in runs (non-empty lists) as fetched.

        Stops after ``limit`` messages when given. Offsets that deliver nothing
        (gaps) are passed over: the scan is complete once a message at or past
        ``end`` arrives or the partition's end is reached at or past ``end``.
        Raises OffsetLost when ``start`` is no longer retained, KafkaUnavailable
        when the partition stops answering for ``timeout`` seconds; the
        messages fetched before the failure are given first.

        Readers of many messages take whole runs: one generator step per fetch
        instead of one per message.
        """
        if start >= end or limit == 0:
            return
        self._c.assign([TopicPartition(self.topic, partition, start)])
        try:
            expected = start
            given = 0
            idle = 0.0
            while True:
                want = min(10_000, end - expected, limit - given if limit is not None else 10_000)
                batch = self._c.consume(num_messages=max(1, want), timeout=0.5)
                if not batch:
                    idle += 0.5
                    if idle >= timeout:
                        msg = (
                            f"{self.topic}[{partition}] stopped answering at offset {expected}"
                            f" (reading up to {end})"
                        )
                        raise KafkaUnavailable(msg + _at(self.bootstrap))
                    continue
                idle = 0.0
                run: list[Any] = []
                add = run.append
                done = False
                failure: Exception | None = None
                room = limit - given if limit is not None else len(batch) + 1  # never reached
                for m in batch:
                    err = m.error()
                    if err is not None:
                        if err.code() == _DriverError._PARTITION_EOF:
                            if _offset(m) >= end:
                                done = True  # the rest of the range is a gap up to the end
                                break
                            continue  # the end is still below ``end``: wait for more
                        if err.code() == _DriverError._AUTO_OFFSET_RESET:
                            msg = (
                                f"{self.topic}[{partition}] no longer holds offset {expected}:"
                                f" retention removed it ({err.str()})"
                            )
                            failure = OffsetLost(msg)
                        else:
                            msg = f"reading {self.topic}[{partition}]: {err.name()}: {err.str()}"
                            if err.code() in _UNAVAILABLE:
                                failure = KafkaUnavailable(msg + _at(self.bootstrap))
                            else:
                                failure = KafkaError(msg)
                        break
                    off = _offset(m)
                    if off < expected:
                        continue
                    if off >= end:
                        done = True
                        break
                    expected = off + 1
                    add(m)
                    if expected >= end or len(run) >= room:
                        done = True  # the range is covered: never wait a fetch for what lies past it
                        break
                if run:
                    given += len(run)
                    yield run
                if failure is not None:
                    raise failure
                if done:
                    return
        except KafkaException as e:
            msg_0 = f"reading {self.topic}[{partition}]"
            raise _raise_from(msg_0, e, self.bootstrap) from e
        finally:
            self._c.unassign()

    def read(
        self,
        partition: int,
        start: int,
        end: int,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> tuple[list[Any], int]:
        """(messages, position): a bounded prefix of [start, end) and where the scan ended.

        The prefix ends after ``limit`` messages or after the message that brings
        their key and value bytes to ``max_bytes``, whichever comes first; it
        holds at least one message when the range delivers any (a single message
        above the budget is read alone). ``position`` is exclusive: every message
        below it has been returned. It is ``end`` unless the prefix was cut; then
        it is the last message's offset + 1.
        """
        msgs: list[Any] = []
        size = 0
        with contextlib.closing(self.scan(partition, start, end, limit=limit)) as scan:
            for run in scan:
                if max_bytes is not None:
                    sizes = [len(m.value() or b"") + len(m.key() or b"") for m in run]
                    after = size + sum(sizes)
                    if after >= max_bytes:
                        for i, total in enumerate(itertools.accumulate(sizes, initial=size)):
                            if i and total >= max_bytes and run[i - 1].offset() + 1 < end:
                                msgs += run[:i]
                                return msgs, run[i - 1].offset() + 1
                    size = after
                msgs += run
        if limit is not None and msgs and len(msgs) >= limit:
            return msgs, msgs[-1].offset() + 1
        return msgs, max(start, end)

    def records(
        self,
        source: str,
        partition: int,
        start: int,
        end: int,
        marker: tuple[int, Marker] | None = None,
    ) -> Iterator[tuple[Record | None, Any]]:
        """(Record, message) pairs of [start, end); the recorded marker gives (None, message).

        ``marker`` is the (offset, content) a namespace recorded for this partition.
        Any other message carrying the marker header is a record flagged
        ``reserved_header`` (quarantined downstream, never silently skipped).
        """
        for m in self.messages(partition, start, end):
            rec, _ = to_record(source, partition, m, marker)
            yield rec, m


def reserved_flag(m: Any, marker: tuple[int, Marker] | None) -> bool | None:
    """Whether a message counts as carrying the reserved marker header; None for the
    recorded marker itself (``marker``: the (offset, content) a namespace recorded).

    A message whose headers cannot be read (a header name that is not valid
    UTF-8) cannot be shown to be free of the reserved header, so it counts as
    carrying it: never the marker, always a record rejected as RESERVED_HEADER,
    by the worker and the oracle alike (both read through here).
    """
    return _flag(m, read_headers(m), marker)


def _flag(
    m: Any, headers: list[tuple[str, bytes]] | None | Unreadable, marker: tuple[int, Marker] | None
) -> bool | None:
    """``reserved_flag`` of ``m`` with its headers already read."""
    if headers is UNREADABLE:
        return True
    reserved = is_marker(headers)
    if reserved and marker is not None and m.offset() == marker[0] and Marker.parse(m.value()) == marker[1]:
        return None
    return reserved


def _headers_of(run: list[Any]) -> list[list[tuple[str, bytes]] | None | Unreadable]:
    """``read_headers`` of every message of ``run``, each message's headers read once."""
    out: list[list[tuple[str, bytes]] | None | Unreadable] = []
    add, headers = out.append, _HEADERS
    while len(out) < len(run):
        try:
            for m in itertools.islice(run, len(out), None):
                add(headers(m))
        except _UNREADABLE_HEADERS:
            add(UNREADABLE)  # the message at this position raised: never touched again
    return out


def reserved_flags(run: list[Any], marker: tuple[int, Marker] | None) -> list[bool | None]:
    """``reserved_flag`` of every message of ``run`` (a ``Reader.scan`` run).

    Messages without headers, nearly all of them, carry no marker header: a run
    without any header costs one header read per message and nothing else.
    """
    headers = _headers_of(run)
    if not any(headers):
        return [False] * len(run)
    return [False if h is None else _flag(m, h, marker) for m, h in zip(run, headers, strict=True)]


def to_record(
    source: str, partition: int, m: Any, marker: tuple[int, Marker] | None
) -> tuple[Record | None, bool]:
    """The record a message stands for: (None, True) for the recorded marker itself.

    The second value tells whether the message carried the marker header (see
    ``reserved_flag``). Key and value are raw bytes and cannot fail to convert.
    """
    reserved = reserved_flag(m, marker)
    if reserved is None:
        return None, True
    return Record(m.value() or b"", m.key(), Coordinates(source, partition, m.offset()), reserved), reserved


def to_records(
    source: str, partition: int, run: list[Any], marker: tuple[int, Marker] | None
) -> list[Record]:
    """``to_record`` of every message of ``run`` (a ``Reader.scan`` run), the recorded
    marker left out: the records, in offset order."""
    return [
        Record(m.value() or b"", m.key(), Coordinates(source, partition, m.offset()), flag)
        for m, flag in zip(run, reserved_flags(run, marker), strict=True)
        if flag is not None
    ]


class Writer:
    """Idempotent producer; ``flush`` raises when any message was not delivered."""

    def __init__(self, bootstrap: str, **extra: Any) -> None:
        self.bootstrap = bootstrap
        try:
            self._p = Producer(producer_config(bootstrap, **extra))
        except KafkaException as e:
            msg = "cannot create a Kafka producer"
            raise _raise_from(msg, e) from e
        self.failures: list[str] = []
        self.unreachable = True
        """Every failure so far is the cluster not answering (delivery timed out, transport)."""
        self.delivered: list[tuple[int, int]] = []
        """(partition, offset) of every delivered message, in delivery order."""
        self._unpolled = 0

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(f"{err.name()}: {err.str()}")
            self.unreachable = self.unreachable and err.code() in _UNDELIVERED
        else:
            self.delivered.append((msg.partition(), msg.offset()))

    def produce(
        self,
        topic: str,
        partition: int,
        value: bytes,
        key: bytes | None,
        headers: list[tuple[str, str | bytes | None]] | None = None,
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
        headers: list[tuple[str, str | bytes | None]] | None = None,
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
                raise _raise_from(msg, e, self.bootstrap) from e
        # Delivery reports are served by every flush (each batch ends with one) and by a poll
        # every POLL_EVERY messages in between; a poll per message cost a fifth of produce.
        self._unpolled += 1
        if self._unpolled >= POLL_EVERY:
            self._unpolled = 0
            self._p.poll(0)

    def flush_quietly(self, timeout: float = 30.0) -> int:
        """Wait for delivery reports; returns how many messages are still undelivered."""
        return int(self._p.flush(timeout))

    def flush(self, timeout: float = 60.0) -> None:
        """Wait for every delivery; KafkaUnavailable when the cluster did not take them, else KafkaError."""
        left = self._p.flush(timeout)
        where = f"Kafka at {self.bootstrap}"
        if left:
            msg = (
                f"{where} did not acknowledge {left} messages within {timeout:.0f}s (not delivered);"
                " check that the broker is up and reachable"
            )
            raise KafkaUnavailable(msg)
        if self.failures:
            first = self.failures[0]
            n = len(self.failures)
            unreachable = self.unreachable
            self.failures = []
            self.unreachable = True
            if unreachable:
                msg = (
                    f"{where}: {n} messages not delivered: {first}; the broker stopped answering"
                    " (check that it is up and reachable)"
                )
                raise KafkaUnavailable(msg)
            msg = f"{n} messages failed: {first}"
            raise KafkaError(msg)
