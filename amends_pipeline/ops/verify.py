"""Durable verification: oracle over the source topic vs the PostgreSQL view.

The boundary is established from durable facts only:
  * the source topic is the incarnation the namespace was provisioned with
    (topic ID, or the marker on clusters without topic IDs);
  * source end H = high watermark (read committed); the worker frontier
    equals H (the recorded marker, transaction control records and gaps are
    passed over, never applied);
  * the source still holds every record the pipeline consumed below H
    (otherwise INCOMPLETE, see below);
  * no outbox row is pending and no relay holds its partition lock with
    pending work;
  * output end O = high watermark of the output topic; the view frontier
    equals O and no view partition is stopped.
Processing state and the view are each read in one REPEATABLE READ, READ
ONLY transaction, and the frontiers are re-checked inside those snapshots,
so a writer that moved in between makes the boundary incomplete instead of
producing a false DRIFT. The oracle reads the source directly from Kafka and
never sees a worker decision.

Full history after retention or compaction: the oracle recomputes from what
the topic still holds. That is the full history only while every record the
pipeline applied or quarantined is still there. The store's consumed offsets
(coordinates only, never its decisions) are compared with the offsets read:
a prefix that held nothing but the marker, control records or aborted
records may be gone and the comparison stays complete; a consumed record that
is gone makes the report INCOMPLETE, naming how many and where, because a
PASS over partial input would vouch for facts nobody recomputed.

Operation errors and operator skips: a source partition whose worker stopped
on an operation error (recorded by the store, still ahead of the frontier) is
reported as ERROR naming the partition, the offset, the error and the
``amends skip`` command line. Records an operator skipped (``amends skip``)
are left out of the oracle's input, exactly those coordinates, and listed
with who skipped them, why and when; such a report is at best
PASS_WITH_EXCLUSIONS.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import polars as pl

from amends_core.oracle import Columns, OracleResult
from amends_core.oracle import compute as oracle_compute
from amends_core.oracle.compute import compute_by_partition
from amends_core.verify import (
    Boundary,
    OperationStop,
    OperatorSkip,
    Report,
    partition_reasons,
    run_oracle,
    verify,
)
from amends_pipeline.kafka.topics import OffsetLost, Reader, reserved_flags
from amends_pipeline.manifest import IncarnationMismatch, Manifest, check_source
from amends_pipeline.ops.skip import skip_command
from amends_pipeline.ops.snapshot import Pinned, pin
from amends_pipeline.postgres.store import PartitionStop, PgStore, SkipEntry
from amends_pipeline.roles.relay import relay_running
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot.read import joined, snapshot_columns
from amends_pipeline.snapshot.table import SnapshotError


@dataclass(frozen=True, slots=True)
class Ends:
    source: dict[int, int]
    output: dict[int, int]


def read_partition(reader: Reader, m: Manifest, partition: int, start: int, end: int) -> Columns:
    """Every retained source record of [start, end) of one partition, as the oracle's columns.

    Only the recorded marker is left out; other messages with the marker header
    are rows flagged ``reserved`` (as ``to_record`` flags ``reserved_header``).
    No ``Record`` or ``Coordinates`` is made per message: its offset, key and
    value bytes and flag go straight into the four lists the columns are built from.
    """
    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes] = []
    reserved: list[bool] = []
    marker = m.marker_at(partition)
    for run in reader.scan(partition, start, end):
        flags = reserved_flags(run, marker)
        if None in flags:  # the recorded marker: not a record
            run = [msg for msg, flag in zip(run, flags, strict=True) if flag is not None]
            flags = [flag for flag in flags if flag is not None]
        offsets += [msg.offset() for msg in run]
        keys += [msg.key() for msg in run]
        values += [msg.value() or b"" for msg in run]
        reserved += [flag is True for flag in flags]
    return Columns.of(offsets, keys, values, reserved)


def read_history(
    reader: Reader, m: Manifest, partition: int, low: int, end: int, pinned: Pinned | None
) -> Columns:
    """One partition's history below ``end``: the snapshot's records first, then the topic's beyond.

    ``low`` is the topic's low watermark. Records neither holds (the snapshot's captured
    end below ``low``) are missing from the result; ``lost_records`` names the consumed ones.
    """
    if pinned is None:
        return read_partition(reader, m, partition, low, end)
    captured = min(pinned.ends.get(partition, 0), end)
    head = snapshot_columns(pinned.table, pinned.version, partition, captured, m.marker_at(partition))
    return joined([head, read_partition(reader, m, partition, max(captured, low), end)])


def pin_snapshot(rt: Runtime, m: Manifest, reasons: list[str]) -> Pinned | None:
    """The namespace's snapshot as it stands now, or None (no table; or unusable: a reason)."""
    try:
        return pin(rt, m)
    except SnapshotError as e:
        reasons.append(f"the source snapshot cannot be read: {e}")
        return None


