"""An audited way past an operation error: skip exactly the record a partition is stopped on.

A record whose processing is an operation error (a daily close outside signed
64-bit) stops its partition: nothing is committed for it, the frontier stays
on it, and every restart fails on it again. ``skip_record`` moves that one
partition past that one record, on the record, under these rules:

* Only the record the partition would process next may be skipped: the first
  record the source delivers at or after the worker frontier (the recorded
  marker, transaction control records and gaps before it are passed over, as
  the worker passes over them). Any other offset is refused.
* Only when processing it is what fails: the core processes the record at the
  installed state in a transaction that is always rolled back; a record that
  is applied or quarantined normally is refused (run the worker instead).
* Ownership: the skip claims the partition with a fresh epoch, exactly like a
  starting worker, and commits the audit row and the new frontier in one
  transaction fenced by that epoch. A live worker holding an older epoch is
  fenced out by its next commit and must claim again (restart it); a worker
  that claims after the skip reads the new frontier and goes on after the
  skipped offset.
* Idempotent: skipping an offset that already has an audit entry changes
  nothing and reports the entry.

Verification leaves skipped records out of the oracle's input and lists them;
a report with skips is at best PASS_WITH_EXCLUSIONS and is accepted only when
the expectations list the skips.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass

from amends_core.ledger import Record
from amends_pipeline.kafka.topics import Reader
from amends_pipeline.manifest import Manifest, check_source
from amends_pipeline.postgres.errors import CommitUnknown
from amends_pipeline.postgres.store import PgStore, SkipEntry
from amends_pipeline.roles.worker import WorkerPartition
from amends_pipeline.runtime import Runtime

MAX_REASON = 500
"""Characters a skip reason may have (the audit table enforces the same bound)."""
MAX_OPERATOR = 128


class SkipRefused(Exception):
    """The offset may not be skipped; the message says why and what to do instead."""


@dataclass(frozen=True, slots=True)
class SkipOutcome:
    entry: SkipEntry
    already: bool
    """True: the offset had been skipped before; nothing changed now."""


def default_operator() -> str:
    """The OS user running the command (``--operator`` overrides it)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return os.environ.get("USER") or f"uid {os.getuid()}"


def check_text(name: str, value: str, limit: int) -> str:
    """``value`` stripped; ValueError when empty, too long or not printable on one line."""
    text = value.strip()
    if not text:
        msg = f"{name} must not be empty"
        raise ValueError(msg)
    if len(text) > limit:
        msg = f"{name} has {len(text)} characters; at most {limit}"
        raise ValueError(msg)
    if not text.isprintable():
        msg = f"{name} must be one line of printable characters"
        raise ValueError(msg)
    return text


def skip_command(config: str, partition: int, offset: int) -> str:
    """The command line that skips ``partition``/``offset`` (the reason left to fill in)."""
    return (
        f"amends skip --config {config} --partition {partition} --offset {offset}"
        " --reason TEXT"
    )


def frontier_record(reader: Reader, m: Manifest, partition: int, frontier: int, offset: int) -> Record:
    """The record at ``offset``, which must be the first the source delivers from ``frontier``."""
    high = reader.watermarks(partition).high
    if offset >= high:
        msg = (
            f"offset {offset} is not in source partition {partition} (it ends at {high});"
            f" the partition's next record is at or after offset {frontier}"
        )
        raise SkipRefused(msg)
    marker = m.marker_at(partition)
    for rec, _ in reader.records(m.source_incarnation, partition, frontier, offset + 1, marker):
        if rec is None:
            continue  # the recorded marker
        if rec.coords.offset != offset:
            msg = (
                f"offset {offset} is not the record partition {partition} processes next:"
                f" that is offset {rec.coords.offset} (frontier {frontier}); only the record a"
                " partition is stopped on can be skipped"
            )
            raise SkipRefused(msg)
        return rec
    msg = (
        f"offset {offset} of source partition {partition} delivers no record (the marker, a"
        " transaction control record, an aborted record or a compaction gap); the worker"
        " passes over it by itself"
    )
    raise SkipRefused(msg)


def skip_record(rt: Runtime, partition: int, offset: int, reason: str, operator: str) -> SkipOutcome:
    """Skip ``partition``/``offset`` after checking it is the failing frontier record (see module)."""
    cfg = rt.cfg
    if not 0 <= partition < cfg.partitions:
        msg = f"partition {partition} is not configured (0..{cfg.partitions - 1})"
        raise SkipRefused(msg)
    with rt.store("amends-skip", read_only=True) as store:
        held = store.skipped(partition, offset)
        if held is not None:
            return SkipOutcome(held, already=True)
        m = rt.manifest(store)
        with rt.reader(m.source_topic) as reader:
            frontier = store.frontier(partition)
            check_source(reader, m, {partition: frontier})
            if offset < m.needed(partition, frontier):
                msg = (
                    f"offset {offset} of partition {partition} is below the frontier"
                    f" {m.needed(partition, frontier)}: it was processed already (applied or"
                    " quarantined); only the record a partition is stopped on can be skipped"
                )
                raise SkipRefused(msg)
            record = frontier_record(reader, m, partition, frontier, offset)
            failure = store.probe(partition, frontier, record)
            if failure is None:
                msg = (
                    f"processing offset {offset} of partition {partition} does not fail at the"
                    " current state (it is applied or quarantined normally): nothing to skip;"
                    " run the worker"
                )
                raise SkipRefused(msg)
            return SkipOutcome(_install(store, reader, m, record, frontier, failure, reason, operator), False)


def _install(
    store: PgStore,
    reader: Reader,
    m: Manifest,
    record: Record,
    frontier: int,
    failure: BaseException,
    reason: str,
    operator: str,
) -> SkipEntry:
    """Claim a fresh epoch (fencing out older owners) and commit the skip under it."""
    p, offset = record.coords.partition, record.coords.offset
    cause = failure.__cause__
    error = f"{type(cause).__name__}: {cause}" if cause is not None else str(failure)
    token = WorkerPartition(store, reader, m, p).claim()
    try:
        return store.skip(token, frontier, record, error=error, reason=reason, operator=operator)
    except CommitUnknown as e:
        entry = store.settle_skip(e, p, offset)
        if entry is None:
            raise
        return entry


__all__ = [
    "MAX_OPERATOR",
    "MAX_REASON",
    "SkipOutcome",
    "SkipRefused",
    "check_text",
    "default_operator",
    "frontier_record",
    "skip_command",
    "skip_record",
]
