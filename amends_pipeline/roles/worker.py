"""The worker role: source partition -> fenced PostgreSQL batches.

Resume contract: the only progress is the database frontier of each source
partition (exclusive: the next offset to read). A worker claims an epoch,
confirms the source incarnation and retention, reads from the frontier, and
commits each batch in one fenced transaction. A lost commit reply is settled
by re-reading the frontier (``PgStore.resolve_unknown``), never by assuming a
rollback. Kafka consumer offsets are never committed or trusted.

A batch is a scan of the source range [frontier, position): the frontier
moves to the position the scan reached, not to the last delivered offset + 1,
because offsets that deliver nothing (transaction control records, aborted
transactional records, compaction gaps, the recorded marker) may end the
range. A range that delivers no record at all still moves the frontier, in a
fenced commit of its own, so lag reaches 0 and verification sees the end.

``WorkerPartition.step`` is the bounded, idempotent unit that a long-running
loop, a Dagster run or a sensor tick can all call.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from amends_core.ledger import Record
from amends_core.ports import Token
from amends_pipeline.kafka.topics import OffsetLost, Reader, to_record
from amends_pipeline.manifest import Manifest, SourceLost, check_range, check_source
from amends_pipeline.postgres.errors import BatchAborted, CommitUnknown, StoreUnavailable
from amends_pipeline.postgres.store import PgStore

CLAIM_ATTEMPTS = 3
"""Claims with a lost reply settled as not ours before giving up (as a transient failure)."""

BATCH_BYTES = 16 * 1024 * 1024
"""Byte budget of one batch (source keys and values). A batch ends at the batch size in
records or at the record that reaches this budget, whichever comes first, and always
holds at least one record: large values cannot make one fenced transaction (and the
worker's memory) grow with the batch size. 16 MiB is 16 values at Kafka's default
1 MiB message limit, far above what 1000 ordinary movements (about 250 bytes each) take."""


@dataclass(frozen=True, slots=True)
class StepResult:
    partition: int
    frontier_before: int
    frontier: int
    """Exclusive frontier after the step."""
    source_end: int
    """High watermark of the source partition when the step started."""
    records: int
    accepted: int
    rejected: int
    envelopes: int
    seconds: float
    resolved_unknown: bool = False

    @property
    def lag(self) -> int:
        return max(0, self.source_end - self.frontier)


class WorkerPartition:
    """Owns one source partition through a database epoch."""

    def __init__(
        self,
        store: PgStore,
        reader: Reader,
        manifest: Manifest,
        partition: int,
        *,
        batch_size: int = 1000,
        batch_bytes: int = BATCH_BYTES,
        recheck_seconds: float = 5.0,
    ) -> None:
        self.store = store
        self.reader = reader
        self.manifest = manifest
        self.partition = partition
        self.batch_size = batch_size
        self.batch_bytes = max(1, batch_bytes)
        self.token: Token | None = None
        self.recheck_seconds = recheck_seconds
        self._checked_at = float("-inf")

    def claim(self) -> Token:
        """Install a new epoch, under a fresh claimant nonce per attempt.

        After an unknown claim outcome (the reply was lost) the installed epoch
        is adopted only when the installed nonce is this attempt's; otherwise
        (the claim did not land, or another claimant's did since) it claims
        again. Repeatedly unknown outcomes end in StoreUnavailable (transient).
        """
        self._checked_at = float("-inf")  # a new owner always re-confirms the incarnation
        self.token = None
        for _ in range(CLAIM_ATTEMPTS):
            nonce = self.store.new_nonce()
            try:
                self.token = self.store.claim(self.partition, nonce)
            except CommitUnknown as e:
                self.token = self.store.settle_claim(self.partition, nonce, e)
            if self.token is not None:
                return self.token
        msg = (
            f"claiming partition {self.partition}: the outcome was unknown"
            f" {CLAIM_ATTEMPTS} times in a row (connection lost during COMMIT)"
        )
        raise StoreUnavailable(msg)

    def effective_frontier(self, frontier: int) -> int:
        """The frontier with the marker offset stepped over (markers are never applied)."""
        return self.manifest.needed(self.partition, frontier)

    def _check(self, frontier: int) -> int:
        """Source end; the incarnation itself is re-confirmed at most every ``recheck_seconds``."""
        p = self.partition
        now = time.monotonic()
        if now - self._checked_at >= self.recheck_seconds:
            wm = check_source(self.reader, self.manifest, {p: frontier})[p]
            self._checked_at = now
        else:
            wm = self.reader.watermarks(p)
            check_range(self.manifest, p, wm, frontier)
        return wm.high

    def _read(self, frontier: int, high: int, limit: int) -> tuple[list[Record], int]:
        """Records of [frontier, high) and the position reached.

        At most ``limit`` messages, cut after the one that reaches ``batch_bytes``.
        """
        p = self.partition
        source = self.manifest.source_incarnation
        marker = self.manifest.marker_at(p)
        records: list[Record] = []
        position = frontier
        while not records and position < high:  # only the marker read: read on
            try:
                msgs, position = self.reader.read(p, position, high, limit, self.batch_bytes)
            except OffsetLost:
                # Retention overtook the read: report it as the check would, never skip.
                self._checked_at = float("-inf")
                check_range(self.manifest, p, self.reader.watermarks(p), position)
                raise
            for m in msgs:
                rec, _ = to_record(source, p, m, marker)
                if rec is not None:
                    records.append(rec)
        return records, position

    def step(self, max_records: int | None = None) -> StepResult:
        """Process at most one batch from the frontier; idempotent and bounded.

        ``max_records`` caps the messages read (default: the batch size); the
        batch also ends at the record that reaches ``batch_bytes``.
        """
        t0 = time.perf_counter()
        if self.token is None:
            self.claim()
        assert self.token is not None
        p = self.partition
        frontier = self.store.frontier(p)
        high = self._check(frontier)
        start = self.effective_frontier(frontier)
        if high <= frontier:
            return StepResult(p, start, start, high, 0, 0, 0, 0, time.perf_counter() - t0)
        limit = max(1, min(self.batch_size, max_records or self.batch_size))
        records, position = self._read(frontier, high, limit)
        resolved = False
        result = None
        try:
            result = self.store.process(self.token, frontier, records, until=position)
        except CommitUnknown as e:
            resolved = self.store.resolve_unknown(e)
        except BatchAborted as e:
            # An operation error (e.g. a close outside int64) on one record: commit the
            # records before it, then stop with the error; the failing record stays unread.
            before = [r for r in records if r.coords.offset < e.offset]
            if before:
                self.store.process(self.token, frontier, before)
            raise
        after = self.effective_frontier(self.store.frontier(p) if result is None else result.frontier)
        return StepResult(
            p, start, after, high, len(records),
            result.accepted if result else 0,
            len(result.rejections) if result else 0,
            len(result.rows) if result else 0,
            time.perf_counter() - t0, resolved,
        )


__all__ = ["SourceLost", "StepResult", "WorkerPartition"]
