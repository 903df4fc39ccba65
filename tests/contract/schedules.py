"""Schedules of role steps over one kit: the production worker, relay and view, one step at a time.

``Roles`` runs the steps of ``amends_core.roles`` over a kit's processing and
view stores, a memory source log per partition (``MemorySource``, read live, so
a test can append to it) and output logs kept as bytes (``ListLog``). The
recovery rules are the roles' own: a failing record stops the worker after
the records before it commit, a relay acknowledges only what was delivered and
its retry publishes again, a view goes on from its installed frontier.

A schedule is a list of steps, each observed in the trace ``run`` returns:

  ("work", p, n)        p's worker takes one step of at most n records
  ("relay", p, n, dup)  p's relay publishes and acknowledges at most n pending rows; with
                        ``dup`` the log loses the first delivery report, so the retry
                        publishes the same rows again
  ("view", p, n)        p's view applies at most n output records
  ("redeliver", p, i)   the transport delivers output record i again
  ("forge", p, i)       an envelope with record i's output ID and version but other content appears
  ("claim", p)          a new worker claims p; the replaced one then tries a step
  ("restart",)          the processes restart: the processing store reopens (PostgreSQL: a new
                        session and a cold key cache) and every worker claims again

After the steps ``run`` drains every partition: the worker until it stops, the
relay, the view; then the transport delivers the whole output log again,
newest first, and the view catches up once more (every older version must be
stale and every equal one a duplicate).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from amends_core.adapters import MemorySource
from amends_core.errors import FenceError, OperationError, Transient
from amends_core.ledger import Record
from amends_core.roles.relay import Relay
from amends_core.roles.view import View, ViewStopped
from amends_core.roles.worker import Worker
from tests import builders as b
from tests.contract.kits import ListLog

Step = tuple[Any, ...]


class Recording:
    """A ViewStore that notes the effect of every record it is given (the port, passed through)."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self.effects: list[str] = []

    def progress(self, partition: int) -> tuple[int, str | None]:
        return self.view.progress(partition)

    def apply(self, partition: int, records: Any, *, start: int, end: int) -> Sequence[Any]:
        decisions = self.view.apply(partition, records, start=start, end=end)
        self.effects += [d.effect.value for d in decisions]
        return decisions

    def resolve_unknown(self, unknown: Any) -> tuple[int, str | None]:
        return self.view.resolve_unknown(unknown)

    def take(self) -> list[str]:
        out, self.effects = self.effects, []
        return out


class Roles:
    def __init__(
        self,
        kit: Any,
        source: dict[int, list[Record]] | None = None,
        *,
        batch_size: int = 1000,
        ahead: int = 1,
    ) -> None:
        self.kit = kit
        partitions = range(kit.cfg.partitions)
        self.source: dict[int, list[Record]] = {p: [] for p in partitions}
        self.offsets: dict[int, list[int]] = {p: [] for p in partitions}
        self.output: dict[int, list[bytes]] = {p: [] for p in partitions}
        self.log = ListLog(self.output)
        self.batch_size = batch_size
        self.ahead = ahead
        for p, recs in (source or {}).items():
            self.append(p, recs)
        self.workers = {p: self.worker(p) for p in partitions}

    def append(self, partition: int, records: Sequence[Record]) -> None:
        """The source partition grows (workers read it live)."""
        self.source[partition] += records
        self.offsets[partition] += [r.coords.offset for r in records]

    def worker(self, partition: int) -> Worker:
        source = MemorySource(self.source[partition], self.offsets[partition])
        return Worker(
            self.kit.store, source, partition, batch_size=self.batch_size, ahead=self.ahead
        )

    # ------------------------------------------------------------ steps

    def work(self, partition: int, n: int) -> Step:
        try:
            r = self.workers[partition].step(max_records=n)
        except OperationError as e:
            return ("error", type(e).__name__)
        return ("ok", r.records, r.accepted, r.rejected, r.envelopes, r.frontier)

    def relay(self, partition: int, n: int, dup: bool = False) -> Step:
        relay = Relay(self.kit.store, self.log, partition, batch_size=n)
        self.log.lose_reply = dup
        try:
            r = relay.step()
        except Transient:
            r = relay.step()  # the retry publishes the unacknowledged rows again
            return ("retried", r.published, r.acknowledged, r.pending_after)
        finally:
            self.log.lose_reply = False
        return ("relayed", r.published, r.acknowledged, r.pending_after)

    def view(self, partition: int, n: int) -> Step:
        recording = Recording(self.kit.view)
        try:
            r = View(recording, self.log, partition, batch_size=n).step()
        except ViewStopped:
            return ("stopped", recording.take())
        return ("viewed", r.frontier_before, r.frontier, r.applied, r.stored, recording.take())

    def claim(self, partition: int) -> Step:
        old = self.workers[partition]
        if old.token is None:
            old.claim()  # it owns the partition (a worker claims at its first step otherwise)
        new = self.workers[partition] = self.worker(partition)
        epoch = new.claim().epoch
        try:
            r = old.step(max_records=1)
        except FenceError:
            return ("claim", "fenced", epoch)
        assert r.records == 0, "a replaced owner committed a batch"
        return ("claim", "idle", epoch)

    def restart(self) -> Step:
        self.kit.reopen()
        self.workers = {p: self.worker(p) for p in self.workers}
        return ("restart",)

    def deliver(self, partition: int, i: int, forge: bool) -> Step:
        log = self.output[partition]
        if log:
            raw = log[i % len(log)]
            log.append(b.forged(raw) if forge else raw)
        return ("log", len(log))

    def step(self, s: Step) -> Step:
        op = s[0]
        if op == "work":
            return self.work(s[1], s[2])
        if op == "relay":
            return self.relay(s[1], s[2], s[3])
        if op == "view":
            return self.view(s[1], s[2])
        if op in ("redeliver", "forge"):
            return self.deliver(s[1], s[2], forge=op == "forge")
        if op == "claim":
            return self.claim(s[1])
        if op == "restart":
            return self.restart()
        raise ValueError(op)

    # ------------------------------------------------------------ draining

    def drain(self, partition: int) -> list[Step]:
        """Worker until it stops, the whole outbox, then the view to the end of the log."""
        seen: list[Step] = []
        while True:
            seen.append(self.work(partition, 7))
            if seen[-1][0] == "error" or seen[-1][1] == 0:
                break
        seen.append(self.relay(partition, 1 << 30))
        return seen + self.catch_up(partition)

    def catch_up(self, partition: int) -> list[Step]:
        seen: list[Step] = []
        while True:
            seen.append(self.view(partition, 5))
            if seen[-1][0] == "stopped" or seen[-1][3] == 0:
                return seen

    def run(self, steps: Sequence[Step]) -> list[Step]:
        trace = [self.step(s) for s in steps]
        for p in self.workers:
            trace += self.drain(p)
            self.output[p].extend(reversed(self.output[p]))
            trace += self.catch_up(p)
        return trace


__all__ = ["Recording", "Roles", "Step"]
