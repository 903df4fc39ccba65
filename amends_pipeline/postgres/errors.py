"""The PostgreSQL adapter's exceptions, and the one place psycopg errors become them.

Every psycopg exception raised inside this package passes through ``translate``
(in ``Database.transaction`` and the session set-up), so callers only ever see our
types: a one-line message naming what was being done and where, never a
driver traceback. The original error stays attached as ``__cause__``.
"""

from __future__ import annotations

import psycopg
from psycopg import errors as pgerr

from amends_core import errors as core_errors
from amends_core.errors import BatchAborted as BatchAborted
from amends_core.errors import FenceError, Transient
from amends_pipeline.redaction import redact


class StoreError(Exception):
    """Base of every error raised by the PostgreSQL adapter."""


class StoreUnavailable(StoreError, Transient):
    """The database cannot be reached or used (wrong DSN, missing database, lost connection).

    The failed call committed nothing; retrying it later is safe.
    """


class SchemaError(StoreError):
    """The schema is missing, older than this code, or its migrations were changed."""


class MigrationError(SchemaError):
    """A migration could not be applied, or applied migrations disagree with the files."""


class NamespaceUnknown(SchemaError):
    """A read-only open found no provisioned namespace (schema, migrations or registration missing).

    Read-only commands never create what is missing: provisioning does. The
    message names the namespace, the database and schema, and what to run.
    """

    def __init__(self, namespace: str, where: str, schema: str, detail: str) -> None:
        self.namespace = namespace
        self.where = where
        self.schema = schema
        self.detail = detail
        super().__init__(self.message())

    def message(self, config: str = "CONFIG.json") -> str:
        """The one-line message; ``config`` is the configuration file to name in the advice."""
        return (
            f"namespace {self.namespace!r} is not provisioned in {self.where}"
            f" ({self.detail}): run `amends provision --config {config}`"
        )


class ConfigMismatch(StoreError, FenceError):
    """The namespace is registered with another configuration digest."""


class StoreConflict(StoreError, Transient):
    """A transient concurrency failure (deadlock, serialization, lock timeout); retry."""


class LockTimeout(StoreConflict):
    """A statement waited longer than ``lock_timeout`` for a lock another session holds.

    Nothing of the unit of work was committed; the roles retry it. Repeated,
    it names a session that holds its locks too long (see pg_stat_activity).
    """


class StatementTimeout(StoreConflict):
    """A statement ran longer than ``statement_timeout`` and the server cancelled it.

    Nothing of the unit of work was committed; the roles retry it. Repeated,
    the statement is stuck (locks, I/O) or the timeout is too short for the
    data (``AMENDS_PG_STATEMENT_TIMEOUT``).
    """


class CommitUnknown(StoreError, core_errors.CommitUnknown):
    """COMMIT was sent but its reply was lost: the transaction may or may not have committed.

    Never assume either outcome. Resolve by re-reading durable state, e.g.
    ``PgStore.resolve_unknown(error)`` for a processing batch. ``backend``
    names the server process that received the COMMIT, so settling can end it.
    """


def one_line(text: object) -> str:
    """A driver message on one line, with every secret redacted (see ``amends_pipeline.redaction``)."""
    return redact(" ".join(redact(text).split()))


def primary_message(e: BaseException) -> str:
    """The server's primary message (or the driver's), on one line."""
    diag = getattr(e, "diag", None)
    msg = getattr(diag, "message_primary", None) if diag is not None else None
    return one_line(msg or str(e) or type(e).__name__)


def connection_lost(e: psycopg.Error) -> bool:
    """True when the error means the session is gone (not a statement failure)."""
    if isinstance(e, psycopg.InterfaceError):
        return True
    if not isinstance(e, psycopg.OperationalError):
        return False
    state = e.sqlstate
    return state is None or state.startswith(("08", "57P"))


_TRANSIENT = (
    pgerr.SerializationFailure,
    pgerr.DeadlockDetected,
    pgerr.LockNotAvailable,
    pgerr.QueryCanceled,
)
_SCHEMA = (pgerr.UndefinedTable, pgerr.InvalidSchemaName, pgerr.UndefinedColumn)


def translate(e: psycopg.Error, where: str, *, committing: bool = False) -> StoreError:
    """Our exception for a psycopg error raised while doing ``where`` (one line).

    ``committing``: the error came from COMMIT itself, so a lost session means
    the outcome is unknown rather than "nothing happened".
    """
    if connection_lost(e):
        if committing:
            return CommitUnknown(
                f"{where}: the commit outcome is unknown ({primary_message(e)})", operation=where
            )
        return StoreUnavailable(f"{where}: {primary_message(e)}")
    if isinstance(e, pgerr.LockNotAvailable):
        return LockTimeout(
            f"{where}: {primary_message(e)} (another session held the lock past lock_timeout;"
            " nothing was committed, retry)"
        )
    if isinstance(e, pgerr.QueryCanceled) and "statement timeout" in primary_message(e):
        return StatementTimeout(
            f"{where}: {primary_message(e)} (the statement ran past statement_timeout;"
            " nothing was committed, retry)"
        )
    if isinstance(e, _TRANSIENT):
        return StoreConflict(f"{where}: {primary_message(e)}")
    if isinstance(e, _SCHEMA):
        return SchemaError(f"{where}: {primary_message(e)} (is the schema migrated?)")
    if isinstance(e, psycopg.OperationalError):
        return StoreUnavailable(f"{where}: {primary_message(e)}")
    return StoreError(f"{where}: {primary_message(e)}")
