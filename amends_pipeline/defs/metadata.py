"""Summaries of amends' work as Dagster metadata (what the UI shows on each event).

Plain functions from our summaries to metadata dictionaries, tested on their
own. Nothing here reads a secret: summaries carry counts, offsets, topic
names and identifiers only.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import dagster as dg

from amends_core.verify import Report
from amends_pipeline.ops.certify import OracleSummary, Verification
from amends_pipeline.ops.orchestration import (
    PartitionState,
    RefoldSummary,
    RelaySummary,
    Snapshot,
    ViewSummary,
)
from amends_pipeline.ops.snapshot import Taken
from amends_pipeline.postgres.oracle_parts import StoredPart
from amends_pipeline.postgres.reports import CertifiedCounts

MAX_TABLE_ROWS = 50


def _cell(value: Any, limit: int = 80) -> str:
    text = str(value).replace("|", "\\|").replace("\n", " ")
    text = "".join(ch if ch.isprintable() else "\N{REPLACEMENT CHARACTER}" for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "\N{HORIZONTAL ELLIPSIS}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]], total: int | None = None) -> str:
    """A markdown table of at most MAX_TABLE_ROWS rows, saying how many were left out."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows[:MAX_TABLE_ROWS]]
    n = len(rows) if total is None else total
    if n > MAX_TABLE_ROWS:
        lines.append(f"\n{n - MAX_TABLE_ROWS} more rows not shown (`amends verify --json` lists all).")
    if not rows:
        lines.append("| " + " | ".join("" for _ in header) + " |")
    return "\n".join(lines)


def partition_state(s: PartitionState, snap: Snapshot) -> dict[str, Any]:
    return {
        "namespace": snap.namespace,
        "source_topic": snap.source_topic,
        "incarnation": snap.incarnation,
        "source_low": s.source_low,
        "source_high": s.source_high,
        "worker_frontier": s.worker_frontier,
        "lag": s.lag,
        "outbox_pending": s.pending,
        "output_high": s.output_high,
        "view_frontier": s.view_frontier,
        "view_stopped": s.view_stopped or "",
        "view_state": s.view_health.state(),
        **({"worker_stopped": s.worker_stopped} if s.worker_stopped else {}),
    }


def snapshot_table(taken: Taken, rows: int, size: int) -> dict[str, Any]:
    """What ``source_snapshot`` appended to the snapshot table for one partition, and its lag."""
    a = taken.appended[0]
    lag = taken.lag[a.partition]
    behind_s = 0.0 if lag.oldest_ms is None else max(0.0, time.time() - lag.oldest_ms / 1e3)
    return {
        "snapshot_uri": taken.uri,
        "snapshot_version": taken.version,
        "appended_offsets": f"{a.start}..{a.end - 1}" if a.end > a.start else "none",
        "appended_records": a.records,
        "appended_gaps": len(a.gaps),
        "snapshot_end": a.end,
        "snapshot_rows": rows,
        "snapshot_bytes": size,
        "snapshot_lag_records": lag.records,
        "snapshot_lag_seconds": round(behind_s, 1),
    }


def refold(s: RefoldSummary) -> dict[str, Any]:
    md: dict[str, Any] = {
        "records": s.records,
        "accepted": s.accepted,
        "rejected": s.rejected,
        "envelopes": s.envelopes,
        "batches": s.batches,
        "records_per_second": round(s.records_per_second, 1),
        "frontier_before": s.frontier_before,
        "frontier_after": s.frontier_after,
        "target": s.target,
        "reached_target": s.reached_target,
        "seconds": round(s.seconds, 3),
    }
    if s.rejections_by_reason:
        md["rejections_by_reason"] = dg.MetadataValue.json(s.rejections_by_reason)
    return md


def relay(s: RelaySummary, output_topic: str) -> dict[str, Any]:
    return {
        "output_topic": output_topic,
        "envelopes_published": s.published,
        "outbox_pending_after": s.pending_after,
        "seconds": round(s.seconds, 3),
    }


def view(s: ViewSummary) -> dict[str, Any]:
    """One view partition's run; ``view_state`` is ok, lagging N or stopped: reason."""
    return {
        "view_state": s.health.state(),
        "view_frontier": s.frontier_after,
        "envelopes_delivered": s.delivered,
        "envelopes_applied": s.stored,
        "duplicates_or_stale_ignored": s.ignored,
        "view_frontier_before": s.frontier_before,
        "view_frontier_after": s.frontier_after,
        "output_end": s.output_end,
        "seconds": round(s.seconds, 3),
    }


