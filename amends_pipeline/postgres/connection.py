"""One PostgreSQL session bound to a schema, with explicit transactions.

The session runs in autocommit mode and every unit of work issues its own
``BEGIN`` and ``COMMIT``, so the adapter always knows which statement was the
commit: a session lost during COMMIT is reported as ``CommitUnknown``, a
session lost anywhere else as ``StoreUnavailable`` (nothing was committed).
A broken idle session is replaced transparently on the next unit of work.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_for
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from amends_pipeline.postgres.errors import (
    CommitUnknown,
    StoreError,
    StoreUnavailable,
    connection_lost,
    one_line,
    translate,
)
from amends_pipeline.redaction import remember_dsn

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/amends"
DSN_ENV = "AMENDS_PG_DSN"
CONNECT_TIMEOUT_S = 5
"""libpq's ``connect_timeout`` for every session amends opens: an address that drops
packets is reported after this many seconds (per address tried), never hangs."""
DEFAULT_SCHEMA = "amends"
IDLE_IN_TRANSACTION_TIMEOUT_S = 300
"""The server ends a session left idle inside a transaction this long, releasing its locks.

A client that vanishes mid-transaction (or whose COMMIT never arrives) must
not hold a partition or view lock until TCP keepalive notices; no amends
transaction legitimately pauses this long between statements. Only idle time
*inside* a transaction counts: an idle session outside one (the relay's lock
session) is never ended, and amends turns ``idle_session_timeout`` off.
"""
STATEMENT_TIMEOUT_S = 300
"""The server cancels any one statement of an amends session that runs this long.

The largest statements amends issues (the COPY of a big batch, a verification
snapshot of a whole namespace) take seconds; a statement still running after
five minutes is stuck (a lock or I/O problem), and failing it as a retryable
``StatementTimeout`` is better than a role that hangs. Migrations lift it for
their own transaction. 0 turns it off. Override: ``AMENDS_PG_STATEMENT_TIMEOUT``.
"""
LOCK_TIMEOUT_S = 60
"""The server gives up a wait for a row or table lock after this many seconds.

Amends transactions hold their locks for one batch (seconds at most); a wait
this long means a stuck or foreign session holds the lock. The waiting
operation fails as a retryable ``LockTimeout`` naming the wait, instead of
queueing forever behind it. Migrations lift it for their own transaction.
0 turns it off. Override: ``AMENDS_PG_LOCK_TIMEOUT``.
"""
KEEPALIVE_IDLE_S = 30
"""TCP keepalive (client and server side): first probe after this much silence."""
KEEPALIVE_INTERVAL_S = 10
"""TCP keepalive: seconds between unanswered probes."""
KEEPALIVE_COUNT = 3
"""TCP keepalive: unanswered probes before the connection counts as dead.

With the two values above a peer that vanished (host down, cable cut, NAT
entry dropped) is noticed after about a minute, by the client (a role gets
StoreUnavailable and reconnects) and by the server (which then releases the
session's locks, the relay's advisory lock included).
"""
TCP_USER_TIMEOUT_S = 60
"""Transmitted data left unacknowledged this long closes the connection (``tcp_user_timeout``).

Keepalives only probe an idle connection; this bounds a send that the peer
never acknowledges, e.g. a COMMIT written into a dead connection.
"""
STATEMENT_TIMEOUT_ENV = "AMENDS_PG_STATEMENT_TIMEOUT"
LOCK_TIMEOUT_ENV = "AMENDS_PG_LOCK_TIMEOUT"


def timeout_from_env(name: str, default: int) -> int:
    """Whole seconds from the environment variable ``name`` (0 = off), else ``default``.

    A value that is not a whole number from 0 to 86400 is refused (StoreError),
    so a typo never silently runs without a timeout.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit() or int(raw) > 86400:
        msg = f"{name}={raw!r}: expected whole seconds from 0 (off) to 86400"
        raise StoreError(msg)
    return int(raw)