def lost_records(store: PgStore, source: dict[int, Columns], ends: dict[int, int]) -> list[str]:
    """Reasons naming consumed records that the source no longer holds (one per partition)."""
    reasons = []
    for p, end in ends.items():
        consumed = pl.Series(store.consumed_offsets(p, end), dtype=pl.Int64)
        held = source[p].offset if p in source else pl.Series([], dtype=pl.Int64)
        lost = consumed.filter(consumed.is_in(held.implode()).not_())
        if len(lost):
            reasons.append(
                f"source partition {p}: {len(lost)} records the pipeline consumed are no longer in"
                f" the topic (the first at offset {lost[0]}; retention or compaction removed them),"
                " so the oracle cannot recompute the full history"
            )
    return reasons


def without_skips(source: dict[int, Columns], skips: Sequence[SkipEntry]) -> dict[int, Columns]:
    """``source`` without the records operators skipped (exactly those coordinates)."""
    if not skips:
        return source
    return {p: cols.without(s.offset for s in skips if s.partition == p) for p, cols in source.items()}


def audited_skips(skips: Sequence[SkipEntry]) -> list[OperatorSkip]:
    return [OperatorSkip(s.partition, s.offset, s.reason, s.operator, s.when, s.error) for s in skips]


def operation_stops(stops: Sequence[PartitionStop], config: str) -> list[OperationStop]:
    """Stopped source partitions, each with what to do about it."""
    return [
        OperationStop(
            s.partition, s.offset, s.error,
            "processing cannot pass this record; review it, then skip it on the record with"
            f" `{skip_command(config, s.partition, s.offset)}` and restart the worker",
        )
        for s in stops
    ]


@dataclass(frozen=True, slots=True)
class Checked:
    """One verification and the oracle computation it compared the view with."""

    report: Report
    oracle: OracleResult | BaseException | None
    """None when nothing was computed (the source is another incarnation)."""
    records: int
    """Source records the oracle read (operator skips left out)."""


def verify_namespace(rt: Runtime, config: str = "CONFIG.json") -> Report:
    """Verify the namespace; read-only: never migrates or registers (NamespaceUnknown instead).

    ``config`` is the configuration file to name in the ``amends skip`` advice.
    """
    return check_namespace(rt, config).report


def check_namespace(rt: Runtime, config: str = "CONFIG.json") -> Checked:
    """``verify_namespace`` with the oracle's result and input size, for callers that also
    report the oracle (the Dagster ``oracle`` asset: one computation per boundary)."""
    cfg = rt.cfg
    counted = 0
    reasons: list[str] = []
    with rt.store("amends-verify", read_only=True) as store, rt.view_store(read_only=True) as vstore:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as src, rt.reader(m.output_topic) as out:
            try:
                wms = check_source(src, m)
            except IncarnationMismatch as e:
                # Nothing comparable exists: report INCOMPLETE with the reason, compare nothing.
                empty = oracle_compute(cfg, {p: [] for p in range(cfg.partitions)})
                return Checked(verify(cfg, empty, {}, [], [], Boundary(False, (str(e),))), None, 0)
            ends = Ends(
                {p: wm.high for p, wm in wms.items()},
                {p: out.watermarks(p).high for p in range(cfg.partitions)},
            )
            snap = store.snapshot(evidence=False, outbox="pending")
            view = vstore.snapshot()
            for p in range(cfg.partitions):
                eff = m.needed(p, snap.frontier(p))
                pend = len(snap.pending(p))
                reasons += partition_reasons(
                    p,
                    worker_frontier=eff,
                    source_end=ends.source[p],
                    pending=pend,
                    view_frontier=view.frontier(p),
                    output_end=ends.output[p],
                )
                if eff < wms[p].low:
                    reasons.append(
                        f"source partition {p}: offsets {eff}..{wms[p].low - 1} were removed before"
                        " the worker read them"
                    )
                if pend and relay_running(rt, p):
                    reasons.append(f"partition {p}: a relay is running; stop or drain it first")
            lost: list[str] = []
            pinned = pin_snapshot(rt, m, reasons)

            def read(p: int) -> Columns:
                # one partition at a time: memory holds one partition's history, not all
                nonlocal counted
                cols = read_history(src, m, p, wms[p].low, ends.source[p], pinned)
                lost.extend(lost_records(store, {p: cols}, {p: ends.source[p]}))
                kept = without_skips({p: cols}, snap.skips)[p]
                counted += len(kept)
                return kept

            def recompute() -> OracleResult:
                try:
                    return compute_by_partition(cfg, read)
                except OffsetLost as e:
                    reasons.append(f"retention removed records while verification read them: {e}")
                    nothing = {p: Columns.empty() for p in range(cfg.partitions)}
                    lost[:] = lost_records(store, nothing, ends.source)
                    return oracle_compute(cfg, nothing)

            oracle = run_oracle(recompute)
            reasons += lost
    boundary = Boundary(
        complete=not reasons,
        reasons=tuple(reasons),
        digests=(("store", store.digest), ("view", view.cfg.digest()), ("manifest", m.config_digest)),
    )
    report = verify(
        cfg, oracle, view.rows, list(snap.rejections), snap.conflicts(), boundary,
        stopped=view.stopped,
        skips=audited_skips(snap.skips),
        stops=operation_stops(snap.stops, config),
    )
    if pinned is not None:
        report = replace(report, source=pinned.describe())
    return Checked(report, oracle, counted)
