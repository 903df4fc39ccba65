"""The migration runner: ordered, recorded with checksums, idempotent, concurrent-safe."""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from amends_pipeline.postgres import migrate
from amends_pipeline.postgres.errors import MigrationError


@pytest.fixture
def fresh_schema(pg_dsn):
    name = f"t_mig_{os.getpid()}_{secrets.token_hex(4)}"
    yield name
    migrate.drop_schema(pg_dsn, name)


def write(dirpath: Path, name: str, text: str) -> None:
    (dirpath / name).write_text(text)


def ledger(pg_dsn, schema):
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute(
            sql.SQL("SELECT version, name, checksum FROM {}.schema_migrations ORDER BY 1").format(
                sql.Identifier(schema)
            )
        ).fetchall()


def test_the_shipped_migrations_apply_in_order_and_are_recorded_with_checksums(
    pg_dsn, fresh_schema
):
    shipped = migrate.discover()
    assert [m.version for m in shipped] == sorted(m.version for m in shipped)
    assert migrate.migrate(pg_dsn, fresh_schema) == [m.version for m in shipped]
    assert ledger(pg_dsn, fresh_schema) == [(m.version, m.name, m.checksum) for m in shipped]
    path = migrate.MIGRATIONS_DIR / f"{shipped[0].version:04d}_{shipped[0].name}.sql"
    assert shipped[0].checksum == hashlib.sha256(path.read_bytes()).hexdigest()


def test_running_the_migrations_again_applies_nothing(pg_dsn, fresh_schema):
    migrate.migrate(pg_dsn, fresh_schema)
    before = ledger(pg_dsn, fresh_schema)
    assert migrate.migrate(pg_dsn, fresh_schema) == []
    assert ledger(pg_dsn, fresh_schema) == before


def test_a_new_migration_file_is_applied_after_the_existing_ones(pg_dsn, fresh_schema, tmp_path):
    write(tmp_path, "0001_a.sql", "CREATE TABLE a (x int);")
    assert migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path)) == [1]
    write(tmp_path, "0002_b.sql", "CREATE TABLE b (y int);")
    assert migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path)) == [2]
    assert [v for v, _, _ in ledger(pg_dsn, fresh_schema)] == [1, 2]


def test_an_applied_migration_that_was_edited_is_refused(pg_dsn, fresh_schema, tmp_path):
    write(tmp_path, "0001_a.sql", "CREATE TABLE a (x int);")
    migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path))
    write(tmp_path, "0001_a.sql", "CREATE TABLE a (x bigint);")
    with pytest.raises(MigrationError, match="0001_a was changed after it was applied"):
        migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path))


def test_a_database_newer_than_the_code_is_refused(pg_dsn, fresh_schema, tmp_path):
    write(tmp_path, "0001_a.sql", "SELECT 1;")
    write(tmp_path, "0002_b.sql", "SELECT 2;")
    migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path))
    (tmp_path / "0002_b.sql").unlink()
    with pytest.raises(MigrationError, match="newer than the code"):
        migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path))


def test_a_failing_migration_applies_nothing_of_the_run(pg_dsn, fresh_schema, tmp_path):
    write(tmp_path, "0001_a.sql", "CREATE TABLE a (x int);")
    write(tmp_path, "0002_b.sql", "CREATE TABLE b (y int); SELECT no_such_function();")
    with pytest.raises(MigrationError, match="0002_b failed") as caught:
        migrate.migrate(pg_dsn, fresh_schema, migrate.discover(tmp_path))
    assert "\n" not in str(caught.value)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (fresh_schema,)
        ).fetchone() == (0,)


def test_concurrent_runners_apply_each_migration_once(pg_dsn, fresh_schema):
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate.migrate(pg_dsn, fresh_schema))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert sorted(results, key=len) == [[], [], [], [m.version for m in migrate.discover()]]


def test_migration_files_must_be_numbered_and_unique(tmp_path):
    write(tmp_path, "first.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="not NNNN_name.sql"):
        migrate.discover(tmp_path)
    (tmp_path / "first.sql").unlink()
    write(tmp_path, "0001_a.sql", "SELECT 1;")
    write(tmp_path, "0001_b.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="two migration files have version 0001"):
        migrate.discover(tmp_path)


def test_schema_names_needing_quotes_work(pg_dsn):
    name = 'odd "schema" name ü'
    try:
        assert migrate.migrate(pg_dsn, name)
        assert migrate.migrate(pg_dsn, name) == []
    finally:
        migrate.drop_schema(pg_dsn, name)


def test_receipts_recorded_on_outbox_rows_survive_the_move_to_receipt_runs(pg_dsn, fresh_schema):
    """0012 drops the outbox's receipt columns: what they said must read the same afterwards."""
    before = [m for m in migrate.discover() if m.version < 12]
    migrate.migrate(pg_dsn, fresh_schema, before)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(fresh_schema)))
        (ns,) = conn.execute(
            "INSERT INTO namespaces (name, config_digest, config, partitions)"
            " VALUES ('n', 'd', '{}', 1) RETURNING ns_id"
        ).fetchone()
        conn.execute("INSERT INTO relay_progress (ns_id, partition, acked_sequence) VALUES (%s, 0, 3)", (ns,))
        rows = [  # sequence, acked, output partition, output offset
            (1, True, 0, 70), (2, True, 0, 71), (3, True, None, None), (4, False, 0, 90),
            (5, False, None, None),
        ]
        for s, a, op, oo in rows:
            conn.execute(
                "INSERT INTO outbox (ns_id, partition, sequence, envelope, acked, output_partition,"
                " output_offset) VALUES (%s, 0, %s, %s, %s, %s, %s)",
                (ns, s, f"env{s}".encode(), a, op, oo),
            )
        assert migrate.migrate(pg_dsn, fresh_schema) == [m.version for m in migrate.discover()
                                                          if m.version >= 12]
        got = conn.execute(
            "SELECT sequence, acked, output_partition, output_offset FROM outbox_status"
            " ORDER BY sequence"
        ).fetchall()
        assert got == rows
        cols = {r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'outbox'", (fresh_schema,)
        )}
        assert cols == {"ns_id", "partition", "sequence", "envelope", "committed_at"}
