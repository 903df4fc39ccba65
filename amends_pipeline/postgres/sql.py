"""SQL text of the processing store: statements, and the sinks that build a batch's writes.

Only text and statement builders live here; ``store`` and ``batch`` run them.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql
from psycopg.copy import Copy, FileWriter, LibpqWriter

_SKIP_COLUMNS = (
    "partition, src_offset, reason, operator, skipped_at, error, epoch, frontier_before,"
    " value_sha256, value_size"
)
READ_SKIPS = (
    "SELECT " + _SKIP_COLUMNS + " FROM operator_skips WHERE ns_id = %s ORDER BY partition, src_offset"
)
READ_SKIP = (
    "SELECT " + _SKIP_COLUMNS + " FROM operator_skips WHERE ns_id = %s AND partition = %s"
    " AND src_offset = %s"
)
_STOP_COLUMNS = "s.partition, s.src_offset, s.error, s.stopped_at"
CURRENT_STOPS = (
    "SELECT " + _STOP_COLUMNS + " FROM partition_stops s JOIN partitions p"
    " ON p.ns_id = s.ns_id AND p.partition = s.partition"
    " WHERE s.ns_id = %s AND s.src_offset >= p.next_offset ORDER BY s.partition"
)

LOCK_PARTITION = """
SELECT p.epoch, p.next_offset, p.last_sequence, p.batches_total, n.config_digest
FROM partitions p JOIN namespaces n ON n.ns_id = p.ns_id
WHERE p.ns_id = %s AND p.partition = %s
FOR UPDATE OF p
"""

CLAIM = """
UPDATE partitions p SET epoch = p.epoch + 1, claim_nonce = %s FROM namespaces n
WHERE n.ns_id = p.ns_id AND p.ns_id = %s AND p.partition = %s
RETURNING p.epoch, n.config_digest
"""
OBSERVE_CLAIM = """
SELECT epoch, claim_nonce FROM partitions WHERE ns_id = %s AND partition = %s FOR UPDATE
"""

LOAD_OBSERVATIONS = """
SELECT key_id, src_offset, txn_id, revision, candidate, kind, valid_day, valid_nod, qty,
       source_day, source_nod
FROM observations WHERE key_id = ANY(%s) ORDER BY key_id, src_offset
"""
LOAD_IDENTITY_BELOW = """
SELECT src_offset, txn_id, revision, candidate, kind, valid_day, valid_nod, qty,
       source_day, source_nod
FROM observations WHERE key_id = %s AND txn_id = %s AND revision < %s ORDER BY src_offset
"""
"""One identity's observations below a revision: what a compact key state restores."""
LOAD_DAYS = """
SELECT key_id, day, total, active_count, close, alert
FROM key_days WHERE key_id = ANY(%s) ORDER BY key_id, day
"""
LOAD_OUTPUTS = """
SELECT key_id, family, day, version, present, close, threshold, status, reasons,
       cause_offset, cause_txn_id, cause_revision
FROM outputs WHERE key_id = ANY(%s)
"""


