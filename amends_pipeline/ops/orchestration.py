"""Bounded, idempotent units of work for an orchestrator (Dagster) to call.

Each function opens what it needs from the Runtime, does a bounded amount of
work through the same role steps the long-running ``amends role`` processes
use, closes everything and returns a plain summary. The database frontiers
and the ownership fencing are the truth: calling any of these twice, or
concurrently with a long-running role, is safe (a relay or view partition held
by another process is reported as busy and skipped; a refold claims a new
epoch, which replaces any other owner of the partition).

Nothing here imports Dagster: the definitions in ``amends_pipeline.defs`` are
a thin shell over these functions, which are tested on their own.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from amends_pipeline.manifest import Manifest
from amends_pipeline.ops.skip import skip_command
from amends_pipeline.postgres.reports import rejections_by_reason
from amends_pipeline.roles.relay import RelayBusy, RelayLock, RelayPartition
from amends_pipeline.roles.view import OutputLost, ViewPartition, ViewStopped
from amends_pipeline.runtime import Runtime


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Where one partition stands across source, worker, outbox, output and view."""

    partition: int
    source_low: int
    source_high: int
    """Exclusive end of the source partition (high watermark)."""
    worker_frontier: int
    """Exclusive worker frontier, the marker offset stepped over."""
    pending: int
    """Outbox rows committed but not yet acknowledged as published."""
    output_high: int
    view_frontier: int
    view_stopped: str | None
    output_low: int | None = None
    """Start of the retained output log (None: not read)."""
    worker_stopped: str | None = None
    """The operation error the worker stopped on (offset, error, what to do), while unpassed."""

    @property
    def lag(self) -> int:
        return max(0, self.source_high - self.worker_frontier)

    @property
    def view_lag(self) -> int:
        return max(0, self.output_high - self.view_frontier)

    @property
    def drained(self) -> bool:
        """Nothing left for worker, relay or view, as far as this reading goes."""
        return (
            self.lag == 0 and self.pending == 0 and self.view_lag == 0 and self.view_stopped is None
        )

    @property
    def view_health(self) -> ViewHealth:
        return ViewHealth(
            self.partition, self.view_frontier, self.view_stopped, self.output_low, self.output_high
        )


@dataclass(frozen=True, slots=True)
class ViewHealth:
    """Whether one output partition of the view is current: ok, lagging, stopped or unknown."""

    partition: int
    frontier: int
    """Exclusive view frontier."""
    stopped: str | None
    """The stop diagnostic the view store recorded (a protocol error), if any."""
    output_low: int | None
    """Start of the retained output log; None when not read."""
    output_high: int | None
    """End of the output log (high watermark); None when it could not be read."""
    unknown: str | None = None
    """Why the output log could not be read (lag unknown)."""

    @property
    def lost(self) -> bool:
        """The output log no longer holds the next offset the view needs (``OutputLost``)."""
        return self.output_low is not None and self.output_low > self.frontier

    @property
    def lag(self) -> int | None:
        """Output records not yet applied; None when the output end is unknown."""
        return None if self.output_high is None else max(0, self.output_high - self.frontier)

    @property
    def current(self) -> bool:
        """Known to be neither stopped nor behind the output end."""
        return self.stopped is None and not self.lost and self.lag == 0

    def state(self) -> str:
        """``ok``, ``lagging N``, ``stopped: reason`` or ``lag unknown: why``."""
        if self.stopped is not None:
            return f"stopped: {self.stopped}"
        if self.lost:
            return (
                f"stopped: OutputLost: the output log starts at offset {self.output_low},"
                " after the view frontier"
            )
        if self.lag is None:
            return f"lag unknown: {self.unknown or 'the output end was not read'}"
        return f"lagging {self.lag}" if self.lag else "ok"

    def short(self) -> str:
        """``state`` without the details: ok, lagging N, stopped, stopped: OutputLost, lag unknown."""
        if self.stopped is not None:
            return "stopped"
        if self.lost:
            return "stopped: OutputLost"
        return "lag unknown" if self.lag is None else self.state()


