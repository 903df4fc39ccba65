"""Make sure the database of a DSN exists, and say in one line what to do when it cannot.

Used by ``scripts/ensure-postgres.sh`` (``python -m amends_pipeline.postgres.ensure``)
and by the test suite, which creates a fresh database for every run and drops
it at the end, so the create path is exercised by every CI run.

Messages never contain a password: they name the server as ``host:port/db``
and the user, nothing else from the DSN, and driver texts pass through
``amends_pipeline.redaction`` (libpq may quote a malformed DSN whole).
"""

from __future__ import annotations

import os
import secrets
import sys
from dataclasses import dataclass

import psycopg
from psycopg import errors as pgerr
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from amends_pipeline.postgres.errors import StoreUnavailable, one_line
from amends_pipeline.postgres.urls import DAGSTER_DB_ENV, DEFAULT_DAGSTER_DB
from amends_pipeline.redaction import remember_dsn


@dataclass(frozen=True, slots=True)
class Target:
    host: str
    port: str
    dbname: str
    user: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.dbname} as {self.user}"


def target(dsn: str) -> Target:
    """Where a DSN points (no credentials); its secrets are remembered for redaction."""
    remember_dsn(dsn)
    try:
        d = conninfo_to_dict(dsn)
    except psycopg.Error as e:
        msg = (
            "AMENDS_PG_DSN is not a valid PostgreSQL connection string (URI or key=value):"
            f" {one_line(e)}"
        )
        raise StoreUnavailable(msg) from None
    host = str(d.get("host") or d.get("hostaddr") or os.environ.get("PGHOST") or "localhost")
    port = str(d.get("port") or os.environ.get("PGPORT") or "5432")
    user = str(d.get("user") or os.environ.get("PGUSER") or _os_user())
    db = str(d.get("dbname") or os.environ.get("PGDATABASE") or user)
    return Target(host, port, db, user)


def _os_user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return "postgres"


def with_dbname(dsn: str, dbname: str) -> str:
    """The same DSN (credentials, TLS settings and all) naming another database."""
    return make_conninfo(dsn, dbname=dbname)


def _explain(e: psycopg.Error, t: Target) -> str:
    """One line: what failed and what to do about it."""
    text = one_line(e)
    low = text.lower()
    state = getattr(e, "sqlstate", None)
    if state == "28P01" or "password authentication failed" in low:
        return (
            f"PostgreSQL at {t.host}:{t.port} rejected the password of user {t.user!r}:"
            " put the right one in AMENDS_PG_DSN or in ~/.pgpass"
        )
    if "no password supplied" in low or "fe_sendauth" in low:
        return (
            f"PostgreSQL at {t.host}:{t.port} wants a password for user {t.user!r}:"
            " add it to AMENDS_PG_DSN or ~/.pgpass (PGPASSFILE)"
        )
    if state == "28000" or "pg_hba.conf" in low:
        return (
            f"PostgreSQL at {t.host}:{t.port} does not let user {t.user!r} in from here"
            " (pg_hba.conf): allow it, or use another user in AMENDS_PG_DSN"
        )
    if "connection refused" in low or "no such file or directory" in low:
        return (
            f"nothing accepts PostgreSQL connections at {t.host}:{t.port}: start the server"
            " (`make postgres` installs and starts a local one) or point AMENDS_PG_DSN at one"
        )
    if "could not translate host name" in low or "name or service not known" in low:
        return f"the PostgreSQL host {t.host!r} of AMENDS_PG_DSN does not resolve: fix AMENDS_PG_DSN"
    if "timeout" in low:
        return f"PostgreSQL at {t.host}:{t.port} did not answer in time: is the host reachable?"
    if isinstance(e, pgerr.InsufficientPrivilege):
        return (
            f"user {t.user!r} may not create database {t.dbname!r} at {t.host}:{t.port}:"
            " create it yourself or grant CREATEDB"
        )
    return f"PostgreSQL at {t.host}:{t.port}/{t.dbname}: {text}"


def _connect(dsn: str) -> psycopg.Connection[object]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=5)


def ensure_database(dsn: str) -> bool:
    """Connect to the DSN's database, creating it when only it is missing; True if created.

    Raises StoreUnavailable with a one-line reason and remedy otherwise.
    """
    t = target(dsn)
    try:
        _connect(dsn).close()
        return False
    except psycopg.Error as e:
        if not _missing_database(e, t.dbname):
            raise StoreUnavailable(_explain(e, t)) from None
    create_database(dsn, t.dbname)
    return True


def _missing_database(e: psycopg.Error, dbname: str) -> bool:
    """True when the server refused the session only because the database does not exist."""
    if isinstance(e, pgerr.InvalidCatalogName) or getattr(e, "sqlstate", None) == "3D000":
        return True
    return f'database "{dbname}" does not exist' in str(e)


def _maintenance(dsn: str, t: Target) -> psycopg.Connection[object]:
    last: psycopg.Error | None = None
    for db in ("postgres", "template1"):
        try:
            return _connect(with_dbname(dsn, db))
        except psycopg.Error as e:
            if not _missing_database(e, db):
                raise StoreUnavailable(_explain(e, t)) from None
            last = e
    assert last is not None
    raise StoreUnavailable(_explain(last, t)) from None


def create_database(dsn: str, dbname: str) -> None:
    """CREATE DATABASE on the DSN's server; an existing database is fine."""
    t = target(with_dbname(dsn, dbname))
    with _maintenance(dsn, t) as conn:
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
        except pgerr.DuplicateDatabase:
            pass
        except psycopg.Error as e:
            raise StoreUnavailable(_explain(e, t)) from None


def drop_database(dsn: str, dbname: str) -> None:
    """DROP DATABASE ... WITH (FORCE) on the DSN's server (sessions still open are ended)."""
    t = target(with_dbname(dsn, dbname))
    with _maintenance(dsn, t) as conn:
        try:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )
        except psycopg.Error as e:
            raise StoreUnavailable(_explain(e, t)) from None


def scratch_database_name(prefix: str = "amends_test") -> str:
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"




def main(argv: list[str] | None = None) -> int:
    """``python -m amends_pipeline.postgres.ensure [--with-dagster]``: ensure AMENDS_PG_DSN's database.

    With ``--with-dagster`` also the database Dagster's run, event-log and
    schedule storage uses on the same server (``AMENDS_DAGSTER_PG_DB``, default
    ``amends_dagster``).
    """
    import argparse

    from amends_pipeline.postgres.connection import dsn_from_env

    parser = argparse.ArgumentParser(prog="ensure-postgres")
    parser.add_argument("--with-dagster", action="store_true")
    args = parser.parse_args(argv)
    dsn = dsn_from_env()
    try:
        target(dsn)  # a DSN that does not parse ends here, in one redacted line
    except StoreUnavailable as e:
        print(f"ensure-postgres: {e}", file=sys.stderr)
        return 1
    wanted = [dsn]
    if args.with_dagster:
        wanted.append(with_dbname(dsn, os.environ.get(DAGSTER_DB_ENV) or DEFAULT_DAGSTER_DB))
    for one in wanted:
        try:
            t = target(one)
            created = ensure_database(one)
        except StoreUnavailable as e:
            print(f"ensure-postgres: {e}", file=sys.stderr)
            return 1
        print(f"ensure-postgres: {'created' if created else 'found'} database {t}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
