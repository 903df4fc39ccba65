"""Snapshots are consistent (REPEATABLE READ, READ ONLY) while writers keep committing."""

from __future__ import annotations

import threading

import psycopg
import pytest

from amends_core.store.memory import MemoryStore
from amends_core.view import ViewState
from amends_pipeline.postgres import store as pg_store
from amends_pipeline.postgres.errors import StoreError
from tests import builders as b


def history(n: int):
    keys = (b.K1, b.K2)
    return b.records([
        b.txn(f"T{i % 7}", 1 + i // 7, "AMEND", qty=(i % 5) - 3, valid=b.day(1 + i % 4),
              key=keys[i % 2])
        for i in range(n)
    ])


def test_a_processing_snapshot_always_shows_one_committed_prefix(open_store):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 50, 40, 0)])
    recs = history(60)
    # The reference state after every prefix, from the memory model.
    ref = MemoryStore(cfg)
    tok = ref.claim(0)
    prefixes = {0: ref.snapshot()}
    for r in recs:
        ref.process(tok, r)
        prefixes[r.coords.offset + 1] = ref.snapshot()
    writer, reader = open_store(cfg), open_store(cfg)
    wtok = writer.claim(0)
    done = threading.Event()

    def write() -> None:
        for i in range(0, len(recs), 3):
            writer.process(wtok, i, recs[i:i + 3])
        done.set()

    t = threading.Thread(target=write)
    t.start()
    seen = set()
    while not done.is_set() or not seen:
        snap = reader.snapshot()
        f = snap.frontier(0)
        seen.add(f)
        m = prefixes[f]
        assert snap.keys == m.keys
        assert snap.outputs == m.outputs
        assert [e.envelope for e in snap.outbox[0]] == [r.envelope.to_bytes() for r in m.outbox[0]]
        assert snap.partitions[0].sequence == m.partitions[0].sequence
    t.join()
    assert len(seen) > 1  # the snapshots did interleave with commits


def test_a_view_snapshot_always_shows_one_applied_prefix(open_store, open_view):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 50, 40, 0)])
    store = open_store(cfg)
    tok = store.claim(0)
    log = [r.envelope.to_bytes() for r in store.process(tok, 0, history(60)).rows]
    ref = ViewState(cfg)
    prefixes = {0: ref.copy()}
    for o, raw in enumerate(log):
        ref.apply(0, o, raw)
        prefixes[o + 1] = ref.copy()
    writer, reader = open_view(cfg), open_view(cfg)
    done = threading.Event()

    def write() -> None:
        for i in range(0, len(log), 4):
            writer.apply(0, list(enumerate(log))[i:i + 4])
        done.set()

    t = threading.Thread(target=write)
    t.start()
    seen = set()
    while not done.is_set() or not seen:
        snap = reader.snapshot()
        f = snap.frontier(0)
        seen.add(f)
        assert snap == prefixes[f]
    t.join()
    assert len(seen) > 1


def test_snapshots_are_read_only(open_store):
    store = open_store(b.config())
    with pytest.raises(StoreError, match="read-only transaction"):
        with store.db.transaction("trying to write in a snapshot", snapshot=True) as conn:
            conn.execute("UPDATE partitions SET epoch = epoch + 1")


def test_snapshot_reports_quarantine_as_rejections_and_all_conflicts(open_store):
    store = open_store(b.config())
    tok = store.claim(0)
    store.process(tok, 0, [
        b.record(b"\x00junk", 0, key=b"\xff"),
        b.record(b.txn("A", 2, "AMEND", qty=-1), 1),
        b.record(b.txn("A", 2, "AMEND", qty=-2), 2),
        b.record(b.txn("A", 3, "AMEND", qty=-3), 3),
    ])
    snap = store.snapshot(evidence=False, outbox="pending")
    assert snap.keys == {} and snap.outputs == {}
    assert store.snapshot().outputs  # with evidence, the output intents the records made
    assert [(r.record.value, r.record.key, r.reason.value) for r in snap.rejections] == [
        (b"\x00junk", b"\xff", "MALFORMED")
    ]
    assert [(c.key, c.txn_id, c.revision) for c in snap.conflicts()] == [(b.K1, "A", 2)]
    assert store.conflicts() == snap.conflicts()
    assert len(snap.pending(0)) == len(snap.outbox[0])
    assert isinstance(snap.outbox[0][0].envelope, bytes)


def test_namespaces_in_one_schema_never_see_each_other(open_store, admin):
    a = open_store(b.config(namespace="ns-a"))
    c = open_store(b.config(namespace="ns-c"))
    a.process(a.claim(0), 0, b.records([b.txn("A")]))
    assert c.frontier(0) == 0
    snap = c.snapshot()
    assert snap.outputs == {} and snap.outbox[0] == () and snap.keys[b.K1].identities == {}
    assert admin.execute("SELECT count(DISTINCT ns_id) FROM partitions").fetchone() == (2,)
    with pytest.raises(psycopg.errors.UniqueViolation):
        admin.execute("INSERT INTO namespaces (name, config_digest, config, partitions)"
                      " VALUES ('ns-a', 'x', '{}', 1)")


@pytest.mark.parametrize("per_array", [1 << 22, 4], ids=["one-array", "arrays-of-4-offsets"])
def test_consumed_offsets_are_every_applied_and_quarantined_offset_below_the_bound_ascending(
    open_store, monkeypatch, per_array
):
    """What verification compares with the source: applied records and quarantined ones, of
    this partition and namespace only, below ``below``; nothing for a partition never read.
    Read in one array or in several (one per range of ``per_array`` offsets)."""
    monkeypatch.setattr(pg_store, "CONSUMED_OFFSETS_PER_ARRAY", per_array)
    keys = [(b.K1, 100, 60, 0), (b.K2, 50, 40, 1)]
    store = open_store(b.config(keys, partitions=2))
    other = open_store(b.config(keys, partitions=2, namespace="ns-other"))
    other.process(other.claim(0), 0, b.records([b.txn(f"O{i}") for i in range(5)]))
    assert store.consumed_offsets(0, 100) == [] and store.consumed_offsets(1, 100) == []
    tok = store.claim(0)
    store.process(tok, 0, [
        b.record(b.txn("A"), 0),
        b.record(b"\x00junk", 1),  # quarantined (MALFORMED)
        b.record(b.txn("B", key=b.K2), 2),  # quarantined (ROUTING: K2 lives on partition 1)
        b.record(b.txn("C"), 3),
    ])
    store.process(tok, 4, [b.record(b.txn(f"D{i}"), 10 + i) for i in range(3)], until=20)
    assert store.consumed_offsets(0, 100) == [0, 1, 2, 3, 10, 11, 12]
    assert store.consumed_offsets(0, 11) == [0, 1, 2, 3, 10]
    assert store.consumed_offsets(0, 0) == []
    assert store.consumed_offsets(1, 100) == []
