"""Idle roles wait for work and are woken by it; a lost wake-up only delays (issue 16 item 5).

The relay waits on ``LISTEN`` for the NOTIFY that every processing commit
issues in its own transaction; the worker and the view wait in a Kafka fetch.
Nothing here measures speed: with the fallback poll set to an hour, a row
relayed before the test's deadline can only have been relayed by the wake-up;
with a listener that can hear nothing, rows are still relayed by the poll.
Real PostgreSQL and a real Kafka broker.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.wake import OutboxListener, outbox_channel
from amends_pipeline.roles.loop import Stop, run_loop
from amends_pipeline.roles.relay import RelayPartition
from tests import builders as b

HOUR = 3600.0
DEADLINE = 60.0
"""How long the test waits for an outcome: far below the hour-long fallback poll."""


class Recorded:
    """A wait that records what each call returned."""

    def __init__(self, wait: Callable[[float], bool]) -> None:
        self.inner = wait
        self.calls: list[bool] = []
        self.entered = threading.Event()

    def __call__(self, seconds: float) -> bool:
        self.entered.set()
        woke = self.inner(seconds)
        self.calls.append(woke)
        return woke


@contextmanager
def relay_loop(relay: RelayPartition, wait: Recorded, fallback_poll: float) -> Iterator[Stop]:
    """The relay's role loop in a thread, as ``amends role relay`` runs it."""
    stop = Stop()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            run_loop([lambda: relay.step().published], stop, wait=wait, fallback_poll=fallback_poll)
        except BaseException as e:
            failed.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    try:
        yield stop
    finally:
        stop.event.set()
        t.join(30)
    assert not t.is_alive() and not failed, failed


def acknowledged(admin: psycopg.Connection[Any], store: PgStore) -> bool:
    """Every committed outbox row of partition 0 is acknowledged by the relay."""
    row = admin.execute(
        "SELECT p.last_sequence, coalesce(r.acked_sequence, 0) FROM partitions p"
        " LEFT JOIN relay_progress r USING (ns_id, partition) WHERE p.ns_id = %s AND p.partition = 0",
        (store.ns_id,),
    ).fetchone()
    assert row is not None
    return row[0] > 0 and row[1] >= row[0]


def eventually(check: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_an_idle_relay_is_woken_by_the_workers_commit_not_by_its_fallback_poll(
    pg_dsn: str,
    pg_schema: str,
    open_store: Callable[..., PgStore],
    admin: psycopg.Connection[Any],
    kafka_broker: RealBroker,
    topic_name: Callable[[str], str],
) -> None:
    cfg = b.config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, cfg.partitions)
    worker, relay_store = open_store(cfg), open_store(cfg)
    listener = OutboxListener(pg_dsn, pg_schema, cfg.namespace)
    listener.listen()
    wait = Recorded(listener.wait)
    relay = RelayPartition(relay_store, Writer(kafka_broker.bootstrap), topic, 0)
    try:
        with relay_loop(relay, wait, fallback_poll=HOUR):
            assert wait.entered.wait(DEADLINE)  # idle: nothing to relay yet, waiting for up to an hour
            tok = worker.claim(0)
            worker.process(tok, 0, b.records([b.txn("W1", qty=-5), b.txn("W2", qty=-7, valid=b.day(2))]))
            assert eventually(lambda: acknowledged(admin, worker))
    finally:
        listener.close()
    assert True in wait.calls  # woken, not timed out
    with Reader(kafka_broker.bootstrap, topic) as reader:
        assert reader.watermarks(0).high > 0


