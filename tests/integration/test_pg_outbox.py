"""The outbox: exact published bytes, strictly ordered acknowledgement, publication receipts."""

from __future__ import annotations

import threading

import psycopg
import pytest

from amends_core.errors import OutboxOrderError
from tests import builders as b


def committed(store, n: int = 4):
    tok = store.claim(0)
    res = store.process(tok, 0, b.records([b.txn(f"T{i}", valid=b.day(i + 1)) for i in range(n)]))
    return tok, res


def receipts(admin):
    return admin.execute(
        "SELECT sequence, acked, output_partition, output_offset FROM outbox_status ORDER BY sequence"
    ).fetchall()


def test_a_receipt_records_where_a_pending_row_landed_and_a_retry_may_overwrite_it(
    open_store, admin
):
    store = open_store(b.config())
    committed(store)
    store.record_receipt(0, 1, 7)
    store.record_receipt(0, 1, 9)  # republished after a lost reply
    store.record_receipt(0, 2, 10, output_partition=0)
    assert receipts(admin)[:2] == [(1, False, 0, 9), (2, False, 0, 10)]
    store.acknowledge(0, 1)
    assert receipts(admin)[0] == (1, True, 0, 9)  # acknowledging keeps the recorded receipt
    with pytest.raises(OutboxOrderError, match="already acknowledged"):
        store.record_receipt(0, 1, 11)
    with pytest.raises(OutboxOrderError, match="no such outbox row"):
        store.record_receipt(0, 99, 11)


def test_the_relay_never_waits_for_a_running_worker_batch(open_store, admin):
    cfg = b.config()
    worker = open_store(cfg)
    relay = open_store(cfg)
    tok, _ = committed(worker)
    tx = worker.begin(tok, 4)  # holds the partition row lock
    tx.apply(b.records([b.txn("X", valid=b.day(9))], start=4))
    done = threading.Event()

    def acknowledge() -> None:
        relay.acknowledge(0, 1)
        done.set()

    t = threading.Thread(target=acknowledge)
    t.start()
    assert done.wait(5), "acknowledge waited for the worker's lock"
    tx.commit()
    t.join()
    assert relay.pending_count(0) == 6


def test_outbox_rows_are_immutable_bytes_once_committed(open_store, admin):
    store = open_store(b.config())
    _, res = committed(store, 1)
    stored = [bytes(r[0]) for r in admin.execute("SELECT envelope FROM outbox ORDER BY sequence")]
    assert stored == [r.envelope.to_bytes() for r in res.rows]
    with pytest.raises(psycopg.errors.UniqueViolation):
        admin.execute(
            "INSERT INTO outbox (ns_id, partition, sequence, envelope) VALUES (%s, 0, 1, 'x')",
            (store.ns_id,),
        )


def test_reading_pending_rows_stops_at_the_limit_whatever_the_backlog(open_store, admin):
    """The pending read walks the outbox in primary-key order from the acknowledged sequence
    and stops at the limit: it never gathers and sorts the whole backlog, so a relay batch
    costs the same behind 20 rows or 20,000."""
    from amends_pipeline.postgres.store import PENDING_OUTBOX

    store = open_store(b.config())
    committed(store)
    admin.execute(
        "INSERT INTO outbox (ns_id, partition, sequence, envelope)"
        " SELECT %s, 0, g, '\\x00' FROM generate_series(6, 20000) g", (store.ns_id,),
    )
    admin.execute("UPDATE partitions SET last_sequence = 20000 WHERE ns_id = %s", (store.ns_id,))
    admin.execute("ANALYZE outbox")
    store.acknowledge_many(0, [(1, 7), (2, 8)])
    args = (store.ns_id, 0, store.ns_id, 0, 1000)
    plan = "\n".join(r[0] for r in admin.execute("EXPLAIN ANALYZE " + PENDING_OUTBOX, args))
    assert "Sort" not in plan, plan
    assert "outbox_pkey" in plan, plan
    pending = store.pending(0, limit=1000)
    assert [e.sequence for e in pending] == list(range(3, 1003))
    assert all(isinstance(e.envelope, bytes) for e in pending)
    assert [e.output_offset for e in store.pending(0, limit=1)] == [None]


def test_acknowledging_never_rewrites_an_outbox_row(open_store, admin):
    """Receipts live in runs beside the outbox: a committed row keeps its first and only version."""
    store = open_store(b.config())
    committed(store)
    before = admin.execute("SELECT sequence, xmin::text, ctid::text FROM outbox ORDER BY 1").fetchall()
    store.record_receipt(0, 1, 40)
    store.acknowledge_many(0, [(1, 50), (2, 51), (3, 52)])
    store.acknowledge_many(0, [(4, 53), (5, 60)])
    after = admin.execute("SELECT sequence, xmin::text, ctid::text FROM outbox ORDER BY 1").fetchall()
    assert after == before
    # per acknowledgement, one run per stretch of consecutive offsets; the recorded receipt
    # gave way to the new offset
    runs = admin.execute(
        "SELECT first_sequence, last_sequence, output_partition, first_offset FROM outbox_receipts"
        " ORDER BY first_sequence"
    ).fetchall()
    assert runs == [(1, 3, 0, 50), (4, 4, 0, 53), (5, 5, 0, 60)]
    assert [(s, o) for s, _, _, o in receipts(admin)] == [(1, 50), (2, 51), (3, 52), (4, 53), (5, 60)]


def test_a_recorded_receipt_shows_on_the_pending_row_and_is_replaced_by_a_new_one(open_store, admin):
    store = open_store(b.config())
    committed(store)
    store.record_receipt(0, 3, 30, output_partition=0)
    store.record_receipt(0, 3, 31, output_partition=0)
    assert [(e.sequence, e.output_partition, e.output_offset) for e in store.pending(0, 10)] == [
        (1, None, None), (2, None, None), (3, 0, 31), (4, None, None), (5, None, None),
    ]
    store.acknowledge_many(0, [(1, 10), (2, 11), (3, None), (4, 13)])
    assert [(s, a, o) for s, a, _, o in receipts(admin)] == [
        (1, True, 10), (2, True, 11), (3, True, 31), (4, True, 13), (5, False, None),
    ]
    assert admin.execute("SELECT count(*) FROM outbox_receipts").fetchone() == (3,)
    snap = store.snapshot(evidence=False)
    assert [(e.sequence, e.acked, e.output_offset) for e in snap.outbox[0]] == [
        (1, True, 10), (2, True, 11), (3, True, 31), (4, True, 13), (5, False, None),
    ]
    assert [e.sequence for e in snap.pending(0)] == [5]
    store.acknowledge_many(0, [(5, None)])  # acknowledged without an offset, none ever recorded
    assert receipts(admin)[-1] == (5, True, None, None)
