"""A fault-free memory pipeline: worker -> outbox -> relay -> output log -> view.

Used by ``amends compute --engine incremental`` and ``amends demo``. It runs
the production role logic (``amends_core.roles``) over the memory adapters
(``amends_core.adapters``), every enabled step to completion; the simulator
drives the same logic step by step with faults.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

from amends_core.adapters import MemoryOutput, MemoryProcessing, MemorySource, MemoryView
from amends_core.errors import BatchAborted
from amends_core.ledger import CloseOutOfRange, Config, Record
from amends_core.ports import OutboxRow
from amends_core.result import ComputeResult, RejectionRef
from amends_core.roles.relay import Relay
from amends_core.roles.view import View, ViewStopped
from amends_core.roles.worker import Worker
from amends_core.store.memory import MemoryStore
from amends_core.view import ViewState


class MemoryPipeline:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.store = MemoryStore(cfg)
        self.view = ViewState(cfg)
        self.source: dict[int, list[Record]] = {p: [] for p in range(cfg.partitions)}
        self._offsets: dict[int, list[int]] = {p: [] for p in range(cfg.partitions)}
        """The offsets of ``source``, kept alongside so that appending never rebuilds them."""
        self.output: dict[int, list[bytes]] = {p: [] for p in range(cfg.partitions)}
        self.committed: list[OutboxRow] = []
        """Every outbox row in commit order (for demonstrations and tests)."""
        processing = MemoryProcessing(self.store)
        log = MemoryOutput(self.output)
        parts = range(cfg.partitions)
        # One record per batch: a memory batch of several records would copy the store
        # to stay all-or-nothing, and the outcome is the same.
        self.workers = {
            p: Worker(processing, MemorySource(self.source[p], self._offsets[p]), p, batch_size=1)
            for p in parts
        }
        self.relays = {p: Relay(processing, log, p, batch_size=1000) for p in parts}
        self.views = {p: View(MemoryView(self.view), log, p, batch_size=1000) for p in parts}

    def append(self, records: Iterable[Record]) -> None:
        """Add records to the source; each partition stays in offset order.

        A record past the partition's last offset (the usual case) is appended in
        constant time; an earlier one is placed by binary search.
        """
        for r in records:
            p, off = r.coords.partition, r.coords.offset
            log, offsets = self.source[p], self._offsets[p]
            if not offsets or off > offsets[-1]:
                log.append(r)
                offsets.append(off)
                continue
            i = bisect.bisect_left(offsets, off)
            if offsets[i] == off:
                msg = f"offset {off} already present on partition {p}"
                raise ValueError(msg)
            log.insert(i, r)
            offsets.insert(i, off)

    def next_offset(self, partition: int) -> int:
        """Next free source offset of a partition (for appending generated input)."""
        log = self.source[partition]
        return log[-1].coords.offset + 1 if log else 0

    def run_worker(self, partition: int) -> int:
        """Process the partition to its end; returns the records processed.

        A record the fold cannot compute (a close outside int64) raises
        CloseOutOfRange, as the partition cannot pass it.
        """
        w = self.workers[partition]
        outbox = self.store.outbox[partition]
        done = 0
        while True:
            seen = len(outbox)
            try:
                r = w.step()
            except BatchAborted as e:
                if isinstance(e.__cause__, CloseOutOfRange):
                    raise e.__cause__ from None
                raise
            self.committed.extend(outbox[seen:])
            done += r.records
            if r.lag == 0:
                return done

    def run_relay(self, partition: int) -> int:
        done = 0
        while published := self.relays[partition].step().published:
            done += published
        return done

    def run_view(self, partition: int) -> int:
        done = 0
        try:
            while applied := self.views[partition].step().applied:
                done += applied
        except ViewStopped:
            pass  # stays stopped; the caller looks at ``view.stopped``
        return done

    def drain(self) -> None:
        for p in range(self.cfg.partitions):
            self.run_worker(p)
            self.run_relay(p)
            self.run_view(p)

    def result(self) -> ComputeResult:
        """What the view shows, with quarantine and conflict evidence from the store."""
        rejections = [
            RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)
            for r in self.store.rejections
        ]
        return ComputeResult.build(
            self.cfg, self.view.projections(), rejections, self.store.conflicts()
        )


def compute_incremental(cfg: Config, by_partition: dict[int, list[Record]]) -> ComputeResult:
    """Run ordered records through the memory pipeline and report the view."""
    pipe = MemoryPipeline(cfg)
    for recs in by_partition.values():
        pipe.append(recs)
    pipe.drain()
    if pipe.view.stopped:
        # the view refused output the same code produced: a defect, never an answer
        where = "; ".join(f"partition {p}: {why}" for p, why in sorted(pipe.view.stopped.items()))
        msg = f"the incremental view stopped, so its result would be incomplete ({where})"
        raise RuntimeError(msg)
    return pipe.result()
