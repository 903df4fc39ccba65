"""Stored oracle parts: one source partition's oracle result, kept for verification to combine.

Not part of processing and never fenced: a part is a cache of a pure computation,
used only when every input it names matches the boundary being verified
(``amends_pipeline.ops.parts``), so a stale or concurrent write can waste work
but never change a verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from amends_pipeline.postgres.store import PgStore


@dataclass(frozen=True, slots=True)
class PartInputs:
    """Everything a part's result depends on besides the records' bytes."""

    partition: int
    incarnation: str
    source_end: int
    config_digest: str
    code_version: str
    skips: str


@dataclass(frozen=True, slots=True)
class StoredPart:
    inputs: PartInputs
    records: int
    lost: tuple[str, ...]
    source: str
    part: bytes
    computed_at: datetime | None = None


def save_part(store: PgStore, sp: StoredPart) -> None:
    """Replace the partition's stored part with ``sp``."""
    i = sp.inputs
    with store.db.transaction(f"storing the oracle part of partition {i.partition}") as conn:
        conn.execute(
            "INSERT INTO oracle_parts (ns_id, partition, incarnation, source_end, config_digest,"
            " code_version, skips, records, lost, source, part)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (ns_id, partition) DO UPDATE SET incarnation = EXCLUDED.incarnation,"
            " source_end = EXCLUDED.source_end, config_digest = EXCLUDED.config_digest,"
            " code_version = EXCLUDED.code_version, skips = EXCLUDED.skips, records = EXCLUDED.records,"
            " lost = EXCLUDED.lost, source = EXCLUDED.source, part = EXCLUDED.part, computed_at = now()",
            (store.ns_id, i.partition, i.incarnation, i.source_end, i.config_digest, i.code_version,
             i.skips, sp.records, list(sp.lost), sp.source, sp.part),
        )


def load_parts(store: PgStore) -> dict[int, StoredPart]:
    """Every stored part of the namespace, by source partition."""
    with store.db.transaction("reading stored oracle parts", snapshot=True) as conn:
        rows = conn.execute(
            "SELECT partition, incarnation, source_end, config_digest, code_version, skips,"
            " records, lost, source, part, computed_at FROM oracle_parts WHERE ns_id = %s",
            (store.ns_id,),
        ).fetchall()
    return {
        int(r[0]): StoredPart(
            PartInputs(int(r[0]), r[1], int(r[2]), r[3], r[4], r[5]),
            int(r[6]), tuple(r[7]), r[8], bytes(r[9]), r[10],
        )
        for r in rows
    }


@dataclass(frozen=True, slots=True)
class Coverage:
    """Every offset the partition's worker consumed below ``below`` was a record of snapshot
    table ``table_id`` at version ``version`` (see migration 0014)."""

    partition: int
    table_id: str
    version: int
    below: int

    def holds_for(self, table_id: str, version: int) -> bool:
        """Whether the claim still holds when the snapshot is read as ``table_id`` at ``version``:
        the same table (an append-only one), read at the claim's version or a later one."""
        return table_id == self.table_id and version >= self.version


def save_coverage(store: PgStore, c: Coverage) -> None:
    """Record ``c`` as the partition's coverage, unless a claim of the same table reaching
    further is recorded already (a slower, older computation never moves it back)."""
    with store.db.transaction(f"recording the snapshot coverage of partition {c.partition}") as conn:
        conn.execute(
            "INSERT INTO snapshot_coverage AS s (ns_id, partition, table_id, table_version, covered_below)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (ns_id, partition) DO UPDATE SET table_id = EXCLUDED.table_id,"
            " table_version = EXCLUDED.table_version, covered_below = EXCLUDED.covered_below,"
            " recorded_at = now()"
            " WHERE s.table_id <> EXCLUDED.table_id OR s.covered_below < EXCLUDED.covered_below",
            (store.ns_id, c.partition, c.table_id, c.version, c.below),
        )


def load_coverage(store: PgStore) -> dict[int, Coverage]:
    """The namespace's recorded coverage, by source partition."""
    with store.db.transaction("reading the snapshot coverage", snapshot=True) as conn:
        rows = conn.execute(
            "SELECT partition, table_id, table_version, covered_below FROM snapshot_coverage"
            " WHERE ns_id = %s",
            (store.ns_id,),
        ).fetchall()
    return {int(p): Coverage(int(p), t, int(v), int(b)) for p, t, v, b in rows}
