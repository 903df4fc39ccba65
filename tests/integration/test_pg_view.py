"""The PostgreSQL view: the core version rule under the view-progress row lock."""

from __future__ import annotations

import threading
import time

import pytest

from amends_core.ledger import Config, StockKey
from amends_core.view import Effect, ViewState
from amends_pipeline.postgres.errors import CommitUnknown
from tests import builders as b


def output_log(open_store, cfg, n: int = 6) -> list[bytes]:
    store = open_store(cfg)
    tok = store.claim(0)
    recs = b.records(
        [b.txn(f"T{i % 3}", 1 + i // 3, "AMEND", qty=-10 * (i + 1), valid=b.day(1 + i % 2))
         for i in range(n)]
    )
    return [r.envelope.to_bytes() for r in store.process(tok, 0, recs).rows]


def test_values_tombstones_and_frontier_commit_together(pg_dsn, open_store, open_view, proxy,
                                                         admin):
    cfg = b.config()
    log = output_log(open_store, cfg)
    view = open_view(cfg, dsn=proxy.dsn(pg_dsn))
    proxy.arm("swallow")
    with pytest.raises(CommitUnknown) as caught:
        view.apply(0, list(enumerate(log)))
    # The COMMIT never arrived: resolution ends the abandoned session (which
    # still holds the progress lock) and finds no row and no progress.
    assert view.resolve_unknown(caught.value) == (0, None)
    assert admin.execute("SELECT count(*) FROM view_rows").fetchone() == (0,)
    decisions = view.apply(0, list(enumerate(log)))
    assert view.frontier(0) == len(log)
    # Re-applying after an unknown outcome is harmless: offsets below the frontier.
    assert {d.effect for d in view.apply(0, list(enumerate(log)))} == {Effect.ALREADY_APPLIED}
    reference = ViewState(cfg)
    assert [reference.apply(0, o, raw).effect for o, raw in enumerate(log)] == [
        d.effect for d in decisions
    ]
    assert view.snapshot() == reference


def test_concurrent_appliers_of_one_partition_serialise_on_its_progress_row(
    open_store, open_view
):
    cfg = b.config()
    log = output_log(open_store, cfg, 9)
    views = [open_view(cfg) for _ in range(3)]
    effects: list[list[str]] = []

    def apply(v) -> None:
        for start in range(0, len(log), 2):
            effects.append([d.effect.value for d in v.apply(0, list(enumerate(log))[start:start + 2])])

    threads = [threading.Thread(target=apply, args=(v,)) for v in views]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    flat = [e for batch in effects for e in batch]
    # Every offset was applied exactly once; the other appliers saw it as already applied.
    assert len([e for e in flat if e != "already-applied"]) == len(log)
    reference = ViewState(cfg)
    for o, raw in enumerate(log):
        reference.apply(0, o, raw)
    assert views[0].snapshot() == reference


def test_a_protocol_violation_is_durable_with_its_bytes_and_stops_only_that_partition(
    open_store, open_view, admin
):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 1)], partitions=2)
    store = open_store(cfg)
    t0, t1 = store.claim(0), store.claim(1)
    out0 = [r.envelope.to_bytes() for r in store.process(t0, 0, b.records([b.txn("A")])).rows]
    out1 = [
        r.envelope.to_bytes()
        for r in store.process(t1, 0, b.records([b.txn("B", key=b.K2)], partition=1)).rows
    ]
    view = open_view(cfg)
    bad = b.forged(out0[0])
    effects = [d.effect for d in view.apply(0, [(0, out0[0]), (1, bad), (2, out0[1])])]
    assert effects == [Effect.STORED, Effect.PROTOCOL_ERROR, Effect.STOPPED]
    row = admin.execute(
        "SELECT next_offset, stopped, stopped_offset, stopped_envelope FROM view_progress"
        " WHERE partition = 0"
    ).fetchone()
    assert row[0] == 1 and row[1].startswith("offset 1: ") and row[2] == 1 and bytes(row[3]) == bad
    # A fresh view store sees the stop; the other partition goes on.
    again = open_view(cfg)
    assert again.stopped(0) == row[1]
    assert [d.effect for d in again.apply(0, [(1, out0[1])])] == [Effect.STOPPED]
    assert [d.effect for d in again.apply(1, list(enumerate(out1)))] == [Effect.STORED] * 2
    assert again.progress(1) == (2, None)


