"""Wake-ups for the relay: the worker's batch commit notifies, an idle relay listens.

A processing transaction that queued outbox rows issues ``NOTIFY`` on the
namespace's outbox channel (``outbox_channel``) with its writes, before it
commits; PostgreSQL delivers a notification
only when, and after, its transaction commits, so a relay woken by one finds
the batch's outbox rows. The notification carries nothing (empty payload): it
only says "look now". What the relay publishes is always what its own query
of the outbox finds, so a lost, late or extra notification can only delay a
publish or cost one empty query, never change what is published; and the relay
still polls every ``--fallback-poll`` seconds when no notification comes.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import psycopg
from psycopg import sql

from amends_pipeline.postgres.connection import open_connection
from amends_pipeline.postgres.errors import StoreError, translate


def outbox_channel(schema: str, namespace: str) -> str:
    """The notification channel of one namespace's outbox in one schema.

    Channels are per database, like advisory locks: the schema is part of the
    name, so two schemas (a test and a demo) never wake each other's relays.
    A digest keeps it within PostgreSQL's 63-byte identifier limit.
    """
    ident = json.dumps(["amends-outbox", schema, namespace], separators=(",", ":"))
    return "amends_outbox_" + hashlib.sha256(ident.encode()).hexdigest()[:32]


class OutboxListener:
    """A dedicated session that LISTENs on an outbox channel; ``wait`` blocks until a notification.

    The session is opened lazily and reopened after a failure. Opening it
    reports a wake-up: notifications sent while no session listened are lost,
    so the caller looks once instead of trusting a silence it could not hear.
    """

    def __init__(self, conninfo: str, schema: str, namespace: str) -> None:
        self.conninfo = conninfo
        self.schema = schema
        self.channel = outbox_channel(schema, namespace)
        self._conn: psycopg.Connection[Any] | None = None

    def listen(self) -> None:
        """Open the session and LISTEN (StoreUnavailable when PostgreSQL cannot be reached)."""
        self.close()
        conn = open_connection(self.conninfo, self.schema, application_name="amends-relay-wake")
        try:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        except psycopg.Error as e:
            conn.close()
            raise translate(e, "listening for outbox notifications") from e
        self._conn = conn

    def wait(self, timeout: float) -> bool:
        """True after a notification (or a reopened session); False when ``timeout`` passed without one."""
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            try:
                self.listen()
            except StoreError:
                time.sleep(timeout)  # PostgreSQL is away: the relay's own step reports it
                return False
            return True
        try:
            woke = False
            for _ in conn.notifies(timeout=timeout, stop_after=1):
                woke = True
            return woke
        except psycopg.Error:
            self.close()
            return True

    def drain(self) -> int:
        """Discard the notifications already received, without waiting; returns how many.

        A relay that stays busy never waits, so without this its session would
        leave notifications unread: PostgreSQL keeps every notification in its
        shared queue until each listening session has read it, and a session
        that reads nothing holds the queue's tail back (the queue is bounded,
        and once full, NOTIFY fails in every database of the server). The relay
        runs this before each round's look at the outbox, never after: a
        notification discarded here is for a commit that the look that follows
        sees, and one arriving after the look still wakes the next wait.
        A broken session is closed; the next ``wait`` reopens it.
        """
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            return 0
        heard = 0
        try:
            for _ in conn.notifies(timeout=0):
                heard += 1
        except psycopg.Error:
            self.close()
        return heard

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
