"""The memory store's own two-phase API: decisions prepared, then committed under the guard; snapshots.

The rules of the ProcessingStore and Outbox ports (epochs, frontiers, coordinates,
the ordered outbox, replay) are the contract suites' (tests/contract), run on this
store through MemoryProcessing as on every other.
"""

from __future__ import annotations

import pytest

from amends_core.errors import FenceError, FrontierMismatch
from amends_core.ledger import RejectReason
from amends_core.store.memory import MemoryStore
from tests.builders import K1, config, record, txn

CFG = config([(K1, 100, 60, 0)])


def test_prepare_does_not_change_installed_state() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    s.prepare(t, 0, record(txn(), 0))
    assert s.frontier(0) == 0 and s.pending(0) is None and not s.keys[K1].touched


def test_an_old_decision_committed_before_the_replacement_claim_stays_committed() -> None:
    s = MemoryStore(CFG)
    old = s.claim(0)
    d = s.prepare(old, 0, record(txn(), 0))
    s.commit(d)
    new = s.claim(0)
    assert s.frontier(0) == 1 and new.epoch == old.epoch + 1


def test_a_replaced_owner_cannot_commit_a_prepared_decision() -> None:
    s = MemoryStore(CFG)
    old = s.claim(0)
    d = s.prepare(old, 0, record(txn(), 0))
    s.claim(0)
    with pytest.raises(FenceError):
        s.commit(d)
    assert s.frontier(0) == 0 and s.pending(0) is None and not s.keys[K1].touched


def test_a_decision_against_a_stale_frontier_cannot_commit() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    d = s.prepare(t, 0, record(txn(), 0))
    s.commit(d)
    with pytest.raises(FrontierMismatch):
        s.commit(d)
    with pytest.raises(FrontierMismatch):
        s.prepare(t, 0, record(txn(), 1))


def test_a_rejection_advances_the_frontier_only_with_its_quarantine_record() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    d = s.prepare(t, 0, record(b"garbage", 0, key=None))
    assert s.rejections == []
    s.commit(d)
    assert s.frontier(0) == 1 and [r.reason for r in s.rejections] == [RejectReason.MALFORMED]
    assert s.rejections[0].record.value == b"garbage"


def test_snapshots_are_deep_copies() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    s.process(t, record(txn(qty=-1), 0))
    s.process(t, record(b"bad", 1, key=None))
    snap = s.snapshot()
    snap.keys[K1].identities["T1"].revisions[1][0].sources.append(None)  # type: ignore[arg-type]
    snap.keys[K1].closes[0] = 0
    snap.rejections.clear()
    snap.partitions[0].next = 99
    assert len(s.keys[K1].identities["T1"].revisions[1][0].sources) == 1
    assert s.keys[K1].closes[0] == 99 and len(s.rejections) == 1 and s.frontier(0) == 2