def test_rows_whose_notification_is_never_heard_are_still_relayed_by_the_fallback_poll(
    pg_dsn: str,
    pg_schema: str,
    open_store: Callable[..., PgStore],
    admin: psycopg.Connection[Any],
    kafka_broker: RealBroker,
    topic_name: Callable[[str], str],
) -> None:
    cfg = b.config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, cfg.partitions)
    worker, relay_store = open_store(cfg), open_store(cfg)
    # Listening on another namespace's channel: this namespace's notifications are lost to it.
    deaf = OutboxListener(pg_dsn, pg_schema, cfg.namespace + "-elsewhere")
    deaf.listen()
    wait = Recorded(deaf.wait)
    relay = RelayPartition(relay_store, Writer(kafka_broker.bootstrap), topic, 0)
    try:
        with relay_loop(relay, wait, fallback_poll=0.2):
            assert wait.entered.wait(DEADLINE)
            tok = worker.claim(0)
            worker.process(tok, 0, b.records([b.txn("L1", qty=-5)]))
            assert eventually(lambda: acknowledged(admin, worker))
    finally:
        deaf.close()
    assert True not in wait.calls  # never woken: the poll found the rows


def test_the_notification_is_sent_by_a_processing_commit_only_and_carries_no_data(
    pg_dsn: str, pg_schema: str, open_store: Callable[..., PgStore],
) -> None:
    cfg = b.config()
    store = open_store(cfg)
    assert store.outbox_channel == outbox_channel(pg_schema, cfg.namespace)
    assert outbox_channel(pg_schema, cfg.namespace) != outbox_channel(pg_schema + "x", cfg.namespace)
    listener = OutboxListener(pg_dsn, pg_schema, cfg.namespace)
    listener.listen()
    raw = psycopg.connect(pg_dsn, autocommit=True)
    raw.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(store.outbox_channel)))
    try:
        tok = store.claim(0)
        with store.begin(tok, 0) as tx:  # left without commit: rolled back, its NOTIFY never delivered
            tx.apply(b.records([b.txn("R1", qty=-1)]))
            tx.notify(store.outbox_channel)
        assert listener.wait(0.5) is False
        store.process(tok, 0, b.records([b.txn("R1", qty=-1)]))
        assert listener.wait(DEADLINE) is True
        got = list(raw.notifies(timeout=DEADLINE, stop_after=1))
        assert [n.payload for n in got] == [""]  # a wake-up only
    finally:
        listener.close()
        raw.close()


def test_a_reader_wait_returns_on_a_message_past_the_position_and_false_when_none_comes(
    kafka_broker: RealBroker, topic_name: Callable[[str], str],
) -> None:
    topic = topic_name("source")
    kafka_broker.create_topic(topic, 1)
    w = Writer(kafka_broker.bootstrap)
    w.produce(topic, 0, b"v0", b"k")
    w.flush()
    with Reader(kafka_broker.bootstrap, topic) as reader:
        assert reader.wait({0: 0}, DEADLINE) is True  # already there
        assert reader.wait({0: 1}, 0.3) is False  # nothing past the end
        woke: list[bool] = []
        t = threading.Thread(target=lambda: woke.append(reader.wait({0: 1}, DEADLINE)), daemon=True)
        t.start()
        time.sleep(0.2)
        w.produce(topic, 0, b"v1", b"k")
        w.flush()
        t.join(DEADLINE)
        assert woke == [True]
        assert [m.value() for m in reader.messages(0, 0, 2)] == [b"v0", b"v1"]  # nothing was consumed away


def test_a_busy_relay_drains_what_it_heard_and_a_later_commit_still_wakes_it(
    pg_dsn: str, pg_schema: str, open_store: Callable[..., PgStore],
) -> None:
    # A relay that never idles never waits; drain is how its session reads its notifications.
    cfg = b.config()
    store = open_store(cfg)
    listener = OutboxListener(pg_dsn, pg_schema, cfg.namespace)
    listener.listen()
    try:
        tok = store.claim(0)
        for i in range(3):
            store.process(tok, i, b.records([b.txn(f"D{i}", qty=-1)], start=i))
        heard = 0
        deadline = time.monotonic() + DEADLINE
        while heard < 3 and time.monotonic() < deadline:
            heard += listener.drain()
        assert heard == 3  # one per committed batch, none left behind
        assert listener.drain() == 0
        assert listener.wait(0.3) is False  # nothing heard is pending any more
        store.process(tok, 3, b.records([b.txn("D3", qty=-1)], start=3))
        assert listener.wait(DEADLINE) is True
    finally:
        listener.close()
    assert listener.drain() == 0  # a closed listener drains nothing and does not raise