@dataclass(frozen=True, slots=True)
class Sink:
    """Where a batch's rows of one kind go: a table (or staging table) and its column types."""

    table: sql.Composable
    columns: tuple[str, ...]
    types: tuple[str, ...]
    """PostgreSQL type names, for binary COPY and for array casts."""

    def copy_statement(self) -> sql.Composed:
        return sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self.table, sql.SQL(", ").join(map(sql.Identifier, self.columns))
        )

    @contextmanager
    def copy(self, cursor: psycopg.Cursor[Any]) -> Iterator[psycopg.Copy]:
        """A binary COPY into this sink, its column types set: rows go in with ``write_row``.

        Leaving the block with an exception ends the COPY with that exception's text as its
        reason (the server discards the rows and writes the reason into its log)."""
        with cursor.copy(self.copy_statement()) as cp:
            cp.set_types(list(self.types))
            yield cp

    def copy_rows(self, cursor: psycopg.Cursor[Any], rows: Iterable[tuple[Any, ...]]) -> None:
        """COPY every row of ``rows`` into this sink."""
        with self.copy(cursor) as cp:
            write = cp.write_row
            for row in rows:
                write(row)

    def encode_rows(self, cursor: psycopg.Cursor[Any], rows: Iterable[tuple[Any, ...]]) -> bytes:
        """The whole binary COPY data of ``rows`` (signature, rows, trailer), formatted here
        without the server: ``cursor`` only lends its type adapters (psycopg's ``Copy``
        writing to a file, as its documentation shows)."""
        out = io.BytesIO()
        cp = Copy(cursor, binary=True, writer=FileWriter(out))
        cp.set_types(list(self.types))
        write = cp.write_row
        for row in rows:
            write(row)
        cp.finish(None)
        return out.getvalue()

    def copy_encoded(self, cursor: psycopg.Cursor[Any], data: bytes) -> None:
        """COPY data ``encode_rows`` made, handed to the driver in one piece and waited for
        once, at its end (no flush in between: little Python work while the server reads)."""
        writer = LibpqWriter(cursor, flush_threshold=len(data) + 1)
        with cursor.copy(self.copy_statement(), writer=writer) as cp:
            cp.write(data)

    def insert_statement(self) -> sql.Composed:
        return sql.SQL("INSERT INTO {} ({}) SELECT * FROM unnest({})").format(
            self.table,
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
            sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in self.types),
        )

    def unnest_source(self) -> sql.Composed:
        """The rows as array parameters, shaped like the staging table, aliased ``u``."""
        return sql.SQL("unnest({}) AS u ({})").format(
            sql.SQL(", ").join(sql.SQL("%s::{}[]").format(sql.SQL(t)) for t in self.types),
            sql.SQL(", ").join(map(sql.Identifier, self.columns)),
        )

    def staged_source(self) -> sql.Composed:
        return sql.SQL("{} AS u").format(self.table)


COPY_MIN_ROWS = 32
"""Below this many rows one array-parameter statement beats a COPY round trip (the worker's
batches and the view's upserts alike); from it on, binary COPY wins: psycopg builds array
parameters element by element in Python (about 2 ms per 1,000 rows of ten columns), COPY
rows in C (under 1 ms)."""


def _stage(name: str) -> sql.Composable:
    return sql.Identifier("pg_temp", name)


OBSERVATIONS = Sink(
    sql.Identifier("observations"),
    ("key_id", "src_offset", "txn_id", "revision", "candidate", "kind", "valid_day", "valid_nod",
     "qty", "source_day", "source_nod"),
    ("int8", "int8", "text", "int8", "int4", "text", "int4", "int8", "int8", "int4", "int8"),
)
OUTBOX = Sink(
    sql.Identifier("outbox"),
    ("ns_id", "partition", "sequence", "envelope"),
    ("int4", "int4", "int8", "bytea"),
)
_STAGE_DAYS = Sink(
    _stage("amends_stage_days"),
    ("key_id", "day", "total", "active_count", "close", "alert"),
    ("int8", "int4", "numeric", "int8", "int8", "bool"),
)
_STAGE_DAY_DELETES = Sink(_stage("amends_stage_day_deletes"), ("key_id", "day"), ("int8", "int4"))
_STAGE_OUTPUTS = Sink(
    _stage("amends_stage_outputs"),
    ("key_id", "family", "day", "version", "present", "close", "threshold", "status", "reasons",
     "cause_offset", "cause_txn_id", "cause_revision"),
    ("int8", "int2", "int4", "int8", "bool", "int8", "int8", "text", "text", "int8", "text",
     "int8"),
)
KEY_DAYS = Sink(sql.Identifier("key_days"), _STAGE_DAYS.columns, _STAGE_DAYS.types)
"""Days a batch adds after a key's last committed day: rows that cannot exist yet, so COPY
goes straight into the table (no staging, no conflict check)."""
OUTPUTS = Sink(sql.Identifier("outputs"), _STAGE_OUTPUTS.columns, _STAGE_OUTPUTS.types)
"""Output IDs a batch publishes for the first time, straight into the table likewise."""

