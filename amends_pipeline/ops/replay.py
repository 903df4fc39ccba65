"""Replay an already-consumed source interval into intact state, and rebuild a namespace.

Replay checks, it never repairs: every record of [from, until) must already
be reflected exactly (accepted evidence at the same coordinates with no new
envelope, or the same quarantine record and reason). Only after the whole
interval passes does ``--execute`` claim a new ownership epoch; frontier,
evidence and output versions never change.

Rebuild reconstructs a fresh namespace from the whole source with the
production roles (worker, relay, view), publishing to a new output topic with
independent output identities, and verifies it. The whole source is what the
topic retains and, where retention deleted the early history, the source
snapshot below its captured end (the rebuild's worker reads it there, see
``snapshot.source``). The original namespace is not touched.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

from amends_core.errors import OperationError, ReplayMismatch
from amends_core.ledger import Config, Record
from amends_core.verify import Report
from amends_pipeline.manifest import Manifest, ManifestMissing, check_source, write_manifest
from amends_pipeline.ops.provision import ensure_topic
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.roles.loop import Stop, run_loop
from amends_pipeline.roles.steps import ROLES, open_steps
from amends_pipeline.runtime import Runtime
from amends_pipeline.snapshot.source import check_whole_source


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    partition: int
    start: int
    until: int
    records: int
    executed: bool
    epoch: int | None


def replay(rt: Runtime, partition: int, start: int, until: int, *, execute: bool) -> ReplayPlan:
    if not 0 <= start <= until:
        msg = f"the interval [{start}, {until}) is empty or reversed"
        raise ReplayMismatch(msg)
    with rt.store("amends-replay", read_only=True) as store:  # never creates the namespace
        m = rt.manifest(store)
        frontier = store.frontier(partition)
        if until > frontier:
            msg = f"[{start}, {until}) reaches past the frontier {frontier}: not consumed yet"
            raise ReplayMismatch(msg)
        with rt.reader(m.source_topic) as reader:
            check_source(reader, m, {partition: start})
            recs: list[Record] = [
                r
                for r, _ in reader.records(
                    m.source_incarnation, partition, start, until, m.marker_at(partition)
                )
                if r is not None
            ]
        if not execute:
            for r in recs:
                store.check_replay(r)
            return ReplayPlan(partition, start, until, len(recs), False, None)
        token = store.replay(partition, recs)
        return ReplayPlan(partition, start, until, len(recs), True, token.epoch)


@dataclass(frozen=True, slots=True)
class RebuildPlan:
    namespace: str
    output_topic: str
    source_topic: str
    executed: bool
    report: Report | None
    accepted: bool = False
    """The rebuild verifies and its exclusions equal the original namespace's quarantine
    and conflict evidence exactly."""
    refolded_by: str | None = None
    """What did the worker's part when it was not the in-process drain (a backfill)."""


def rebuild(
    rt: Runtime, new_namespace: str, output_topic: str, *, execute: bool, batch: int = 5000,
    refold: Callable[[Runtime], str] | None = None,
    say: Callable[[str], None] = lambda _text: None,
) -> RebuildPlan:
    """Rebuild into ``new_namespace``; ``refold`` (e.g. a Dagster backfill) does the worker's part.

    ``refold`` receives the rebuild namespace's Runtime once it is provisioned
    and returns a description of what it ran (a backfill ID). The in-process
    drain that follows finds any worker tail it left and does the relay and
    view work; verification then compares the rebuild with the oracle.
    """
    old = rt.cfg
    if new_namespace == old.namespace:
        msg = "the rebuild namespace must differ from the original"
        raise OperationError(msg)
    new_cfg: Config = old.with_namespace(new_namespace)
    say("checking that the whole source is still held (the topic, or the source snapshot below it)")
    with rt.store("amends-rebuild", read_only=True) as store:  # the original must exist
        m = rt.manifest(store)
        if output_topic == m.output_topic:
            msg = f"output topic {output_topic!r} belongs to {old.namespace!r}; use a new one"
            raise OperationError(msg)
        with rt.reader(m.source_topic) as reader:
            for line in check_whole_source(reader, m, partial(rt.snapshot_rows, m)):
                say(line)
        original = store.snapshot(evidence=False, outbox="none")
    if not execute:
        return RebuildPlan(new_namespace, output_topic, m.source_topic, False, None)
    say(f"registering {new_namespace!r} with output topic {output_topic!r}")
    nrt = Runtime(new_cfg, dsn=rt.dsn, schema=rt.schema, bootstrap=rt.kafka(), snapshot_uri=rt.snapshot_uri)
    ensure_topic(nrt, output_topic, new_cfg.partitions, output=True)
    with nrt.store("amends-rebuild") as nstore:
        try:
            existing = nrt.manifest(nstore)
        except ManifestMissing:
            existing = None
        if existing is None:
            write_manifest(
                nstore.db, nstore.ns_id,
                Manifest(
                    new_namespace, m.source_topic, output_topic, m.partitions, m.source_incarnation,
                    new_cfg.digest(), m.nonce, dict(m.markers), m.marker_namespace,
                    m.source_topic_id,
                ),
            )
        elif (
            existing.output_topic != output_topic
            or existing.nonce != m.nonce
            or existing.source_topic_id != m.source_topic_id
        ):
            msg = f"namespace {new_namespace!r} already exists with another binding"
            raise OperationError(msg)
    if refold is not None:
        say("refolding every partition through a Dagster backfill of refold_job")
    ran = refold(nrt) if refold is not None else None
    say("running worker, relay and view until idle" if ran is None else "publishing and applying the output")
    drain(nrt, batch)
    say("verifying against the oracle")
    report = verify_namespace(nrt)
    accepted = report.accepts(list(original.rejections), original.conflicts())
    return RebuildPlan(new_namespace, output_topic, m.source_topic, True, report, accepted, ran)


def drain(rt: Runtime, batch: int) -> None:
    """Run worker, relay and view steps of every partition until no work is left."""
    parts = range(rt.cfg.partitions)
    with ExitStack() as stack:
        steps = [s for role in ROLES for s in open_steps(rt, role, parts, batch, stack)]
        run_loop(steps, Stop(), until_idle=True)