def client_keepalives(conninfo: str) -> dict[str, str]:
    """libpq keepalive settings to add to ``conninfo``: only those it does not set itself."""
    wanted = {
        "keepalives": "1",
        "keepalives_idle": str(KEEPALIVE_IDLE_S),
        "keepalives_interval": str(KEEPALIVE_INTERVAL_S),
        "keepalives_count": str(KEEPALIVE_COUNT),
        "tcp_user_timeout": str(TCP_USER_TIMEOUT_S * 1000),
    }
    try:
        given = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return wanted  # the connect call reports the malformed DSN
    return {k: v for k, v in wanted.items() if k not in given}


def session_settings(
    *, statement_timeout_s: int, lock_timeout_s: int, idle_in_transaction_timeout_s: int | None,
    server_version: int,
) -> list[tuple[str, str]]:
    """The (parameter, value) pairs ``open_connection`` SETs on every session."""
    out = [
        ("statement_timeout", f"{statement_timeout_s * 1000}"),
        ("lock_timeout", f"{lock_timeout_s * 1000}"),
        ("tcp_keepalives_idle", str(KEEPALIVE_IDLE_S)),
        ("tcp_keepalives_interval", str(KEEPALIVE_INTERVAL_S)),
        ("tcp_keepalives_count", str(KEEPALIVE_COUNT)),
    ]
    if idle_in_transaction_timeout_s is not None:
        out.append(("idle_in_transaction_session_timeout", f"{idle_in_transaction_timeout_s * 1000}"))
    if server_version >= 120000:
        out.append(("tcp_user_timeout", f"{TCP_USER_TIMEOUT_S * 1000}"))
    if server_version >= 140000:
        # A server-wide idle_session_timeout would silently end the relay's lock session.
        out.append(("idle_session_timeout", "0"))
    return out


def dsn_from_env() -> str:
    """``AMENDS_PG_DSN`` when set, else the local development default."""
    return os.environ.get(DSN_ENV) or DEFAULT_DSN


def describe(conninfo: str) -> str:
    """``host:port/dbname`` of a DSN, for messages; never includes a password."""
    try:
        d = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "PostgreSQL (unparsable DSN)"
    host = d.get("host") or d.get("hostaddr") or os.environ.get("PGHOST") or "localhost"
    port = d.get("port") or os.environ.get("PGPORT") or "5432"
    db = d.get("dbname") or os.environ.get("PGDATABASE") or d.get("user") or "?"
    return f"PostgreSQL {host}:{port}/{db}"


_LIBPQ_PREFIX = re.compile(
    r'(?:connection failed: )?connection to server (?:at "[^"]*"(?: \([^)]*\))?, port \d+|on socket "[^"]*")'
    r" failed: (?:FATAL:\s+)?"
)


def cannot_connect(where: str, e: psycopg.Error, connect_timeout: int) -> StoreUnavailable:
    """One line for a failed connection attempt: the server, why, and what to check.

    The result's ``unreachable`` is True when nothing answered (refused, unresolvable
    host, no answer in time), False when the server answered and said no.
    """
    text = one_line(e)
    low = text.lower()
    parts: list[str] = []
    for part in _LIBPQ_PREFIX.split(text):
        part = part.strip().rstrip(";").strip()
        if part and part not in parts:
            parts.append(part)
    said = "; ".join(parts) or text
    unreachable = True
    if "connection refused" in low:
        why = "connection refused"
        hint = f"start PostgreSQL or point {DSN_ENV} at a running server"
    elif isinstance(e, psycopg.errors.ConnectionTimeout) or "timeout expired" in low:
        why = f"no answer within {connect_timeout}s (connect_timeout)"
        hint = f"check the host and port in {DSN_ENV} and that the server is up and reachable from here"
    elif "resolve host" in low or "translate host name" in low:
        why = said
        hint = f"check the host name in {DSN_ENV}"
    else:
        unreachable = False
        why = said
        if "password authentication failed" in low or "no password supplied" in low:
            hint = f"check the user and password in {DSN_ENV} (or PGPASSWORD, ~/.pgpass)"
        elif "does not exist" in low and "database" in low:
            hint = f"create the database or fix its name in {DSN_ENV}"
        else:
            hint = f"check {DSN_ENV}"
    err = StoreUnavailable(f"{where}: cannot connect: {why}; {hint}")
    err.unreachable = unreachable  # type: ignore[attr-defined]
    return err


