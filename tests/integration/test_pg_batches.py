"""Batches in PostgreSQL: key state read at most once, only the repaired suffix written, COPY paths.

All-or-nothing batches and the fence are the ProcessingStore contract (tests/contract).
"""

from __future__ import annotations

from amends_core.ledger import ConflictRef
from amends_pipeline.postgres.store import PgStore
from tests import builders as b


def day_rows(admin) -> dict[int, tuple[int, str]]:
    """day -> (close, xmin): xmin changes exactly when a row is rewritten."""
    return {
        d: (c, x)
        for d, c, x in admin.execute("SELECT day, close, xmin::text FROM key_days ORDER BY day")
    }


def test_a_tail_append_rewrites_no_earlier_day_row(open_store, admin):
    store = open_store(b.config([(b.K1, 10_000, 0, 0)]))
    tok = store.claim(0)
    store.process(tok, 0, b.records([b.txn(f"T{d}", qty=-1, valid=b.day(d)) for d in range(1, 41)]))
    before = day_rows(admin)
    store.process(tok, 40, b.records([b.txn("NEW", qty=-1, valid=b.day(41))], start=40))
    after = day_rows(admin)
    assert len(after) == 41
    assert {d: after[d] for d in before} == before  # same values, same row versions
    store.process(tok, 41, b.records([b.txn("SAME", qty=-2, valid=b.day(41))], start=41))
    again = day_rows(admin)
    changed = [d for d in again if again[d] != after.get(d)]
    assert changed == [max(again)]


def test_a_deep_correction_rewrites_exactly_the_days_from_the_corrected_one(open_store, admin):
    store = open_store(b.config([(b.K1, 10_000, 0, 0)]))
    tok = store.claim(0)
    store.process(tok, 0, b.records([b.txn(f"T{d}", qty=-1, valid=b.day(d)) for d in range(1, 31)]))
    before = day_rows(admin)
    store.process(tok, 30, b.records([b.txn("T10", 2, "AMEND", qty=-5, valid=b.day(10))], 0, 30))
    after = day_rows(admin)
    changed = sorted(d for d in after if after[d] != before[d])
    assert changed == sorted(before)[9:]


def test_a_cancelled_last_activity_deletes_its_day_row(open_store, admin):
    store = open_store(b.config())
    tok = store.claim(0)
    store.process(tok, 0, b.records([b.txn("A", valid=b.day(1)), b.txn("B", valid=b.day(3))]))
    store.process(tok, 2, b.records([b.txn("B", 2, "CANCEL", qty=0, valid=b.day(3))], start=2))
    assert len(day_rows(admin)) == 1


def test_key_state_is_read_once_for_a_cold_batch_and_not_at_all_when_warm(open_store, monkeypatch):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 0), (b.K3, 100, 60, 0)])
    loads: list[int] = []
    real = PgStore._load_keys

    def counting(self, conn, cache, keys, **kw):
        loads.append(len(keys))
        return real(self, conn, cache, keys, **kw)

    monkeypatch.setattr(PgStore, "_load_keys", counting)
    store = open_store(cfg)
    tok = store.claim(0)
    recs = b.records([b.txn(f"T{i}", key=(b.K1, b.K2, b.K3)[i % 3]) for i in range(30)])
    store.process(tok, 0, recs[:15])
    assert loads == [3]  # one set-based read for all three keys
    store.process(tok, 15, recs[15:])
    assert loads == [3]  # warm: the store's own last commit is still installed
    cold = open_store(cfg, cache=False)
    cold.process(tok, 30, b.records([b.txn("X", key=b.K2)], start=30))
    cold.process(tok, 31, b.records([b.txn("Y", key=b.K2)], start=31))
    assert loads == [3, 1, 1]  # without the cache: once per batch


def test_cold_and_warm_stores_build_identical_state(open_store):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 0)])
    recs = b.records([
        b.txn("A", qty=-50, valid=b.day(1)),
        b.txn("B", qty=-20, valid=b.day(2), key=b.K2),
        b.txn("A", 2, "AMEND", qty=-30, valid=b.day(3)),
        b.txn("A", 2, "AMEND", qty=-31, valid=b.day(3)),
        b.txn("C", qty=5, valid=b.day(2)),
        b.txn("A", 3, "CANCEL", qty=0, valid=b.day(3)),
        b.txn("C", qty=5, valid=b.day(2), source_time="2030-01-01T00:00:00Z"),
    ])
    warm = open_store(cfg)
    tok = warm.claim(0)
    for r in recs:
        warm.process(tok, r.coords.offset, [r])
    cold_cfg = cfg.with_namespace("cold")
    cold = open_store(cold_cfg, cache=False)
    tok2 = cold.claim(0)
    for r in recs:
        cold.process(tok2, r.coords.offset, [r])
    w, c = warm.snapshot(), cold.snapshot()
    assert w.keys == c.keys
    assert [e.envelope.replace(b'"test-ns"', b'"cold"') for e in w.outbox[0]] == [
        e.envelope for e in c.outbox[0]
    ]


