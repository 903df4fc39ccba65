"""The worker's step with batches run ahead (``Worker(ahead=N)``), over the memory adapters.

Memory commits at once, so these tests check the step's own logic: which batches
it runs, how it settles the batch in flight when the next one fails, and that
the frontier and the outbox end exactly as with one batch per step.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from amends_core.adapters import Decided, MemoryProcessing, MemorySource
from amends_core.errors import BatchAborted, CommitUnknown
from amends_core.ledger import INT64_MAX, Record
from amends_core.ports import BatchResult, Token
from amends_core.roles.worker import Worker
from amends_core.store.memory import MemoryStore
from tests import builders as b


def records(n: int) -> list[Record]:
    return b.records([b.txn(f"T{i}", qty=-(i % 3) - 1, valid=b.day(1 + i % 5)) for i in range(n)])


def worker(store: MemoryProcessing, recs: list[Record], **kw: int) -> Worker:
    source = MemorySource(recs, [r.coords.offset for r in recs])
    return Worker(store, source, 0, **kw)


def drained(w: Worker) -> list[int]:
    steps = []
    while (r := w.step()).records:
        steps.append(r.records)
    return steps


def outbox(store: MemoryProcessing) -> list[tuple[int, bytes]]:
    return [(row.sequence, row.envelope.to_bytes()) for row in store.store.outbox[0]]


def serial(recs: list[Record]) -> list[tuple[int, bytes]]:
    store = MemoryProcessing(MemoryStore(b.config()))
    assert sum(drained(worker(store, recs, batch_size=4))) == len(recs)
    return outbox(store)


class LosesReply(MemoryProcessing):
    """Loses the reply of its ``nth`` batch, after (``installed``) or instead of committing it."""

    def __init__(self, nth: int, installed: bool) -> None:
        super().__init__(MemoryStore(b.config()))
        self.nth = nth
        self.installed = installed
        self.calls = 0

    def process(
        self, token: Token, expected_next: int, records: Sequence[Record], until: int | None = None
    ) -> BatchResult:
        self.calls += 1
        after = until if until is not None else records[-1].coords.offset + 1
        if self.calls == self.nth:
            if self.installed:
                super().process(token, expected_next, records, until)
            msg = "the reply was lost"
            raise CommitUnknown(msg, operation="batch", partition=0, before=expected_next, after=after)
        return super().process(token, expected_next, records, until)


def test_one_step_runs_up_to_ahead_batches_and_ends_as_one_batch_per_step_does():
    recs = records(30)
    store = MemoryProcessing(MemoryStore(b.config()))
    w = worker(store, recs, batch_size=4, ahead=3)
    assert drained(w) == [12, 12, 6]
    assert store.frontier(0) == 30
    assert outbox(store) == serial(recs)


def test_max_records_caps_the_whole_step():
    store = MemoryProcessing(MemoryStore(b.config()))
    w = worker(store, records(30), batch_size=4, ahead=3)
    assert w.step(max_records=6).records == 6
    assert store.frontier(0) == 6


def test_a_lost_reply_that_committed_ends_the_step_and_the_next_one_goes_on():
    recs = records(30)
    store = LosesReply(nth=2, installed=True)
    w = worker(store, recs, batch_size=4, ahead=3)
    first = w.step()
    # batch 2's reply was lost; batch 3 had been read ahead of it and is dropped unwritten
    assert (first.records, first.resolved_unknown, first.accepted) == (8, True, 4)
    assert w.cursor == store.frontier(0) == 8  # read again from the store
    assert sum(drained(w)) == 22
    assert outbox(store) == serial(recs)


def test_a_lost_reply_that_did_not_commit_is_read_again():
    recs = records(30)
    store = LosesReply(nth=2, installed=False)
    w = worker(store, recs, batch_size=4, ahead=3)
    first = w.step()
    assert (first.records, first.resolved_unknown) == (8, False)
    assert store.frontier(0) == 4
    assert sum(drained(w)) == 26
    assert outbox(store) == serial(recs)


def test_an_operation_error_in_a_batch_run_ahead_commits_what_is_before_it():
    cfg = b.config([(b.K1, INT64_MAX - 5, 0, 0)])
    objs = [b.txn(f"T{i}", qty=0, valid=b.day(1 + i)) for i in range(10)]
    objs[6] = b.txn("BIG", qty=9, valid=b.day(7))  # the close leaves int64
    recs = b.records(objs)
    store = MemoryProcessing(MemoryStore(cfg))
    w = worker(store, recs, batch_size=4, ahead=3)
    with pytest.raises(BatchAborted) as caught:
        w.step()
    assert caught.value.offset == 6
    assert store.frontier(0) == 6  # the first batch and the failing batch's first two records
    assert w.cursor is None


def test_a_store_without_process_ahead_cannot_run_ahead():
    class Plain:
        pass

    with pytest.raises(ValueError, match="process_ahead"):
        Worker(Plain(), MemorySource([], []), 0, ahead=2)  # type: ignore[arg-type]


def test_decided_reports_its_outcome():
    err = CommitUnknown("lost", operation="batch", partition=0, before=0, after=1)
    lost = Decided(err)
    assert lost.done() and not lost.committed()
    with pytest.raises(CommitUnknown):
        lost.result()
    ok = Decided(BatchResult(0, 1, (), (), 1))
    assert ok.committed() and ok.result().frontier == 1
