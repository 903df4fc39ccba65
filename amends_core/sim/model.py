"""The deterministic simulation: the production role logic, one step at a time, with faults.

A ``Model`` holds the declared source list, a ``MemoryStore``, a ``ViewState``,
one output log per partition, a logical clock, retained-start markers, retry
state and an event log, and per partition the *production* worker, relay and
view steps (``amends_core.roles``) wired to them through the memory adapters.
The simulator's faults are injected at the port boundary, by the adapters in
``amends_core.sim.faults``: a step's outcome decides whether the commit (or
publication) it makes lands and whether its reply arrives. ``step`` advances
exactly one explicitly chosen actor; nothing happens on its own and nothing
is random here (randomness lives in the generator, which only ever produces
explicit steps). The roles run with a batch size of 1, so schedules
interleave at the finest grain: a step reads one record, except a worker step
of a model built with ``ahead`` above 1 (the production worker's folding of a
batch while the one before commits, ``Worker(ahead=N)``), which runs up to
that many one-record batches back to back. Its armed outcome then falls on
one of those commits, the first at an even event index and the second at an
odd one (with ``ahead=2``), so schedules reach a lost or refused reply
both before and after a commit that landed within the same step.

Each step names an outcome. ``commit`` and ``unknown-committed`` install the
effect (or let the publication land); ``abort`` and ``unknown-aborted`` do not.
Only ``commit`` and ``abort`` are *known* to the actor: after an unknown
outcome the actor sees a lost reply, whatever really happened. An ``Event``
keeps both sides: ``installed`` (what happened) and ``observed`` (what the
actor saw), so tests can tell recovery behaviour from the harness's knowledge.

Recovery rules after a lost reply are the production ones:
  worker  settles the batch in the store (``resolve_unknown``), forgets its
          local frontier and rereads the installed one;
  view    settles the apply and goes on from its installed output frontier;
  claim   settles by its own nonce (``settle_claim``): it adopts the installed
          epoch only when its claim installed it, and claims again otherwise;
  relay   acknowledges only delivered rows; a retry republishes them.

Two actors extend the reference vocabulary: ``prepare`` runs the first half of
the production worker step (``Worker.prepare``: read a batch under the current
token) and *holds* it, so that a ``claim`` can land between reading and
committing (the stale-owner order where the old batch must fail its fence), and
``redeliver`` makes the output transport deliver an older record again (stale
delivery, which the view's retained versions must defeat).

Subclasses in ``amends_core.sim.variants`` override the hook methods
(``new_store``, ``new_view``, ``new_processing``, ``new_worker``, ``new_relay``,
``oracle``) to
build deliberately broken variants, each a subclass of the production store,
view or role logic; no core module is edited for that.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from amends_core import oracle as oracle_mod
from amends_core import verify
from amends_core.errors import BatchAborted, FenceError, OperationError
from amends_core.ledger import CloseOutOfRange, Config, Envelope, Record
from amends_core.ports import Token
from amends_core.roles.relay import Relay
from amends_core.roles.view import View, ViewStopped
from amends_core.roles.worker import Batch, ClaimUnsettled, StepResult, Worker
from amends_core.sim.faults import (
    Aborted,
    FaultyLog,
    FaultyProcessing,
    FaultyView,
    Injected,
    Outcome,
    SimSource,
)
from amends_core.sim.prefixes import Classified, classify_many
from amends_core.sim.retry import Gate, RetryBook
from amends_core.store.memory import MemoryStore
from amends_core.view import ViewState


class Actor(enum.StrEnum):
    WORKER = "worker"
    """Commit the held decision, or read progress, prepare the next record and commit."""
    PREPARE = "prepare"
    """Read progress and prepare the next record, holding the decision uncommitted."""
    RELAY = "relay"
    """Publish the earliest pending outbox row and acknowledge it."""
    VIEW = "view"
    """Apply the next output record to the view."""
    CLAIM = "claim"
    """Install a replacement ownership epoch."""
    TICK = "tick"
    """Advance the logical clock by one."""
    REDELIVER = "redeliver"
    """The output transport delivers an older output record again."""
    RESUME_WORKER = "resume-worker"
    RESUME_RELAY = "resume-relay"
    RESUME_VIEW = "resume-view"


RETRYING = (Actor.WORKER, Actor.RELAY, Actor.VIEW)
"""Actors with retry state (``prepare`` shares the worker's)."""
RESUMES = {
    Actor.RESUME_WORKER: Actor.WORKER,
    Actor.RESUME_RELAY: Actor.RELAY,
    Actor.RESUME_VIEW: Actor.VIEW,
}


@dataclass(frozen=True, slots=True)
class Step:
    """One explicit scheduling choice."""

    actor: Actor
    partition: int = 0
    outcome: Outcome = Outcome.COMMIT
    offset: int = 0
    """Only for ``redeliver``: which output-log offset is delivered again (modulo the log)."""

    def __str__(self) -> str:
        extra = f"@{self.offset}" if self.actor is Actor.REDELIVER else ""
        return f"{self.actor.value}[{self.partition}]{extra}:{self.outcome.value}"


class Observation(enum.StrEnum):
    """What the acting component saw."""

    DONE = "done"
    """A known successful reply after doing work."""
    IDLE = "idle"
    """Nothing to do (a successful reply)."""
    HELD = "held"
    """A decision was prepared and is held uncommitted."""
    ABORTED = "aborted"
    UNKNOWN = "unknown"
    """The reply was lost."""
    FENCED = "fenced"
    """The commit guard refused a replaced owner."""
    REFUSED = "refused"
    """Another operation error (wrong frontier, source mismatch, ...)."""
    STOPPED = "stopped"
    """The view partition is stopped by a protocol error."""
    ARITHMETIC = "arithmetic"
    """The fold refused the record: a daily close would leave signed 64-bit (by design
    the partition cannot pass it; it is neither applied nor quarantined)."""
    BACKOFF = "backoff"
    PARKED = "parked"
    RESUMED = "resumed"
    TICKED = "ticked"

    @property
    def successful(self) -> bool:
        return self in _SUCCESSFUL


_SUCCESSFUL = frozenset({Observation.DONE, Observation.IDLE, Observation.HELD})


@dataclass(frozen=True, slots=True)
class Event:
    index: int
    time: int
    step: Step
    installed: bool
    """Whether an effect was really installed or a publication really landed."""
    observed: Observation
    detail: str = ""

    def __str__(self) -> str:
        inst = "installed" if self.installed else "-"
        tail = f" ({self.detail})" if self.detail else ""
        return f"#{self.index} t={self.time} {self.step} -> {self.observed.value} {inst}{tail}"


class DrainStalled(Exception):
    """The recovery suffix did not finish the enabled work within its bound."""


class ReplayRefused(Exception):
    """An administrative replay request is outside what the model can check."""


def sorted_source(cfg: Config, records: Iterable[Record]) -> dict[int, list[Record]]:
    by_p: dict[int, list[Record]] = {p: [] for p in range(cfg.partitions)}
    for r in records:
        p = r.coords.partition
        if p not in by_p:
            msg = f"record names partition {p}, configuration has {cfg.partitions}"
            raise ValueError(msg)
        by_p[p].append(r)
    for p, recs in by_p.items():
        recs.sort(key=lambda r: r.coords.offset)
        for a, b in zip(recs, recs[1:], strict=False):
            if a.coords.offset == b.coords.offset:
                msg = f"partition {p} has offset {a.coords.offset} twice"
                raise ValueError(msg)
    return by_p


def _batch_where(batch: Batch) -> str:
    first = batch.records[0].coords.offset if batch.records else batch.frontier
    return f"offset {first} epoch {batch.token.epoch}"


def _step_where(batch: Batch, port: FaultyProcessing) -> str:
    """Where a worker step started, and how many batch commits it attempted when more than one."""
    where = _batch_where(batch)
    return f"{where}, {port.attempts} batches" if port.attempts > 1 else where


class _Armed:
    """Arms a port with a step's outcome for the duration of that step."""

    def __init__(self, port: Injected, outcome: Outcome, fault_at: int | None = None) -> None:
        self.port = port
        self.outcome = outcome
        self.fault_at = fault_at

    def __enter__(self) -> Injected:
        self.port.arm(self.outcome, self.fault_at)
        return self.port

    def __exit__(self, *exc: object) -> None:
        self.port.disarm()


class _Cursors:
    """The workers' local frontiers as a mapping (reading and setting them, for tests)."""

    def __init__(self, workers: dict[int, Worker]) -> None:
        self.workers = workers

    def __getitem__(self, partition: int) -> int | None:
        return self.workers[partition].cursor

    def __setitem__(self, partition: int, value: int | None) -> None:
        self.workers[partition].cursor = value


class Model:
    """Serial model of source, worker, store, relay, output log and view."""

    def __init__(
        self, cfg: Config, records: Iterable[Record] = (), *, safety: bool = True, ahead: int = 1
    ):
        if ahead < 1:
            msg = f"ahead must be at least 1, not {ahead}"
            raise ValueError(msg)
        self.cfg = cfg
        self.ahead = ahead
        """Batches a worker step may run (``Worker(ahead=...)``); 1: one per step."""
        self.source: dict[int, list[Record]] = sorted_source(cfg, records)
        self._offsets = {p: [r.coords.offset for r in rs] for p, rs in self.source.items()}
        self.store = self.new_store(cfg)
        self.view = self.new_view(cfg)
        self.output: dict[int, list[Envelope]] = {p: [] for p in range(cfg.partitions)}
        self.held: dict[int, Batch] = {}
        """Batches read by ``prepare`` and not yet committed, per partition."""
        self.time = 0
        self.retained: dict[int, int] = {p: 0 for p in range(cfg.partitions)}
        """First source offset still retained; positive means the required prefix is gone."""
        self.retry = RetryBook()
        self.events: list[Event] = []
        self.acks: dict[int, list[int]] = {p: [] for p in range(cfg.partitions)}
        """Outbox sequences in the order the relay acknowledged them."""
        self.installs: list[tuple[int, int, int]] = []
        """Installed worker commits: (partition, batch epoch, epoch installed at commit)."""
        self._oracle_cache: dict[tuple[int, ...], oracle_mod.OracleResult] = {}
        self._classified: Classified | None = None
        self._classify_tried: tuple[tuple[Record, ...], ...] | None = None
        """The source last handed to ``classify_many``."""
        self.processing = self.new_processing()
        self.log = FaultyLog(self.output)
        self.view_store = FaultyView(self.view)
        parts = range(cfg.partitions)
        self.workers = {p: self.new_worker(p) for p in parts}
        self.relays = {p: self.new_relay(p) for p in parts}
        self.views = {p: View(self.view_store, self.log, p, batch_size=1) for p in parts}
        for w in self.workers.values():
            w.claim()
        self.cursor = _Cursors(self.workers)
        """The workers' local frontiers (None: reread the installed one), by partition."""
        self.safety = None
        if safety:
            from amends_core.sim.safety import Safety

            self.safety = Safety(self)

    # ------------------------------------------------------------ hooks

    def new_store(self, cfg: Config) -> MemoryStore:
        return MemoryStore(cfg)

    def new_view(self, cfg: Config) -> ViewState:
        return ViewState(cfg)

    def new_processing(self) -> FaultyProcessing:
        """The processing store and outbox port over ``self.store``, with faults."""
        return FaultyProcessing(self.store, self.installs, self.acks)

    def new_worker(self, partition: int) -> Worker:
        """The production worker step over the fault-injecting adapters, one record per batch."""
        source = SimSource(self.source[partition], self._offsets[partition])
        return Worker(self.processing, source, partition, batch_size=1, ahead=self.ahead)

    def new_relay(self, partition: int) -> Relay:
        """The production relay step, one outbox row per publication."""
        return Relay(self.processing, self.log, partition, batch_size=1)

    def oracle(self, by_partition: Mapping[int, Sequence[Record]]) -> oracle_mod.OracleResult:
        """The independent full-history computation (raises CloseOutOfRange)."""
        return oracle_mod.compute(self.cfg, {p: list(r) for p, r in by_partition.items()})

    def oracle_at(self, frontiers: Sequence[int]) -> oracle_mod.OracleResult:
        """The oracle over the prefix below ``frontiers`` (cached: the source only grows).

        With the production ``oracle`` (variants may replace it), the source is
        classified once and each prefix only derives from its rows
        (``amends_core.sim.prefixes``: the same result as ``oracle``).
        """
        key = tuple(frontiers)
        hit = self._oracle_cache.get(key)
        if hit is None:
            counts = [bisect.bisect_left(self._offsets[p], f) for p, f in enumerate(key)]
            classified = self._classification() if any(counts) else None
            if classified is not None:
                hit = classified.derive_prefix(counts)
            else:
                hit = self.oracle(self.prefix(dict(enumerate(key))))
            self._oracle_cache[key] = hit
        return hit

    def _classification(self) -> Classified | None:
        if type(self).oracle is not Model.oracle:
            return None
        c = self._classified
        if c is not None and c.covers(self.cfg, self.source):
            return c
        parts = tuple(tuple(self.source[p]) for p in range(self.cfg.partitions))
        if parts == self._classify_tried:
            return None  # this very source was refused: every prefix computes on its own
        self._classify_tried = parts
        self._classified = classify_many(self.cfg, [self.source])[0]
        return self._classified

    def preset_empty_oracle(self, result: oracle_mod.OracleResult) -> None:
        """Reuse a result computed for the empty history under this configuration."""
        self._oracle_cache[(0,) * self.cfg.partitions] = result

    def preset_classified(self, classified: Classified | None) -> None:
        """Reuse a classification of the source made in a batch (ignored unless it covers it)."""
        if classified is not None and classified.covers(self.cfg, self.source):
            self._classified = classified
            self._classify_tried = classified.parts

    # ------------------------------------------------------------ source

    def append(self, records: Iterable[Record]) -> None:
        """Extend the declared source; offsets must lie beyond every existing one."""
        for r in sorted(records, key=lambda r: (r.coords.partition, r.coords.offset)):
            p = r.coords.partition
            offs = self._offsets[p]
            if offs and r.coords.offset <= offs[-1]:
                msg = f"offset {r.coords.offset} is not beyond the end of partition {p}"
                raise ValueError(msg)
            self.source[p].append(r)
            offs.append(r.coords.offset)

    def records(self) -> list[Record]:
        return [r for p in sorted(self.source) for r in self.source[p]]

    def source_end(self, partition: int) -> int:
        """H: last declared offset plus one (0 for an empty partition)."""
        offs = self._offsets[partition]
        return offs[-1] + 1 if offs else 0

    def prefix(self, frontiers: Mapping[int, int]) -> dict[int, list[Record]]:
        """Source records strictly below each partition's frontier."""
        out = {}
        for p, recs in self.source.items():
            n = bisect.bisect_left(self._offsets[p], frontiers.get(p, 0))
            out[p] = recs[:n]
        return out

    def next_record(self, partition: int, frontier: int) -> Record | None:
        offs = self._offsets[partition]
        i = bisect.bisect_left(offs, frontier)
        return self.source[partition][i] if i < len(offs) else None

    # ------------------------------------------------------------ stepping

    def step(self, step: Step) -> Event:
        """Advance one actor; then run the safety checks (raising SafetyViolation)."""
        if not 0 <= step.partition < self.cfg.partitions:
            msg = f"step names partition {step.partition}"
            raise ValueError(msg)
        actor = step.actor
        if actor is Actor.TICK:
            self.time += 1
            result: tuple[Observation, bool, str] = (Observation.TICKED, False, "")
        elif actor in RESUMES:
            done = self.retry.resume(RESUMES[actor].value, step.partition)
            result = (Observation.RESUMED if done else Observation.IDLE, False, "")
        elif actor is Actor.CLAIM:
            result = self._claim(step)
        elif actor is Actor.REDELIVER:
            result = self._redeliver(step)
        else:
            owner = Actor.WORKER if actor is Actor.PREPARE else actor
            gate = self.retry.gate(owner.value, step.partition, self.time)
            if gate is not None:
                obs = Observation.BACKOFF if gate is Gate.BACKOFF else Observation.PARKED
                result = (obs, False, "")
            else:
                if actor is Actor.WORKER:
                    result = self._worker(step)
                elif actor is Actor.PREPARE:
                    result = self._prepare(step.partition)
                elif actor is Actor.RELAY:
                    result = self._relay(step)
                else:
                    result = self._view(step)
                if actor is not Actor.PREPARE or not result[0].successful:
                    if result[0].successful:
                        self.retry.succeed(owner.value, step.partition)
                    else:
                        self.retry.fail(owner.value, step.partition, self.time)
        observed, installed, detail = result
        ev = Event(len(self.events), self.time, step, installed, observed, detail)
        self.events.append(ev)
        if self.safety is not None:
            self.safety.check(ev)
        return ev

    def run(self, steps: Iterable[Step]) -> None:
        for s in steps:
            self.step(s)

    # ------------------------------------------------------------ worker

    def token(self, partition: int) -> Token | None:
        """The token the worker holds (None after a claim it could not settle)."""
        return self.workers[partition].token

    def _armed(self, port: Injected, outcome: Outcome, fault_at: int | None = None) -> _Armed:
        return _Armed(port, outcome, fault_at)

    def _prepare(self, partition: int) -> tuple[Observation, bool, str]:
        if partition in self.held:
            return (Observation.IDLE, False, "a decision is already held")
        got = self._read(partition)
        if not isinstance(got, Batch):
            return got
        self.held[partition] = got
        return (Observation.HELD, False, _batch_where(got))

    def _read(self, partition: int) -> Batch | tuple[Observation, bool, str]:
        """The first half of the production step: claim if needed, read one record."""
        try:
            got = self.workers[partition].prepare()
        except OperationError as e:
            return (Observation.REFUSED, False, f"prepare: {type(e).__name__}: {e}")
        if isinstance(got, StepResult):
            return (Observation.IDLE, False, "")
        return got

    def _worker(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        batch = self.held.pop(p, None)
        held = batch is not None
        if batch is None:
            got = self._read(p)
            if not isinstance(got, Batch):
                return got
            batch = got
        port = self.processing
        # which of the step's batch commits has the armed fate (None: every one, as with one batch)
        fault_at = None if self.ahead == 1 else len(self.events) % self.ahead
        with self._armed(port, step.outcome, fault_at):
            try:
                self.workers[p].run(batch)
            except Aborted:  # a batch of the step before the aborted one may have committed
                return (Observation.ABORTED, port.installed, _step_where(batch, port))
            except BatchAborted as e:
                cause = e.__cause__
                if isinstance(cause, CloseOutOfRange):
                    return (Observation.ARITHMETIC, port.installed, f"offset {e.offset}: {cause}")
                return (Observation.REFUSED, port.installed, f"{_step_where(batch, port)}: {e}")
            except OperationError as e:
                # A fence refusal is the rule working only for a batch read before a
                # replacement claim landed; anything else means the worker used a
                # token or frontier that was not installed.
                obs = Observation.FENCED if held and isinstance(e, FenceError) else Observation.REFUSED
                return (obs, port.installed, f"{_step_where(batch, port)}: {e}")
        where = _step_where(batch, port)
        if port.lost:
            tail = f": {port.detail}" if port.detail else ""
            return (Observation.UNKNOWN, port.installed, where + tail)
        return (Observation.DONE, True, where)

    # ------------------------------------------------------------ claim

    def _claim(self, step: Step) -> tuple[Observation, bool, str]:
        """The production claim (a fresh nonce per attempt, settled by nonce) under the outcome."""
        port = self.processing
        with self._armed(port, step.outcome):
            try:
                tok = self.workers[step.partition].claim()
            except Aborted:
                return (Observation.ABORTED, False, "")
            except ClaimUnsettled as e:
                return (Observation.UNKNOWN, port.installed, str(e))
        if port.lost:
            return (Observation.UNKNOWN, port.installed, f"epoch {tok.epoch}")
        return (Observation.DONE, True, f"epoch {tok.epoch}")

    # ------------------------------------------------------------ relay

    def _relay(self, step: Step) -> tuple[Observation, bool, str]:
        port = self.log
        with self._armed(port, step.outcome):
            try:
                r = self.relays[step.partition].step()
            except Aborted:
                return (Observation.ABORTED, False, port.detail)
            except OperationError as e:
                if port.lost or step.outcome is Outcome.ABORT:
                    obs = Observation.UNKNOWN if port.lost else Observation.ABORTED
                    return (obs, port.installed, port.detail)
                return (Observation.REFUSED, port.installed, f"{port.detail}: {e}")
        if r.published == 0:
            return (Observation.IDLE, False, "")
        return (Observation.DONE, True, port.detail)

    # ------------------------------------------------------------ view

    def _view(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        if p in self.view.stopped:
            return (Observation.STOPPED, False, self.view.stopped[p])
        port = self.view_store
        with self._armed(port, step.outcome):
            try:
                r = self.views[p].step()
            except Aborted:
                return (Observation.ABORTED, False, port.detail)
            except ViewStopped:
                return (Observation.STOPPED, port.installed, f"{port.detail}: {self.view.stopped.get(p, '')}")
        if r.applied == 0:
            return (Observation.IDLE, False, "")
        if port.lost:
            return (Observation.UNKNOWN, port.installed, port.detail)
        return (Observation.DONE, True, port.detail)

    # ------------------------------------------------------------ transport fault

    def _redeliver(self, step: Step) -> tuple[Observation, bool, str]:
        log = self.output[step.partition]
        if not log:
            return (Observation.IDLE, False, "")
        i = step.offset % len(log)
        log.append(log[i])
        return (Observation.DONE, True, f"offset {i} again at {len(log) - 1}")

    # ------------------------------------------------------------ recovery suffix

    def enabled(self) -> list[tuple[Actor, int]]:
        """Work that a fault-free schedule could still do."""
        out: list[tuple[Actor, int]] = []
        for p in range(self.cfg.partitions):
            if p in self.held or self.next_record(p, self.store.frontier(p)) is not None:
                out.append((Actor.WORKER, p))
            if self.store.pending(p) is not None:
                out.append((Actor.RELAY, p))
            if p not in self.view.stopped and self.view.frontier(p) < len(self.output[p]):
                out.append((Actor.VIEW, p))
        return out

    def drain(self, limit: int | None = None) -> int:
        """Finish all enabled work with successful steps; returns the steps taken.

        Parked actors are resumed, outstanding backoff is waited out with ticks,
        and then the actor is stepped with a ``commit`` outcome. A correct model
        needs a handful of steps per record, outbox row and output record; the
        default bound allows far more and raises DrainStalled (a liveness
        failure) when it is reached.
        """
        if limit is None:
            work = len(self.records()) + sum(len(v) for v in self.store.outbox.values())
            work += sum(len(v) for v in self.output.values())
            limit = 500 + 40 * work
        start = len(self.events)
        resume = {v: k for k, v in RESUMES.items()}
        while work_items := self.enabled():
            for actor, p in work_items:
                if len(self.events) - start > limit:
                    msg = f"drain made no end after {limit} steps; still enabled: {work_items}"
                    raise DrainStalled(msg)
                st = self.retry.state(actor.value, p)
                if st.parked:
                    self.step(Step(resume[actor], p))
                while self.time < st.next_at:
                    self.step(Step(Actor.TICK))
                self.step(Step(actor, p))
        return len(self.events) - start

    # ------------------------------------------------------------ verification

    def boundary(self) -> verify.Boundary:
        """Whether the declared source is fully processed, published and applied.

        Per partition: the required source prefix (from offset 0) is still
        retained, the worker frontier equals the source end H, no outbox row is
        pending and the view frontier equals the output end O. The model states
        its retention with ``retained``; it cannot ask a broker.
        """
        reasons: list[str] = []
        for p in range(self.cfg.partitions):
            if self.retained[p] > 0:
                reasons.append(
                    f"partition {p}: source retained only from offset {self.retained[p]},"
                    " the required prefix starts at 0"
                )
            reasons += verify.partition_reasons(
                p,
                worker_frontier=self.store.frontier(p),
                source_end=self.source_end(p),
                pending=self.store.pending_count(p),
                view_frontier=self.view.frontier(p),
                output_end=len(self.output[p]),
            )
        return verify.Boundary(
            complete=not reasons,
            reasons=tuple(reasons),
            digests=(("store", self.store.cfg.digest()), ("view", self.view.cfg.digest())),
        )

    def check(self) -> verify.Report:
        """Compare the oracle over the whole declared source with the view."""
        ends = [self.source_end(p) for p in range(self.cfg.partitions)]
        return verify.verify(
            self.cfg,
            verify.run_oracle(lambda: self.oracle_at(ends)),
            self.view.rows,
            self.store.rejections,
            self.store.conflicts(),
            self.boundary(),
            stopped=self.view.stopped,
        )

    # ------------------------------------------------------------ administration

    def replay(self, partition: int, start: int, until: int) -> Token:
        """Check the consumed interval [start, until) against intact state.

        Retention, range and configuration are checked first, then every record
        is preflighted by the store before it claims an administrative epoch;
        nothing else changes. The worker is then replaced by a new one, which
        claims the next epoch (a replaced owner never adopts another's epoch).
        """
        if not 0 <= partition < self.cfg.partitions:
            msg = f"partition {partition} is not configured"
            raise ReplayRefused(msg)
        if self.store.cfg.digest() != self.cfg.digest():
            msg = "store configuration differs from the model's"
            raise ReplayRefused(msg)
        if start < self.retained[partition]:
            msg = (
                f"offsets from {start} are no longer retained on partition {partition}"
                f" (retained from {self.retained[partition]})"
            )
            raise ReplayRefused(msg)
        if not 0 <= start <= until <= self.store.frontier(partition):
            msg = (
                f"interval [{start}, {until}) is not inside the consumed prefix"
                f" [0, {self.store.frontier(partition)})"
            )
            raise ReplayRefused(msg)
        lo = bisect.bisect_left(self._offsets[partition], start)
        hi = bisect.bisect_left(self._offsets[partition], until)
        tok = self.store.replay(partition, self.source[partition][lo:hi])
        # The replay's epoch fences the running worker, as in production, where its
        # process stops; the worker that takes over claims an epoch of its own.
        self.workers[partition] = self.new_worker(partition)
        return tok


def rebuild(model: Model, namespace: str) -> Model:
    """Reconstruct the declared history in a fresh namespace and drain it.

    The original model is untouched; the new one has its own store, outbox,
    output logs and view, and every output ID carries the new namespace.
    """
    fresh = type(model)(model.cfg.with_namespace(namespace), model.records(), ahead=model.ahead)
    fresh.drain()
    return fresh


__all__ = [
    "RESUMES", "RETRYING", "Actor", "DrainStalled", "Event", "Model", "Observation", "Outcome",
    "ReplayRefused", "Step", "rebuild", "sorted_source",
]