@dataclass(frozen=True, slots=True)
class Snapshot:
    namespace: str
    source_topic: str
    output_topic: str
    incarnation: str
    """How the source incarnation is bound: the topic ID, or the marker nonce."""
    partitions: tuple[PartitionState, ...]

    @property
    def drained(self) -> bool:
        return all(p.drained for p in self.partitions)

    @property
    def boundary_key(self) -> str:
        """Identifies a common boundary: the source and output ends of every partition."""
        return ";".join(f"{p.partition}:{p.source_high}:{p.output_high}" for p in self.partitions)


def incarnation_of(m: Manifest) -> str:
    return f"topic id {m.source_topic_id}" if m.source_topic_id else f"marker nonce {m.nonce}"


def snapshot(
    rt: Runtime, parts: Iterable[int] | None = None, config: str = "CONFIG.json"
) -> Snapshot:
    """Read watermarks and durable progress of the given partitions (all by default).

    ``config`` is the configuration file named in the ``amends skip`` advice of a
    partition stopped by an operation error.
    """
    wanted = sorted(set(range(rt.cfg.partitions) if parts is None else parts))
    states = []
    with rt.store("amends-snapshot", read_only=True) as store, rt.view_store(read_only=True) as vstore:
        m = rt.manifest(store)
        halted = {s.partition: s for s in store.stops()}
        with rt.reader(m.source_topic) as src, rt.reader(m.output_topic) as out:
            for p in wanted:
                wm = src.watermarks(p)
                prog = store.progress(p)
                frontier = prog.next + 1 if prog.next == m.markers[p] else prog.next
                view_frontier, stopped = vstore.progress(p)
                owm = out.watermarks(p)
                stop = halted.get(p)
                states.append(
                    PartitionState(
                        p, wm.low, wm.high, frontier, prog.sequence - prog.acked,
                        owm.high, view_frontier, stopped, owm.low,
                        None if stop is None else (
                            f"operation error at offset {stop.offset}: {stop.error};"
                            f" `{skip_command(config, p, stop.offset)}` once reviewed"
                        ),
                    )
                )
    return Snapshot(m.namespace, m.source_topic, m.output_topic, incarnation_of(m), tuple(states))


@dataclass(frozen=True, slots=True)
class RefoldSummary:
    partition: int
    frontier_before: int
    frontier_after: int
    target: int
    records: int
    accepted: int
    rejected: int
    envelopes: int
    batches: int
    seconds: float
    rejections_by_reason: dict[str, int] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    @property
    def reached_target(self) -> bool:
        return self.frontier_after >= self.target


def refold(
    rt: Runtime,
    partition: int,
    *,
    until: int | None = None,
    batch_size: int = 1000,
    budget_seconds: float | None = None,
) -> RefoldSummary:
    """Process one source partition from its database frontier to ``until`` (default: its end).

    Claims a new epoch first, so a concurrent owner is fenced out; each batch
    commits state, outbox and frontier in one transaction. Stops at the target,
    when a step makes no progress, or when the time budget is spent.
    """
    t0 = time.perf_counter()
    with rt.store("amends-refold") as store:
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as reader:
            w = rt.worker(store, reader, m, partition, batch_size=batch_size)
            w.claim()
            before = w.source.start(store.frontier(partition))
            target = until if until is not None else reader.watermarks(partition).high
            frontier = before
            records = accepted = rejected = envelopes = batches = 0
            while frontier < target:
                if budget_seconds is not None and time.perf_counter() - t0 > budget_seconds:
                    break
                r = w.step(max_records=target - frontier)
                if r.frontier <= frontier:
                    break
                batches += 1
                records += r.records
                accepted += r.accepted
                rejected += r.rejected
                envelopes += r.envelopes
                frontier = r.frontier
            reasons = rejections_by_reason(store, partition, before, frontier) if rejected else {}
    return RefoldSummary(
        partition, before, frontier, target, records, accepted, rejected, envelopes, batches,
        time.perf_counter() - t0, reasons,
    )


