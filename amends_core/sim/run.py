"""Run a trace to its verdict, classify failures, shrink them, and soak many seeds.

A run executes the trace's explicit steps (safety is checked after every
step), then the deterministic recovery suffix ``Model.drain``, then the
complete-boundary check. The expected status comes from the oracle over the
whole declared source alone: BLOCKED when some key has unresolved authority,
PASS_WITH_EXCLUSIONS when it rejects records or sees conflicts, PASS
otherwise. A run fails when

  safety    a safety property broke during a step (``check`` names it);
  liveness  the recovery suffix could not finish the enabled work;
  status    the report's status differs from the expected one, a PASS or
            PASS_WITH_EXCLUSIONS report does not accept the oracle's own
            manifests, or a BLOCKED report still carries differences;
  error     anything else escaped (``check`` is the exception type).

A failure's signature ``(kind, check)`` is what shrinking preserves.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from amends_core.oracle import OracleResult
from amends_core.sim.generate import generate
from amends_core.sim.model import Actor, DrainStalled, Model, Outcome, sorted_source
from amends_core.sim.prefixes import Classified, classify_many
from amends_core.sim.safety import SafetyViolation
from amends_core.sim.shrink import shrink
from amends_core.sim.trace import Trace
from amends_core.verify import Report, VerifyStatus


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str
    check: str
    detail: str
    event: int | None = None

    @property
    def signature(self) -> tuple[str, str]:
        return (self.kind, self.check)

    def __str__(self) -> str:
        at = "" if self.event is None else f" at step #{self.event}"
        return f"{self.kind}/{self.check}{at}: {self.detail}"


@dataclass(frozen=True, slots=True)
class RunResult:
    trace: Trace
    model: Model
    report: Report | None
    expected: VerifyStatus | None
    failure: Failure | None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def status(self) -> str:
        """The report's status, or the failure kind when no report was reached."""
        if self.report is not None:
            return self.report.status.value
        assert self.failure is not None
        return self.failure.kind.upper()


def expected_status(model: Model) -> VerifyStatus:
    """What a correct pipeline must report for the model's declared source."""
    full = model.oracle_at([model.source_end(p) for p in range(model.cfg.partitions)])
    if full.blocked:
        return VerifyStatus.BLOCKED
    if full.rejections or full.conflicts:
        return VerifyStatus.PASS_WITH_EXCLUSIONS
    return VerifyStatus.PASS


def _judge(model: Model, report: Report) -> tuple[VerifyStatus, Failure | None]:
    expected = expected_status(model)
    if report.status is not expected:
        detail = f"expected {expected.value}, got {report.status.value}: {report.render(5)}"
        return expected, Failure("status", report.status.value, detail)
    if expected is VerifyStatus.BLOCKED:
        if report.differences:
            detail = f"BLOCKED report carries differences: {report.render(5)}"
            return expected, Failure("status", "BLOCKED-with-differences", detail)
        return expected, None
    full = model.oracle_at([model.source_end(p) for p in range(model.cfg.partitions)])
    if not report.accepts(full.rejections, full.conflicts):
        detail = f"report does not accept the oracle's manifests: {report.render(5)}"
        return expected, Failure("status", f"{report.status.value}-not-accepted", detail)
    return expected, None


def run_trace(
    trace: Trace,
    model_class: type[Model] = Model,
    *,
    empty: OracleResult | None = None,
    classified: Classified | None = None,
) -> RunResult:
    """Execute explicit steps, the recovery suffix and the boundary check.

    ``empty`` may carry the oracle's (configuration-only) result for the empty
    history, which every run needs once; soaks compute it a single time.
    ``classified`` may carry the trace's source classified in a batch
    (``classify_batch``).
    """
    model = model_class(trace.cfg, trace.records, ahead=trace.ahead)
    if empty is not None:
        model.preset_empty_oracle(empty)
    model.preset_classified(classified)
    report: Report | None = None
    expected: VerifyStatus | None = None
    failure: Failure | None = None
    try:
        for s in trace.steps:
            model.step(s)
        model.drain()
        report = model.check()
        expected, failure = _judge(model, report)
    except SafetyViolation as e:
        failure = Failure("safety", e.check, e.detail, e.event)
    except DrainStalled as e:
        failure = Failure("liveness", "drain", str(e))
    except Exception as e:  # any escape is a finding, classified by its type
        failure = Failure("error", type(e).__name__, str(e), len(model.events) - 1)
    return RunResult(trace, model, report, expected, failure)


