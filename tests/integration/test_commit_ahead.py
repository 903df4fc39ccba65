"""Folding a batch while the one before it commits (``PgStore.process_ahead``).

The next batch folds from the cache while the previous batch's writes and COMMIT
run on the database's background thread; it locks the partition only after that
commit. These tests hold the previous COMMIT back (the fault proxy in front of
the real server), lose its reply, or cancel it, and check that the result is
always exactly what committing the batches one at a time gives, that nothing of
a batch folded ahead of a failed commit is written, and that the fence still
decides.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg import sql

from amends_core.errors import FenceError, PredecessorFailed
from amends_pipeline.postgres.batch import COPY_MIN_ROWS
from amends_pipeline.postgres.errors import CommitUnknown, StoreError
from tests import builders as b

from .test_pg_batches import _tables

CFG = b.config([(b.K1, 10**6, 999_900, 0), (b.K2, 10**6, 999_950, 0)])


def one_at_a_time(open_store, admin, recs, cut_at: list[int]):
    store = open_store(CFG.with_namespace("serial"))
    tok = store.claim(0)
    edges = [0, *cut_at, len(recs)]
    for lo, hi in zip(edges, edges[1:], strict=False):
        store.process(tok, lo, recs[lo:hi])
    return _tables(admin, "serial"), pending_of(store)


def pending_of(store):
    """The outbox, in order, with the namespace's name taken out of each envelope."""
    name = f'"namespace":"{store.cfg.namespace}"'.encode()
    return [(e.sequence, bytes(e.envelope).replace(name, b"")) for e in store.pending(0, 10_000)]


def test_each_batch_of_a_chain_folded_ahead_is_measured_as_a_batch_of_its_own(open_store):
    """What a chain installs is the contract suite's (tests/contract/test_processing_store.py,
    test_a_chain_of_batches_folded_ahead_installs_what_one_batch_at_a_time_installs); here,
    the PostgreSQL store's own record of it."""
    size = 7
    recs = b.records(b.mixed_history(4 * size))
    store = open_store(CFG.with_namespace("ahead"))
    tok = store.claim(0)
    flight = None
    for lo in range(0, 4 * size, size):
        flight = store.process_ahead(tok, lo, recs[lo:lo + size], after=flight)
    assert flight is not None and flight.result().frontier == 4 * size
    samples = store.measurements(0)
    assert [(m.first_offset, m.next_offset) for m in samples] == [(0, 7), (7, 14), (14, 21), (21, 28)]


def test_the_next_batch_folds_while_the_commit_is_held_and_locks_only_after_it(
    pg_dsn, open_store, proxy, admin
):
    recs = b.records(b.mixed_history(2 * COPY_MIN_ROWS))
    half = COPY_MIN_ROWS
    expected = one_at_a_time(open_store, admin, recs, [half])
    store = open_store(CFG.with_namespace("ahead"), dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("hold")
    first = store.process_ahead(tok, 0, recs[:half])
    assert proxy.commit_seen.wait(10)
    assert not first.done()
    with store.begin(tok, half, after=first) as tx:
        tx.apply(recs[half:])  # folded from the cache with the first COMMIT still held back
        assert tx._conn is None
        assert not first.done()
        proxy.release()
        assert tx.commit().frontier == 2 * half
    assert first.result().frontier == half
    assert (_tables(admin, "ahead"), pending_of(store)) == expected


def test_a_lost_commit_reply_drops_the_batch_folded_ahead_and_is_settled(
    pg_dsn, open_store, proxy, admin
):
    recs = b.records(b.mixed_history(40))
    expected = one_at_a_time(open_store, admin, recs, [20])
    store = open_store(CFG.with_namespace("ahead"), dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("cut-reply")
    first = store.process_ahead(tok, 0, recs[:20])
    assert proxy.commit_seen.wait(10)
    tx = store.begin(tok, 20, after=first)
    tx.apply(recs[20:])
    proxy.release()
    with pytest.raises(PredecessorFailed):
        tx.commit()
    with pytest.raises(CommitUnknown) as caught:
        first.result()
    err = caught.value
    assert (err.partition, err.before, err.after) == (0, 0, 20)
    assert store.resolve_unknown(err) is True  # the server had committed it
    # nothing of the second batch was written: it runs again from the frontier
    assert store.frontier(0) == 20
    assert store.process(tok, 20, recs[20:]).frontier == 40
    assert (_tables(admin, "ahead"), pending_of(store)) == expected


def test_a_commit_that_fails_writes_nothing_of_either_batch(pg_dsn, pg_schema, open_store, admin):
    recs = b.records(b.mixed_history(40))
    expected = one_at_a_time(open_store, admin, recs, [10, 20])
    store = open_store(CFG.with_namespace("ahead"))
    tok = store.claim(0)
    store.process(tok, 0, recs[:10])
    locker = psycopg.connect(pg_dsn)
    try:
        locker.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(pg_schema)))
        locker.execute("LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE")
        first = store.process_ahead(tok, 10, recs[10:20])  # its outbox rows wait for the lock
        pid = store.db.backend[0]
        tx = store.begin(tok, 20, after=first)
        tx.apply(recs[20:])
        assert not first.done()
        for _ in range(200):  # cancel the statement only once it waits for the lock
            waiting = admin.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()
            if waiting == ("Lock",):
                break
            threading.Event().wait(0.05)
        assert waiting == ("Lock",)
        admin.execute("SELECT pg_cancel_backend(%s)", (pid,))
        with pytest.raises(PredecessorFailed):
            tx.commit()
        with pytest.raises(StoreError) as caught:
            first.result()
        assert not isinstance(caught.value, CommitUnknown)
    finally:
        locker.rollback()
        locker.close()
    assert store.frontier(0) == 10
    # the cache was dropped: both batches run again from what is committed
    assert store.process(tok, 10, recs[10:20]).frontier == 20
    assert store.process(tok, 20, recs[20:]).frontier == 40
    assert (_tables(admin, "ahead"), pending_of(store)) == expected


def test_a_new_owner_fences_the_batch_folded_ahead(pg_dsn, open_store, proxy, admin):
    recs = b.records(b.mixed_history(30))
    store = open_store(CFG.with_namespace("ahead"), dsn=proxy.dsn(pg_dsn))
    other = open_store(CFG.with_namespace("ahead"))
    tok = store.claim(0)
    proxy.arm("hold")
    first = store.process_ahead(tok, 0, recs[:10])
    assert proxy.commit_seen.wait(10)
    tx = store.begin(tok, 10, after=first)
    tx.apply(recs[10:20])
    claimed: list[object] = []
    t = threading.Thread(target=lambda: claimed.append(other.claim(0)))
    t.start()  # waits for the partition row the held batch has locked
    proxy.release()
    t.join(10)
    assert claimed
    with pytest.raises(FenceError):
        tx.commit()
    assert first.result().frontier == 10
    assert store.frontier(0) == 10
    assert other.process(claimed[0], 10, recs[10:20]).frontier == 20


def test_everything_else_on_the_session_waits_for_the_commit_in_flight(pg_dsn, open_store, proxy):
    recs = b.records(b.mixed_history(10))
    store = open_store(CFG.with_namespace("ahead"), dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("hold")
    first = store.process_ahead(tok, 0, recs)
    assert proxy.commit_seen.wait(10)
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(store.frontier(0)))
    t.start()
    t.join(0.3)
    assert not seen  # the session is busy with the held COMMIT
    proxy.release()
    t.join(10)
    assert seen == [10]
    assert first.result().frontier == 10
