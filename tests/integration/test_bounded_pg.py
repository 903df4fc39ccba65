"""Bounded PostgreSQL sessions, pruning, the relay lock per schema and schema ownership.

Real PostgreSQL throughout; the pruning tests also run the real worker, relay
and view against the real Kafka broker (and the development broker where the
test needs retention on demand).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from amends_core import wire
from amends_pipeline import cli
from amends_pipeline.kafka.devbroker import DevBroker
from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from amends_pipeline.ops.orchestration import refold
from amends_pipeline.ops.provision import provision
from amends_pipeline.ops.replay import drain
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.postgres import migrate
from amends_pipeline.postgres.connection import (
    KEEPALIVE_COUNT,
    KEEPALIVE_IDLE_S,
    KEEPALIVE_INTERVAL_S,
    LOCK_TIMEOUT_S,
    STATEMENT_TIMEOUT_S,
    Database,
    open_connection,
)
from amends_pipeline.postgres.errors import LockTimeout, MigrationError, StatementTimeout, StoreError
from amends_pipeline.roles.relay import RelayBusy, RelayLock
from amends_pipeline.runtime import Runtime
from tests import builders as b

# ---------------------------------------------------------------- session settings


def show(conn: psycopg.Connection[Any], name: str) -> str:
    row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name))).fetchone()
    assert row is not None
    return str(row[0])


def test_every_session_gets_statement_lock_idle_timeouts_and_keepalives(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AMENDS_PG_STATEMENT_TIMEOUT", raising=False)
    monkeypatch.delenv("AMENDS_PG_LOCK_TIMEOUT", raising=False)
    db = Database(pg_dsn, pg_schema)
    try:
        conn = db.connection()
        assert show(conn, "statement_timeout") == f"{STATEMENT_TIMEOUT_S // 60}min"
        assert show(conn, "lock_timeout") == f"{LOCK_TIMEOUT_S // 60}min"
        assert show(conn, "idle_in_transaction_session_timeout") == "5min"
        assert show(conn, "idle_session_timeout") == "0"  # the relay's lock session must live
        assert show(conn, "tcp_keepalives_idle") == str(KEEPALIVE_IDLE_S)
        assert show(conn, "tcp_keepalives_interval") == str(KEEPALIVE_INTERVAL_S)
        assert show(conn, "tcp_keepalives_count") == str(KEEPALIVE_COUNT)
        params = conn.info.get_parameters()
        assert params.get("keepalives") == "1"
        assert params.get("keepalives_idle") == str(KEEPALIVE_IDLE_S)
        assert params.get("tcp_user_timeout") == "60000"
    finally:
        db.close()


def test_the_environment_overrides_the_statement_and_lock_timeouts_and_refuses_nonsense(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMENDS_PG_STATEMENT_TIMEOUT", "7")
    monkeypatch.setenv("AMENDS_PG_LOCK_TIMEOUT", "0")
    conn = open_connection(pg_dsn, None)
    try:
        assert show(conn, "statement_timeout") == "7s"
        assert show(conn, "lock_timeout") == "0"
    finally:
        conn.close()
    monkeypatch.setenv("AMENDS_PG_LOCK_TIMEOUT", "1.5s")
    with pytest.raises(StoreError, match=r"AMENDS_PG_LOCK_TIMEOUT='1.5s': expected whole seconds"):
        open_connection(pg_dsn, None)


def test_a_lock_held_by_another_session_fails_a_store_operation_as_lock_timeout(
    open_store: Callable[..., Any], admin: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMENDS_PG_LOCK_TIMEOUT", "1")
    store = open_store(b.config())
    before = store.claim(0).epoch
    admin.execute("BEGIN")
    admin.execute("SELECT 1 FROM partitions WHERE partition = 0 FOR UPDATE")  # a foreign holder
    try:
        with pytest.raises(LockTimeout, match=r"canceling statement due to lock timeout .*lock_timeout"):
            store.claim(0)
    finally:
        admin.execute("ROLLBACK")
    assert store.claim(0).epoch == before + 1  # retried once the lock is free: the failed claim left nothing


def test_a_statement_past_the_statement_timeout_is_a_statement_timeout(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AMENDS_PG_STATEMENT_TIMEOUT", "1")
    db = Database(pg_dsn, pg_schema)
    try:
        with pytest.raises(StatementTimeout, match="statement timeout"), db.transaction("sleeping") as c:
            c.execute("SELECT pg_sleep(30)")
        with db.transaction("after") as c:  # the session is still usable
            assert c.execute("SELECT 1").fetchone() == (1,)
    finally:
        db.close()


def test_migrations_lift_the_session_timeouts_and_wait_for_a_concurrent_holder(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AMENDS_PG_LOCK_TIMEOUT", "1")
    monkeypatch.setenv("AMENDS_PG_STATEMENT_TIMEOUT", "1")
    schema = f"t_bnd_{secrets.token_hex(4)}"
    (tmp_path / "0001_slow.sql").write_text("SELECT pg_sleep(1.5); CREATE TABLE a (x int);")
    holder = psycopg.connect(pg_dsn, autocommit=True)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (migrate._lock_key(schema),))
        timer = threading.Timer(1.5, lambda: holder.execute("ROLLBACK"))
        timer.start()
        assert migrate.migrate(pg_dsn, schema, migrate.discover(tmp_path)) == [1]
        timer.join()
    finally:
        holder.close()
        migrate.drop_schema(pg_dsn, schema)


# ---------------------------------------------------------------- relay lock per schema


def test_two_relays_of_one_namespace_in_two_schemas_both_get_the_lock(pg_dsn: str) -> None:
    locks = []
    try:
        locks.append(RelayLock(pg_dsn, "schema_a", "same-ns", 0))
        locks.append(RelayLock(pg_dsn, "schema_b", "same-ns", 0))
        with pytest.raises(RelayBusy):  # within one schema the lock still excludes
            RelayLock(pg_dsn, "schema_a", "same-ns", 0)
    finally:
        for lock in locks:
            lock.close()


# ---------------------------------------------------------------- schema ownership


@pytest.fixture
def foreign_schema(pg_dsn: str) -> Iterator[tuple[str, str]]:
    """A schema owned by a freshly created role (both dropped afterwards)."""
    role = f"amends_other_{secrets.token_hex(4)}"
    schema = f"t_foreign_{secrets.token_hex(4)}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {}").format(sql.Identifier(role)))
        conn.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
            sql.Identifier(schema), sql.Identifier(role)))
    yield schema, role
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_migrating_into_a_schema_owned_by_another_role_is_refused(
    pg_dsn: str, foreign_schema: tuple[str, str]
) -> None:
    schema, role = foreign_schema
    with pytest.raises(MigrationError, match=f"schema '{schema}' exists and belongs to role '{role}'"):
        migrate.migrate(pg_dsn, schema)
    with psycopg.connect(pg_dsn) as conn:  # nothing was created in it
        assert conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = %s", (schema,)).fetchone() == (0,)


def test_an_own_schema_and_an_already_migrated_one_are_still_migrated(
    pg_dsn: str, pg_schema: str, foreign_schema: tuple[str, str]
) -> None:
    assert migrate.migrate(pg_dsn, pg_schema) == []  # ours, already current
    schema, role = foreign_schema
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # migrated by us, then handed over
        conn.execute(sql.SQL("ALTER SCHEMA {} OWNER TO CURRENT_USER").format(sql.Identifier(schema)))
    assert migrate.migrate(pg_dsn, schema) == [m.version for m in migrate.discover()]
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER SCHEMA {} OWNER TO {}").format(
            sql.Identifier(schema), sql.Identifier(role)))
    assert migrate.migrate(pg_dsn, schema) == []


# ---------------------------------------------------------------- pruning


def write_config(tmp_path: Path, rt: Runtime) -> str:
    path = tmp_path / "config.json"
    path.write_bytes(wire.encode_config(rt.cfg))
    return str(path)


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    w = Writer(bootstrap)
    for v in values:
        w.produce(topic, 0, v, b.K1.transport_key())
    w.flush()


def txns(*ids: str) -> list[bytes]:
    return [b.value(b.txn(t, qty=-1, valid=b.day(2))) for t in ids]


def outbox(admin: psycopg.Connection[Any]) -> list[tuple[int, bool]]:
    rows = admin.execute("SELECT sequence, acked FROM outbox_status ORDER BY sequence")
    return [(s, a) for s, a in rows]


def prune_cli(
    monkeypatch: pytest.MonkeyPatch, rt: Runtime, config: str, *args: str
) -> int:
    monkeypatch.setenv("AMENDS_PG_DSN", rt.dsn)
    monkeypatch.setenv("AMENDS_PG_SCHEMA", rt.schema)
    monkeypatch.setenv("AMENDS_KAFKA_BOOTSTRAP", str(rt.bootstrap))
    return cli.main(["prune", "--config", config, *args])


def test_prune_deletes_only_published_applied_old_outbox_rows_and_verification_still_passes(
    pg_dsn: str, pg_schema: str, kafka_broker: RealBroker, topic_name: Callable[[str], str],
    admin: psycopg.Connection[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=kafka_broker.bootstrap)
    src, out = topic_name("source"), topic_name("output")
    provision(rt, src, out)
    config = write_config(tmp_path, rt)
    produce(kafka_broker.bootstrap, src, [*txns("A", "B", "C"), b"not json"])
    drain(rt, 100)
    published = outbox(admin)
    assert published and all(acked for _, acked in published)
    # Old and applied, except the last row, which the view has not applied yet, and
    # a new pending row (from D) that the relay has not published.
    admin.execute("UPDATE outbox SET committed_at = now() - interval '30 days'")
    last = published[-1][0]
    (last_offset,) = admin.execute("SELECT output_offset FROM outbox_status WHERE sequence = %s", (last,)).fetchone()
    (applied_to,) = admin.execute("SELECT next_offset FROM view_progress WHERE partition = 0").fetchone()
    admin.execute("UPDATE view_progress SET next_offset = %s WHERE partition = 0", (last_offset,))
    produce(kafka_broker.bootstrap, src, txns("D"))
    refold(rt, 0)
    pending = [s for s, acked in outbox(admin) if not acked]
    assert pending
    admin.execute("UPDATE outbox SET committed_at = now() - interval '30 days'")

    assert prune_cli(monkeypatch, rt, config, "--keep-days", "7", "--dry-run") == 0
    assert f"would delete {len(published) - 1} published outbox rows" in capsys.readouterr().out
    assert len(outbox(admin)) == len(published) + len(pending)  # the dry run changed nothing

    assert prune_cli(monkeypatch, rt, config, "--keep-days", "40") == 0  # nothing is that old
    assert "deleted 0 published outbox rows" in capsys.readouterr().out

    assert prune_cli(monkeypatch, rt, config, "--keep-days", "7") == 0
    assert f"deleted {len(published) - 1} published outbox rows" in capsys.readouterr().out
    assert [s for s, _ in outbox(admin)] == [last, *pending]  # unapplied and pending rows stay
    # Receipt runs go with the last row they describe; the kept row keeps its receipt.
    assert admin.execute(
        "SELECT count(*) FROM outbox_receipts WHERE last_sequence < %s", (last,)
    ).fetchone() == (0,)
    assert admin.execute(
        "SELECT output_offset FROM outbox_status WHERE sequence = %s", (last,)
    ).fetchone() == (last_offset,)

    admin.execute("UPDATE view_progress SET next_offset = %s WHERE partition = 0", (applied_to,))
    drain(rt, 100)  # the relay publishes exactly the pending rows; nothing pruned comes back
    report = verify_namespace(rt)
    assert report.status.value == "PASS_WITH_EXCLUSIONS"  # the malformed record stays excluded
    (payload,) = admin.execute("SELECT raw_value FROM quarantine").fetchone()
    assert bytes(payload) == b"not json"  # the source still holds it: its payload is kept


def test_prune_drops_quarantine_payloads_only_below_the_source_low_watermark(
    pg_dsn: str, pg_schema: str, admin: psycopg.Connection[Any], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    # The development broker: retention (delete-records) on demand.
    with DevBroker(topics={"src": 1, "out": 1}, workdir=tmp_path) as broker:
        rt = Runtime(b.config(), dsn=pg_dsn, schema=pg_schema, bootstrap=broker.bootstrap)
        m = provision(rt, "src", "out").manifest
        config = write_config(tmp_path, rt)
        produce(broker.bootstrap, "src", [b"bad one", *txns("A"), b"bad two"])
        drain(rt, 100)
        first_bad = m.markers[0] + 1
        admin.execute("UPDATE quarantine SET quarantined_at = now() - interval '30 days'")
        broker.delete_records("src", 0, first_bad + 1)  # retention took the first bad record only

        assert prune_cli(monkeypatch, rt, config, "--keep-days", "7", "--dry-run") == 0
        assert "would drop 1 quarantine payloads" in capsys.readouterr().out
        assert prune_cli(monkeypatch, rt, config, "--keep-days", "7") == 0
        assert "dropped 1 quarantine payloads" in capsys.readouterr().out
        rows = admin.execute(
            "SELECT src_offset, reason, raw_value, payload_pruned_at IS NOT NULL, raw_value_sha256,"
            " raw_value_size FROM quarantine ORDER BY src_offset"
        ).fetchall()
        assert [(r[0], r[1], bytes(r[2]), r[3]) for r in rows] == [
            (first_bad, "MALFORMED", b"", True), (first_bad + 2, "MALFORMED", b"bad two", False)
        ]
        assert rows[0][4:] == (hashlib.sha256(b"bad one").hexdigest(), len(b"bad one"))
