"""Read-only reporting queries and the certified-results tables, for orchestration.

Kept apart from the processing store: nothing here takes part in fencing. The
certified tables are written only behind an accepted verification (see
``amends_pipeline.ops.certify``) and replaced whole in one transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date

from amends_core import wire
from amends_core.ledger import Envelope, OutputID, Projection, StockKey, compact_json
from amends_core.timefmt import format_day
from amends_pipeline.postgres.store import PgStore


def rejections_by_reason(store: PgStore, partition: int, start: int, end: int) -> dict[str, int]:
    """Quarantined records of ``[start, end)`` of one source partition, counted by reason."""
    with store.db.transaction(f"counting rejections of partition {partition}") as conn:
        rows = conn.execute(
            "SELECT reason, count(*) FROM quarantine"
            " WHERE ns_id = %s AND partition = %s AND src_offset >= %s AND src_offset < %s"
            " GROUP BY reason ORDER BY reason",
            (store.ns_id, partition, start, end),
        ).fetchall()
    return {str(r): int(n) for r, n in rows}


@dataclass(frozen=True, slots=True)
class CertifiedCounts:
    certified_id: int
    keys: int
    balances: int
    alerts: int


def _day(day: int) -> date:
    return date.fromisoformat(format_day(day))


def write_certified(
    store: PgStore, boundary: str, status: str, projections: Mapping[StockKey, Projection]
) -> CertifiedCounts:
    """Replace the namespace's certified balances and alerts; returns what was written.

    BLOCKED keys have no certified values (values computed before a conflict
    became visible depend on arrival order), so they contribute no rows.
    """
    ns = store.ns_id
    balances: list[tuple[int, str, str, date, int]] = []
    alerts: list[tuple[int, str, str, date, int, int]] = []
    for key, p in sorted(projections.items(), key=lambda kv: (kv[0].item, kv[0].location)):
        if p.status.value != "READY":
            continue
        balances.extend((ns, key.item, key.location, _day(b.day), b.close) for b in p.balances)
        alerts.extend((ns, key.item, key.location, _day(a.day), a.threshold, a.close) for a in p.alerts)
    with store.db.transaction("writing certified balances and alerts") as conn:
        conn.execute("DELETE FROM certified_balances WHERE ns_id = %s", (ns,))
        conn.execute("DELETE FROM certified_alerts WHERE ns_id = %s", (ns,))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO certified_balances (ns_id, item, location, day, close)"
                " VALUES (%s, %s, %s, %s, %s)",
                balances,
            )
            cur.executemany(
                "INSERT INTO certified_alerts (ns_id, item, location, day, threshold, close)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                alerts,
            )
        row = conn.execute(
            "INSERT INTO certified_boundaries (ns_id, boundary, status, keys, balances, alerts)"
            " VALUES (%s, %s, %s, %s, %s, %s) RETURNING certified_id",
            (ns, boundary, status, len(projections), len(balances), len(alerts)),
        ).fetchone()
    assert row is not None
    return CertifiedCounts(int(row[0]), len(projections), len(balances), len(alerts))


BalanceOut = tuple[str, str, str, int]
AlertOut = tuple[str, str, str, int, int]


def read_certified(store: PgStore) -> tuple[list[BalanceOut], list[AlertOut]]:
    """(balances, alerts) as certified: (item, location, ISO day, close[, threshold]) rows."""
    with store.db.transaction("reading certified balances", snapshot=True) as conn:
        bal = conn.execute(
            "SELECT item, location, day::text, close FROM certified_balances WHERE ns_id = %s"
            " ORDER BY item, location, day",
            (store.ns_id,),
        ).fetchall()
        al = conn.execute(
            "SELECT item, location, day::text, threshold, close FROM certified_alerts WHERE ns_id = %s"
            " ORDER BY item, location, day",
            (store.ns_id,),
        ).fetchall()
    return [tuple(r) for r in bal], [tuple(r) for r in al]


def replaced_versions(store: PgStore, current: Mapping[OutputID, int]) -> dict[OutputID, Envelope]:
    """For outputs at their ``current`` version, the envelope each version replaced.

    The outbox keeps every envelope the worker committed; for each output this
    returns the one with the highest version below ``current[output]`` (absent
    when there is none). Only outbox rows of the outputs' keys are decoded, but
    finding them scans the partitions' outbox: a diagnostic read, not a hot path.
    """
    want = {oid: v for oid, v in current.items() if v > 1}
    if not want:
        return {}
    cfg = store.cfg
    parts = sorted({kc.partition for oid in want if (kc := cfg.key_config(oid.key)) is not None})
    # The exact bytes of '"stock_key":{...}' in our compact envelopes: found without parsing JSON.
    marks = sorted({b'"stock_key":' + compact_json(oid.key.to_json()).encode("utf-8") for oid in want})
    found: dict[OutputID, Envelope] = {}
    with store.db.transaction("reading replaced output versions", snapshot=True) as conn:
        rows = conn.execute(
            "SELECT o.envelope FROM outbox o WHERE o.ns_id = %s AND o.partition = ANY(%s)"
            " AND EXISTS (SELECT 1 FROM unnest(%s::bytea[]) AS m(b) WHERE position(m.b IN o.envelope) > 0)",
            (store.ns_id, parts, marks),
        ).fetchall()
    for (raw,) in rows:
        env = wire.decode_envelope(bytes(raw))
        if isinstance(env, wire.DecodeError):
            continue  # the worker wrote these bytes itself; the view reports undecodable ones
        v = want.get(env.output_id)
        if v is not None and env.version < v:
            old = found.get(env.output_id)
            if old is None or env.version > old.version:
                found[env.output_id] = env
    return found
