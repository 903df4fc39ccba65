"""The deterministic simulation model: every actor of the pipeline, one step at a time.

A ``Model`` holds the declared source list, a ``MemoryStore``, a ``ViewState``,
one output log per partition, the workers' ownership tokens and local
frontiers, a logical clock, retained-start markers, retry state and an event
log. ``step`` advances exactly one explicitly chosen actor; nothing happens on
its own and nothing is random here (randomness lives in the generator, which
only ever produces explicit steps).

Each step names an outcome. ``commit`` and ``unknown-committed`` install the
effect (or let the publication land); ``abort`` and ``unknown-aborted`` do not.
Only ``commit`` and ``abort`` are *known* to the actor: after an unknown
outcome the actor sees a lost reply, whatever really happened. An ``Event``
keeps both sides: ``installed`` (what happened) and ``observed`` (what the
actor saw), so tests can tell recovery behaviour from the harness's knowledge.

Recovery rules after a lost reply:
  worker  forgets its local frontier and rereads the installed one;
  view    always starts from its installed output frontier;
  claim   forgets the local token; the next worker attempt observes the
          installed one (this assumes the modelled assignment is still ours).

Two actors extend the reference vocabulary: ``prepare`` lets the worker
prepare and *hold* a decision, so that a ``claim`` can land between prepare and
commit (the stale-owner order where the old decision must fail its guard), and
``redeliver`` makes the output transport deliver an older record again (stale
delivery, which the view's retained versions must defeat).

Subclasses in ``amends_core.sim.variants`` override the hook methods
(``new_store``, ``new_view``, ``oracle``, ``relay_publish`` ...) to build
deliberately broken variants; the core modules are never edited for that.
"""

from __future__ import annotations

import bisect
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from amends_core import oracle as oracle_mod
from amends_core import verify
from amends_core.errors import FenceError, OperationError
from amends_core.ledger import CloseOutOfRange, Config, Envelope, Record
from amends_core.ports import Token
from amends_core.sim.retry import Gate, RetryBook
from amends_core.store.memory import Decision, MemoryStore
from amends_core.view import Effect, ViewState


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


class Outcome(enum.StrEnum):
    COMMIT = "commit"
    ABORT = "abort"
    UNKNOWN_COMMITTED = "unknown-committed"
    UNKNOWN_ABORTED = "unknown-aborted"

    @property
    def installed(self) -> bool:
        """Whether the effect really happens."""
        return self in (Outcome.COMMIT, Outcome.UNKNOWN_COMMITTED)

    @property
    def known(self) -> bool:
        """Whether the actor receives the reply."""
        return self in (Outcome.COMMIT, Outcome.ABORT)


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


def _sorted_source(cfg: Config, records: Iterable[Record]) -> dict[int, list[Record]]:
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


