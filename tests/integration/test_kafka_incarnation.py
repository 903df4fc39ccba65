"""Source incarnation, marker header and non-contiguous offsets, against real Kafka and PostgreSQL.

The real Apache Kafka broker reports topic IDs, writes transaction control
records and never delivers aborted records to read-committed readers; the
librdkafka mock cluster is used only where a cluster *without* topic IDs is
the point of the test (it cannot answer DescribeTopics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from amends_core.ledger import RejectReason
from amends_core.oracle import compute as oracle_compute
from amends_core.oracle.source import gather
from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import MARKER_HEADER, Reader, Writer
from amends_pipeline.manifest import IncarnationMismatch, SourceLost, check_source
from amends_pipeline.ops.provision import provision
from amends_pipeline.ops.replay import drain, replay
from amends_pipeline.ops.verify import read_partition, verify_namespace
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime
from tests import builders as b


@pytest.fixture
def runtime(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[tuple[Runtime, str, str]]:
    """A runtime on the shared real broker and the test's schema, with its topic names."""
    rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=kafka_broker.bootstrap)
    yield rt, topic_name("source"), topic_name("output")


def produce(bootstrap: str, topic: str, values: list[bytes], headers: list[tuple[str, bytes]] | None = None) -> None:
    w = Writer(bootstrap)
    for v in values:
        w.produce(topic, 0, v, b.K1.transport_key(), headers)
    w.flush()


def txns(*ids: str, qty: int = -1) -> list[bytes]:
    return [b.value(b.txn(t, qty=qty, valid=b.day(2))) for t in ids]


# ---------------------------------------------------------------- topic IDs


def test_provision_records_the_topic_id_the_broker_reports(runtime, kafka_broker: RealBroker) -> None:
    rt, src, out = runtime
    m = provision(rt, src, out).manifest
    assert m.source_topic_id is not None
    assert m.source_topic_id == kafka_broker.topic_id(src)
    with rt.store() as store:
        assert rt.manifest(store).source_topic_id == m.source_topic_id


def test_a_recreated_topic_is_refused_by_topic_id_even_when_a_copied_marker_sits_at_the_recorded_offset(
    runtime, kafka_broker: RealBroker
) -> None:
    rt, src, out = runtime
    m = provision(rt, src, out).manifest
    old_id = m.source_topic_id
    kafka_broker.delete_topic(src)
    kafka_broker.create_topic(src, 1)
    # a perfect copy of the marker at the recorded offset: the marker alone would accept it
    w = Writer(kafka_broker.bootstrap)
    w.produce(src, 0, m.marker(0).to_bytes(), None, [(MARKER_HEADER, b"1")])
    w.flush()
    assert w.delivered == [(0, m.markers[0])]
    new_id = kafka_broker.topic_id(src)
    with rt.reader(src) as r, pytest.raises(IncarnationMismatch) as caught:
        check_source(r, m, {0: 0})
    text = str(caught.value)
    assert old_id in text and new_id in text and "recreated" in text
    assert len(text.splitlines()) == 1


def test_a_cluster_without_topic_ids_binds_by_marker_and_accepts_retention_past_it(
    pg_dsn: str, pg_schema: str, tmp_path: Path
) -> None:
    # Mock cluster: the point is a cluster that reports no topic IDs.
    with DevBroker(topics={"src": 1, "out": 1}, workdir=tmp_path) as broker:
        bootstrap = broker.env()["AMENDS_KAFKA_BOOTSTRAP"]
        rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=bootstrap)
        m = provision(rt, "src", "out").manifest
        assert m.source_topic_id is None
        produce(bootstrap, "src", txns("A", "B", "C"))
        drain(rt, 100)
        assert verify_namespace(rt).status.value == "PASS"
        assert m.markers[0] == 0
        broker.delete_records("src", 0, 1)  # only the marker is gone
        with rt.reader("src") as r:
            check_source(r, m, {0: 4})  # the worker's frontier: consistent, accepted
            check_source(r, m, {0: 0})  # nothing but the marker below offset 1
        produce(bootstrap, "src", txns("D"))
        drain(rt, 100)
        assert verify_namespace(rt).status.value == "PASS"
        broker.delete_records("src", 0, 2)  # now record A at offset 1 is gone too
        with rt.reader("src") as r:
            check_source(r, m, {0: 5})
            with pytest.raises(SourceLost, match="never skipped"):
                check_source(r, m, {0: 0})
        report = verify_namespace(rt)
        assert report.status.value == "INCOMPLETE"
        assert any("1 records the pipeline consumed are no longer in the topic" in x
                   for x in report.boundary_reasons)
        broker.delete_topic("src")
        broker.create_topic("src", 1)
        produce(bootstrap, "src", txns("X", "Y", "Z", "W", "V", "U"))
        with rt.reader("src") as r, pytest.raises(IncarnationMismatch, match="marker"):
            check_source(r, m, {0: 5})


