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

from amends_core.ledger import Config
from amends_core.oracle import Columns, OracleResult
from amends_core.oracle import compute as oracle_compute
from amends_core.oracle.compute import classify_partition
from amends_core.oracle.partial import PartitionResult, combine, decode, encode, partition_from_rows
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
from amends_pipeline.ops import parts
from amends_pipeline.ops.skip import skip_command
from amends_pipeline.ops.snapshot import Pinned, pin
from amends_pipeline.postgres.oracle_parts import (
    Coverage,
    StoredPart,
    load_coverage,
    load_parts,
    save_coverage,
    save_part,
)
from amends_pipeline.postgres.store import PartitionStop, PgStore, SkipEntry
from amends_pipeline.roles.relay import relay_running
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot.decoded import Classified, DecodedRows, classified_snapshot
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
    rt: Runtime, reader: Reader, m: Manifest, partition: int, low: int, end: int, pinned: Pinned | None,
    *, keep: bool = False,
) -> Classified:
    """One partition's history below ``end``, classified: the snapshot's records first, then the topic's.

    Records of the snapshot already classified by this oracle code for this configuration
    come from the kept rows (``DecodedRows``); the snapshot's other records are decoded
    here, and kept when ``keep`` (never by ``amends verify``, which writes nothing); the
    topic's records beyond the snapshot are decoded every time. ``low`` is the topic's
    low watermark: records neither holds are missing, and ``lost_records`` names the
    consumed ones.
    """
    cfg = rt.cfg
    captured = 0 if pinned is None else min(pinned.ends.get(partition, 0), end)
    tail = read_partition(reader, m, partition, max(captured, low), end)
    tail_rows = classify_partition(cfg, partition, tail)
    if pinned is None:
        return Classified(tail_rows.lazy(), len(tail))
    kept = DecodedRows(pinned.table, m.config_digest, parts.code_version())
    head = classified_snapshot(
        cfg, pinned.table, pinned.version, partition, captured, m.marker_at(partition), kept, keep=keep
    )
    return Classified(pl.concat([head.rows, tail_rows.lazy()]), head.decoded + len(tail))


def pin_snapshot(rt: Runtime, m: Manifest, reasons: list[str]) -> Pinned | None:
    """The namespace's snapshot as it stands now, or None (no table; or unusable: a reason)."""
    try:
        return pin(rt, m)
    except SnapshotError as e:
        reasons.append(f"the source snapshot cannot be read: {e}")
        return None


def lost_records(
    store: PgStore, held_offsets: dict[int, pl.Series], ends: dict[int, int],
    since: dict[int, int] | None = None,
) -> list[str]:
    """Reasons naming consumed records that the source no longer holds (one per partition).

    ``since``: per partition, the offset below which a recorded snapshot coverage vouches
    for every consumed record; only offsets consumed from there on are compared.
    """
    reasons = []
    for p, end in ends.items():
        consumed = pl.Series(store.consumed_offsets(p, end, (since or {}).get(p, 0)), dtype=pl.Int64)
        held = held_offsets.get(p, pl.Series([], dtype=pl.Int64))
        lost = consumed.filter(consumed.is_in(held.implode()).not_())
        if len(lost):
            reasons.append(
                f"source partition {p}: {len(lost)} records the pipeline consumed are no longer in"
                f" the topic (the first at offset {lost[0]}; retention or compaction removed them),"
                " so the oracle cannot recompute the full history"
            )
    return reasons


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
    reused: tuple[int, ...] = ()
    """Source partitions whose stored oracle part was used instead of reading them again."""


def verify_namespace(rt: Runtime, config: str = "CONFIG.json") -> Report:
    """Verify the namespace; read-only: never migrates or registers (NamespaceUnknown instead).

    ``config`` is the configuration file to name in the ``amends skip`` advice.
    """
    return check_namespace(rt, config).report


@dataclass(frozen=True, slots=True)
class Computed:
    """One partition's oracle part, and the snapshot coverage its comparison established
    (None: nothing new to record; see ``Coverage``)."""

    part: StoredPart
    coverage: Coverage | None


