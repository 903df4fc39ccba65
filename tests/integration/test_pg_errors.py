"""Unusable databases and dropped sessions give our own one-line errors and lose nothing."""

from __future__ import annotations

import socket

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from amends_pipeline.postgres import migrate
from amends_pipeline.postgres.errors import (
    SchemaError,
    StoreConflict,
    StoreError,
    StoreUnavailable,
    translate,
)
from amends_pipeline.postgres.store import PgStore
from amends_pipeline.postgres.view_store import PgViewStore
from tests import builders as b


def with_dsn(dsn: str, **changes: str) -> str:
    d = conninfo_to_dict(dsn)
    d.update(changes)
    return make_conninfo(**d)


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def one_line(e: BaseException) -> str:
    text = str(e)
    assert "\n" not in text and text.strip() == text and text
    return text


def test_a_port_without_a_server_gives_store_unavailable_on_one_line(pg_dsn):
    dsn = with_dsn(pg_dsn, host="127.0.0.1", port=str(free_port()), password="s3cret-pw")
    with pytest.raises(StoreUnavailable) as caught:
        PgStore.open(dsn, b.config())
    text = one_line(caught.value)
    assert "cannot connect" in text and "s3cret-pw" not in text
    assert isinstance(caught.value.__cause__, psycopg.Error)


def test_a_missing_database_gives_store_unavailable_naming_it(pg_dsn):
    dsn = with_dsn(pg_dsn, dbname="amends_no_such_db")
    with pytest.raises(StoreUnavailable) as caught:
        PgViewStore.open(dsn, b.config())
    assert 'database "amends_no_such_db" does not exist' in one_line(caught.value)


def test_a_malformed_dsn_gives_store_unavailable():
    with pytest.raises(StoreUnavailable) as caught:
        PgStore.open("host=127.0.0.1 port=5432 this is not a dsn", b.config())
    assert "invalid connection string" in one_line(caught.value)


def test_an_unmigrated_schema_says_to_run_the_migrations(pg_dsn):
    with pytest.raises(SchemaError, match="run the migrations") as caught:
        PgStore.open(pg_dsn, b.config(), schema="amends_never_migrated_schema")
    one_line(caught.value)


def test_a_schema_missing_a_newer_migration_is_refused(pg_dsn, pg_schema):
    known = migrate.discover()
    extra = migrate.Migration(known[-1].version + 1, "future", "SELECT 1", "0" * 64)
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(pg_schema)))
    with pytest.raises(SchemaError, match="lacks migrations"):
        migrate.check_current(conn, pg_schema, [*known, extra])
    conn.close()


def test_an_idle_session_killed_by_the_server_is_replaced_transparently(open_store, admin):
    store = open_store(b.config())
    tok = store.claim(0)
    admin.execute("SELECT pg_terminate_backend(%s, 5000)", (store.db.backend[0],))
    assert store.frontier(0) == 0  # a new session; nothing was in flight
    assert store.process(tok, 0, b.records([b.txn("A")])).frontier == 1


def test_a_session_killed_inside_a_unit_of_work_raises_store_unavailable_then_recovers(
    open_store, admin
):
    store = open_store(b.config())
    tok = store.claim(0)
    store.process(tok, 0, b.records([b.txn("A")]))
    with pytest.raises(StoreUnavailable) as caught:
        with store.db.transaction("reading something") as conn:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (store.db.backend[0],))
            conn.execute("SELECT 1")
    assert "reading something: terminating connection" in one_line(caught.value)
    assert store.frontier(0) == 1  # the broken session is discarded and replaced


def test_psycopg_errors_map_to_our_types():
    assert isinstance(translate(psycopg.errors.DeadlockDetected(), "x"), StoreConflict)
    assert isinstance(translate(psycopg.errors.UndefinedTable(), "x"), SchemaError)
    assert isinstance(translate(psycopg.OperationalError("gone"), "x"), StoreUnavailable)
    generic = translate(psycopg.errors.DivisionByZero("a\nb"), "doing x")
    assert type(generic) is StoreError and str(generic) == "doing x: a b"
