"""Verification: compare the oracle with the downstream view at a boundary.

The caller establishes the boundary (the memory model from its logs and
frontiers, the durable verifier from PostgreSQL and the broker) and hands over
what it saw: the view's retained rows and stopped partitions, the store's
quarantine and retained conflict evidence. ``verify`` decides one status with
this precedence, first match wins:

1. ``ERROR``                the oracle failed, a source partition is stopped by
                            an operation error, or a view partition stopped on
                            a protocol error;
2. ``INCOMPLETE``           the boundary is not complete or a component runs
                            under another configuration digest (known
                            diagnostics are kept, nothing is compared);
3. ``BLOCKED``              some key has unresolved highest-revision authority
                            (every difference found is still reported);
4. ``DRIFT``                any difference in business rows, trust status,
                            quarantine or conflict evidence;
5. ``PASS_WITH_EXCLUSIONS`` agreement, with rejected records, historical
                            conflicts or operator skips to acknowledge;
6. ``PASS``                 agreement and nothing excluded.

For a BLOCKED key only status and reasons are compared: the view holds values
frozen when the conflict appeared, which are never certified.

Operator skips: a record whose processing was an operation error and that an
operator moved past (``amends skip``) is an exclusion of its own kind. The
caller leaves it out of the oracle's input and hands the audit entries over;
they are listed in the report, make an otherwise agreeing report
PASS_WITH_EXCLUSIONS (never plain PASS) and must be expected explicitly.
"""

from __future__ import annotations

import base64
import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from amends_core.ledger import (
    Config,
    Conflict,
    Envelope,
    Family,
    OutputID,
    Payload,
    Projection,
    Rejection,
    RejectReason,
    Status,
    StockKey,
    compact_json,
    printable,
)
from amends_core.oracle import OracleResult
from amends_core.oracle import compute as oracle_compute
from amends_core.result import RejectionRef
from amends_core.view import Projected, project, reason_counts

if TYPE_CHECKING:
    from amends_core.pipeline import MemoryPipeline


class VerifyStatus(enum.StrEnum):
    PASS = "PASS"
    PASS_WITH_EXCLUSIONS = "PASS_WITH_EXCLUSIONS"
    BLOCKED = "BLOCKED"
    DRIFT = "DRIFT"
    INCOMPLETE = "INCOMPLETE"
    ERROR = "ERROR"


class DiffKind(enum.StrEnum):
    KEY_STATUS = "key-status"
    BALANCE = "balance"
    ALERT = "alert"
    REJECTION = "rejection"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class Boundary:
    """What the caller established about the compared source and output ends."""

    complete: bool
    reasons: tuple[str, ...] = ()
    """Why the boundary is incomplete (or notes about how it was established)."""
    digests: tuple[tuple[str, str], ...] = ()
    """(component, configuration digest) of every compared component, e.g. store and view."""


@dataclass(frozen=True, slots=True, order=True)
class SkipRef:
    """The coordinates of an operator skip, as an expectations file names it."""

    partition: int
    offset: int

    def to_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "offset": self.offset}


@dataclass(frozen=True, slots=True)
class OperatorSkip:
    """One source record an operator moved past after its processing failed (the audit entry)."""

    partition: int
    offset: int
    reason: str
    operator: str
    skipped_at: str
    """When, as the store recorded it (ISO 8601 text; the core has no clock)."""
    error: str = ""
    """The operation error processing the record raised."""

    @property
    def ref(self) -> SkipRef:
        return SkipRef(self.partition, self.offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "reason": self.reason,
            "operator": self.operator,
            "skipped_at": self.skipped_at,
            "error": self.error,
        }


@dataclass(frozen=True, slots=True)
class OperationStop:
    """A source partition stopped by an operation error on one record (nothing past it ran)."""

    partition: int
    offset: int
    error: str
    remedy: str = ""
    """What an operator can do about it (supplied by the caller, e.g. a command line)."""

    def text(self) -> str:
        line = (
            f"source partition {self.partition} is stopped by an operation error at offset"
            f" {self.offset}: {self.error}"
        )
        return f"{line}; {self.remedy}" if self.remedy else line

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.partition,
            "offset": self.offset,
            "error": self.error,
            "remedy": self.remedy,
        }


