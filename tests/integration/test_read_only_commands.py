"""Read-only commands never write: ``amends view``, ``verify``, ``replay`` and ``rebuild`` (dry runs) as real processes.

On a namespace that was never provisioned (no schema, a schema without the
tables, or tables without the namespace) both exit 2 with one line naming
the namespace, the database and what to run, and afterwards PostgreSQL holds
nothing new: no schema, no table, no namespace row. On a provisioned namespace
they leave the migration ledger and every registration table as they were.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.postgres.migrate import drop_schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "worked-example"
AMENDS = str(Path(sys.executable).with_name("amends"))
UNUSED_BOOTSTRAP = "127.0.0.1:9"
"""Nothing listens there: a read-only command refusing an unknown namespace never needs Kafka."""

READ_ONLY = [
    ("view", "--last", "0"),
    ("verify",),
    ("replay", "--partition", "0", "--from", "0", "--until", "0"),  # the dry run only reads
    ("rebuild", "--new-namespace", "never-rebuilt", "--output-topic", "never-out", "--quiet"),  # the plan reads
    ("load", str(FIXTURE / "before.jsonl")),  # reads the manifest for its topic; writes only Kafka
]


def amends(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AMENDS, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def environment(pg_dsn: str, schema: str, bootstrap: str) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("AMENDS_")}
    env.update(
        {"AMENDS_PG_DSN": pg_dsn, "AMENDS_PG_SCHEMA": schema, "AMENDS_KAFKA_BOOTSTRAP": bootstrap}
    )
    return env


def config_named(tmp: Path, namespace: str) -> Path:
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg["namespace"] = namespace
    path = tmp / f"{namespace}.json"
    path.write_text(json.dumps(cfg))
    return path


def schema_exists(conn: psycopg.Connection[Any], schema: str) -> bool:
    row = conn.execute(
        "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s", (schema,)
    ).fetchone()
    return bool(row and row[0])


def tables_of(conn: psycopg.Connection[Any], schema: str) -> list[str]:
    return sorted(
        r[0]
        for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        )
    )


def contents(conn: psycopg.Connection[Any], schema: str, table: str) -> list[tuple[Any, ...]]:
    q = sql.SQL("SELECT * FROM {}.{} ORDER BY 1, 2").format(
        sql.Identifier(schema), sql.Identifier(table)
    )
    return [tuple(r) for r in conn.execute(q).fetchall()]


@pytest.fixture
def conn(pg_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    c = psycopg.connect(pg_dsn, autocommit=True)
    yield c
    c.close()


def assert_refused(r: subprocess.CompletedProcess[str], command: str, namespace: str, config: Path,
                   schema: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith(f"amends {command}: namespace {namespace!r} is not provisioned in PostgreSQL 127.0.0.1:"), lines
    assert f"schema {schema!r}" in lines[0]
    assert lines[0].endswith(f": run `amends provision --config {config}`"), lines  # the file given


def test_view_and_verify_on_a_schema_that_does_not_exist_exit_2_and_create_nothing(
    pg_dsn: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    schema = f"t_never_{secrets.token_hex(4)}"
    config = config_named(tmp_path, "never-provisioned")
    env = environment(pg_dsn, schema, UNUSED_BOOTSTRAP)
    try:
        for cmd in READ_ONLY:
            r = amends(env, cmd[0], "--config", str(config), *cmd[1:])
            assert_refused(r, cmd[0], "never-provisioned", config, schema)
            assert "has no amends tables" in r.stderr
            assert not schema_exists(conn, schema)
    finally:
        drop_schema(pg_dsn, schema)


def test_view_and_verify_on_a_migrated_schema_without_the_namespace_exit_2_and_register_nothing(
    pg_dsn: str, pg_schema: str, tmp_path: Path, conn: psycopg.Connection[Any]
) -> None:
    config = config_named(tmp_path, "never-registered")
    env = environment(pg_dsn, pg_schema, UNUSED_BOOTSTRAP)
    ledger = contents(conn, pg_schema, "schema_migrations")
    tables = tables_of(conn, pg_schema)
    for cmd in READ_ONLY:
        r = amends(env, cmd[0], "--config", str(config), *cmd[1:])
        assert_refused(r, cmd[0], "never-registered", config, pg_schema)
        assert "has no namespace of that name" in r.stderr
    assert contents(conn, pg_schema, "namespaces") == []
    for table in ("partitions", "relay_progress", "view_progress", "stock_keys"):
        assert contents(conn, pg_schema, table) == [], table
    assert contents(conn, pg_schema, "schema_migrations") == ledger
    assert tables_of(conn, pg_schema) == tables


def test_view_and_verify_on_a_provisioned_namespace_change_no_registration_or_migration_row(
    pg_dsn: str, pg_schema: str, tmp_path: Path, conn: psycopg.Connection[Any],
    kafka_broker: RealBroker, topic_name: Callable[[str], str],
) -> None:
    config = FIXTURE / "config.json"
    env = environment(pg_dsn, pg_schema, kafka_broker.bootstrap)
    r = amends(env, "provision", "--config", str(config), "--source-topic", topic_name("source"),
               "--output-topic", topic_name("output"))
    assert r.returncode == 0, r.stderr
    watched = ["schema_migrations", "namespaces", "partitions", "relay_progress", "view_progress",
               "stock_keys", "source_manifest", "source_markers"]
    before = {t: contents(conn, pg_schema, t) for t in watched}
    tables = tables_of(conn, pg_schema)
    assert before["namespaces"] and before["stock_keys"]  # provision registered the namespace
    shown = amends(env, "view", "--config", str(config), "--last", "0")
    assert shown.returncode == 0, shown.stderr
    assert "view frontiers: nothing applied" in shown.stdout
    checked = amends(env, "verify", "--config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr  # nothing loaded: PASS
    after = {t: contents(conn, pg_schema, t) for t in watched}
    assert after == before
    assert tables_of(conn, pg_schema) == tables
    # another configuration under the same name stays a refusal (exit 1, as before)
    cfg = json.loads(config.read_text())
    cfg["keys"][0]["reorder_threshold"] += 1
    other = tmp_path / "other.json"
    other.write_text(json.dumps(cfg))
    for cmd in READ_ONLY:
        r = amends(env, cmd[0], "--config", str(other), *cmd[1:])
        assert r.returncode == 1 and "ConfigMismatch" in r.stderr, (cmd, r.returncode, r.stderr)
    assert {t: contents(conn, pg_schema, t) for t in watched} == before