def is_unreachable(e: BaseException) -> bool:
    """True for a ``cannot_connect`` error where nothing answered (worth waiting for)."""
    return bool(getattr(e, "unreachable", False))


def open_connection(
    conninfo: str,
    schema: str | None,
    *,
    connect_timeout: int = CONNECT_TIMEOUT_S,
    application_name: str = "amends",
    idle_in_transaction_timeout_s: int | None = IDLE_IN_TRANSACTION_TIMEOUT_S,
    statement_timeout_s: int | None = None,
    lock_timeout_s: int | None = None,
) -> psycopg.Connection[Any]:
    """A new autocommit session whose search_path is ``schema``; StoreUnavailable on failure.

    Every session gets TCP keepalives and ``tcp_user_timeout`` (libpq, unless
    the DSN sets them), and the server-side timeouts of ``session_settings``:
    statement and lock timeouts (None: ``AMENDS_PG_STATEMENT_TIMEOUT`` /
    ``AMENDS_PG_LOCK_TIMEOUT`` or the constants), idle-in-transaction timeout,
    server keepalives, and ``idle_session_timeout`` off.

    libpq may quote the connection string, password included, in the text of
    a failure to connect: the driver's exception stays attached as the cause,
    with its text redacted like our message.
    """
    remember_dsn(conninfo)
    where = describe(conninfo)
    if statement_timeout_s is None:
        statement_timeout_s = timeout_from_env(STATEMENT_TIMEOUT_ENV, STATEMENT_TIMEOUT_S)
    if lock_timeout_s is None:
        lock_timeout_s = timeout_from_env(LOCK_TIMEOUT_ENV, LOCK_TIMEOUT_S)
    try:
        # Connection parameters for libpq (psycopg's **kwargs), not its named arguments.
        keepalives: dict[str, Any] = client_keepalives(conninfo)
        conn = psycopg.connect(
            conninfo,
            autocommit=True,
            connect_timeout=connect_timeout,
            application_name=application_name,
            **keepalives,
        )
    except psycopg.ProgrammingError as e:  # malformed DSN
        e.args = (one_line(e),)
        msg = f"{where}: invalid connection string ({e})"
        raise StoreUnavailable(msg) from e
    except psycopg.Error as e:
        err = cannot_connect(where, e, connect_timeout)
        e.args = (one_line(e),)
        raise err from e
    try:
        if schema is not None:
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        settings = session_settings(
            statement_timeout_s=statement_timeout_s,
            lock_timeout_s=lock_timeout_s,
            idle_in_transaction_timeout_s=idle_in_transaction_timeout_s,
            server_version=conn.info.server_version,
        )
        conn.execute(
            sql.SQL("SELECT {}").format(
                sql.SQL(", ").join(
                    sql.SQL("set_config({}, {}, false)").format(sql.Literal(k), sql.Literal(v))
                    for k, v in settings
                )
            )
        )
    except psycopg.Error as e:
        conn.close()
        raise translate(e, f"{where}: preparing the session") from e
    return conn


T = TypeVar("T")


