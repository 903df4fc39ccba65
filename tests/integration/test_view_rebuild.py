"""Rebuilding the PostgreSQL view from the compacted output topic (real PostgreSQL, real Kafka).

The relay keys every envelope by its output ID, so Kafka's log cleaner keeps
the latest envelope of each ID; the view store's range guard and reset make
re-application from the start of the log safe while a view may be running.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
from confluent_kafka import TopicPartition

from amends_core import wire
from amends_core.ledger import Config
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Reader, Writer
from amends_pipeline.postgres.migrate import scratch_schema
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore
from amends_pipeline.roles.relay import RelayPartition, output_key
from amends_pipeline.roles.view import RebuildRefused, ViewPartition, rebuild_view
from tests import builders as b

COMPACTING_BROKER = {
    "log.roll.ms": "300",
    "log.cleaner.min.cleanable.ratio": "0.01",
    "log.cleaner.backoff.ms": "200",
    "log.cleaner.min.compaction.lag.ms": "0",
}


def two_key_config() -> Config:
    return b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2)


def publish(store: PgStore, writer: Writer, topic: str, parts: tuple[int, ...] = (0, 1)) -> None:
    """Relay every pending outbox row with the production relay step."""
    for p in parts:
        relay = RelayPartition(store, writer, topic, p)
        while relay.step().published:
            pass


def process(store: PgStore, partition: int, objs: list[dict[str, object]]) -> list[bytes]:
    tok = store.claim(partition)
    start = store.frontier(partition)
    out = store.process(tok, start, b.records(objs, partition=partition, start=start))
    return [r.envelope.to_bytes() for r in out.rows]


def read_log(bootstrap: str, topic: str, partition: int) -> list[tuple[int, bytes | None, bytes]]:
    with Reader(bootstrap, topic) as r:
        wm = r.watermarks(partition)
        return [(m.offset(), m.key(), m.value()) for m in r.messages(partition, wm.low, wm.high)]


def drain(view: PgViewStore, reader: Reader, parts: tuple[int, ...], batch: int = 5000) -> int:
    applied = 0
    for p in parts:
        v = ViewPartition(view, reader, p, batch_size=batch)
        while (n := v.step().applied):
            applied += n
    return applied


def corrections(key: b.StockKey, rounds: int) -> list[list[dict[str, object]]]:
    """Three days of activity, then ``rounds`` amendments of day 1 (each restates every day)."""
    first = [
        b.txn("I1", 1, "NEW", -50, b.day(1), key=key),
        b.txn("I2", 1, "NEW", -20, b.day(2), key=key),
        b.txn("R3", 1, "NEW", 50, b.day(3), key=key),
    ]
    later = [[b.txn("I1", 1 + r, "AMEND", -30 - 5 * r, b.day(1), key=key)] for r in range(1, rounds + 1)]
    return [first, *later, [b.txn("R3", 2, "CANCEL", 0, b.day(3), key=key)]]


def test_the_relay_keys_every_envelope_by_its_encoded_output_id(
    open_store: Callable[..., PgStore], kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    cfg = two_key_config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, 2, {"cleanup.policy": "compact"})
    store = open_store(cfg)
    for p, key in ((0, b.K1), (1, b.K2)):
        for stage in corrections(key, 1):
            process(store, p, stage)
    publish(store, Writer(kafka_broker.bootstrap), topic)
    families = set()
    for p in (0, 1):
        log = read_log(kafka_broker.bootstrap, topic, p)
        assert log
        for _, key, value in log:
            env = wire.decode_envelope(value)
            assert not isinstance(env, wire.DecodeError)
            assert key == output_key(value) == env.output_id.encoded.encode()
            families.add(env.output_id.family)
    assert len(families) == 3  # balance, alert and key status (the one without a day)


def test_an_outbox_row_that_is_not_an_envelope_cannot_be_keyed_and_says_which_row() -> None:
    from amends_core.errors import OperationError

    with pytest.raises(OperationError, match="no output ID"):
        output_key(b'{"not":"an envelope"}')


def test_a_brand_new_view_in_another_schema_rebuilt_from_the_compacted_log_equals_the_original(
    open_store: Callable[..., PgStore],
    open_view: Callable[..., PgViewStore],
    make_broker: Callable[..., RealBroker],
    pg_dsn: str,
) -> None:
    broker = make_broker(COMPACTING_BROKER)
    topic = "output"
    broker.create_topic(topic, 2, {"cleanup.policy": "compact"})
    cfg = two_key_config()
    store = open_store(cfg)
    writer = Writer(broker.bootstrap)
    original = open_view(cfg)
    stages = list(zip(corrections(b.K1, 3), corrections(b.K2, 3), strict=True))
    # a last stage with new output IDs only, so the segment holding the corrections rolls
    stages.append(([b.txn("LATE", 1, "NEW", 5, b.day(40), key=b.K1)],
                   [b.txn("LATE", 1, "NEW", 5, b.day(40), key=b.K2)]))
    with Reader(broker.bootstrap, topic) as reader:
        for s0, s1 in stages:
            process(store, 0, s0)
            process(store, 1, s1)
            publish(store, writer, topic)
            drain(original, reader, (0, 1))
            time.sleep(0.4)  # past log.roll.ms: the next stage starts a new segment
    want = original.snapshot()
    ids = {oid.encoded.encode() for oid in want.rows}

    deadline = time.monotonic() + 180
    while True:
        keys = [k for p in (0, 1) for _, k, _ in read_log(broker.bootstrap, topic, p)]
        if len(keys) == len(set(keys)) == len(ids):
            break
        assert time.monotonic() < deadline, "the log cleaner did not compact the output topic"
        time.sleep(0.5)
    assert set(keys) == ids

    with scratch_schema(pg_dsn, "t_inte_fresh") as other, PgViewStore.open(
        pg_dsn, cfg, schema=other
    ) as fresh, Reader(broker.bootstrap, topic) as reader:
        # batches of two offsets: many ranges are gaps the cleaner left, stepped over
        drain(fresh, reader, (0, 1), batch=2)
        got = fresh.snapshot()
    assert got.rows == want.rows
    assert got.frontiers == want.frontiers
    assert any(not env.payload.present for env in got.rows.values())  # deletion versions kept


def test_a_rebuild_keeps_rows_clears_the_stop_and_reapplication_only_confirms_them(
    open_store: Callable[..., PgStore], open_view: Callable[..., PgViewStore],
    kafka_broker: RealBroker, topic_name: Callable[[str], str],
) -> None:
    cfg = two_key_config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, 2, {"cleanup.policy": "compact"})
    store = open_store(cfg)
    for stage in corrections(b.K1, 2):
        process(store, 0, stage)
    publish(store, Writer(kafka_broker.bootstrap), topic, (0,))
    view = open_view(cfg)
    with Reader(kafka_broker.bootstrap, topic) as reader:
        drain(view, reader, (0,))
        before = view.snapshot()
        end = view.frontier(0)
        # a forged record stops the partition (as a foreign producer's would)
        log = read_log(kafka_broker.bootstrap, topic, 0)
        view.apply(0, [(end, b.forged(log[-1][2]))])
        assert view.stopped(0) is not None
        done = rebuild_view(view, reader, (0,))
        assert [(r.reset.frontier_before, r.log_start, r.log_end) for r in done] == [(end, 0, end)]
        assert done[0].reset.stopped_before is not None and done[0].reset.rows_discarded == 0
        assert view.progress(0) == (0, None)
        assert view.snapshot().rows == before.rows  # kept while the frontier is back at 0
        drain(view, reader, (0,))
    after = view.snapshot()
    assert after.rows == before.rows and after.frontiers == before.frontiers


def test_a_batch_read_before_a_rebuild_moved_the_frontier_is_not_applied(
    open_store: Callable[..., PgStore], open_view: Callable[..., PgViewStore]
) -> None:
    cfg = b.config()
    store = open_store(cfg)
    log = process(store, 0, corrections(b.K1, 1)[0])
    view = open_view(cfg)
    view.apply(0, list(enumerate(log)), start=0, end=len(log))
    assert view.frontier(0) == len(log)
    view.rebuild(0, 0, discard_rows=True)
    # a view process read [len, len+1) before the reset; applying it would jump the
    # frontier past the records the rebuild has to re-apply
    assert view.apply(0, [(len(log), log[0])], start=len(log), end=len(log) + 1) == []
    assert view.progress(0) == (0, None) and view.snapshot().rows == {}


def test_discarding_rows_is_refused_while_the_output_log_misses_its_start_and_nothing_is_reset(
    open_store: Callable[..., PgStore], open_view: Callable[..., PgViewStore],
    kafka_broker: RealBroker, topic_name: Callable[[str], str],
) -> None:
    cfg = two_key_config()
    topic = topic_name("output")
    kafka_broker.create_topic(topic, 2, {"cleanup.policy": "compact,delete"})
    store = open_store(cfg)
    for p, key in ((0, b.K1), (1, b.K2)):
        process(store, p, corrections(key, 1)[0])
    publish(store, Writer(kafka_broker.bootstrap), topic)
    view = open_view(cfg)
    with Reader(kafka_broker.bootstrap, topic) as reader:
        drain(view, reader, (0, 1))
        before = view.snapshot()
        admin = kafka_broker.admin()
        for f in admin.delete_records([TopicPartition(topic, 1, 2)]).values():
            f.result(timeout=30)
        with pytest.raises(RebuildRefused, match="partition 1 from offset 2"):
            rebuild_view(view, reader, (0, 1), discard_rows=True)
        assert view.snapshot() == before  # partition 0 was not reset either
        done = rebuild_view(view, reader, (0, 1))  # keeping rows is allowed
        assert [r.log_start for r in done] == [0, 2]
        drain(view, reader, (0, 1))
    assert view.snapshot() == before


def test_output_key_agrees_with_the_strict_decoder_on_every_family_and_odd_names(
    open_store: Callable[..., PgStore],
) -> None:
    odd = b.StockKey('PART "1"/\\x', "DÉPÔT,A")
    cfg = b.config([(odd, 100, 60, 0)])
    store = open_store(cfg)
    raws = []
    for stage in corrections(odd, 1):
        raws += process(store, 0, stage)
    assert raws
    for raw in raws:
        env = wire.decode_envelope(raw)
        assert not isinstance(env, wire.DecodeError)
        assert output_key(raw) == env.output_id.encoded.encode("utf-8")
        assert json.loads(output_key(raw))[2] == odd.item