@dataclass(frozen=True, slots=True)
class Folded:
    part: PartitionResult
    held: pl.Series
    """Offsets of the history's records from the ``since`` it was folded with on."""
    records: int
    """Records of the whole history, operator skips left out."""


def fold_history(
    cfg: Config, partition: int, rows: pl.LazyFrame, *, since: int = 0, skipped: Sequence[int] = ()
) -> Folded:
    """One partition's oracle part from its classified history (``read_history``), with the
    offsets held from ``since`` on (to compare with the consumed ones) and the record count.

    The offsets and the count come from one pass over the offset column; the fold is a
    second pass over the rows. Records operators skipped (``skipped``) are left out.
    """
    got = rows.select(
        pl.len().alias("records"),
        pl.col("offset").filter(pl.col("offset") >= since).implode().alias("held"),
        pl.col("offset").is_in(list(skipped)).sum().alias("skipped"),
    ).collect()
    held = got.get_column("held")[0]
    if skipped:
        rows = rows.filter(pl.col("offset").is_in(list(skipped)).not_())
    records = int(got.get_column("records")[0]) - int(got.get_column("skipped")[0])
    return Folded(partition_from_rows(cfg, partition, rows), held, records)


def covered_since(cover: Coverage | None, pinned: Pinned | None, end: int) -> int:
    """The offset below which ``cover`` vouches for every consumed record of a verification
    reading ``pinned`` up to ``end``: 0 when there is no claim, no snapshot or another table."""
    if cover is None or pinned is None or not cover.holds_for(pinned.table_id, pinned.version):
        return 0
    return min(cover.below, end)


def _compute_part(
    rt: Runtime, src: Reader, store: PgStore, m: Manifest, p: int, low: int, end: int,
    pinned: Pinned | None, skips: Sequence[SkipEntry], reasons: list[str], *, keep: bool,
    cover: Coverage | None = None,
) -> Computed:
    """Read partition ``p``'s history below ``end`` and compute its oracle part.

    Memory holds this one partition's history, never all of them. Records retention
    removed while they were read add a reason to ``reasons`` and leave the part empty.
    Records operators skipped (exactly those coordinates) are left out. Consumed offsets
    are compared with the history's from where ``cover`` stops vouching for them on; with
    ``keep`` and nothing lost, the coverage reaches the snapshot's captured end.
    """
    since = covered_since(cover, pinned, end)
    lost_while_reading = False
    try:
        history = read_history(rt, src, m, p, low, end, pinned, keep=keep)
    except OffsetLost as e:
        reasons.append(f"retention removed records while verification read them: {e}")
        history = Classified(classify_partition(rt.cfg, p, Columns.empty()).lazy(), 0)
        lost_while_reading = True
    skipped = [s.offset for s in skips if s.partition == p]
    folded = fold_history(rt.cfg, p, history.rows, since=since, skipped=skipped)
    lost = lost_records(store, {p: folded.held}, {p: end}, {p: since})
    where = pinned.describe() if pinned is not None else "the topic"
    part = encode(folded.part)
    stored = StoredPart(parts.inputs(m, p, end, skips), folded.records, tuple(lost), where, part)
    coverage = None
    if keep and pinned is not None and not lost and not lost_while_reading and pinned.table_id:
        below = min(pinned.ends.get(p, 0), end)
        if below > since:
            coverage = Coverage(p, pinned.table_id, pinned.version, below)
    return Computed(stored, coverage)


class PartNotComputed(Exception):
    """The partition's oracle part could not be computed from a usable input; nothing was stored."""


def oracle_part(rt: Runtime, partition: int) -> StoredPart:
    """Compute source partition ``partition``'s oracle part at its current source end and store it.

    What a Dagster run of the ``oracle_partition`` asset does, on any host that reaches
    the namespace's PostgreSQL, Kafka and snapshot; ``check_namespace`` combines the
    stored parts that still match the boundary it verifies.
    """
    reasons: list[str] = []
    with rt.store("amends-oracle-part") as store:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as src:
            wm = check_source(src, m)[partition]
            pinned = pin_snapshot(rt, m, reasons)
            computed = _compute_part(
                rt, src, store, m, partition, wm.low, wm.high, pinned, store.skips(), reasons, keep=True,
                cover=load_coverage(store).get(partition),
            )
        if reasons:
            raise PartNotComputed(f"source partition {partition}: " + "; ".join(reasons))
        save_part(store, computed.part)
        if computed.coverage is not None:
            save_coverage(store, computed.coverage)
    return computed.part