def test_an_output_id_stored_twice_in_one_batch_keeps_the_later_version(open_store, open_view,
                                                                         admin):
    cfg = b.config()
    log = output_log(open_store, cfg, 4)
    view = open_view(cfg)
    view.apply(0, list(enumerate(log)))
    versions = dict(admin.execute("SELECT output_id, version FROM view_rows").fetchall())
    reference = ViewState(cfg)
    for o, raw in enumerate(log):
        reference.apply(0, o, raw)
    assert versions == {oid.encoded: e.version for oid, e in reference.rows.items()}
    stored = {
        oid: bytes(env) for oid, env in admin.execute("SELECT output_id, envelope FROM view_rows")
    }
    assert set(stored.values()) <= set(log)


def test_view_apply_waits_for_the_progress_lock_held_by_another_applier(open_store, open_view,
                                                                         admin):
    cfg = b.config()
    log = output_log(open_store, cfg, 2)
    holder, other = open_view(cfg), open_view(cfg)
    with holder.db.transaction("holding the view lock") as conn:
        conn.execute("SELECT 1 FROM view_progress WHERE partition = 0 FOR UPDATE")
        box: dict[str, object] = {}
        t = threading.Thread(target=lambda: box.update(d=other.apply(0, list(enumerate(log)))))
        t.start()
        time.sleep(0.3)
        assert "d" not in box
    t.join(10)
    assert other.frontier(0) == len(log)


def test_a_reply_lost_after_the_view_committed_resolves_to_the_new_frontier(
    pg_dsn, open_store, open_view, proxy
):
    cfg = b.config()
    log = output_log(open_store, cfg)
    view = open_view(cfg, dsn=proxy.dsn(pg_dsn))
    proxy.arm("cut-reply")
    box: dict[str, object] = {}

    def apply() -> None:
        try:
            view.apply(0, list(enumerate(log)))
        except CommitUnknown as e:
            box["e"] = e

    t = threading.Thread(target=apply)
    t.start()
    assert proxy.commit_seen.wait(10)
    time.sleep(0.3)
    proxy.release()
    t.join(10)
    assert view.resolve_unknown(box["e"]) == (len(log), None)


def test_the_server_ends_a_session_left_idle_in_its_transaction(pg_dsn, pg_schema, admin):
    from amends_pipeline.postgres.connection import Database

    db = Database(pg_dsn, pg_schema, idle_in_transaction_timeout_s=1)
    conn = db.begin("pausing inside a transaction")
    conn.execute("SELECT 1 FROM view_progress FOR UPDATE")
    pid = db.backend[0]
    deadline = time.monotonic() + 30
    while admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() != (0,):
        assert time.monotonic() < deadline, "the server never ended the session idle in its transaction"
        time.sleep(0.1)
    db.close()


AWKWARD_KEYS = [StockKey('IT"EM,{1}', "LOC\\A"), StockKey("NULL", "DEPOT é"), StockKey("a b", "{}")]
"""Identities holding array and JSON syntax: quotes, backslashes, braces, commas, NULL."""


def awkward_log(
    open_store, new: int, amended: int, *, days: int, amend_day: int, amend_qty: int
) -> tuple[Config, list[bytes]]:
    """The output log of ``new`` transactions over AWKWARD_KEYS, then amendments of the first
    ``amended`` of them (``amend_day`` is the first valid day of the amendments)."""
    keys = AWKWARD_KEYS
    cfg = b.config([(k, 100, 60, 0) for k in keys])
    store = open_store(cfg)
    tok = store.claim(0)
    first = b.records([b.txn(f"T{i}", 1, "NEW", qty=-1, valid=b.day(1 + i % days), key=keys[i % 3])
                       for i in range(new)])
    log = [r.envelope.to_bytes() for r in store.process(tok, 0, first).rows]
    more = b.records(
        [b.txn(f"T{i}", 2, "AMEND", qty=amend_qty, valid=b.day(amend_day + i % days), key=keys[i % 3])
         for i in range(amended)],
        start=len(first),
    )
    log += [r.envelope.to_bytes() for r in store.process(tok, len(first), more).rows]
    return cfg, log


def test_rows_with_awkward_identities_round_trip_through_the_batched_statements(
    open_store, open_view, admin
):
    """The view reads and writes a batch's rows as binary arrays: identities holding array
    and JSON syntax (quotes, backslashes, braces, commas, the word NULL) come back exact,
    and a second batch that names rows already stored finds them (the version rule)."""
    cfg, log = awkward_log(open_store, 12, 6, days=4, amend_day=1, amend_qty=-2)
    keys = AWKWARD_KEYS
    view = open_view(cfg)
    half = len(log) // 2
    view.apply(0, list(enumerate(log))[:half])
    view.apply(0, list(enumerate(log))[half:])
    # Duplicates and stale deliveries of the whole log change nothing.
    view.rebuild(0, 0)
    assert {d.effect for d in view.apply(0, list(enumerate(log)))} <= {Effect.DUPLICATE, Effect.STALE}
    reference = ViewState(cfg)
    for o, raw in enumerate(log):
        reference.apply(0, o, raw)
    assert view.snapshot() == reference
    stored = {
        (item, location) for item, location in admin.execute("SELECT DISTINCT item, location FROM view_rows")
    }
    assert stored == {(k.item, k.location) for k in keys}


