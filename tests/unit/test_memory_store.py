"""Store guards: ownership epochs, frontiers, atomic installation, ordered outbox, snapshots, replay."""

from __future__ import annotations

import pytest

from amends_core.errors import (
    FenceError,
    FrontierMismatch,
    ReplayMismatch,
    SourceMismatch,
)
from amends_core.ledger import RejectReason
from amends_core.store.memory import MemoryStore
from tests.builders import K1, config, record, records, txn

CFG = config([(K1, 100, 60, 0)])


def test_claim_installs_a_new_epoch_without_moving_the_frontier() -> None:
    s = MemoryStore(CFG)
    t1 = s.claim(0)
    s.process(t1, record(txn(), 0))
    t2 = s.claim(0)
    assert t2.epoch == t1.epoch + 1 and s.frontier(0) == 1


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


def test_a_token_of_another_configuration_is_refused() -> None:
    s = MemoryStore(CFG)
    other = MemoryStore(config([(K1, 100, 61, 0)]))
    with pytest.raises(FenceError):
        s.prepare(other.claim(0), 0, record(txn(), 0))


def test_records_of_another_source_or_partition_or_below_the_frontier_are_operation_errors() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    with pytest.raises(SourceMismatch):
        s.prepare(t, 0, record(txn(), 0, source="other"))
    s.process(t, record(txn(), 3))
    with pytest.raises(SourceMismatch):
        s.prepare(t, 4, record(txn(), 2))


def test_gaps_in_source_offsets_are_allowed_and_the_frontier_is_exclusive() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    s.process(t, record(txn(), 4))
    assert s.frontier(0) == 5


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


def test_replay_of_a_consumed_interval_into_intact_state_changes_nothing_but_the_epoch() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    recs = records([txn(qty=-50), txn(revision=2, qty=-30)]) + [record(b"bad", 2, key=None)]
    for r in recs:
        s.process(t, r)
    before = (s.frontier(0), dict(s.outputs), len(s.outbox[0]))
    tok = s.replay(0, recs)
    assert tok.epoch == t.epoch + 1
    assert (s.frontier(0), dict(s.outputs), len(s.outbox[0])) == before


def test_replay_preflight_fails_before_claiming_when_evidence_differs() -> None:
    s = MemoryStore(CFG)
    t = s.claim(0)
    s.process(t, record(txn(qty=-50), 0))
    with pytest.raises(ReplayMismatch):
        s.replay(0, [record(txn(qty=-51), 0)])
    with pytest.raises(ReplayMismatch):
        s.replay(0, [record(txn(qty=-50), 1)])  # not consumed yet
    assert s.observe(0).epoch == t.epoch