def stale_parts(rt: Runtime) -> list[int]:
    """Source partitions whose stored oracle part does not match their inputs as they stand now."""
    with rt.store("amends-oracle-part", read_only=True) as store:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as src:
            wms = check_source(src, m)
        skips = store.skips()
        stored = load_parts(store)
    stale = []
    for p in range(m.partitions):
        want = parts.inputs(m, p, wms[p].high, skips)
        have = stored.get(p)
        if have is None or have.inputs != want:
            stale.append(p)
    return stale


def check_namespace(
    rt: Runtime, config: str = "CONFIG.json", *, use_parts: bool = False, keep_decoded: bool = False
) -> Checked:
    """``verify_namespace`` with the oracle's result and input size, for callers that also
    report the oracle (the Dagster ``oracle`` asset: one computation per boundary).

    ``use_parts``: take each source partition's result from its stored oracle part
    (``oracle_part``) when that part was computed from exactly this boundary's inputs,
    and compute only the others here. ``keep_decoded``: keep the snapshot records this
    computation classified beside the snapshot, so the next boundary decodes only newer
    ones (``read_history``; ``amends verify`` leaves it off and writes nothing), and record
    how far the snapshot is now known to hold every consumed record (``Coverage``), so the
    next boundary compares only the offsets consumed since.
    """
    cfg = rt.cfg
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
            view, projected = vstore.checked()
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
            stored = load_parts(store) if use_parts else {}
            pinned = pin_snapshot(rt, m, reasons)
            covered = load_coverage(store) if pinned is not None else {}
            used: dict[int, StoredPart] = {}
            established: list[Coverage] = []

            def part_of(p: int) -> PartitionResult:
                sp = stored.get(p)
                if sp is None or sp.inputs != parts.inputs(m, p, ends.source[p], snap.skips):
                    end = ends.source[p]
                    computed = _compute_part(
                        rt, src, store, m, p, wms[p].low, end, pinned, snap.skips, reasons,
                        keep=keep_decoded, cover=covered.get(p),
                    )
                    sp = computed.part
                    if computed.coverage is not None:
                        established.append(computed.coverage)
                used[p] = sp
                return decode(sp.part)

            oracle = run_oracle(lambda: combine(cfg, [part_of(p) for p in range(cfg.partitions)]))
            reasons += [line for p in sorted(used) for line in used[p].lost]
            for c in established:  # only with keep_decoded: `amends verify` never writes
                save_coverage(store, c)
    boundary = Boundary(
        complete=not reasons,
        reasons=tuple(reasons),
        digests=(("store", store.digest), ("view", view.cfg.digest()), ("manifest", m.config_digest)),
    )
    report = verify(
        cfg, oracle, projected, list(snap.rejections), snap.conflicts(), boundary,
        stopped=view.stopped,
        skips=audited_skips(snap.skips),
        stops=operation_stops(snap.stops, config),
    )
    reused = tuple(p for p in sorted(used) if used[p] is stored.get(p))
    source = _sources(used, reused)
    if source:
        report = replace(report, source=source)
    return Checked(report, oracle, sum(sp.records for sp in used.values()), reused)


def _sources(used: dict[int, StoredPart], reused: tuple[int, ...]) -> str:
    """Where the oracle's input was read: one phrase, or one per partition when they differ."""
    said = {p: sp.source for p, sp in used.items()}
    for p in reused:
        when = used[p].computed_at
        stamp = f" {when:%Y-%m-%d %H:%M:%S}" if when else ""
        said[p] += f" (its oracle part stored{stamp})"
    if not said or set(said.values()) == {"the topic"}:
        return ""
    if len(set(said.values())) == 1:
        return next(iter(said.values()))
    return "; ".join(f"partition {p}: {text}" for p, text in sorted(said.items()))