def test_the_kept_cache_is_compact_and_restores_dropped_revisions_from_the_table(open_store):
    """The worker's cache keeps only each identity's highest revision, without delivery
    places. Stale arrivals at dropped revisions (committed earlier, or earlier in the same
    batch) are decided from the observations table: the same evidence, conflicts and
    outputs as a store that keeps everything in memory (``cache=False``)."""
    cfg = b.config([(b.K1, 100, 60, 0)])
    recs = b.records([
        b.txn("A", 1, qty=-50, valid=b.day(1)),
        b.txn("A", 2, "AMEND", qty=-30, valid=b.day(3)),
        # next batch: stale arrivals at A's dropped revision 1
        b.txn("A", 1, qty=-50, valid=b.day(1)),  # a duplicate of it
        b.txn("A", 1, qty=-51, valid=b.day(1)),  # a historical conflict with it
        b.txn("B", 1, qty=-5, valid=b.day(2)),
        b.txn("B", 3, "AMEND", qty=-6, valid=b.day(2)),
        b.txn("B", 1, qty=-7, valid=b.day(2)),  # conflicts with B 1, dropped in this batch
        b.txn("A", 1, qty=-51, valid=b.day(1)),  # a duplicate of the conflicting candidate
    ])
    warm = open_store(cfg)
    tok = warm.claim(0)
    warm.process(tok, 0, recs[:2])
    warm.process(tok, 2, recs[2:])
    cold = open_store(cfg.with_namespace("cold"), cache=False)
    tok2 = cold.claim(0)
    cold.process(tok2, 0, recs[:2])
    cold.process(tok2, 2, recs[2:])
    cached = warm._batches.caches[0].keys[b.K1]
    assert cached.compact
    assert {t: i.dropped_below for t, i in cached.identities.items()} == {"A": 2, "B": 3}
    assert all(
        c.sources == [] for i in cached.identities.values() for c in i.revisions[i.highest]
    )
    assert cached.conflicts == {ConflictRef("A", 1), ConflictRef("B", 1)}
    w, c = warm.snapshot(), cold.snapshot()
    assert w.keys == c.keys
    a1 = w.keys[b.K1].identities["A"].revisions[1]
    assert [[s.offset for s in x.sources] for x in a1] == [[0, 2], [3, 7]]
    assert [e.envelope.replace(b'"test-ns"', b'"cold"') for e in w.outbox[0]] == [
        e.envelope for e in c.outbox[0]
    ]
    assert w.conflicts() == c.conflicts() and len(w.conflicts()) == 2


def test_measurements_keep_cumulative_counts_and_the_latest_32_batches(open_store, admin):
    store = open_store(b.config())
    tok = store.claim(0)
    for i in range(35):
        store.process(tok, i, [b.record(b.txn(f"T{i}") if i % 5 else b"bad", i)])
    ms = store.measurements(0)
    assert [m.batch for m in ms] == list(range(4, 36))
    assert ms[-1].next_offset == 35 and ms[-1].records == 1
    row = admin.execute(
        "SELECT records_total, rejected_total, batches_total FROM partitions WHERE ns_id = %s",
        (store.ns_id,),
    ).fetchone()
    assert row == (35, 7, 35)


def test_staging_tables_created_by_a_rolled_back_batch_are_created_again(open_store, admin):
    store = open_store(b.config())
    tok = store.claim(0)
    tx = store.begin(tok, 0)
    tx.apply(b.records([b.txn("A")]))
    tx._send(tx._session(), tx._seal())  # creates the session's staging tables inside the transaction
    tx.rollback()  # ... which takes them away again
    assert store.process(tok, 0, b.records([b.txn("A")])).frontier == 1
    assert store.process(tok, 1, b.records([b.txn("B")], start=1)).frontier == 2


def test_large_batches_take_the_copy_path_with_identical_results(open_store, monkeypatch):
    from amends_pipeline.postgres import batch as pg_batch

    cfg = b.config([(b.K1, 10**6, 999_990, 0), (b.K2, 10**6, 999_990, 0)])
    recs = b.records([
        b.txn(f"T{i}", qty=-(i % 7), valid=b.day(1 + i % 40), key=(b.K1, b.K2)[i % 2])
        for i in range(300)
    ] + [b.txn("T3", 2, "CANCEL", qty=0, valid=b.day(4), key=b.K2)])
    copied = open_store(cfg)
    tok = copied.claim(0)
    for i in range(0, len(recs), 150):
        copied.process(tok, i, recs[i:i + 150])
    monkeypatch.setattr(pg_batch, "COPY_MIN_ROWS", 10**9)
    arrays = open_store(cfg.with_namespace("arrays"))
    tok2 = arrays.claim(0)
    for i in range(0, len(recs), 150):
        arrays.process(tok2, i, recs[i:i + 150])
    a, c = arrays.snapshot(), copied.snapshot()
    assert a.keys == c.keys
    assert len(c.outbox[0]) == len(a.outbox[0]) > 64