@dataclass(frozen=True, slots=True)
class Difference:
    """One disagreement; ``expected`` is the oracle's side, ``actual`` the pipeline's."""

    kind: DiffKind
    subject: str
    """Encoded output ID for rows and status; JSON coordinates or conflict tuple otherwise."""
    expected: Any
    """JSON-ready value, or None when the oracle has nothing there."""
    actual: Any
    """JSON-ready value, or None when the pipeline has nothing there."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "subject": self.subject,
            "expected": self.expected,
            "actual": self.actual,
        }


@dataclass(frozen=True, slots=True)
class Counts:
    keys: int = 0
    blocked_keys: int = 0
    rows: int = 0
    """Balance and alert output IDs compared (union of both sides, unblocked keys)."""


@dataclass(frozen=True, slots=True)
class Report:
    """The outcome of one verification, with everything needed to act on it."""

    status: VerifyStatus
    namespace: str
    config_digest: str
    error: str | None = None
    """Oracle failure or view protocol error (status ERROR)."""
    boundary_reasons: tuple[str, ...] = ()
    blocked: tuple[Projection, ...] = ()
    """Oracle projections of BLOCKED keys (status and reasons)."""
    rejections: tuple[Rejection, ...] = ()
    """The oracle's rejections (the quarantine's when the oracle failed)."""
    conflicts: tuple[Conflict, ...] = ()
    """The oracle's conflicts (the retained evidence when the oracle failed)."""
    differences: tuple[Difference, ...] = ()
    counts: Counts = field(default_factory=Counts)
    skips: tuple[OperatorSkip, ...] = ()
    """Records operators moved past (left out of the oracle's input), in coordinate order."""
    stops: tuple[OperationStop, ...] = ()
    """Source partitions stopped by an operation error (status ERROR)."""
    source: str = ""
    """Where the oracle read the source history (a snapshot table's version, then the topic),
    so that the same report can be made again; empty when only the topic was read."""

    @property
    def rejection_refs(self) -> tuple[RejectionRef, ...]:
        return tuple(sorted(_ref(r) for r in self.rejections))

    @property
    def skip_refs(self) -> tuple[SkipRef, ...]:
        return tuple(sorted(s.ref for s in self.skips))

    def expectation_difference(
        self,
        expected_rejections: Iterable[RejectionRef | Rejection],
        expected_conflicts: Iterable[Conflict],
        expected_skips: Iterable[SkipRef | OperatorSkip] = (),
    ) -> ExpectationDifference:
        """How explicit manifests differ from the exclusions this report found."""
        return expectation_difference(
            expected_rejections, expected_conflicts, self.rejection_refs, self.conflicts,
            expected_skips=expected_skips, found_skips=self.skip_refs,
        )

    def accepts(
        self,
        expected_rejections: Iterable[RejectionRef | Rejection],
        expected_conflicts: Iterable[Conflict],
        expected_skips: Iterable[SkipRef | OperatorSkip] = (),
    ) -> bool:
        """Whether this report certifies the run against explicit manifests.

        PASS only when nothing is expected; PASS_WITH_EXCLUSIONS only when the
        rejection manifest (coordinates and reason), the conflict manifest and
        the operator-skip manifest (coordinates) equal the report's exactly (no
        difference); every other status never accepts.
        """
        if self.status not in (VerifyStatus.PASS, VerifyStatus.PASS_WITH_EXCLUSIONS):
            return False
        found_rejections = () if self.status is VerifyStatus.PASS else self.rejection_refs
        found_conflicts = () if self.status is VerifyStatus.PASS else self.conflicts
        found_skips = () if self.status is VerifyStatus.PASS else self.skip_refs
        return expectation_difference(
            expected_rejections, expected_conflicts, found_rejections, found_conflicts,
            expected_skips=expected_skips, found_skips=found_skips,
        ).empty

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form with every difference."""
        return {
            "status": self.status.value,
            "namespace": self.namespace,
            "config_digest": self.config_digest,
            "error": self.error,
            "boundary_reasons": list(self.boundary_reasons),
            "counts": {
                "keys": self.counts.keys,
                "blocked_keys": self.counts.blocked_keys,
                "rows": self.counts.rows,
                "rejections": len(self.rejections),
                "conflicts": len(self.conflicts),
                "differences": len(self.differences),
            },
            "blocked": [
                {**p.key.to_json(), "reasons": [r.to_json() for r in p.reasons]}
                for p in self.blocked
            ],
            "rejections": [_rejection_json(r) for r in self.rejections],
            "conflicts": [_conflict_json(c) for c in self.conflicts],
            "differences": [d.to_json() for d in self.differences],
            **({"skips": [s.to_json() for s in self.skips]} if self.skips else {}),
            **({"stops": [s.to_json() for s in self.stops]} if self.stops else {}),
            **({"source": self.source} if self.source else {}),
        }

    def render(self, max_rows: int = 20) -> str:
        """A bounded human-readable summary: at most ``max_rows`` lines per list."""
        lines = [
            f"verification {self.status.value}: namespace {self.namespace!r},"
            f" config {self.config_digest[:12]}"
        ]
        if self.error:
            lines.append(f"  error: {self.error}")
        if self.source:
            lines.append(f"  source: {self.source}")
        for reason in self.boundary_reasons[:max_rows]:
            lines.append(f"  boundary: {reason}")
        _more(lines, len(self.boundary_reasons), max_rows)
        lines.append(
            f"  compared {self.counts.keys} keys ({self.counts.blocked_keys} blocked),"
            f" {self.counts.rows} balance/alert rows; {len(self.rejections)} rejections,"
            f" {len(self.conflicts)} conflicts, {len(self.differences)} differences"
        )
        for p in self.blocked[:max_rows]:
            refs = ", ".join(f"{printable(r.txn_id)}@{r.revision}" for r in p.reasons)
            lines.append(f"  blocked {_key_text(p.key)}: {refs}")
        _more(lines, len(self.blocked), max_rows)
        for d in self.differences[:max_rows]:
            lines.append(
                f"  {d.kind.value} {printable(d.subject)}:"
                f" expected {_short(d.expected)}, actual {_short(d.actual)}"
            )
        _more(lines, len(self.differences), max_rows)
        by_reason: dict[RejectReason, list[RejectionRef]] = {}
        for ref in self.rejection_refs:
            by_reason.setdefault(ref.reason, []).append(ref)
        for reason in sorted(by_reason, key=list(RejectReason).index):
            group = by_reason[reason]
            at = ", ".join(f"{r.partition}/{r.offset}" for r in group[:max_rows])
            more = f", ... and {len(group) - max_rows} more" if len(group) > max_rows else ""
            lines.append(f"  rejected {reason.value}: {len(group)} at partition/offset {at}{more}")
        for c in self.conflicts[:max_rows]:
            lines.append(f"  conflict {_conflict_text(c)}")
        _more(lines, len(self.conflicts), max_rows)
        for st in self.stops[:max_rows]:
            lines.append(f"  stopped: {printable(st.text())}")
        _more(lines, len(self.stops), max_rows)
        for sk in self.skips[:max_rows]:
            lines.append(f"  skipped by an operator: {_skip_text(sk)}")
        _more(lines, len(self.skips), max_rows)
        return "\n".join(lines)


def _skip_text(s: OperatorSkip) -> str:
    return (
        f"partition/offset {s.partition}/{s.offset} by {printable(s.operator)} at"
        f" {printable(s.skipped_at)}: {printable(s.reason)} (error: {printable(s.error)})"
    )


@dataclass(frozen=True, slots=True)
class ExpectationDifference:
    """Explicit manifests against the exclusions a report found (multisets, sorted).

    ``missing_*`` are expected but not found; ``unexpected_*`` are found but not expected.
    """

    missing_rejections: tuple[RejectionRef, ...] = ()
    unexpected_rejections: tuple[RejectionRef, ...] = ()
    missing_conflicts: tuple[Conflict, ...] = ()
    unexpected_conflicts: tuple[Conflict, ...] = ()
    missing_skips: tuple[SkipRef, ...] = ()
    unexpected_skips: tuple[SkipRef, ...] = ()

    @property
    def empty(self) -> bool:
        return not (
            self.missing_rejections
            or self.unexpected_rejections
            or self.missing_conflicts
            or self.unexpected_conflicts
            or self.missing_skips
            or self.unexpected_skips
        )

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "matches": self.empty,
            "missing": {
                "rejections": [r.to_json() for r in self.missing_rejections],
                "conflicts": [_conflict_json(c) for c in self.missing_conflicts],
            },
            "unexpected": {
                "rejections": [r.to_json() for r in self.unexpected_rejections],
                "conflicts": [_conflict_json(c) for c in self.unexpected_conflicts],
            },
        }
        if self.missing_skips or self.unexpected_skips:  # the skip lists appear only when they differ
            doc["missing"]["skips"] = [s.to_json() for s in self.missing_skips]
            doc["unexpected"]["skips"] = [s.to_json() for s in self.unexpected_skips]
        return doc

    def render(self, max_rows: int = 20) -> str:
        """One line per entry (at most ``max_rows`` per list); a single line when they match."""
        if self.empty:
            return "  expectations: match"
        lines: list[str] = []
        groups: tuple[tuple[str, str, Sequence[RejectionRef | Conflict]], ...] = (
            ("missing", "expected, not found", self.missing_rejections),
            ("unexpected", "found, not expected", self.unexpected_rejections),
            ("missing", "expected, not found", self.missing_conflicts),
            ("unexpected", "found, not expected", self.unexpected_conflicts),
        )
        for word, why, entries in groups:
            for e in entries[:max_rows]:
                if isinstance(e, RejectionRef):
                    text = f"rejection {e.reason.value} at partition/offset {e.partition}/{e.offset}"
                else:
                    text = f"conflict {_conflict_text(e)}"
                lines.append(f"  {word} {text} ({why})")
            _more(lines, len(entries), max_rows)
        for word, why, skips in (
            ("missing", "expected, not found", self.missing_skips),
            ("unexpected", "found, not expected", self.unexpected_skips),
        ):
            for s in skips[:max_rows]:
                lines.append(f"  {word} operator skip at partition/offset {s.partition}/{s.offset} ({why})")
            _more(lines, len(skips), max_rows)
        return "\n".join(lines)


def expectation_difference(
    expected_rejections: Iterable[RejectionRef | Rejection],
    expected_conflicts: Iterable[Conflict],
    found_rejections: Iterable[RejectionRef | Rejection],
    found_conflicts: Iterable[Conflict],
    *,
    expected_skips: Iterable[SkipRef | OperatorSkip] = (),
    found_skips: Iterable[SkipRef | OperatorSkip] = (),
) -> ExpectationDifference:
    """Which expected entries are missing and which found entries are unexpected.

    Rejections compare by (partition, offset, reason), operator skips by
    (partition, offset); entries count with multiplicity, so an entry expected
    twice and found once is missing once.
    """
    want_r = Counter(_as_ref(r) for r in expected_rejections)
    have_r = Counter(_as_ref(r) for r in found_rejections)
    want_c, have_c = Counter(expected_conflicts), Counter(found_conflicts)
    want_s = Counter(_as_skip_ref(s) for s in expected_skips)
    have_s = Counter(_as_skip_ref(s) for s in found_skips)
    return ExpectationDifference(
        tuple(sorted((want_r - have_r).elements())),
        tuple(sorted((have_r - want_r).elements())),
        tuple(sorted((want_c - have_c).elements())),
        tuple(sorted((have_c - want_c).elements())),
        tuple(sorted((want_s - have_s).elements())),
        tuple(sorted((have_s - want_s).elements())),
    )


def _as_skip_ref(s: SkipRef | OperatorSkip) -> SkipRef:
    return s if isinstance(s, SkipRef) else s.ref


def _key_text(key: StockKey) -> str:
    return f"{printable(key.item)}/{printable(key.location)}"


def _conflict_text(c: Conflict) -> str:
    return f"{_key_text(c.key)} txn_id {printable(c.txn_id)} revision {c.revision}"


def _more(lines: list[str], total: int, shown: int) -> None:
    if total > shown:
        lines.append(f"  ... and {total - shown} more")


def _short(value: Any, limit: int = 160) -> str:
    if value is None:
        return "(nothing)"
    text = compact_json(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- JSON helpers


def _ref(r: Rejection) -> RejectionRef:
    return RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)


def _as_ref(r: RejectionRef | Rejection) -> RejectionRef:
    return r if isinstance(r, RejectionRef) else _ref(r)


def _bytes_json(raw: bytes | None, name: str) -> dict[str, Any]:
    if raw is None:
        return {name: None}
    try:
        return {name: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(raw).decode("ascii")}


def _rejection_json(r: Rejection) -> dict[str, Any]:
    return {
        **r.record.coords.to_json(),
        "reason": r.reason.value,
        **_bytes_json(r.record.key, "key"),
        **_bytes_json(r.record.value, "value"),
    }


def _conflict_json(c: Conflict) -> dict[str, Any]:
    return {
        "item": c.key.item,
        "location": c.key.location,
        "txn_id": c.txn_id,
        "revision": c.revision,
    }


# ---------------------------------------------------------------- comparison


def _status_json(p: Projection, count: int) -> dict[str, Any]:
    out: dict[str, Any] = {"status": p.status.value, "reasons": [r.to_json() for r in p.reasons]}
    if count != len(p.reasons):  # more references exist than the status carries
        out["reason_count"] = count
    return out


def _business_rows(p: Projection) -> dict[tuple[Family, int], Payload]:
    rows: dict[tuple[Family, int], Payload] = {
        (Family.BALANCE, b.day): Payload(True, close=b.close) for b in p.balances
    }
    for a in p.alerts:
        rows[(Family.ALERT, a.day)] = Payload(True, close=a.close, threshold=a.threshold)
    return rows


def _compare_keys(
    cfg: Config,
    expected: Sequence[Projection],
    actual: Mapping[StockKey, Projection],
    counts: tuple[Mapping[StockKey, int], Mapping[StockKey, int]] = ({}, {}),
) -> tuple[list[Difference], int]:
    """Status, the first reasons and the total reason count (``counts``: oracle's, view's)."""
    diffs: list[Difference] = []
    rows = 0
    for exp in expected:
        act = actual.get(exp.key, Projection.untouched(exp.key))
        n_exp = counts[0].get(exp.key, len(exp.reasons))
        n_act = counts[1].get(exp.key, len(act.reasons))
        if (exp.status, exp.reasons, n_exp) != (act.status, act.reasons, n_act):
            oid = OutputID(cfg.namespace, Family.STATUS, exp.key, None)
            diffs.append(
                Difference(
                    DiffKind.KEY_STATUS, oid.encoded, _status_json(exp, n_exp), _status_json(act, n_act)
                )
            )
        if exp.status is Status.BLOCKED:
            continue  # frozen view values are not comparable
        if exp.balances == act.balances and exp.alerts == act.alerts:
            # Equal rows (each day once per family) compare equal one by one: nothing to list.
            rows += len(exp.balances) + len(exp.alerts)
            continue
        want, have = _business_rows(exp), _business_rows(act)
        ids = sorted(want.keys() | have.keys(), key=lambda fd: (fd[0].value, fd[1]))
        rows += len(ids)
        for family, day in ids:
            w, h = want.get((family, day)), have.get((family, day))
            if w != h:
                oid = OutputID(cfg.namespace, family, exp.key, day)
                diffs.append(
                    Difference(
                        DiffKind(family.value),
                        oid.encoded,
                        None if w is None else w.to_json(),
                        None if h is None else h.to_json(),
                    )
                )
    return diffs, rows


def _compare_rejections(
    expected: Sequence[Rejection], actual: Sequence[Rejection]
) -> list[Difference]:
    """Exact raw record (value, key, coordinates) and reason, per coordinate."""
    if len(expected) == len(actual) and all(
        e.record.coords == a.record.coords and _identity(e) == _identity(a)
        for e, a in zip(expected, actual, strict=True)
    ):
        return []  # the same rejections in the same order (both by coordinates, as a rule)
    by_coords: dict[Any, tuple[list[Rejection], list[Rejection]]] = {}
    for r in expected:
        by_coords.setdefault(r.record.coords, ([], []))[0].append(r)
    for r in actual:
        by_coords.setdefault(r.record.coords, ([], []))[1].append(r)
    diffs: list[Difference] = []
    for coords in sorted(by_coords):
        exp, act = by_coords[coords]
        if sorted(_identity(r) for r in exp) == sorted(_identity(r) for r in act):
            continue
        diffs.append(
            Difference(
                DiffKind.REJECTION,
                compact_json(coords.to_json()),
                _one_or_many(exp),
                _one_or_many(act),
            )
        )
    return diffs


def _identity(r: Rejection) -> tuple[bytes, bytes, bool, str]:
    key = r.record.key
    return (r.record.value, key or b"", key is None, r.reason.value)


def _one_or_many(rs: list[Rejection]) -> Any:
    if not rs:
        return None
    if len(rs) == 1:
        return _rejection_json(rs[0])
    return [_rejection_json(r) for r in rs]


def _compare_conflicts(
    expected: Sequence[Conflict], actual: Sequence[Conflict]
) -> list[Difference]:
    exp, act = set(expected), set(actual)
    return [
        Difference(
            DiffKind.CONFLICT,
            compact_json([c.key.item, c.key.location, c.txn_id, c.revision]),
            _conflict_json(c) if c in exp else None,
            _conflict_json(c) if c in act else None,
        )
        for c in sorted(exp ^ act)
    ]


def verify(
    cfg: Config,
    oracle: OracleResult | BaseException,
    view_rows: Mapping[OutputID, Envelope] | Iterable[Envelope] | Projected,
    quarantine: Sequence[Rejection],
    conflicts: Sequence[Conflict],
    boundary: Boundary,
    *,
    stopped: Mapping[int, str] | None = None,
    skips: Sequence[OperatorSkip] = (),
    stops: Sequence[OperationStop] = (),
) -> Report:
    """Compare oracle and pipeline at a boundary and decide the status (see module doc).

    ``view_rows`` are the view's retained envelopes (withdrawals included), or the view
    already projected per key (``Projected``, read by a store as columns);
    ``stopped`` maps view partitions to their protocol diagnostics;
    ``quarantine`` and ``conflicts`` are the store's retained evidence;
    ``skips`` are the operator skips (already left out of the oracle's input);
    ``stops`` are source partitions stopped by an operation error (ERROR).
    """
    digest = cfg.digest()
    skipped = tuple(sorted(skips, key=lambda s: (s.partition, s.offset)))
    if stops:
        halted = tuple(sorted(stops, key=lambda s: (s.partition, s.offset)))
        text = "; ".join(s.text() for s in halted)
        if isinstance(oracle, BaseException):
            text += f"; oracle failed: {type(oracle).__name__}: {str(oracle) or type(oracle).__name__}"
        return Report(
            VerifyStatus.ERROR,
            cfg.namespace,
            digest,
            error=text,
            rejections=tuple(sorted(quarantine, key=lambda r: r.record.coords)),
            conflicts=tuple(sorted(set(conflicts))),
            skips=skipped,
            stops=halted,
        )
    if isinstance(oracle, BaseException):
        text = str(oracle) or type(oracle).__name__
        return Report(
            VerifyStatus.ERROR,
            cfg.namespace,
            digest,
            error=f"oracle failed: {type(oracle).__name__}: {text}",
            rejections=tuple(sorted(quarantine, key=lambda r: r.record.coords)),
            conflicts=tuple(sorted(set(conflicts))),
            skips=skipped,
        )
    result = oracle.result
    blocked = tuple(p for p in result.keys if p.status is Status.BLOCKED)

    def report(status: VerifyStatus, **extra: Any) -> Report:
        return Report(
            status,
            cfg.namespace,
            digest,
            blocked=blocked,
            rejections=oracle.rejections,
            conflicts=result.conflicts,
            skips=skipped,
            **extra,
        )

    if stopped:
        detail = "; ".join(f"partition {p}: {d}" for p, d in sorted(stopped.items()))
        return report(VerifyStatus.ERROR, error=f"view protocol error: {detail}")
    reasons = list(boundary.reasons)
    for component, other in boundary.digests:
        if other != digest:
            reasons.append(f"{component} runs configuration {other[:12]}, expected {digest[:12]}")
    if not boundary.complete and not reasons:
        reasons.append("the boundary is not complete")
    if not boundary.complete or len(reasons) > len(boundary.reasons):
        return report(VerifyStatus.INCOMPLETE, boundary_reasons=tuple(reasons))

    if isinstance(view_rows, Projected):
        projected, view_counts = view_rows.projections, view_rows.reason_counts
    else:
        rows = tuple(view_rows.values() if isinstance(view_rows, Mapping) else view_rows)
        projected, view_counts = project(cfg, rows), reason_counts(rows)
    diffs, row_count = _compare_keys(cfg, result.keys, projected, (oracle.reason_counts, view_counts))
    diffs += _compare_rejections(oracle.rejections, quarantine)
    diffs += _compare_conflicts(result.conflicts, conflicts)
    if blocked:
        status = VerifyStatus.BLOCKED
    elif diffs:
        status = VerifyStatus.DRIFT
    elif oracle.rejections or result.conflicts or skipped:
        status = VerifyStatus.PASS_WITH_EXCLUSIONS
    else:
        status = VerifyStatus.PASS
    return report(
        status,
        boundary_reasons=tuple(reasons),
        differences=tuple(diffs),
        counts=Counts(len(result.keys), len(blocked), row_count),
    )


# ---------------------------------------------------------------- the boundary rule


def partition_reasons(
    partition: int,
    *,
    worker_frontier: int,
    source_end: int,
    pending: int,
    view_frontier: int,
    output_end: int,
) -> list[str]:
    """Why one partition is not at a complete boundary (nothing: it is).

    The rule every verifier applies: the worker frontier equals the source end
    H, no outbox row is pending and the view frontier equals the output end O.
    Each verifier adds what only it can see (retention, a running relay).
    """
    p = partition
    reasons = []
    if worker_frontier != source_end:
        reasons.append(f"source partition {p}: worker frontier {worker_frontier}, source end {source_end}")
    if pending:
        reasons.append(
            f"partition {p}: {pending} outbox rows not yet published (not yet acknowledged by a relay)"
        )
    if view_frontier != output_end:
        reasons.append(f"output partition {p}: view frontier {view_frontier}, output end {output_end}")
    return reasons


def run_oracle(compute: Callable[[], OracleResult]) -> OracleResult | BaseException:
    """The oracle's result, or the exception it raised: an oracle failure is an ERROR report
    (``verify`` takes either), never an exception past verification."""
    try:
        return compute()
    except Exception as e:
        return e


# ---------------------------------------------------------------- memory model


def memory_boundary(pipe: MemoryPipeline) -> Boundary:
    """Boundary of a memory pipeline: every source record processed, published and applied.

    Per partition the source end H is the last offset plus one (zero when
    empty) and the output end O is the output log length; the worker frontier
    must equal H, the outbox must be drained and the view frontier must equal O.
    """
    reasons: list[str] = []
    for p in range(pipe.cfg.partitions):
        log = pipe.source.get(p, [])
        reasons += partition_reasons(
            p,
            worker_frontier=pipe.store.frontier(p),
            source_end=log[-1].coords.offset + 1 if log else 0,
            pending=pipe.store.pending_count(p),
            view_frontier=pipe.view.frontier(p),
            output_end=len(pipe.output.get(p, [])),
        )
    return Boundary(
        complete=not reasons,
        reasons=tuple(reasons),
        digests=(("store", pipe.store.cfg.digest()), ("view", pipe.view.cfg.digest())),
    )


def verify_memory(pipe: MemoryPipeline) -> Report:
    """Run the oracle over the pipeline's source and verify its view at its boundary."""
    return verify(
        pipe.cfg,
        run_oracle(lambda: oracle_compute(pipe.cfg, pipe.source)),
        pipe.view.rows,
        pipe.store.rejections,
        pipe.store.conflicts(),
        memory_boundary(pipe),
        stopped=pipe.view.stopped,
    )


__all__ = [
    "Boundary",
    "Counts",
    "DiffKind",
    "Difference",
    "ExpectationDifference",
    "OperationStop",
    "OperatorSkip",
    "Report",
    "SkipRef",
    "VerifyStatus",
    "expectation_difference",
    "memory_boundary",
    "partition_reasons",
    "run_oracle",
    "verify",
    "verify_memory",
]
