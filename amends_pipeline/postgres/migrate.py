"""Versioned SQL migrations, applied in order and recorded with their checksums.

Files are ``migrations/NNNN_name.sql``; version ``NNNN`` is the number. The
runner applies every pending file inside one transaction, serialised across
processes by an advisory lock, and records ``(version, name, sha256)`` in
``schema_migrations`` of the target schema. An applied file whose text has
changed, or an applied version this code does not know, is refused: the
database and the code disagree about what the schema is.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, describe, open_connection
from amends_pipeline.postgres.errors import (
    MigrationError,
    SchemaError,
    primary_message,
    translate,
)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_FILE = re.compile(r"(?P<version>[0-9]{4})_(?P<name>[a-z0-9_]+)\.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str
    checksum: str
    """SHA-256 of the file's bytes."""


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Migration files of ``directory`` in version order; refuses odd names and duplicates."""
    out: dict[int, Migration] = {}
    for path in sorted(directory.iterdir()):
        if path.suffix != ".sql":
            continue
        m = _FILE.fullmatch(path.name)
        if m is None:
            msg = f"migration file name {path.name!r} is not NNNN_name.sql"
            raise MigrationError(msg)
        version = int(m["version"])
        if version in out:
            msg = f"two migration files have version {version:04d}"
            raise MigrationError(msg)
        data = path.read_bytes()
        out[version] = Migration(
            version, m["name"], data.decode("utf-8"), hashlib.sha256(data).hexdigest()
        )
    return [out[v] for v in sorted(out)]


_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer PRIMARY KEY,
    name        text NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def _lock_key(schema: str) -> int:
    digest = hashlib.sha256(f"amends-migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _check_applied(applied: dict[int, tuple[str, str]], known: Sequence[Migration]) -> None:
    by_version = {m.version: m for m in known}
    for version, (name, checksum) in sorted(applied.items()):
        m = by_version.get(version)
        if m is None:
            msg = (
                f"the database has migration {version:04d}_{name}, which this code does not"
                " know; it is newer than the code"
            )
            raise MigrationError(msg)
        if m.checksum != checksum:
            msg = f"migration {version:04d}_{m.name} was changed after it was applied"
            raise MigrationError(msg)


def _applied(conn: psycopg.Connection[Any]) -> dict[int, tuple[str, str]]:
    rows = conn.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    return {v: (n, c) for v, n, c in rows}


def _check_owner(conn: psycopg.Connection[Any], schema: str, where: str) -> None:
    """Refuse to adopt an existing schema that another role owns and amends never migrated.

    ``CREATE SCHEMA IF NOT EXISTS`` would silently put our tables into someone
    else's schema, whose owner can drop or replace anything in it. Used as it
    is: a schema the current user owns, one owned by ``pg_database_owner``
    (PostgreSQL 15's ``public``) when the current user owns the database, and
    one that already has a ``schema_migrations`` table the current user owns
    (migrated by us before; the schema's ownership was transferred later).
    A schema a superuser or the database's owner created for us (a DBA's usual
    set-up, with CREATE granted to our role) is used too: those roles can drop
    anything in the database anyway, so their ownership adds no risk. The risk
    is an ordinary other role, which could replace our tables behind our back.
    """
    row = conn.execute(
        "SELECT pg_get_userbyid(n.nspowner), current_user,"
        " pg_get_userbyid((SELECT datdba FROM pg_database WHERE datname = current_database())),"
        " EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid"
        " AND c.relname = 'schema_migrations' AND c.relkind IN ('r', 'p')"
        " AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)),"
        " (SELECT rolsuper FROM pg_roles WHERE oid = n.nspowner)"
        " FROM pg_namespace n WHERE n.nspname = %s",
        (schema,),
    ).fetchone()
    if row is None:
        return  # absent: we create it, owned by the current user
    owner, me, db_owner, migrated, owner_is_superuser = row
    trusted = owner_is_superuser or owner == db_owner
    if owner == me or migrated or trusted or (owner == "pg_database_owner" and db_owner == me):
        return
    msg = (
        f"{where}: schema {schema!r} exists and belongs to role {owner!r}, not to {me!r},"
        " and has no amends migrations: refusing to put amends tables into another role's"
        " schema; choose another schema (AMENDS_PG_SCHEMA) or have its owner transfer it"
        f" (ALTER SCHEMA {schema} OWNER TO {me})"
    )
    raise MigrationError(msg)


def migrate(
    conninfo: str,
    schema: str = DEFAULT_SCHEMA,
    migrations: Sequence[Migration] | None = None,
) -> list[int]:
    """Apply pending migrations to ``schema`` (created if absent); return versions applied.

    Idempotent and safe to run concurrently: the second runner waits for the
    first and then finds nothing to do.
    """
    known = list(discover() if migrations is None else migrations)
    where = f"{describe(conninfo)}: migrating schema {schema!r}"
    conn = open_connection(conninfo, None)
    try:
        conn.execute("BEGIN")
        # A migration may rewrite big tables and waits for a concurrent runner (the
        # advisory lock) and for short amends transactions: no session timeouts here.
        conn.execute("SET LOCAL statement_timeout = 0")
        conn.execute("SET LOCAL lock_timeout = 0")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema),))
        _check_owner(conn, schema, where)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(schema)))
        conn.execute(_LEDGER)
        applied = _applied(conn)
        _check_applied(applied, known)
        done = []
        for m in known:
            if m.version in applied:
                continue
            try:
                conn.execute(m.sql.encode("utf-8"))  # bytes: plain SQL, no parameters
            except psycopg.Error as e:
                msg = f"{where}: migration {m.version:04d}_{m.name} failed: {primary_message(e)}"
                raise MigrationError(msg) from e
            conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                (m.version, m.name, m.checksum),
            )
            done.append(m.version)
        conn.execute("COMMIT")
        return done
    except psycopg.Error as e:
        raise translate(e, where) from e
    finally:
        conn.close()


def check_current(
    conn: psycopg.Connection[Any], schema: str, migrations: Sequence[Migration] | None = None
) -> None:
    """Refuse a schema that is missing migrations or disagrees with the files (SchemaError)."""
    known = list(discover() if migrations is None else migrations)
    try:
        exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
        applied = _applied(conn) if exists and exists[0] else {}
    except psycopg.Error as e:
        raise translate(e, f"checking schema {schema!r}") from e
    if not applied:
        msg = f"schema {schema!r} has no amends tables; run the migrations first"
        raise SchemaError(msg)
    _check_applied(applied, known)
    missing = [m for m in known if m.version not in applied]
    if missing:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in missing)
        msg = f"schema {schema!r} lacks migrations {names}; run the migrations first"
        raise SchemaError(msg)


def drop_schema(conninfo: str, schema: str) -> None:
    """Remove a schema and everything in it (tests and throw-away namespaces only)."""
    conn = open_connection(conninfo, None)
    try:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    except psycopg.Error as e:
        raise translate(e, f"{describe(conninfo)}: dropping schema {schema!r}") from e
    finally:
        conn.close()


@contextmanager
def scratch_schema(conninfo: str, prefix: str = "scratch", *, migrated: bool = True) -> Iterator[str]:
    """A freshly migrated, uniquely named schema that is dropped afterwards.

    ``migrated=False``: only the name; whoever uses it first creates and migrates it (another
    checkout's ``amends provision``, whose code refuses a schema migrated past its own).
    """
    schema = f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"
    if migrated:
        migrate(conninfo, schema)
    try:
        yield schema
    finally:
        drop_schema(conninfo, schema)