class Model:
    """Serial model of source, worker, store, relay, output log and view."""

    def __init__(self, cfg: Config, records: Iterable[Record] = (), *, safety: bool = True):
        self.cfg = cfg
        self.source: dict[int, list[Record]] = _sorted_source(cfg, records)
        self._offsets = {p: [r.coords.offset for r in rs] for p, rs in self.source.items()}
        self.store = self.new_store(cfg)
        self.view = self.new_view(cfg)
        self.output: dict[int, list[Envelope]] = {p: [] for p in range(cfg.partitions)}
        self.tokens: dict[int, Token | None] = {
            p: self.store.claim(p) for p in range(cfg.partitions)
        }
        self.cursor: dict[int, int | None] = {p: None for p in range(cfg.partitions)}
        """The worker's local idea of its frontier; None means reread the installed one."""
        self.held: dict[int, Decision] = {}
        self.time = 0
        self.retained: dict[int, int] = {p: 0 for p in range(cfg.partitions)}
        """First source offset still retained; positive means the required prefix is gone."""
        self.retry = RetryBook()
        self.events: list[Event] = []
        self.acks: dict[int, list[int]] = {p: [] for p in range(cfg.partitions)}
        """Outbox sequences in the order the relay acknowledged them."""
        self.installs: list[tuple[int, int, int]] = []
        """Installed worker commits: (partition, decision epoch, epoch installed at commit)."""
        self._oracle_cache: dict[tuple[int, ...], oracle_mod.OracleResult] = {}
        self.safety = None
        if safety:
            from amends_core.sim.safety import Safety

            self.safety = Safety(self)

    # ------------------------------------------------------------ hooks

    def new_store(self, cfg: Config) -> MemoryStore:
        return MemoryStore(cfg)

    def new_view(self, cfg: Config) -> ViewState:
        return ViewState(cfg)

    def oracle(self, by_partition: Mapping[int, Sequence[Record]]) -> oracle_mod.OracleResult:
        """The independent full-history computation (raises CloseOutOfRange)."""
        return oracle_mod.compute(self.cfg, {p: list(r) for p, r in by_partition.items()})

    def oracle_at(self, frontiers: Sequence[int]) -> oracle_mod.OracleResult:
        """The oracle over the prefix below ``frontiers`` (cached: the source only grows)."""
        key = tuple(frontiers)
        hit = self._oracle_cache.get(key)
        if hit is None:
            hit = self.oracle(self.prefix(dict(enumerate(key))))
            self._oracle_cache[key] = hit
        return hit

    def preset_empty_oracle(self, result: oracle_mod.OracleResult) -> None:
        """Reuse a result computed for the empty history under this configuration."""
        self._oracle_cache[(0,) * self.cfg.partitions] = result

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

    def processed_prefix(self) -> dict[int, list[Record]]:
        return self.prefix({p: self.store.frontier(p) for p in self.source})

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

    def token(self, partition: int) -> Token:
        """The worker's token; after a lost claim reply it observes the installed one."""
        tok = self.tokens[partition]
        if tok is None:
            tok = self.store.observe(partition)
            self.tokens[partition] = tok
        return tok

    def local_frontier(self, partition: int) -> int:
        cur = self.cursor[partition]
        if cur is None:
            cur = self.store.frontier(partition)
            self.cursor[partition] = cur
        return cur

    def _prepare_next(self, partition: int) -> Decision | tuple[Observation, bool, str]:
        tok = self.token(partition)
        frontier = self.local_frontier(partition)
        rec = self.next_record(partition, frontier)
        if rec is None:
            return (Observation.IDLE, False, "")
        try:
            return self.store.prepare(tok, frontier, rec)
        except CloseOutOfRange as e:
            return (Observation.ARITHMETIC, False, f"offset {rec.coords.offset}: {e}")
        except OperationError as e:
            self.cursor[partition] = None
            return (Observation.REFUSED, False, f"prepare: {type(e).__name__}: {e}")

    def _prepare(self, partition: int) -> tuple[Observation, bool, str]:
        if partition in self.held:
            return (Observation.IDLE, False, "a decision is already held")
        d = self._prepare_next(partition)
        if not isinstance(d, Decision):
            return d
        self.held[partition] = d
        c = d.record.coords
        return (Observation.HELD, False, f"offset {c.offset} epoch {d.token.epoch}")

    def _worker(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        d = self.held.pop(p, None)
        if d is None:
            prepared = self._prepare_next(p)
            if not isinstance(prepared, Decision):
                return prepared
            d = prepared
        return self.worker_commit(d, step.outcome)

    def worker_commit(self, d: Decision, outcome: Outcome) -> tuple[Observation, bool, str]:
        p = d.token.partition
        off = d.record.coords.offset
        where = f"offset {off} epoch {d.token.epoch}"
        if outcome.installed:
            epoch = self.store.observe(p).epoch
            try:
                self.store.commit(d)
                self.installs.append((p, d.token.epoch, epoch))
            except OperationError as e:
                self.cursor[p] = None
                if not outcome.known:
                    return (Observation.UNKNOWN, False, f"{where}: {e}")
                obs = Observation.FENCED if isinstance(e, FenceError) else Observation.REFUSED
                return (obs, False, f"{where}: {e}")
        if outcome is Outcome.COMMIT:
            self.cursor[p] = off + 1
            return (Observation.DONE, True, where)
        if outcome is Outcome.ABORT:
            return (Observation.ABORTED, False, where)
        self.after_lost_worker_reply(p, d)
        return (Observation.UNKNOWN, outcome.installed, where)

    def after_lost_worker_reply(self, partition: int, d: Decision) -> None:
        """Recovery rule: forget the local frontier so the next attempt rereads it."""
        self.cursor[partition] = None

    # ------------------------------------------------------------ claim

    def _claim(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        tok = self.store.claim(p) if step.outcome.installed else None
        if step.outcome is Outcome.COMMIT:
            assert tok is not None
            self.tokens[p] = tok
            self.cursor[p] = None  # a new owner reads the installed frontier
            return (Observation.DONE, True, f"epoch {tok.epoch}")
        if step.outcome is Outcome.ABORT:
            return (Observation.ABORTED, False, "")
        self.after_lost_claim_reply(p)
        return (Observation.UNKNOWN, tok is not None, "")

    def after_lost_claim_reply(self, partition: int) -> None:
        """Recovery rule: forget the token (and frontier); the worker observes later."""
        self.tokens[partition] = None
        self.cursor[partition] = None

    # ------------------------------------------------------------ relay

    def _relay(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        row = self.store.pending(p)
        if row is None:
            return (Observation.IDLE, False, "")
        return self.relay_publish(p, row.sequence, row.envelope, step.outcome)

    def relay_publish(
        self, partition: int, sequence: int, env: Envelope, outcome: Outcome
    ) -> tuple[Observation, bool, str]:
        where = f"sequence {sequence}"
        if outcome.installed:
            self.output[partition].append(env)
        if outcome is Outcome.COMMIT:
            self.acknowledge(partition, sequence)
            return (Observation.DONE, True, where)
        if outcome is Outcome.ABORT:
            return (Observation.ABORTED, False, where)
        return (Observation.UNKNOWN, outcome.installed, where)

    def acknowledge(self, partition: int, sequence: int) -> None:
        self.store.acknowledge(partition, sequence)
        self.acks[partition].append(sequence)

    # ------------------------------------------------------------ view

    def _view(self, step: Step) -> tuple[Observation, bool, str]:
        p = step.partition
        if p in self.view.stopped:
            return (Observation.STOPPED, False, self.view.stopped[p])
        off = self.view.frontier(p)
        log = self.output[p]
        if off >= len(log):
            return (Observation.IDLE, False, "")
        d = self.view.decide(p, off, log[off])
        where = f"offset {off} {d.effect.value}"
        if step.outcome.installed:
            self.view.install(d)
        if d.effect is Effect.PROTOCOL_ERROR:
            return (Observation.STOPPED, step.outcome.installed, f"{where}: {d.diagnostic}")
        if step.outcome is Outcome.COMMIT:
            return (Observation.DONE, True, where)
        if step.outcome is Outcome.ABORT:
            return (Observation.ABORTED, False, where)
        return (Observation.UNKNOWN, step.outcome.installed, where)

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
        nothing else changes. The worker afterwards observes the new epoch.
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
        self.tokens[partition] = None
        self.cursor[partition] = None
        return tok

    def installed_frontiers(self) -> dict[int, int]:
        return {p: self.store.frontier(p) for p in range(self.cfg.partitions)}


def rebuild(model: Model, namespace: str) -> Model:
    """Reconstruct the declared history in a fresh namespace and drain it.

    The original model is untouched; the new one has its own store, outbox,
    output logs and view, and every output ID carries the new namespace.
    """
    fresh = type(model)(model.cfg.with_namespace(namespace), model.records())
    fresh.drain()
    return fresh
