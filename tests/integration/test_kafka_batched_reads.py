"""Reading a partition in batches on the real broker: every batch boundary and byte budget returns the same messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import (
    MARKER_HEADER,
    Marker,
    Reader,
    Writer,
    reserved_flag,
    reserved_flags,
    to_record,
    to_records,
)


def _fill(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    w = Writer(bootstrap)
    for v in values:
        w.produce(topic, partition, v, None)
    w.flush()


def _batches(r: Reader, partition: int, start: int, end: int, limit: int, max_bytes: int | None = None) -> list[bytes]:
    got: list[bytes] = []
    pos = start
    while pos < end:
        msgs, pos = r.read(partition, pos, end, limit, max_bytes)
        got += [m.value() for m in msgs]
    return got


def test_reading_a_backlog_in_batches_returns_every_message_once_in_order(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    values = [f"m{i}".encode() for i in range(2500)]
    _fill(kafka_broker.bootstrap, t, 0, values)
    with Reader(kafka_broker.bootstrap, t) as r:
        assert _batches(r, 0, 0, 2500, 300) == values
        # a byte budget that cuts batches inside what the driver handed over
        assert _batches(r, 0, 0, 2500, 1000, max_bytes=50) == values


def test_a_read_that_does_not_start_where_the_last_one_stopped_reads_from_its_own_start(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 2)
    values = [f"v{i}".encode() for i in range(1000)]
    _fill(kafka_broker.bootstrap, t, 0, values)
    _fill(kafka_broker.bootstrap, t, 1, [b"other"])
    with Reader(kafka_broker.bootstrap, t) as r:
        msgs, pos = r.read(0, 0, 1000, 100)
        assert (pos, [m.value() for m in msgs]) == (100, values[:100])
        msgs, pos = r.read(0, 50, 1000, 10)  # back
        assert (pos, [m.value() for m in msgs]) == (60, values[50:60])
        msgs, pos = r.read(0, 700, 1000, 10)  # ahead
        assert (pos, [m.value() for m in msgs]) == (710, values[700:710])
        assert [m.value() for m in r.messages(1, 0, 1)] == [b"other"]  # another partition
        msgs, pos = r.read(0, 710, 1000, 10)
        assert (pos, [m.value() for m in msgs]) == (720, values[710:720])
        assert not r.wait({0: 1000}, 0.05)  # a wait takes the consumer over
        assert [m.value() for m in r.messages(0, 720, 725)] == values[720:725]
        assert [m.value() for m in r.messages(0, 725, 1000)] == values[725:]


def test_a_batched_read_sees_messages_produced_after_the_previous_batch(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    first = [f"a{i}".encode() for i in range(500)]
    later = [f"b{i}".encode() for i in range(500)]
    _fill(kafka_broker.bootstrap, t, 0, first)
    with Reader(kafka_broker.bootstrap, t) as r:
        msgs, pos = r.read(0, 0, 500, 200)
        assert (pos, [m.value() for m in msgs]) == (200, first[:200])
        _fill(kafka_broker.bootstrap, t, 0, later)
        end = r.watermarks(0).high
        assert end == 1000
        assert [m.value() for m in msgs] + _batches(r, 0, pos, end, 200) == first + later


def test_only_a_kafka_broker_counts_as_answering_waiting_fetches_early(
    kafka_broker: RealBroker, topic_name: Callable[[str], str], tmp_path: Path
) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    with Reader(kafka_broker.bootstrap, t) as r:
        assert r.answers_waiting_fetches()
    with DevBroker(topics={"t": 1}, workdir=tmp_path) as dev, Reader(dev.bootstrap, "t") as r:
        assert not r.answers_waiting_fetches()


def test_every_delivery_report_is_in_by_the_flush_however_seldom_produce_polls(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    """The writer serves delivery reports every POLL_EVERY messages and at each flush: a
    count that is no multiple of it still has every report, in order, after the flush."""
    from amends_pipeline.kafka.topics import POLL_EVERY

    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    n = 2 * POLL_EVERY + 345
    w = Writer(kafka_broker.bootstrap)
    for i in range(n):
        w.produce(t, 0, f"m{i}".encode(), None)
    w.flush()
    assert w.delivered == [(0, i) for i in range(n)]
    w.produce(t, 0, b"one more", None)  # fewer than POLL_EVERY since the last poll
    w.flush()
    assert w.delivered[-1] == (0, n)


def _scan_values(r: Reader, partition: int, start: int, end: int, limit: int | None = None) -> list[list[bytes]]:
    return [[m.value() for m in run] for run in r.scan(partition, start, end, limit=limit)]


def test_a_scan_gives_the_messages_of_its_range_in_runs_that_join_to_what_messages_gives(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    values = [f"s{i}".encode() for i in range(25_000)]  # more than one fetch, more than 10,000 a consume
    _fill(kafka_broker.bootstrap, t, 0, values)
    with Reader(kafka_broker.bootstrap, t) as r:
        for start, end, limit in [(0, 25_000, None), (3, 17_003, None), (100, 25_000, 12_345), (24_999, 25_000, None)]:
            runs = _scan_values(r, 0, start, end, limit)
            assert runs and all(runs), "runs are never empty"
            want = values[start:end][:limit]
            assert [v for run in runs for v in run] == want == [m.value() for m in r.messages(0, start, end, limit=limit)]
        assert len(_scan_values(r, 0, 0, 25_000)) > 2  # whole fetches, not one run per message or one run
        assert _scan_values(r, 0, 10, 10) == [] and _scan_values(r, 0, 0, 100, limit=0) == []


def test_batch_flags_and_records_equal_the_per_message_route_on_every_kind_of_header(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    """``reserved_flags``/``to_records`` read each message's headers once and agree with
    ``reserved_flag``/``to_record``: plain messages, other headers, the marker header on
    a record, the recorded marker itself and a header name that is not UTF-8, in one run."""
    from tests.e2e.test_hostile_input_consumer import produce_in_c  # raw header names need the C client

    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    recorded = Marker("ns", "src", "nonce", 0)
    w = Writer(kafka_broker.bootstrap)
    w.produce(t, 0, b"plain-0", b"k0")
    w.produce(t, 0, recorded.to_bytes(), None, [(MARKER_HEADER, b"1")])  # offset 1: the recorded marker
    w.produce(t, 0, b"other-header", b"k2", [("trace", b"x")])
    w.produce(t, 0, Marker("ns", "src", "another", 0).to_bytes(), None, [(MARKER_HEADER, b"1")])
    w.produce(t, 0, b"marked-record", b"k4", [("trace", b"y"), (MARKER_HEADER, None)])
    w.flush()
    produce_in_c(kafka_broker.bootstrap, t, b"unreadable", b"k5", [(b"\xff\xfe", b"v")])
    w.produce(t, 0, b"", None)
    w.produce(t, 0, b"plain-7", b"k7")
    w.flush()
    marker = (1, recorded)
    with Reader(kafka_broker.bootstrap, t) as r:
        per_message = [reserved_flag(m, marker) for m in r.messages(0, 0, 8)]
        assert per_message == [False, None, False, True, True, True, False, False]
        (run,) = list(r.scan(0, 0, 8))
        assert reserved_flags(run, marker) == per_message
        singles = [to_record("src", 0, m, marker)[0] for m in r.messages(0, 0, 8)]
        (run,) = list(r.scan(0, 0, 8))
        records = to_records("src", 0, run, marker)
        assert records == [rec for rec in singles if rec is not None]
        assert [(rec.coords.offset, rec.key, rec.reserved_header) for rec in records] == [
            (0, b"k0", False), (2, b"k2", False), (3, None, True), (4, b"k4", True), (5, b"k5", True),
            (6, None, False), (7, b"k7", False),
        ]
        (run,) = list(r.scan(0, 6, 8))
        assert reserved_flags(run, marker) == [False, False]  # a run without headers
