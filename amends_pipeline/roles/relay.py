"""The relay role in production: the core relay step over a PgStore outbox and Kafka.

The logic and its resume contract are ``amends_core.roles.relay``. Here: the
output topic as an ``OutputLog`` (``KafkaOutput``), and one relay per source
partition, enforced with a PostgreSQL session advisory lock (``RelayLock``).

Every message is keyed by the envelope's encoded output ID, the identity the
view's version rule works on: the output topic is log-compacted, so the log
keeps the latest envelope of every output ID (withdrawals included, as
envelopes with ``present: false``; never Kafka null-value tombstones) and a
view can rebuild itself from offset 0.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import psycopg

from amends_core import wire
from amends_core.errors import OperationError
from amends_core.ledger import Family, output_id_text
from amends_core.ports import Delivery
from amends_core.roles.relay import Relay, RelayResult
from amends_core.timefmt import parse_day
from amends_pipeline.kafka.topics import KafkaUnavailable, Writer
from amends_pipeline.postgres.connection import open_connection
from amends_pipeline.postgres.errors import translate
from amends_pipeline.postgres.store import OutboxEntry, PgStore
from amends_pipeline.runtime import Runtime

_UNANSWERED = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"})
"""Delivery failures that only say the cluster did not answer in time (down or restarting)."""


class RelayBusy(OperationError):
    """Another relay holds this partition."""


class _StockKeyDoc(msgspec.Struct, gc=False):
    item: str
    location: str


class _OutputIDDoc(msgspec.Struct, gc=False):
    namespace: str
    family: str
    stock_key: _StockKeyDoc
    day: str | None


class _KeyOfEnvelope(msgspec.Struct, gc=False):
    """The members of an envelope ``output_key`` reads; the rest is checked as JSON, never built."""

    output_id: _OutputIDDoc


_KEY_OF_ENVELOPE = msgspec.json.Decoder(_KeyOfEnvelope, strict=True)
_FAMILY_VALUES = frozenset(f.value for f in Family)
"""What ``Family(...)`` accepts, checked without building the member (once per outbox row)."""


def output_key(envelope: bytes) -> bytes:
    """The Kafka message key of an envelope: its output ID, encoded as ``OutputID.encoded``.

    A lenient parse of the output ID alone instead of the strict decoder
    (msgspec skips the payload and cause without building them: about ten
    times cheaper per row); bytes it cannot read go through the strict
    decoder, whose message says what is wrong.

    The fast path writes ``OutputID.encoded``'s array directly, with the family
    and the day checked as ``OutputID`` would take them (a day that parses is
    already written the way ``format_day`` writes it).
    """
    try:
        oid = _KEY_OF_ENVELOPE.decode(envelope).output_id
        sk = oid.stock_key
        if oid.day is not None:
            parse_day(oid.day)
        if oid.family not in _FAMILY_VALUES:
            raise ValueError(oid.family)  # the strict decoder words it
        key = output_id_text(oid.namespace, oid.family, sk.item, sk.location, oid.day)
    except (ValueError, msgspec.DecodeError):  # ValidationError included
        dec = wire.decode_envelope(envelope)
        if isinstance(dec, wire.DecodeError):
            msg = f"not a valid envelope ({dec.message}), so it has no output ID to key it by"
            raise OperationError(msg) from None
        key = dec.output_id.encoded
    return key.encode("utf-8")


def _lock_id(schema: str, namespace: str, partition: int) -> int:
    """The advisory-lock key of one relay partition.

    Advisory locks are per database, not per schema: the schema is part of the
    key, so namespaces of the same name in two schemas of one database (two
    environments, a test and a demo) never block each other's relays.
    """
    ident = json.dumps(["amends-relay", schema, namespace, partition], separators=(",", ":"))
    digest = hashlib.sha256(ident.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class RelayLock:
    """Session advisory lock: held while the process (and its session) lives."""

    def __init__(self, conninfo: str, schema: str, namespace: str, partition: int) -> None:
        self.conn = open_connection(conninfo, schema, application_name="amends-relay-lock")
        key = _lock_id(schema, namespace, partition)
        try:
            row = self.conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
        except psycopg.Error as e:  # a lost session is StoreUnavailable (retried at start-up)
            self.conn.close()
            raise translate(e, f"locking relay partition {partition} of {namespace!r}") from e
        if not row or not row[0]:
            self.conn.close()
            msg = f"another relay already publishes partition {partition} of {namespace!r}"
            raise RelayBusy(msg)

    def close(self) -> None:
        self.conn.close()


class KafkaOutput:
    """The output topic as a relay publishes to it (the ``OutputLog`` port).

    Every message is keyed by its envelope's output ID (``output_key``) and
    sent to the outbox's own partition; the stored bytes go out unchanged.
    """

    def __init__(self, writer: Writer, topic: str) -> None:
        self.writer = writer
        self.topic = topic

    def publish(self, partition: int, rows: Sequence[OutboxEntry]) -> Delivery:
        delivery = Delivery()
        names: list[str] = []

        def report(seq: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    delivery.delivered[seq] = msg.offset()
                else:
                    names.append(err.name())
                    delivery.failures.append(f"{err.name()}: {err.str()}")
            return cb

        for r in rows:
            try:
                key = output_key(r.envelope)
            except OperationError as e:
                msg = f"outbox row {r.sequence} of partition {partition} is {e}"
                raise OperationError(msg) from None
            self.writer.produce_raw(self.topic, partition, r.envelope, key, report(r.sequence))
        self.writer.flush_quietly()
        delivery.unanswered = all(name in _UNANSWERED for name in names)
        return delivery

    def unavailable(self, message: str) -> Exception:
        return KafkaUnavailable(message)


class RelayPartition(Relay):
    """The core relay over a ``PgStore`` outbox and the output topic."""

    def __init__(
        self, store: PgStore, writer: Writer, topic: str, partition: int, *, batch_size: int = 1000
    ) -> None:
        super().__init__(
            store, KafkaOutput(writer, topic), partition, batch_size=batch_size, clock=time.perf_counter
        )
        self.store = store
        self.writer = writer
        self.topic = topic


def relay_running(rt: Runtime, partition: int) -> bool:
    """Whether some session holds the relay lock of a partition (probe by try-lock)."""
    try:
        lock = RelayLock(rt.dsn, rt.schema, rt.cfg.namespace, partition)
    except RelayBusy:
        return True
    lock.close()
    return False


__all__ = [
    "KafkaOutput", "RelayBusy", "RelayLock", "RelayPartition", "RelayResult", "output_key",
    "relay_running",
]
