"""A replaced owner can never commit, whichever lock order happens (independent sessions)."""

from __future__ import annotations

import threading
import time

import pytest

from amends_core.errors import FenceError
from amends_pipeline.postgres.errors import ConfigMismatch
from tests import builders as b


def count(admin, table: str) -> int:
    return admin.execute(f"SELECT count(*) FROM {table}").fetchone()[0]  # noqa: S608


def wait_until_blocked(admin, pid: int) -> None:
    for _ in range(200):
        row = admin.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
        if row and row[0] == "Lock":
            return
        time.sleep(0.02)
    raise AssertionError(f"backend {pid} never waited for a lock")


def test_claim_waits_for_the_owner_holding_the_partition_lock_then_installs(open_store, admin):
    cfg = b.config()
    old_owner = open_store(cfg)
    new_owner = open_store(cfg)
    old = old_owner.claim(0)
    tx = old_owner.begin(old, 0)  # holds the partition row lock
    tx.apply(b.records([b.txn("A"), b.txn("B")]))
    box: dict[str, object] = {}
    claimer = threading.Thread(target=lambda: box.update(token=new_owner.claim(0)))
    claimer.start()
    new_owner_pid = None
    for _ in range(200):
        if new_owner.db.backend is not None:
            new_owner_pid = new_owner.db.backend[0]
            break
        time.sleep(0.01)
    assert new_owner_pid is not None
    wait_until_blocked(admin, new_owner_pid)
    assert "token" not in box
    result = tx.commit()  # the old owner still owns the partition: its batch commits
    claimer.join(10)
    assert result.frontier == 2
    new = box["token"]
    assert new.epoch == old.epoch + 1
    # From now on the old owner is fenced; the new one continues from 2.
    with pytest.raises(FenceError):
        old_owner.process(old, 2, b.records([b.txn("C")], start=2))
    assert new_owner.process(new, 2, b.records([b.txn("C")], start=2)).frontier == 3


def test_racing_owners_never_both_commit_a_frontier(open_store, admin):
    cfg = b.config()
    stores = [open_store(cfg) for _ in range(4)]
    recs = b.records([b.txn(f"T{i}") for i in range(40)])
    results: list[str] = []

    def owner(s) -> None:
        for _ in range(10):
            tok = s.claim(0)
            f = s.frontier(0)
            try:
                s.process(tok, f, [r for r in recs if r.coords.offset >= f][:3])
                results.append("ok")
            except FenceError:
                results.append("fenced")
            except Exception as e:  # noqa: BLE001
                results.append(type(e).__name__)

    threads = [threading.Thread(target=owner, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert set(results) <= {"ok", "fenced", "FrontierMismatch"}
    # Every committed record is there exactly once, and the frontier covers them all.
    f = stores[0].frontier(0)
    assert count(admin, "observations") == f
    offs = [r[0] for r in admin.execute("SELECT src_offset FROM observations ORDER BY 1")]
    assert offs == list(range(f))


def test_another_configuration_under_the_same_namespace_is_refused(open_store):
    open_store(b.config())
    other = b.config([(b.K1, 999, 60, 0)])
    with pytest.raises(ConfigMismatch, match="registered with configuration digest"):
        open_store(other)


def test_a_cached_key_state_is_not_trusted_after_another_store_committed(open_store):
    cfg = b.config()
    a = open_store(cfg)
    other = open_store(cfg)
    tok = a.claim(0)
    a.process(tok, 0, b.records([b.txn("A", qty=-10)]))  # a caches the key at (epoch, 1)
    t2 = other.claim(0)
    other.process(t2, 1, b.records([b.txn("B", qty=-20)], start=1))
    t3 = a.observe(0)  # the same epoch the other store committed under
    res = a.process(t3, 2, b.records([b.txn("C", qty=-30)], start=2))
    balances = [r.envelope for r in res.rows if r.envelope.output_id.family.value == "balance"]
    assert [(e.version, e.payload.close) for e in balances] == [(3, 100 - 10 - 20 - 30)]
    assert a.snapshot().keys[b.K1].identities.keys() == {"A", "B", "C"}
