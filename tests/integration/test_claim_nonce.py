"""Claimant nonces on the real server: after a lost claim reply, adopt only your own epoch.

Every claim installs a fresh nonce with its epoch. A worker whose claim reply
was lost settles it with ``PgStore.settle_claim``: the installed epoch is
adopted only when the installed nonce is its own; otherwise it claims again,
so it never shares an epoch with another live worker. The fault proxy of
tests/integration/conftest.py loses the reply of exactly one COMMIT.
"""

from __future__ import annotations

import threading
import time

import pytest

from amends_core.errors import FenceError
from amends_pipeline.roles.worker import WorkerPartition
from tests import builders as b


def installed(admin, store) -> tuple[int, str | None]:
    row = admin.execute(
        "SELECT epoch, claim_nonce FROM partitions WHERE ns_id = %s AND partition = 0",
        (store.ns_id,),
    ).fetchone()
    return row[0], row[1]


def wait_for_epoch(admin, store, epoch: int) -> None:
    for _ in range(400):
        if installed(admin, store)[0] == epoch:
            return
        time.sleep(0.025)
    raise AssertionError(f"epoch {epoch} was never installed; installed {installed(admin, store)}")


def worker_of(store) -> WorkerPartition:
    # claim() uses only the store; reader and manifest are not needed for it.
    return WorkerPartition(store, None, None, 0)  # type: ignore[arg-type]


def claim_in_thread(worker: WorkerPartition):
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["token"] = worker.claim()
        except Exception as e:  # noqa: BLE001 - inspected by the test
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


def test_each_claim_installs_a_fresh_nonce_with_its_epoch(open_store, admin):
    store = open_store(b.config())
    assert installed(admin, store) == (0, None)
    tok = store.claim(0, "n-one")
    assert (tok.epoch, installed(admin, store)) == (1, (1, "n-one"))
    store.claim(0)
    epoch, nonce = installed(admin, store)
    assert epoch == 2 and nonce not in (None, "n-one") and len(nonce) == 32


def test_a_lost_claim_reply_with_another_claimants_epoch_installed_makes_the_worker_claim_again(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    rival = open_store(cfg)
    worker = worker_of(store)
    proxy.arm("cut-reply")
    t, box = claim_in_thread(worker)
    assert proxy.commit_seen.wait(10)
    wait_for_epoch(admin, store, 1)  # the worker's claim committed; its reply is withheld
    mine = installed(admin, store)[1]
    theirs = rival.claim(0)  # another live worker claims epoch 2 meanwhile
    assert theirs.epoch == 2 and installed(admin, store)[1] != mine
    proxy.release()  # the worker's reply is lost: CommitUnknown
    t.join(30)
    assert "error" not in box, box
    tok = box["token"]
    assert tok.epoch == 3  # claimed again, did not adopt the rival's epoch 2
    assert installed(admin, store)[1] not in (None, mine)
    recs = b.records([b.txn("A"), b.txn("B")])
    with pytest.raises(FenceError, match="replaced"):
        rival.process(theirs, 0, recs)
    assert store.process(tok, 0, recs).frontier == 2


def test_a_lost_claim_reply_whose_claim_landed_is_adopted(pg_dsn, open_store, proxy, admin):
    store = open_store(b.config(), dsn=proxy.dsn(pg_dsn))
    worker = worker_of(store)
    proxy.arm("cut-reply")
    t, box = claim_in_thread(worker)
    assert proxy.commit_seen.wait(10)
    wait_for_epoch(admin, store, 1)
    proxy.release()
    t.join(30)
    assert "error" not in box, box
    assert box["token"].epoch == 1  # its own epoch: adopted, no second claim
    assert installed(admin, store)[0] == 1


def test_a_claim_commit_lost_on_the_way_in_is_settled_then_claimed_again(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    store.claim(0, "earlier")
    worker = worker_of(store)
    proxy.arm("swallow")
    # The COMMIT never reaches the server, whose session stays idle in its
    # transaction holding the partition row: settling ends it, then reads.
    tok = worker.claim()
    assert tok.epoch == 2
    epoch, nonce = installed(admin, store)
    assert epoch == 2 and nonce not in (None, "earlier")
    assert store.process(tok, 0, b.records([b.txn("A")])).frontier == 1
