"""Worker batches are bounded in bytes as well as records, against real Kafka and PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.ops.provision import provision
from amends_pipeline.ops.replay import drain
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime
from tests import builders as b


@pytest.fixture
def runtime(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> Iterator[tuple[Runtime, str, str]]:
    rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=kafka_broker.bootstrap)
    yield rt, topic_name("source"), topic_name("output")


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    w = Writer(bootstrap)
    for v in values:
        w.produce(topic, 0, v, b.K1.transport_key())
    w.flush()


def values(n: int) -> list[bytes]:
    """``n`` movements of equal size (ids of equal length)."""
    return [b.value(b.txn(f"T{i:04d}", qty=-1, valid=b.day(2))) for i in range(n)]


@pytest.mark.parametrize(
    ("ahead", "steps"),
    [
        (1, [3, 3, 3, 1, 0]),  # one batch per step: each step shows one batch's records
        (4, [10, 0]),  # the default: one step runs the four batches, each folded while the one before commits
    ],
)
def test_a_worker_batch_ends_at_the_record_that_reaches_the_byte_budget_before_the_record_count(
    runtime, kafka_broker: RealBroker, ahead: int, steps: list[int]
) -> None:
    rt, src, out = runtime
    m = provision(rt, src, out).manifest
    vals = values(10)
    produce(kafka_broker.bootstrap, src, vals)
    size = len(vals[0]) + len(b.K1.transport_key())
    with rt.store() as store, rt.reader(src) as reader:
        w = WorkerPartition(store, reader, m, 0, batch_size=1000, batch_bytes=3 * size - 1, ahead=ahead)
        first = w.step()
        assert first.records == steps[0]
        assert first.frontier == store.frontier(0)
        assert [w.step().records for _ in steps[1:]] == steps[1:]  # every record exactly once
        assert store.frontier(0) == reader.watermarks(0).high
        samples = store.measurements(0)
        # the third record reaches the budget; the count (1000) never does: each batch is
        # its own fenced commit, starting where the one before ended
        assert [x.records for x in samples] == [3, 3, 3, 1]
        assert samples[0].next_offset == m.markers[0] + 4
        assert [x.first_offset for x in samples[1:]] == [x.next_offset for x in samples[:-1]]
    drain(rt, 100)
    assert verify_namespace(rt).status.value == "PASS"