def test_the_batch_row_lookup_probes_the_primary_key_whatever_the_view_size(open_view, admin):
    """A batch's stored rows are found by one primary-key probe per output ID: every row of
    a namespace shares its ns_id, so a scan of the namespace would make each batch cost
    grow with the whole view (a real-broker bulk run spent 2.9 s of view-session CPU on it)."""
    from amends_pipeline.postgres.view_store import _LOOKUP_ROWS

    view = open_view(b.config())
    n = 20_000
    admin.execute(
        "INSERT INTO view_rows (ns_id, output_id, partition, family, item, location, day, version,"
        " present, envelope, applied_offset)"
        " SELECT %s, 'id-' || g, 0, 'balance', 'I', 'L', g, 1, true, '\\x00', g FROM generate_series(1, %s) g",
        (view.ns_id, n),
    )
    admin.execute("ANALYZE view_rows")
    for size in (1, 50, 1000, 5000):
        ids = [f"id-{i}" for i in range(n - size, n + size, 2)]
        plan = "\n".join(
r[0] for r in admin.execute("EXPLAIN " + _LOOKUP_ROWS, (ids, view.ns_id)))
        assert "view_rows_pkey" in plan and "Seq Scan on view_rows" not in plan, plan
        assert "view_rows_by_key" not in plan, plan
        got = admin.execute(_LOOKUP_ROWS, (ids, view.ns_id)).fetchall()
        assert len(got) == len([i for i in ids if int(i[3:]) <= n])


def test_large_batches_go_through_copy_and_store_exactly_what_single_records_store(
    open_store, open_view, admin
):
    """From COPY_MIN_ROWS stored rows a batch is staged by binary COPY; the rows it leaves
    (every column) are the ones the one-statement route leaves for the same log."""
    from amends_pipeline.postgres.view_store import COPY_MIN_ROWS

    cfg, log = awkward_log(open_store, 90, 45, days=30, amend_day=2, amend_qty=-3)
    half = len(log) // 2
    assert half >= 2 * COPY_MIN_ROWS

    def rows() -> list[tuple[object, ...]]:
        return [
            tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
            for r in admin.execute(
                "SELECT output_id, partition, family, item, location, day, version, present,"
                " envelope, applied_offset FROM view_rows ORDER BY output_id"
            )
        ]

    view = open_view(cfg)
    view.apply(0, list(enumerate(log))[:half])  # two large batches on one session
    view.apply(0, list(enumerate(log))[half:])
    copied = rows()
    reference = ViewState(cfg)
    for o, raw in enumerate(log):
        reference.apply(0, o, raw)
    assert view.snapshot() == reference
    view.rebuild(0, 0, discard_rows=True)
    assert rows() == []
    for o, raw in enumerate(log):
        view.apply(0, [(o, raw)])
    assert rows() == copied
    assert len(copied) > COPY_MIN_ROWS


class _SinkSpy:
    """Counts the rows a view batch sends through one sink, then sends them on."""

    def __init__(self, sink) -> None:
        self.sink = sink
        self.batches: list[int] = []

    def copy_rows(self, cursor, rows) -> None:
        rows = list(rows)
        self.batches.append(len(rows))
        self.sink.copy_rows(cursor, rows)


def test_a_large_batch_copies_the_output_ids_it_stores_first_and_upserts_the_rest(
    open_store, open_view, admin, monkeypatch
):
    """Output IDs the lookup did not find go straight into view_rows by COPY; rows already
    stored are upserted (staged); the rows left are the ones single records leave."""
    from amends_pipeline.postgres import view_store

    cfg, log = awkward_log(open_store, 120, 60, days=40, amend_day=1, amend_qty=-3)
    direct, staged = _SinkSpy(view_store.VIEW_ROWS), _SinkSpy(view_store.VIEW_ROWS_STAGE)
    monkeypatch.setattr(view_store, "VIEW_ROWS", direct)
    monkeypatch.setattr(view_store, "VIEW_ROWS_STAGE", staged)
    first = 120  # the envelopes of the new transactions: every output ID is new to the view
    view = open_view(cfg)
    view.apply(0, list(enumerate(log))[:first])
    assert staged.batches == [] and direct.batches and direct.batches[0] >= view_store.COPY_MIN_ROWS
    stored_first = admin.execute("SELECT count(*) FROM view_rows").fetchone()[0]
    assert direct.batches == [stored_first]
    view.apply(0, list(enumerate(log))[first:], start=first, end=len(log))
    assert staged.batches and staged.batches[0] >= view_store.COPY_MIN_ROWS  # amended rows
    reference = ViewState(cfg)
    for o, raw in enumerate(log):
        reference.apply(0, o, raw)
    assert view.snapshot() == reference