# ---------------------------------------------------------------- the marker header


def test_only_the_recorded_marker_is_skipped_and_other_marker_headers_are_quarantined_alike_by_worker_and_oracle(
    runtime, kafka_broker: RealBroker
) -> None:
    rt, src, out = runtime
    m = provision(rt, src, out).manifest
    produce(kafka_broker.bootstrap, src, txns("A"))
    produce(kafka_broker.bootstrap, src, txns("HIDDEN", qty=-90), [(MARKER_HEADER, b"1")])
    produce(kafka_broker.bootstrap, src, [m.marker(0).to_bytes()], [(MARKER_HEADER, b"1")])  # a copy
    produce(kafka_broker.bootstrap, src, txns("B"))
    drain(rt, 100)
    with rt.store() as store:
        snap = store.snapshot(evidence=False, outbox="none")
        assert snap.frontier(0) == m.markers[0] + 5
    quarantined = [(r.record.coords.offset, r.reason) for r in snap.rejections]
    spoofed = [m.markers[0] + 2, m.markers[0] + 3]
    assert quarantined == [(o, RejectReason.RESERVED_HEADER) for o in spoofed]
    with rt.reader(src) as r:
        low = r.watermarks(0).low
        source = {0: read_partition(r, m, 0, low, snap.frontier(0))}
        oracle = oracle_compute(rt.cfg, source)
        # the oracle's columns hold exactly the records the worker's route makes of the same messages
        as_records = [x for x, _ in r.records(m.source_incarnation, 0, low, snap.frontier(0), m.marker_at(0))]
    assert None in as_records  # the recorded marker is in the range, and left out of both
    rows = gather(rt.cfg, source).records(range(len(source[0])))
    assert rows == [x for x in as_records if x is not None]
    assert [x.reserved_header for x in rows].count(True) == 2
    assert [(x.record.coords.offset, x.reason) for x in oracle.rejections] == quarantined
    report = verify_namespace(rt)
    assert report.status.value == "PASS_WITH_EXCLUSIONS"
    assert report.accepts(list(snap.rejections), [])
    assert replay(rt, 0, 0, snap.frontier(0), execute=False).records == 4  # reflected exactly


# ---------------------------------------------------------------- offsets with gaps


def test_a_read_ending_in_transaction_control_records_reaches_the_end_without_waiting(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    t = topic_name("txn")
    kafka_broker.create_topic(t, 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": t, "log_level": 3})
    p.init_transactions(30)
    p.begin_transaction()
    for v in (b"c1", b"c2"):
        p.produce(t, v, partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in (b"a1", b"a2"):
        p.produce(t, v, partition=0)
    p.flush(30)
    p.abort_transaction(30)
    with Reader(kafka_broker.bootstrap, t) as r:
        high = r.watermarks(0).high
        assert high == 6  # 2 committed, a commit marker, 2 aborted, an abort marker
        msgs, position = r.read(0, 0, high)
        assert [m.value() for m in msgs] == [b"c1", b"c2"]
        assert position == high
        assert r.read(0, 2, high) == ([], high)  # nothing deliverable at all
        msgs, position = r.read(0, 0, high, limit=1)
        assert [m.value() for m in msgs] == [b"c1"] and position == 1


def test_a_worker_step_over_a_range_without_deliverable_records_still_advances_the_frontier(
    runtime, kafka_broker: RealBroker
) -> None:
    rt, src, out = runtime
    m = provision(rt, src, out).manifest
    produce(kafka_broker.bootstrap, src, txns("A"))
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap, "transactional.id": src, "log_level": 3})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(src, txns("ABORTED", qty=-99)[0], key=b.K1.transport_key(), partition=0)
    p.flush(30)
    p.abort_transaction(30)
    with rt.store() as store, rt.reader(src) as reader:
        w = WorkerPartition(store, reader, m, 0, batch_size=100)
        first = w.step()
        high = reader.watermarks(0).high
        assert (first.records, first.frontier) == (1, high)
        assert store.frontier(0) == high == m.markers[0] + 4
        assert w.step().records == 0 and store.frontier(0) == high
    drain(rt, 100)
    assert verify_namespace(rt).status.value == "PASS"
