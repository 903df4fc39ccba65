"""A lost COMMIT reply is resolved by re-reading the frontier, never by assuming rollback.

A fault proxy in front of the real server interferes with exactly the COMMIT
of a processing batch; ``pg_terminate_backend`` from an independent session
kills the server process around it.
"""

from __future__ import annotations

import threading

import pytest

from amends_pipeline.postgres.errors import CommitUnknown, StoreUnavailable
from tests import builders as b


def batch(start: int = 0):
    return b.records([b.txn(f"T{start}", qty=-5), b.txn(f"U{start}", qty=-7)], start=start)


def commit_in_thread(store, token, expected, records):
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["result"] = store.process(token, expected, records)
        except Exception as e:  # noqa: BLE001 - inspected by the test
            box["error"] = e

    t = threading.Thread(target=run)
    t.start()
    return t, box


def outcome(t: threading.Thread, box: dict[str, object]) -> dict[str, object]:
    """What the commit thread ended with. Its wait is bounded by the store's own timeouts;
    the join allows for a loaded machine (a 10 s join once ran out under the full suite)."""
    t.join(120)
    assert not t.is_alive(), "the commit did not end within 120 s"
    return box


def frontier_of(admin, store) -> int:
    return admin.execute(
        "SELECT next_offset FROM partitions WHERE ns_id = %s AND partition = 0", (store.ns_id,)
    ).fetchone()[0]


def test_a_reply_lost_after_the_server_committed_resolves_as_committed(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("cut-reply")
    t, box = commit_in_thread(store, tok, 0, batch())
    assert proxy.commit_seen.wait(10)
    # The server commits; the client never hears about it.
    for _ in range(100):
        if frontier_of(admin, store) == 2:
            break
        threading.Event().wait(0.05)
    assert frontier_of(admin, store) == 2
    proxy.release()
    err = outcome(t, box)["error"]
    assert isinstance(err, CommitUnknown)
    assert (err.partition, err.before, err.after) == (0, 0, 2)
    assert store.resolve_unknown(err) is True
    # The worker continues from the installed frontier with the same token.
    res = store.process(tok, store.frontier(0), batch(2))
    assert res.frontier == 4
    assert [e.sequence for e in store.pending(0, 100)] == list(range(1, len(res.rows) + 4))


def test_a_commit_lost_before_the_server_saw_it_resolves_as_not_committed(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("swallow")
    with pytest.raises(CommitUnknown) as caught:
        store.process(tok, 0, batch())
    # The server session is still open, idle in its transaction, holding the
    # partition lock: resolution must end it, not wait for it forever.
    pid = caught.value.backend[0]
    state = admin.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
    assert state == ("idle in transaction",)
    assert store.resolve_unknown(caught.value) is False
    assert admin.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone() == (0,)
    assert frontier_of(admin, store) == 0
    assert admin.execute("SELECT count(*) FROM observations").fetchone() == (0,)
    res = store.process(tok, 0, batch())
    assert res.frontier == 2


def test_a_backend_killed_while_its_commit_is_in_flight_resolves_as_not_committed(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("hold")
    t, box = commit_in_thread(store, tok, 0, batch())
    assert proxy.commit_seen.wait(10)
    pid = store.db.backend[0]
    assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    proxy.release()
    err = outcome(t, box)["error"]
    assert isinstance(err, CommitUnknown)
    assert store.resolve_unknown(err) is False
    assert frontier_of(admin, store) == 0
    assert store.process(tok, 0, batch()).frontier == 2


def test_a_backend_killed_after_commit_before_its_reply_resolves_as_committed(
    pg_dsn, open_store, proxy, admin
):
    cfg = b.config()
    store = open_store(cfg, dsn=proxy.dsn(pg_dsn))
    tok = store.claim(0)
    proxy.arm("cut-reply")
    t, box = commit_in_thread(store, tok, 0, batch())
    assert proxy.commit_seen.wait(10)
    for _ in range(100):
        if frontier_of(admin, store) == 2:
            break
        threading.Event().wait(0.05)
    pid = store.db.backend[0]
    assert admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,)).fetchone() == (True,)
    proxy.release()
    err = outcome(t, box)["error"]
    assert isinstance(err, CommitUnknown)
    assert store.resolve_unknown(err) is True
    assert store.frontier(0) == 2


def test_a_backend_killed_before_commit_loses_the_batch_and_says_so(open_store, admin):
    cfg = b.config()
    store = open_store(cfg)
    tok = store.claim(0)
    tx = store.begin(tok, 0)
    tx.apply(batch())
    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (store.db.backend[0],))
    with pytest.raises(StoreUnavailable) as caught:
        tx.commit()
    assert "\n" not in str(caught.value)
    assert frontier_of(admin, store) == 0
    # Nothing was committed, so the same batch simply runs again on a new session.
    assert store.process(tok, 0, batch()).frontier == 2
