"""An output envelope above the size limit stops its source partition before any outbox row (issue 14).

Before the fix a key-status envelope could grow past 1 MiB: the relay then
failed on it at every restart (message too large) or, published, it stopped
the view. Now an envelope above ``limits.MAX_ENVELOPE_BYTES`` is an operation
error of the worker: the batch aborts on that record (BatchAborted, naming
the `amends skip` way past it), nothing is committed and no outbox row is
written. The limits keep real data below the limit, so the test lowers the
limit for the worker's process (real Kafka, real PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from amends_core import limits
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.ops.provision import provision
from amends_pipeline.postgres.errors import BatchAborted
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime
from tests import builders as b


def test_an_envelope_above_the_size_limit_aborts_the_batch_on_its_record_with_no_outbox_row(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str],
    admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=kafka_broker.bootstrap)
    src, out = topic_name("source"), topic_name("output")
    m = provision(rt, src, out).manifest
    w = Writer(kafka_broker.bootstrap)
    w.produce(src, 0, b.value(b.txn("A", qty=-5, valid=b.day(1))), b.K1.transport_key())
    w.flush()
    first = m.markers[0] + 1
    monkeypatch.setattr(limits, "MAX_ENVELOPE_BYTES", 64)  # below any key-status envelope
    with rt.store("amends-worker") as store, rt.reader(src) as reader:
        worker = WorkerPartition(store, reader, m, 0)
        worker.claim()
        before = store.frontier(0)
        with pytest.raises(BatchAborted) as caught:
            worker.step()
        assert caught.value.offset == first
        assert "above the 64 byte envelope limit" in str(caught.value)
        assert f"amends skip --config CONFIG --partition 0 --offset {first}" in str(caught.value)
        assert store.frontier(0) == before <= first  # nothing of the batch was committed
    assert admin.execute("SELECT count(*) FROM outbox").fetchone() == (0,)