VIEW_ROWS_STAGE = Sink(
    _stage("amends_stage_view_rows"),
    ("output_id", "partition", "family", "item", "location", "day", "version", "present",
     "envelope", "applied_offset", "close", "threshold"),
    ("text", "int4", "text", "text", "text", "int4", "int8", "bool", "bytea", "int8", "int8", "int8"),
)
"""The view's large batches, staged by COPY before one upsert into view_rows."""
VIEW_ROWS = Sink(
    sql.Identifier("view_rows"), ("ns_id", *VIEW_ROWS_STAGE.columns), ("int4", *VIEW_ROWS_STAGE.types)
)
"""Output IDs a view batch stores for the first time: COPY straight into the table, as the
worker does for rows that cannot exist yet (no staging, no conflict check)."""

# Per-session staging tables; ON COMMIT DELETE ROWS empties them at every commit.
CREATE_STAGING = """
CREATE TEMP TABLE IF NOT EXISTS amends_stage_days
    (key_id bigint, day int, total numeric, active_count bigint, close bigint, alert boolean)
    ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS amends_stage_day_deletes (key_id bigint, day int)
    ON COMMIT DELETE ROWS;
CREATE TEMP TABLE IF NOT EXISTS amends_stage_outputs
    (key_id bigint, family smallint, day int, version bigint, present boolean, close bigint,
     threshold bigint, status text, reasons text, cause_offset bigint, cause_txn_id text,
     cause_revision bigint)
    ON COMMIT DELETE ROWS
"""
_APPLY_DAY_DELETES = sql.SQL(
    "DELETE FROM key_days d USING {} WHERE d.key_id = u.key_id AND d.day = u.day"
)
_APPLY_DAYS = sql.SQL("""
INSERT INTO key_days (key_id, day, total, active_count, close, alert)
SELECT u.key_id, u.day, u.total, u.active_count, u.close, u.alert FROM {}
ON CONFLICT (key_id, day) DO UPDATE
SET total = excluded.total, active_count = excluded.active_count, close = excluded.close,
    alert = excluded.alert
""")
_APPLY_OUTPUTS = sql.SQL("""
INSERT INTO outputs (key_id, family, day, version, present, close, threshold, status, reasons,
                     cause_offset, cause_txn_id, cause_revision)
SELECT u.key_id, u.family, u.day, u.version, u.present, u.close, u.threshold, u.status,
       u.reasons, u.cause_offset, u.cause_txn_id, u.cause_revision
FROM {}
ON CONFLICT (key_id, family, day) DO UPDATE
SET version = excluded.version, present = excluded.present, close = excluded.close,
    threshold = excluded.threshold, status = excluded.status, reasons = excluded.reasons,
    cause_offset = excluded.cause_offset, cause_txn_id = excluded.cause_txn_id,
    cause_revision = excluded.cause_revision
""")
UPSERTS: tuple[tuple[Sink, sql.Composed, sql.Composed], ...] = tuple(
    (sink, stmt.format(sink.staged_source()), stmt.format(sink.unnest_source()))
    for sink, stmt in (
        (_STAGE_DAY_DELETES, _APPLY_DAY_DELETES),
        (_STAGE_DAYS, _APPLY_DAYS),
        (_STAGE_OUTPUTS, _APPLY_OUTPUTS),
    )
)
"""Day deletes, day upserts, output upserts: each from its staging table (after COPY)
or straight from array parameters."""

INSERT_QUARANTINE = """
INSERT INTO quarantine (ns_id, partition, src_offset, source, raw_value, raw_key, reason, detail)
SELECT %s, %s, o, s, v, k, r, d
FROM unnest(%s::bigint[], %s::text[], %s::bytea[], %s::bytea[], %s::text[], %s::text[])
     AS u(o, s, v, k, r, d)
"""
ADVANCE = """
UPDATE partitions
SET next_offset = %s, last_sequence = %s, records_total = records_total + %s,
    rejected_total = rejected_total + %s, envelopes_total = envelopes_total + %s,
    batches_total = batches_total + 1, last_commit_at = now()
WHERE ns_id = %s AND partition = %s
"""
MEASURE = """
INSERT INTO measurements (ns_id, partition, batch, first_offset, next_offset, records, rejected,
                          envelopes, compute_us)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
"""
PRUNE_MEASUREMENTS = "DELETE FROM measurements WHERE ns_id = %s AND partition = %s AND batch <= %s"