def view_partitions(states: Sequence[PartitionState]) -> dict[str, Any]:
    """Every output partition's view state and frontier, as a table (ok / lagging N / stopped: reason)."""
    rows = [
        (s.partition, s.view_health.state(), s.view_frontier, s.output_high) for s in states
    ]
    return {
        "view_current": all(s.view_health.current for s in states),
        "view_partitions": dg.MetadataValue.md(
            markdown_table(["partition", "state", "view frontier", "output end"], rows)
        ),
    }


def oracle(s: OracleSummary) -> dict[str, Any]:
    return {
        "boundary": s.boundary,
        "records": s.records,
        "keys": s.keys,
        "statuses": dg.MetadataValue.json(s.statuses),
        "rejections": s.rejections,
        "conflicts": s.conflicts,
        "seconds": round(s.seconds, 3),
        "partitions_from_stored_parts": dg.MetadataValue.json(list(s.parts_used)),
    }


def oracle_part(sp: StoredPart) -> dict[str, Any]:
    """A partition's stored oracle part: the inputs it matches, its size and where it read."""
    i = sp.inputs
    return {
        "source_end": i.source_end,
        "records": sp.records,
        "part_bytes": len(sp.part),
        "code_version": i.code_version,
        "operator_skips": len(i.skips.split(",")) if i.skips else 0,
        "lost_records": dg.MetadataValue.json(list(sp.lost)),
        "source": sp.source,
    }


def verification(v: Verification) -> dict[str, Any]:
    r: Report = v.report
    md: dict[str, Any] = {
        "status": r.status.value,
        "accepted": v.accepted,
        "boundary": v.boundary or "moved during verification",
        "keys": r.counts.keys,
        "blocked_keys": r.counts.blocked_keys,
        "rows_compared": r.counts.rows,
        "rejections": len(r.rejections),
        "conflicts": len(r.conflicts),
        "differences": len(r.differences),
        "report": dg.MetadataValue.md(report_markdown(r)),
    }
    if r.error:
        md["error"] = _cell(r.error, 300)
    if r.stops:  # which partition, which offset, the error, and what to do
        md["stopped_partitions"] = dg.MetadataValue.json([s.to_json() for s in r.stops])
    if r.skips:
        md["operator_skips"] = len(r.skips)
    return md


def report_markdown(r: Report) -> str:
    """The verification report as readable markdown: reasons, exclusions, every differing row (bounded)."""
    parts = [f"**{r.status.value}** for namespace `{_cell(r.namespace)}`"]
    if r.error:
        parts.append(f"Error: {_cell(r.error, 300)}")
    if r.stops:
        parts.append(
            "Source partitions stopped by an operation error:\n"
            + "\n".join(
                f"- partition {s.partition}, offset {s.offset}: {_cell(s.error, 200)}."
                f" {_cell(s.remedy, 300)}"
                for s in r.stops
            )
        )
    if r.boundary_reasons:
        parts.append("Boundary not complete:\n" + "\n".join(f"- {_cell(x, 200)}" for x in r.boundary_reasons))
    parts.append(
        f"Compared {r.counts.keys} keys ({r.counts.blocked_keys} blocked) and {r.counts.rows}"
        f" balance/alert rows."
    )
    if r.differences:
        parts.append(
            "Differences (expected = oracle, actual = view):\n\n"
            + markdown_table(
                ["kind", "subject", "expected", "actual"],
                [(d.kind.value, d.subject, d.expected, d.actual) for d in r.differences],
            )
        )
    if r.rejections:
        parts.append(
            "Rejections (excluded):\n\n"
            + markdown_table(
                ["partition", "offset", "reason"],
                [(x.partition, x.offset, x.reason) for x in r.rejection_refs],
            )
        )
    if r.skips:
        parts.append(
            "Operator skips (excluded, `amends skip`):\n\n"
            + markdown_table(
                ["partition", "offset", "reason", "operator", "when", "error"],
                [(s.partition, s.offset, s.reason, s.operator, s.skipped_at, s.error) for s in r.skips],
            )
        )
    if r.conflicts:
        parts.append(
            "Conflicts (keys BLOCKED):\n\n"
            + markdown_table(
                ["item", "location", "txn_id", "revision"],
                [(c.key.item, c.key.location, c.txn_id, c.revision) for c in r.conflicts],
            )
        )
    return "\n\n".join(parts)


def certified(c: CertifiedCounts, boundary: str, preview: Sequence[Sequence[Any]]) -> dict[str, Any]:
    return {
        "certified_id": c.certified_id,
        "boundary": boundary,
        "keys": c.keys,
        "balances": c.balances,
        "alerts": c.alerts,
        "table": "certified_balances, certified_alerts (PostgreSQL, schema of AMENDS_PG_SCHEMA)",
        "preview": dg.MetadataValue.md(
            markdown_table(["item", "location", "day", "close", "alert"], preview)
        ),
    }