def apply_while_another_session_stores(view, admin, batch: list[bytes], raw: bytes, offset: int) -> list:
    """Apply ``batch`` while another session holds an uncommitted row of ``raw``'s output ID
    (as if written after the batch's lookup), committed once the view waits on it; returns
    the view's decisions."""
    from amends_core import wire

    env = wire.decode_envelope(raw)
    assert not isinstance(env, wire.DecodeError)
    oid = env.output_id
    out: list[object] = []

    def apply() -> None:
        try:
            out.append(view.apply(0, list(enumerate(batch))))
        except Exception as e:  # reported by the assertions below
            out.append(e)

    with admin.transaction():
        admin.execute(
            "INSERT INTO view_rows (ns_id, output_id, partition, family, item, location, day,"
            " version, present, envelope, applied_offset) VALUES (%s, %s, 0, %s, %s, %s, %s, %s,"
            " %s, %s, %s)",
            (view.ns_id, oid.encoded, oid.family.value, oid.key.item, oid.key.location, oid.day,
             env.version, env.payload.present, raw, offset),
        )
        t = threading.Thread(target=apply)
        t.start()
        deadline = time.monotonic() + 30
        while not admin.execute("SELECT count(*) FROM pg_locks WHERE NOT granted").fetchone()[0]:
            assert time.monotonic() < deadline, "the view never waited for the other session's row"
            assert t.is_alive(), out
            time.sleep(0.02)
    t.join(30)
    assert not t.is_alive()
    [decisions] = out
    assert isinstance(decisions, list), decisions
    return decisions


def test_a_new_output_id_another_session_stores_first_has_the_batch_applied_again_after_a_fresh_lookup(
    open_store, open_view, admin
):
    """If a session commits a row for one of the batch's new output IDs between the batch's
    lookup and its COPY, the COPY fails on the primary key: the view rolls that attempt back
    and applies the batch again, its lookup now finding that row (the version rule), instead
    of failing."""
    from amends_core import wire
    from amends_pipeline.postgres.view_store import COPY_MIN_ROWS

    cfg, log = awkward_log(open_store, 90, 0, days=30, amend_day=1, amend_qty=-1)
    assert len(log) >= 2 * COPY_MIN_ROWS
    view = open_view(cfg)
    decisions = apply_while_another_session_stores(view, admin, log, log[-1], 0)
    env = wire.decode_envelope(log[-1])
    assert not isinstance(env, wire.DecodeError)
    oid = env.output_id
    assert decisions[-1].effect is Effect.DUPLICATE  # the second attempt saw the stored row
    reference = ViewState(cfg)
    reference.rows[oid] = env  # the other session's row, there before the batch
    assert [d.effect for d in decisions] == [reference.apply(0, o, raw).effect for o, raw in enumerate(log)]
    assert view.snapshot() == reference


def test_an_upsert_never_moves_a_row_back_to_a_version_another_session_overtook(
    open_store, open_view, admin
):
    """A small batch (upserted, not copied) stores version 1 of an output ID while another
    session commits version 2 of it after the batch's lookup: the row keeps version 2, and
    the batch, applied again after a fresh lookup, reports its version 1 as stale."""
    from amends_core import wire
    from amends_pipeline.postgres.view_store import COPY_MIN_ROWS

    cfg = b.config()
    store = open_store(cfg)
    tok = store.claim(0)
    first = store.process(tok, 0, b.records([b.txn("T1", 1, "NEW", qty=-5, valid=b.day(1))])).rows
    later = store.process(
        tok, 1, b.records([b.txn("T1", 2, "AMEND", qty=-7, valid=b.day(1))], start=1)
    ).rows
    batch = [r.envelope.to_bytes() for r in first]
    assert 0 < len(batch) < COPY_MIN_ROWS
    v1 = wire.decode_envelope(batch[0])
    assert not isinstance(v1, wire.DecodeError)
    [v2_raw] = [r.envelope.to_bytes() for r in later if r.envelope.output_id == v1.output_id]
    v2 = wire.decode_envelope(v2_raw)
    assert not isinstance(v2, wire.DecodeError) and v2.version > v1.version
    oid = v1.output_id
    view = open_view(cfg)
    view.frontier(0)  # the view's session exists before the other one takes its row lock
    decisions = apply_while_another_session_stores(view, admin, batch, v2_raw, 99)
    reference = ViewState(cfg)
    reference.rows[oid] = v2  # the other session's row, there before the batch
    assert [d.effect for d in decisions] == [reference.apply(0, o, raw).effect for o, raw in enumerate(batch)]
    assert decisions[0].effect is Effect.STALE
    assert view.snapshot() == reference
    assert admin.execute(
        "SELECT version, applied_offset FROM view_rows WHERE output_id = %s", (oid.encoded,)
    ).fetchone() == (v2.version, 99)