def shrink_trace(
    trace: Trace, model_class: type[Model] = Model, max_attempts: int = 5000
) -> tuple[Trace, Failure]:
    """Reduce a failing trace while it keeps the same failure signature."""
    first = run_trace(trace, model_class).failure
    if first is None:
        msg = "the trace does not fail; there is nothing to shrink"
        raise ValueError(msg)
    sig = first.signature

    def fails(t: Trace) -> bool:
        f = run_trace(t, model_class).failure
        return f is not None and f.signature == sig

    small = shrink(trace, fails, max_attempts)
    final = run_trace(small, model_class).failure
    assert final is not None and final.signature == sig
    return small.with_parts(failure=sig), final


def soak(
    first_seed: int,
    runs: int,
    *,
    max_records: int = 8,
    max_steps: int = 80,
    model_class: type[Model] = Model,
    toolchain: str = "unknown",
    ahead: int = 1,
) -> Iterator[RunResult]:
    """Generate and run ``runs`` consecutive seeds starting at ``first_seed`` (worker steps
    running up to ``ahead`` batches)."""
    empty: OracleResult | None = None
    end = first_seed + runs
    for start in range(first_seed, end, SOAK_BATCH):
        traces = [
            generate(seed, max_records=max_records, max_steps=max_steps, toolchain=toolchain, ahead=ahead)
            for seed in range(start, min(start + SOAK_BATCH, end))
        ]
        for t, classified in zip(traces, classify_batch(traces), strict=True):
            if empty is None:
                empty = model_class(t.cfg, ()).oracle_at([0] * t.cfg.partitions)
            yield run_trace(t, model_class, empty=empty, classified=classified)


SOAK_BATCH = 64
"""Seeds generated ahead, so that their sources are classified for the oracle in one pass."""


def classify_batch(traces: list[Trace]) -> list[Classified | None]:
    """The oracle's classification of every trace's source, one pass per configuration.

    None for a trace whose source the batch cannot classify (its model then
    classifies or computes on its own, and raises where it would have).
    """
    out: list[Classified | None] = [None] * len(traces)
    by_cfg: dict[object, list[int]] = {}
    for i, t in enumerate(traces):
        by_cfg.setdefault(t.cfg, []).append(i)
    for group in by_cfg.values():
        cfg = traces[group[0]].cfg
        sources = []
        for i in group:
            try:
                sources.append(sorted_source(cfg, traces[i].records))
            except ValueError:
                sources.append({})  # the model refuses it before any oracle runs
        for i, c in zip(group, classify_many(cfg, sources), strict=True):
            out[i] = c
    return out


def faults_of(trace: Trace) -> int:
    """Explicit fault steps: non-commit outcomes, claims and redeliveries."""
    return sum(
        1
        for s in trace.steps
        if s.outcome is not Outcome.COMMIT or s.actor in (Actor.CLAIM, Actor.REDELIVER)
    )


@dataclass(slots=True)
class SoakSummary:
    """Counts of one soak (or one chunk of it); chunks combine with ``merge``."""

    runs: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[tuple[int, str]] = field(default_factory=list)
    """(seed, failure text) of every failing run."""
    faulted: int = 0
    """Runs whose schedule holds at least one explicit fault."""
    steps: int = 0
    """Steps executed, recovery suffix included."""

    def add(self, r: RunResult) -> None:
        self.runs += 1
        self.statuses[r.status] += 1
        self.steps += len(r.model.events)
        if faults_of(r.trace):
            self.faulted += 1
        if r.failure is not None:
            seed = -1 if r.trace.seed is None else r.trace.seed
            self.failures.append((seed, str(r.failure)))

    def merge(self, other: SoakSummary) -> None:
        self.runs += other.runs
        self.statuses.update(other.statuses)
        self.failures += other.failures
        self.faulted += other.faulted
        self.steps += other.steps


def soak_chunk(
    first_seed: int,
    runs: int,
    max_records: int = 8,
    max_steps: int = 80,
    model_class: type[Model] = Model,
    ahead: int = 1,
) -> SoakSummary:
    """Summary of ``runs`` seeds (a picklable unit of work for process pools)."""
    summary = SoakSummary()
    for r in soak(
        first_seed, runs, max_records=max_records, max_steps=max_steps, model_class=model_class,
        ahead=ahead,
    ):
        summary.add(r)
    return summary