class Database:
    """A lazily (re)connected session on one schema; not thread-safe (one per worker).

    One unit of work at a time may run on a background thread (``submit``: a batch's
    writes and COMMIT while the next batch is folded). Until it has finished, every
    other use of the session waits for it: the session is never used by two threads.
    """

    def __init__(
        self,
        conninfo: str,
        schema: str = DEFAULT_SCHEMA,
        *,
        connect_timeout: int = CONNECT_TIMEOUT_S,
        application_name: str = "amends",
        idle_in_transaction_timeout_s: int | None = IDLE_IN_TRANSACTION_TIMEOUT_S,
    ) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.where = describe(conninfo)
        self._connect_timeout = connect_timeout
        self._application_name = application_name
        self._idle_timeout = idle_in_transaction_timeout_s
        self._conn: psycopg.Connection[Any] | None = None
        self.backend: tuple[int, object] | None = None
        """(pid, backend_start) of the current server process, for commit resolution."""
        self._background: ThreadPoolExecutor | None = None
        self._busy: Future[Any] | None = None
        """The unit of work ``submit`` handed to the background thread, until it is waited for."""
        self._inside = threading.local()

    # ------------------------------------------------------------ the background unit

    def submit(self, work: Callable[[], T]) -> Future[T]:
        """Run ``work`` (which uses the session) on this database's background thread.

        The caller must not touch the session itself until the returned future is done;
        every method of this class waits for it first, so nothing else can interleave.
        """
        self.settle()
        if self._background is None:
            self._background = ThreadPoolExecutor(1, thread_name_prefix="amends-commit")

        def run() -> T:
            self._inside.active = True
            try:
                return work()
            finally:
                self._inside.active = False

        self._busy = f = self._background.submit(run)
        return f

    def settle(self) -> None:
        """Wait until the background unit of work (if any) has finished; its outcome is its future's."""
        f = self._busy
        if f is not None and not getattr(self._inside, "active", False):
            wait_for([f])
            self._busy = None

    # ------------------------------------------------------------ the session

    def connection(self) -> psycopg.Connection[Any]:
        """The live session, reconnecting when the previous one is closed or broken."""
        self.settle()
        c = self._conn
        if c is not None and not c.closed and not c.broken:
            if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                # A unit of work was abandoned mid-way; nothing of it may survive.
                try:
                    c.execute("ROLLBACK")
                except psycopg.Error:
                    self.discard()
                    return self.connection()
            return c
        self.discard()
        c = open_connection(
            self.conninfo,
            self.schema,
            connect_timeout=self._connect_timeout,
            application_name=self._application_name,
            idle_in_transaction_timeout_s=self._idle_timeout,
        )
        try:
            row = c.execute(
                "SELECT pid, backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).fetchone()
        except psycopg.Error as e:
            c.close()
            raise translate(e, f"{self.where}: identifying the session") from e
        self.backend = (row[0], row[1]) if row else None
        self._conn = c
        return c

    def discard(self) -> None:
        """Drop the session (closing it); the next unit of work reconnects."""
        self.settle()
        c, self._conn = self._conn, None
        self.backend = None
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001 - closing a dead session may fail in any way
                pass

    def close(self) -> None:
        """Drop the session and stop the background thread (after its unit of work)."""
        self.discard()
        bg, self._background = self._background, None
        if bg is not None:
            bg.shutdown(wait=True)

    @contextmanager
    def transaction(
        self, where: str, *, snapshot: bool = False
    ) -> Iterator[psycopg.Connection[Any]]:
        """BEGIN ... COMMIT around the block; any error rolls back and is translated.

        ``snapshot``: REPEATABLE READ READ ONLY (one consistent view of the data).
        A lost session during COMMIT raises CommitUnknown.
        """
        label = self.label(where)
        conn = self.begin(label, snapshot=snapshot)
        try:
            yield conn
        except psycopg.Error as e:
            self._abandon(conn)
            raise translate(e, label) from e
        except BaseException:
            self._abandon(conn)
            raise
        self.commit(conn, label)

    def label(self, where: str) -> str:
        """``where`` prefixed with the server it concerns (once)."""
        return where if where.startswith(self.where) else f"{self.where}: {where}"

    def begin(self, label: str, *, snapshot: bool = False) -> psycopg.Connection[Any]:
        """Start a unit of work; a session the server dropped while idle is replaced.

        Nothing is in flight before BEGIN, so one reconnection is always safe.
        """
        stmt = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if snapshot else "BEGIN"
        conn = self.connection()
        try:
            conn.execute(stmt)
            return conn
        except psycopg.Error as e:
            self._abandon(conn)
            if not connection_lost(e):
                raise translate(e, label) from e
        self.discard()
        conn = self.connection()
        try:
            conn.execute(stmt)
        except psycopg.Error as e:
            self._abandon(conn)
            raise translate(e, label) from e
        return conn

    def commit(self, conn: psycopg.Connection[Any], label: str) -> None:
        """COMMIT; a lost session here is CommitUnknown, never assumed rolled back."""
        backend = self.backend
        try:
            conn.execute("COMMIT")
        except psycopg.Error as e:
            self.discard()
            err = translate(e, label, committing=True)
            if isinstance(err, CommitUnknown):
                err.backend = backend
            raise err from e

    def end_backend(self, conn: psycopg.Connection[Any], backend: tuple[int, object] | None) -> None:
        """Terminate the server process of an abandoned session (if it still exists).

        Matched by pid *and* start time, so a reused pid is never hit. Used to
        settle a lost COMMIT: once that process is gone its transaction can no
        longer commit, and whatever it did commit is visible.
        """
        if backend is None:
            return
        conn.execute(
            "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
            " WHERE pid = %s AND backend_start = %s AND pid <> pg_backend_pid()",
            backend,
        )

    def rollback(self) -> None:
        """Roll back the current unit of work, if any; a failing session is dropped."""
        self.settle()
        if self._conn is not None:
            self._abandon(self._conn)

    def _abandon(self, conn: psycopg.Connection[Any]) -> None:
        if conn.closed or conn.broken:
            self.discard()
            return
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            self.discard()


def check_available(
    conninfo: str, *, connect_timeout: int = CONNECT_TIMEOUT_S, application_name: str = "amends"
) -> None:
    """Connect once and run ``SELECT 1``; raises StoreUnavailable with a one-line reason."""
    conn = open_connection(conninfo, None, connect_timeout=connect_timeout, application_name=application_name)
    try:
        conn.execute("SELECT 1")
    except psycopg.Error as e:
        raise translate(e, describe(conninfo)) from e
    finally:
        conn.close()


def wait_available(
    conninfo: str, seconds: float, *, application_name: str = "amends-probe"
) -> None:
    """``check_available``, retried while nothing answers, for at most about ``seconds``.

    A server that answers and refuses (password, missing database) fails at
    once; an unreachable one (refused, no answer) is tried again every half
    second until ``seconds`` have passed, then its StoreUnavailable is raised.
    """
    deadline = time.monotonic() + seconds
    while True:
        left = deadline - time.monotonic()
        try:
            check_available(
                conninfo, connect_timeout=max(1, min(CONNECT_TIMEOUT_S, round(left))),
                application_name=application_name,
            )
            return
        except StoreUnavailable as e:
            if not is_unreachable(e) or time.monotonic() + 0.5 >= deadline:
                raise
        time.sleep(0.5)


__all__ = [
    "CONNECT_TIMEOUT_S",
    "LOCK_TIMEOUT_ENV",
    "LOCK_TIMEOUT_S",
    "STATEMENT_TIMEOUT_ENV",
    "STATEMENT_TIMEOUT_S",
    "DEFAULT_DSN",
    "DEFAULT_SCHEMA",
    "DSN_ENV",
    "Database",
    "StoreError",
    "cannot_connect",
    "check_available",
    "describe",
    "dsn_from_env",
    "is_unreachable",
    "open_connection",
    "wait_available",
]
