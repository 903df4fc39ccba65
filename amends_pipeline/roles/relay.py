"""The relay role: ordered outbox rows -> the output topic, bytes unchanged.

Resume contract: the acknowledged outbox prefix is the only progress. A relay
publishes the earliest pending rows in sequence order, waits for the broker's
delivery reports, then records receipts and acknowledges exactly the
delivered prefix. A retry republishes the stored bytes (same sequence,
version and content), so a lost delivery report can only duplicate a message
in the output log, which the view recognises; it can never skip or reorder
intent. One relay per source partition is enforced with a PostgreSQL
session advisory lock.

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
from dataclasses import dataclass
from typing import Any

import psycopg

from amends_core import wire
from amends_core.errors import OperationError
from amends_core.ledger import Family, OutputID, StockKey
from amends_core.timefmt import parse_day
from amends_pipeline.kafka.topics import KafkaUnavailable, Writer
from amends_pipeline.postgres.connection import open_connection
from amends_pipeline.postgres.errors import translate
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.runtime import Runtime

_UNANSWERED = frozenset({"_MSG_TIMED_OUT", "_TIMED_OUT", "_TRANSPORT", "_ALL_BROKERS_DOWN"})
"""Delivery failures that only say the cluster did not answer in time (down or restarting)."""


class RelayBusy(OperationError):
    """Another relay holds this partition."""


@dataclass(frozen=True, slots=True)
class RelayResult:
    partition: int
    published: int
    acknowledged: int
    pending_after: int
    seconds: float


def output_key(envelope: bytes) -> bytes:
    """The Kafka message key of an envelope: its output ID, encoded as ``OutputID.encoded``.

    A plain JSON parse instead of the strict decoder (about five times cheaper
    per row); bytes the fast path cannot read go through the strict decoder,
    whose message says what is wrong.
    """
    try:
        oid = json.loads(envelope)["output_id"]
        sk = oid["stock_key"]
        day = oid["day"]
        ident = OutputID(
            oid["namespace"], Family(oid["family"]), StockKey(sk["item"], sk["location"]),
            None if day is None else parse_day(day),
        )
    except (ValueError, KeyError, TypeError):
        dec = wire.decode_envelope(envelope)
        if isinstance(dec, wire.DecodeError):
            msg = f"not a valid envelope ({dec.message}), so it has no output ID to key it by"
            raise OperationError(msg) from None
        ident = dec.output_id
    return ident.encoded.encode("utf-8")


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


class RelayPartition:
    def __init__(
        self, store: PgStore, writer: Writer, topic: str, partition: int, *, batch_size: int = 1000
    ) -> None:
        self.store = store
        self.writer = writer
        self.topic = topic
        self.partition = partition
        self.batch_size = batch_size

    def step(self) -> RelayResult:
        """Publish and acknowledge at most one batch of pending rows."""
        t0 = time.perf_counter()
        p = self.partition
        rows = self.store.pending(p, limit=self.batch_size)
        if not rows:
            return RelayResult(p, 0, 0, 0, time.perf_counter() - t0)
        delivered: dict[int, int] = {}
        failures: list[tuple[str, str]] = []

        def report(seq: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is None:
                    delivered[seq] = msg.offset()
                else:
                    failures.append((err.name(), f"{err.name()}: {err.str()}"))
            return cb

        for r in rows:
            try:
                key = output_key(r.envelope)
            except OperationError as e:
                msg = f"outbox row {r.sequence} of partition {p} is {e}"
                raise OperationError(msg) from None
            self.writer.produce_raw(self.topic, p, r.envelope, key, report(r.sequence))
        self.writer.flush_quietly()
        receipts: list[tuple[int, int | None]] = []
        for r in rows:  # acknowledge only the consecutive delivered prefix
            if r.sequence not in delivered:
                break
            receipts.append((r.sequence, delivered[r.sequence]))
        if receipts:
            self.store.acknowledge_many(p, receipts)
        if len(receipts) < len(rows):
            why = failures[0][1] if failures else "no delivery report in time"
            msg = f"published {len(receipts)} of {len(rows)} rows on partition {p}: {why}"
            if all(name in _UNANSWERED for name, _ in failures):
                # Nothing refused the rows, the cluster just did not answer in time: the
                # loop retries (transient), and a retry republishes the same stored bytes.
                raise KafkaUnavailable(msg)
            raise OperationError(msg)
        return RelayResult(p, len(rows), len(receipts), self.store.pending_count(p), time.perf_counter() - t0)


def relay_running(rt: Runtime, partition: int) -> bool:
    """Whether some session holds the relay lock of a partition (probe by try-lock)."""
    try:
        lock = RelayLock(rt.dsn, rt.schema, rt.cfg.namespace, partition)
    except RelayBusy:
        return True
    lock.close()
    return False
