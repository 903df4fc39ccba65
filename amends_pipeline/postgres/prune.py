"""Retention for the two tables that only grow: published outbox rows and quarantine payloads.

What may go, and why nothing that is still needed does:

* An outbox row is deleted when (1) the relay acknowledged it (its sequence is
  at or below ``relay_progress.acked_sequence``), (2) the view applied it (its
  recorded output offset, from ``outbox_receipts``, is below
  ``view_progress.next_offset`` of its output partition), and (3) it was
  committed before the retention cut-off. A receipt run goes with the last
  outbox row it describes. The relay
  only ever reads rows above its acknowledged sequence, and that sequence only
  grows, so a deleted row can never be published again; the delete holds a
  share lock on the partition's relay progress while it runs. Verification
  reads only pending rows, replay reads none, and a view rebuilds from the
  compacted output topic, never from the outbox. What is lost: ``amends plot``
  draws a fact whose replaced version was pruned as unchanged (counted as
  "previous missing").
* A quarantine record keeps its coordinates, source, reason and detail for
  ever; its raw value and key are replaced by their SHA-256 and length when it
  is older than the cut-off *and* the source topic no longer holds the record
  (its offset is below the partition's low watermark). Verification compares
  the exact rejected bytes with the oracle's, and replay compares them with the
  re-read record: both read the record from the source, so neither can need
  the payload of a record the source has lost (verification of such a
  partition is INCOMPLETE anyway). A record the source still holds keeps its
  payload however old it is.

Deletes run in chunks of ``CHUNK`` rows, one short transaction each.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from amends_pipeline.postgres.connection import Database

CHUNK = 5000
"""Rows deleted or rewritten per transaction: short lock holds, bounded WAL per commit."""

_OUTBOX_ELIGIBLE = """
FROM outbox_status o
JOIN view_progress v ON v.ns_id = o.ns_id AND v.partition = o.output_partition
WHERE o.ns_id = %(ns)s AND o.partition = %(p)s
  AND o.sequence <= %(acked)s
  AND o.acked AND o.output_offset IS NOT NULL AND o.output_offset < v.next_offset
  AND o.committed_at < now() - make_interval(secs => %(keep)s)
"""

_SPENT_RECEIPTS = """
DELETE FROM outbox_receipts x
WHERE x.ns_id = %(ns)s AND x.partition = %(p)s AND x.last_sequence <= %(acked)s
  AND NOT EXISTS (
      SELECT 1 FROM outbox o
      WHERE o.ns_id = x.ns_id AND o.partition = x.partition
        AND o.sequence BETWEEN x.first_sequence AND x.last_sequence)
"""
"""Receipt runs none of whose outbox rows is left (they only ever describe outbox rows)."""

_QUARANTINE_ELIGIBLE = """
FROM quarantine q
WHERE q.ns_id = %(ns)s AND q.partition = %(p)s AND q.payload_pruned_at IS NULL
  AND q.src_offset < %(low)s
  AND q.quarantined_at < now() - make_interval(secs => %(keep)s)
"""


@dataclass(slots=True)
class PruneResult:
    outbox_rows: dict[int, int] = field(default_factory=dict)
    """Per source partition: outbox rows deleted (or, in a dry run, that would be)."""
    quarantine_payloads: dict[int, int] = field(default_factory=dict)
    """Per source partition: quarantine payloads dropped (or that would be)."""
    dry_run: bool = False

    @property
    def total_outbox(self) -> int:
        return sum(self.outbox_rows.values())

    @property
    def total_quarantine(self) -> int:
        return sum(self.quarantine_payloads.values())


def prune_outbox(
    db: Database, ns_id: int, partition: int, keep_seconds: float, *, dry_run: bool = False
) -> int:
    """Delete (or count) the outbox rows of one partition that are published, applied and old."""
    total = 0
    while True:
        with db.transaction(f"pruning the outbox of partition {partition}") as conn:
            row = conn.execute(
                "SELECT acked_sequence FROM relay_progress WHERE ns_id = %s AND partition = %s"
                " FOR SHARE",
                (ns_id, partition),
            ).fetchone()
            if row is None:
                return total
            params = {"ns": ns_id, "p": partition, "acked": row[0], "keep": keep_seconds}
            if dry_run:
                n = conn.execute("SELECT count(*)" + _OUTBOX_ELIGIBLE, params).fetchone()
                return int(n[0]) if n else 0
            cur = conn.execute(
                "DELETE FROM outbox d WHERE d.ns_id = %(ns)s AND d.partition = %(p)s"
                " AND d.sequence IN (SELECT o.sequence" + _OUTBOX_ELIGIBLE
                + " ORDER BY o.sequence LIMIT %(chunk)s)",
                {**params, "chunk": CHUNK},
            )
            n_deleted = cur.rowcount
            if n_deleted < CHUNK:
                conn.execute(_SPENT_RECEIPTS, params)
        total += n_deleted
        if n_deleted < CHUNK:
            return total


def prune_quarantine(
    db: Database,
    ns_id: int,
    partition: int,
    keep_seconds: float,
    source_low: int,
    *,
    dry_run: bool = False,
) -> int:
    """Drop (or count) the payloads of old quarantine records below the source's low watermark."""
    params = {"ns": ns_id, "p": partition, "low": source_low, "keep": keep_seconds}
    total = 0
    while True:
        with db.transaction(f"pruning quarantine payloads of partition {partition}") as conn:
            if dry_run:
                n = conn.execute("SELECT count(*)" + _QUARANTINE_ELIGIBLE, params).fetchone()
                return int(n[0]) if n else 0
            cur = conn.execute(
                "UPDATE quarantine u SET payload_pruned_at = now(),"
                " raw_value_sha256 = encode(sha256(u.raw_value), 'hex'),"
                " raw_value_size = length(u.raw_value),"
                " raw_key_sha256 = encode(sha256(u.raw_key), 'hex'),"
                " raw_key_size = length(u.raw_key),"
                " raw_value = ''::bytea, raw_key = NULL"
                " WHERE u.ns_id = %(ns)s AND u.partition = %(p)s AND u.src_offset IN"
                " (SELECT q.src_offset" + _QUARANTINE_ELIGIBLE
                + " ORDER BY q.src_offset LIMIT %(chunk)s)",
                {**params, "chunk": CHUNK},
            )
            n_done = cur.rowcount
        total += n_done
        if n_done < CHUNK:
            return total


def prune(
    db: Database,
    ns_id: int,
    partitions: Sequence[int],
    keep_seconds: float,
    source_low: Mapping[int, int] | None,
    *,
    dry_run: bool = False,
) -> PruneResult:
    """Prune every partition; ``source_low`` None skips the quarantine (source unknown)."""
    if keep_seconds < 0:
        msg = f"the retention must not be negative, got {keep_seconds}"
        raise ValueError(msg)
    result = PruneResult(dry_run=dry_run)
    for p in partitions:
        result.outbox_rows[p] = prune_outbox(db, ns_id, p, keep_seconds, dry_run=dry_run)
        if source_low is not None and p in source_low:
            result.quarantine_payloads[p] = prune_quarantine(
                db, ns_id, p, keep_seconds, source_low[p], dry_run=dry_run
            )
    return result