def _tables(admin, namespace: str) -> tuple[list[tuple], list[tuple]]:
    """key_days and outputs of one namespace, keys named instead of numbered."""
    days = admin.execute(
        "SELECT k.item, k.location, d.day, d.total, d.active_count, d.close, d.alert"
        " FROM key_days d JOIN stock_keys k USING (key_id) JOIN namespaces n USING (ns_id)"
        " WHERE n.name = %s ORDER BY 1, 2, 3", (namespace,),
    ).fetchall()
    outs = admin.execute(
        "SELECT k.item, k.location, o.family, o.day, o.version, o.present, o.close, o.threshold,"
        " o.status, o.reasons, o.cause_offset, o.cause_txn_id, o.cause_revision"
        " FROM outputs o JOIN stock_keys k USING (key_id) JOIN namespaces n USING (ns_id)"
        " WHERE n.name = %s ORDER BY 1, 2, 3, 4", (namespace,),
    ).fetchall()
    return days, outs


def test_rows_that_cannot_exist_yet_go_straight_in_and_the_tables_equal_upserting_everything(
    open_store, admin, monkeypatch
):
    """New days after a key's last committed day and never-published output IDs are copied
    straight into their tables; the result must be what upserting every row gives, with
    corrections, a day inserted before the last one and a day added then removed in the
    same batch."""
    from amends_pipeline.postgres import batch as pg_batch

    cfg = b.config([(b.K1, 1_000, 950, 0), (b.K2, 1_000, 990, 0)])
    first = [b.txn(f"E{k}{d}", qty=-3, valid=b.day(d), key=key) for d in range(2, 81, 2) for k, key in ((1, b.K1), (2, b.K2))]
    second = [b.txn(f"N{k}{d}", qty=-2, valid=b.day(d), key=key) for d in range(81, 141) for k, key in ((1, b.K1), (2, b.K2))]
    second += [
        b.txn("E110", 2, "AMEND", qty=-40, valid=b.day(10), key=b.K1),  # a correction: every later day
        b.txn("M1", qty=-1, valid=b.day(33), key=b.K1),  # a day before the last committed one
        b.txn("N1100", 2, "CANCEL", qty=0, valid=b.day(100), key=b.K1),  # added and removed in the batch
        b.txn("E22", 2, "AMEND", qty=-3, valid=b.day(150), key=b.K2),  # moves a committed day past the end
    ]
    recs = b.records(first + second)
    cut = len(first)

    def run(namespace: str) -> tuple[list[tuple], list[tuple]]:
        store = open_store(cfg.with_namespace(namespace))
        tok = store.claim(0)
        store.process(tok, 0, recs[:cut])
        store.process(tok, cut, recs[cut:])
        return _tables(admin, namespace)

    calls: list[int] = []
    real_seal = pg_batch.ProcessingTx._seal

    def counting(self):
        calls.append(len(self._new_outputs))
        return real_seal(self)

    monkeypatch.setattr(pg_batch.ProcessingTx, "_seal", counting)
    direct = run("direct")
    assert calls[1] >= pg_batch.COPY_MIN_ROWS  # the second batch took the direct route
    # Now every row counts as possibly existing: no day is after the last committed one and
    # no output ID is new, so everything is upserted.
    real_dirty, real_init = pg_batch._DirtyDays, pg_batch.ProcessingTx.__init__

    class NeverNew(set):
        def add(self, _oid) -> None:
            pass

    def init(self, *a, **kw):
        real_init(self, *a, **kw)
        self._new_outputs = NeverNew()

    monkeypatch.setattr(pg_batch, "_DirtyDays", lambda from_day, _last: real_dirty(from_day, 10**9))
    monkeypatch.setattr(pg_batch.ProcessingTx, "__init__", init)
    calls.clear()
    upserted = run("upserted")
    assert calls == [0, 0]
    assert direct == upserted
    from amends_core import timefmt

    def n(d: int) -> int:
        return timefmt.parse_rfc3339(b.day(d)) // timefmt.NS_PER_DAY

    days = {(r[0], r[2]) for r in direct[0]}
    assert ("PART-1", n(100)) not in days and ("PART-1", n(33)) in days
    assert ("PART-2", n(150)) in days and ("PART-2", n(2)) not in days
    assert len(direct[1]) > 2 * pg_batch.COPY_MIN_ROWS