def test_a_batch_overtaken_on_both_attempts_ends_in_a_retryable_conflict_with_nothing_committed(
    open_store, open_view, admin, monkeypatch
):
    """Overtaking is retried once; when the second attempt is overtaken too, apply raises
    StoreConflict (transient: the view role retries the step) and the frontier stays."""
    from amends_pipeline.postgres import view_store
    from amends_pipeline.postgres.errors import StoreConflict

    cfg = b.config()
    log = output_log(open_store, cfg)
    view = open_view(cfg)
    attempts: list[int] = []

    def overtaken(*args, **kwargs):
        attempts.append(1)
        raise view_store._Overtaken

    monkeypatch.setattr(view_store.PgViewStore, "_write_rows", overtaken)
    with pytest.raises(StoreConflict, match="wrote rows of this batch while it was applied"):
        view.apply(0, list(enumerate(log)))
    assert len(attempts) == 2
    assert view.frontier(0) == 0
    assert admin.execute("SELECT count(*) FROM view_rows").fetchone() == (0,)


def _rich_view(open_store, open_view):
    """A view with balances, alerts, withdrawals and a blocked key with conflict reasons."""
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 80, 75, 0), (b.K3, 50, 10, 0)])
    store = open_store(cfg)
    tok = store.claim(0)
    objs = b.mixed_history(60)
    objs += [b.txn("R1", 1, qty=-3, valid=b.day(4), key=b.K3), b.txn("R1", 1, qty=-4, valid=b.day(4), key=b.K3)]
    objs += [b.txn("T5", 9, "CANCEL", qty=0, valid=b.day(2), key=b.K2)]  # withdraws rows of K2
    log = [r.envelope.to_bytes() for r in store.process(tok, 0, b.records(objs)).rows]
    view = open_view(cfg)
    view.apply(0, list(enumerate(log)))
    return cfg, view


def test_the_view_read_as_columns_projects_exactly_as_its_decoded_envelopes_do(open_store, open_view):
    from amends_core.view import project, reason_counts

    cfg, view = _rich_view(open_store, open_view)
    whole = view.snapshot()
    progress, projected = view.checked()
    assert dict(projected.projections) == project(cfg, whole.rows.values())
    assert dict(projected.reason_counts) == reason_counts(whole.rows.values())
    assert (progress.frontiers, progress.stopped) == (whole.frontiers, whole.stopped)
    shapes = projected.projections.values()
    assert any(p.alerts for p in shapes) and any(p.reasons for p in shapes)  # the case is rich enough
    assert any(not e.payload.present for e in whole.rows.values())


def test_rows_without_value_columns_are_read_from_their_envelopes_and_the_migration_fills_them(
    open_store, open_view, admin
):
    from pathlib import Path

    from amends_pipeline.postgres.migrate import MIGRATIONS_DIR

    cfg, view = _rich_view(open_store, open_view)
    _, want = view.checked()
    assert admin.execute("SELECT count(*) FROM view_rows WHERE present AND close IS NULL"
                         " AND family <> 'key-status'").fetchone() == (0,)
    emptied = admin.execute("UPDATE view_rows SET close = NULL, threshold = NULL").rowcount
    assert emptied > 0
    _, got = view.checked()
    assert got == want  # read from the envelopes
    sql_text = Path(MIGRATIONS_DIR / "0015_view_row_values.sql").read_text()
    admin.execute(sql_text[sql_text.index("UPDATE view_rows"):])
    assert admin.execute("SELECT count(*) FROM view_rows WHERE present AND close IS NULL"
                         " AND family <> 'key-status'").fetchone() == (0,)
    _, filled = view.checked()
    assert filled == want
