"""The worker step: source partition -> fenced batches in the processing store.

Resume contract: the only progress is the store's frontier of each source
partition (exclusive: the next offset to read). A worker claims an epoch,
confirms the source (``SourceLog.end``), reads from the frontier and commits
each batch in one fenced call. A lost commit reply is settled through the
store (``resolve_unknown``), never by assuming a rollback; a lost claim reply
through ``settle_claim`` with the claim's own nonce, never by adopting
whatever epoch is installed.

The worker remembers the frontier its own commit installed and re-reads it
from the store after anything else: a claim, a lost reply, an error. Only a
new epoch can move the frontier under an owner, and that fences the owner.

A batch is a scan of the source range [frontier, position): the frontier
moves to the position the scan reached, not to the last delivered offset + 1,
because offsets that deliver nothing may end the range. A range that delivers
no record at all still moves the frontier, in a fenced commit of its own.

``step`` is ``run(prepare())``. The two halves are public so that the
simulator can hold a prepared batch while another claim lands (a replaced
owner's batch must then fail its fence); ``run`` is ``commit`` when only one
batch runs.

With ``ahead`` above 1 (and a store that supports it, ``AheadStore``) a step
that finds more in the source than one batch runs up to ``ahead`` batches back
to back, each folded while the one before it commits. Nothing about progress
changes: every batch is still one fenced commit from the frontier the one
before installed; a batch folded ahead of a commit that failed is dropped
unwritten (PredecessorFailed) and read again from the frontier the store
reports. The step returns only when every batch it ran has settled, so what it
reports is committed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from amends_core.errors import BatchAborted, CommitUnknown, PredecessorFailed, Transient
from amends_core.ledger import Record
from amends_core.ports import AheadStore, BatchResult, CommitInFlight, ProcessingStore, SourceLog, Token

CLAIM_ATTEMPTS = 3
"""Claims with a lost reply settled as not ours before giving up (as a transient failure)."""

BATCH_BYTES = 16 * 1024 * 1024
"""Byte budget of one batch (source keys and values). A batch ends at the batch size in
records or at the record that reaches this budget, whichever comes first, and always
holds at least one record: large values cannot make one fenced transaction (and the
worker's memory) grow with the batch size. 16 MiB is 16 values at Kafka's default
1 MiB message limit, far above what 1000 ordinary movements (about 250 bytes each) take."""


def no_clock() -> float:
    """The clock of a worker that measures nothing (the core has no clock of its own)."""
    return 0.0


class ClaimUnsettled(Transient):
    """Claims kept ending with an unknown outcome; nothing is owned, retry later."""


@dataclass(frozen=True, slots=True)
class StepResult:
    partition: int
    frontier_before: int
    frontier: int
    """Exclusive frontier after the step."""
    source_end: int
    """End of the source partition when the step started."""
    records: int
    accepted: int
    rejected: int
    envelopes: int
    seconds: float
    resolved_unknown: bool = False

    @property
    def lag(self) -> int:
        return max(0, self.source_end - self.frontier)


@dataclass(frozen=True, slots=True)
class Batch:
    """Records read under one token from one frontier, not yet committed."""

    token: Token
    frontier: int
    """The installed frontier the batch was read from (the commit's expected frontier)."""
    start: int
    """``frontier`` with never-applied offsets stepped over (what a report shows)."""
    high: int
    records: list[Record]
    position: int
    """Exclusive end of the scanned range."""
    started: float


class Worker:
    """Owns one source partition through an epoch of the processing store."""

    def __init__(
        self,
        store: ProcessingStore,
        source: SourceLog,
        partition: int,
        *,
        batch_size: int = 1000,
        batch_bytes: int = BATCH_BYTES,
        clock: Callable[[], float] = no_clock,
        ahead: int = 1,
    ) -> None:
        if ahead > 1 and not callable(getattr(store, "process_ahead", None)):
            msg = f"ahead={ahead} needs a store that can commit in the background (process_ahead)"
            raise ValueError(msg)
        self.store = store
        self.source = source
        self.partition = partition
        self.batch_size = batch_size
        self.batch_bytes = max(1, batch_bytes)
        self.clock = clock
        self.ahead = max(1, ahead)
        """Batches one step may run back to back, each folded while the previous one commits."""
        self.token: Token | None = None
        self.cursor: int | None = None
        """The frontier this worker's last known commit installed; None: read it from the store."""

    # ------------------------------------------------------------ ownership

    def claim(self) -> Token:
        """Install a new epoch, under a fresh claimant nonce per attempt.

        After an unknown claim outcome the installed epoch is adopted only when
        its nonce is this attempt's (``settle_claim``); otherwise it claims
        again. Repeatedly unknown outcomes end in ClaimUnsettled (transient).
        """
        self.source.reset()  # a new owner always re-confirms the source
        self.token = None
        self.cursor = None
        for _ in range(CLAIM_ATTEMPTS):
            nonce = self.store.new_nonce()
            try:
                self.token = self.store.claim(self.partition, nonce)
            except CommitUnknown as e:
                self.token = self.settle_claim(nonce, e)
            if self.token is not None:
                return self.token
        msg = (
            f"claiming partition {self.partition}: the outcome was unknown"
            f" {CLAIM_ATTEMPTS} times in a row (connection lost during COMMIT)"
        )
        raise ClaimUnsettled(msg)

    def settle_claim(self, nonce: str, unknown: CommitUnknown) -> Token | None:
        """Recovery rule after a lost claim reply: ask the store whether ``nonce`` installed it."""
        return self.store.settle_claim(self.partition, nonce, unknown)

    # ------------------------------------------------------------ the step

    def frontier(self) -> int:
        if self.cursor is None:
            self.cursor = self.store.frontier(self.partition)
        return self.cursor

    def prepare(self, max_records: int | None = None) -> Batch | StepResult:
        """Claim if needed, confirm the source and read one batch from the frontier.

        Returns the StepResult of an idle step when the source has nothing past
        the frontier. Nothing is written.
        """
        t0 = self.clock()
        token = self.token if self.token is not None else self.claim()
        frontier = self.frontier()
        high = self.source.end(frontier)
        start = self.source.start(frontier)
        if high <= frontier:
            return StepResult(self.partition, start, start, high, 0, 0, 0, 0, self.clock() - t0)
        limit = max(1, min(self.batch_size, max_records or self.batch_size))
        records, position = self.source.read(frontier, high, limit, self.batch_bytes)
        return Batch(token, frontier, start, high, records, position, t0)

    def _read_on(self, after: Batch, max_records: int) -> Batch | None:
        """The batch after ``after``, read from where it ended (its commit still in flight)."""
        frontier = after.position
        high = self.source.end(frontier)
        if high <= frontier or max_records < 1:
            return None
        start = self.source.start(frontier)
        limit = min(self.batch_size, max_records)
        records, position = self.source.read(frontier, high, limit, self.batch_bytes)
        return Batch(after.token, frontier, start, high, records, position, self.clock())

    def commit(self, batch: Batch) -> StepResult:
        """Commit a prepared batch in one fenced call and settle a lost reply."""
        self.cursor = None  # whatever happens below, only a known commit says where it is
        resolved = False
        result: BatchResult | None = None
        try:
            result = self.store.process(batch.token, batch.frontier, batch.records, until=batch.position)
        except CommitUnknown as e:
            resolved = self.settle_lost_commit(e, batch)
        except BatchAborted as e:
            # An operation error (e.g. a close outside int64) on one record: commit the
            # records before it, then stop with the error; the failing record stays unread.
            before = [r for r in batch.records if r.coords.offset < e.offset]
            if before:
                self.store.process(batch.token, batch.frontier, before)
            raise
        if result is not None:
            self.cursor = result.frontier
        after = self.source.start(self.frontier())
        return StepResult(
            self.partition, batch.start, after, batch.high, len(batch.records),
            result.accepted if result else 0,
            len(result.rejections) if result else 0,
            len(result.rows) if result else 0,
            self.clock() - batch.started, resolved,
        )

    def settle_lost_commit(self, unknown: CommitUnknown, batch: Batch) -> bool:
        """Recovery rule after a lost commit reply: settle it in the store and re-read the frontier."""
        del batch
        return self.store.resolve_unknown(unknown)

    def step(self, max_records: int | None = None) -> StepResult:
        """Process at most ``ahead`` batches from the frontier; idempotent and bounded.

        ``max_records`` caps the records read (default: ``ahead`` batch sizes); a
        batch also ends at the record that reaches ``batch_bytes``. More than one
        batch runs only when the source holds more than the first one.
        """
        prepared = self.prepare(max_records)
        if isinstance(prepared, StepResult):
            return prepared
        return self.run(prepared, max_records)

    def run(self, batch: Batch, max_records: int | None = None) -> StepResult:
        """The second half of ``step``: commit a prepared batch and, with ``ahead`` above 1
        and more in the source, the batches after it (at most ``max_records`` records in all,
        default ``ahead`` batch sizes), each folded while the one before commits."""
        if self.ahead == 1 or batch.position >= batch.high:
            return self.commit(batch)
        cap = max_records if max_records is not None else self.ahead * self.batch_size
        return self._run_ahead(batch, cap)

    def _run_ahead(self, first: Batch, cap: int) -> StepResult:
        """Batches from ``first`` on, each folded while the one before commits; every one is
        settled (its commit known, a lost reply resolved) before this returns or raises."""
        store = cast(AheadStore, self.store)
        self.cursor = None  # only a known commit says where the frontier is
        results: list[BatchResult] = []
        batches: list[Batch] = []
        resolved = False
        clean = True
        pending: tuple[Batch, CommitInFlight] | None = None

        def settle() -> None:
            # the batch in flight, settled like ``commit`` settles its one batch
            nonlocal pending, resolved, clean
            if pending is None:
                return
            b, flight = pending
            pending = None
            try:
                results.append(flight.result())
            except CommitUnknown as e:
                clean = False
                resolved = self.settle_lost_commit(e, b) or resolved

        batch: Batch | None = first
        left = cap
        try:
            while batch is not None:
                try:
                    flight = store.process_ahead(
                        batch.token, batch.frontier, batch.records, until=batch.position,
                        after=pending[1] if pending is not None else None,
                    )
                except PredecessorFailed:
                    settle()  # raises the previous batch's own error unless its reply was lost
                    clean = False
                    break
                except BatchAborted as e:
                    settle()
                    if not clean:
                        raise
                    # as ``commit``: the records before the failing one commit, then stop
                    before = [r for r in batch.records if r.coords.offset < e.offset]
                    if before:
                        store.process(batch.token, batch.frontier, before)
                    raise
                settle()  # already finished: this batch could only lock after it committed
                batches.append(batch)
                pending = (batch, flight)
                left -= len(batch.records)
                if len(batches) >= self.ahead or not clean:
                    break
                batch = self._read_on(batch, left)
        except BaseException:
            clean = False  # the frontier is read again from the store
            raise
        finally:
            try:
                settle()
            finally:
                if clean and results:
                    self.cursor = results[-1].frontier
        after = self.source.start(self.frontier())
        return StepResult(
            self.partition, first.start, after, batches[-1].high if batches else first.high,
            sum(len(b.records) for b in batches),
            sum(r.accepted for r in results),
            sum(len(r.rejections) for r in results),
            sum(len(r.rows) for r in results),
            self.clock() - first.started, resolved,
        )


__all__ = ["BATCH_BYTES", "CLAIM_ATTEMPTS", "Batch", "ClaimUnsettled", "StepResult", "Worker", "no_clock"]