@dataclass(frozen=True, slots=True)
class RelaySummary:
    partition: int
    published: int
    pending_after: int
    busy: bool
    """Another process (a long-running relay) holds the partition; nothing was done here."""
    seconds: float


def relay(rt: Runtime, parts: Sequence[int] | None = None, *, budget_seconds: float = 20.0,
          batch_size: int = 1000) -> list[RelaySummary]:
    """Publish pending outbox rows of each partition for at most ``budget_seconds`` in all."""
    t0 = time.perf_counter()
    wanted = list(range(rt.cfg.partitions) if parts is None else parts)
    out: list[RelaySummary] = []
    with rt.store("amends-relay") as store:
        m = rt.manifest(store)
        writer = rt.writer()
        for p in wanted:
            t1 = time.perf_counter()
            try:
                lock = RelayLock(rt.dsn, rt.schema, rt.cfg.namespace, p)
            except RelayBusy:
                prog = store.progress(p)
                out.append(RelaySummary(p, 0, prog.sequence - prog.acked, True, 0.0))
                continue
            try:
                r = RelayPartition(store, writer, m.output_topic, p, batch_size=batch_size)
                published = 0
                while time.perf_counter() - t0 < budget_seconds:
                    step = r.step()
                    published += step.published
                    if step.published == 0 or step.pending_after == 0:
                        break
                prog = store.progress(p)
                out.append(
                    RelaySummary(p, published, prog.sequence - prog.acked, False, time.perf_counter() - t1)
                )
            finally:
                lock.close()
    return out


@dataclass(frozen=True, slots=True)
class ViewSummary:
    partition: int
    frontier_before: int
    frontier_after: int
    output_end: int
    delivered: int
    """Output records read and applied (including ignored duplicates and stale ones)."""
    stored: int
    """Records that changed the view."""
    ignored: int
    """Duplicate or stale deliveries the version rule ignored."""
    seconds: float
    stopped: str | None = None
    """The partition's stop diagnostic after this run (or why it could not go on)."""

    @property
    def health(self) -> ViewHealth:
        return ViewHealth(self.partition, self.frontier_after, self.stopped, None, self.output_end)


def apply_view(rt: Runtime, parts: Sequence[int] | None = None, *, budget_seconds: float = 20.0,
               batch_size: int = 5000) -> list[ViewSummary]:
    """Apply published envelopes to the view for at most ``budget_seconds`` in all."""
    t0 = time.perf_counter()
    wanted = list(range(rt.cfg.partitions) if parts is None else parts)
    out: list[ViewSummary] = []
    with rt.store("amends-view-manifest") as store:
        m = rt.manifest(store)
    with rt.view_store() as vstore, rt.reader(m.output_topic) as reader:
        for p in wanted:
            t1 = time.perf_counter()
            v = ViewPartition(vstore, reader, p, batch_size=batch_size)
            before = vstore.progress(p)[0]
            delivered = stored = 0
            end = before
            lost: str | None = None
            while time.perf_counter() - t0 < budget_seconds:
                try:
                    r = v.step()
                except ViewStopped:
                    break  # the stop diagnostic is in progress(); other partitions go on
                except OutputLost as e:
                    lost = f"OutputLost: {e}"
                    break
                delivered += r.applied
                stored += r.stored
                end = r.output_end
                if r.applied == 0 or r.frontier >= r.output_end:
                    break
            after, stopped = vstore.progress(p)
            stopped = stopped if stopped is not None else lost
            out.append(
                ViewSummary(p, before, after, end, delivered, stored, delivered - stored,
                            time.perf_counter() - t1, stopped)
            )
    return out
