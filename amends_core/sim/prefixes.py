"""The oracle over many prefixes of one source, each record decoded and classified once.

``oracle.compute`` is ``gather`` (coordinate checks, column layout), then
``classify`` (decode every value and transport key and name the first rule it
breaks) and ``derive`` (rejections, authority, conflicts, closes, crossings).
``classify`` looks at one record alone: every row of its frame is a function of
that record, its partition and the configuration, never of the other rows. So
the classified frame of a prefix is the matching rows of the frame of the whole
source, and ``derive`` over those rows is ``compute`` over the prefix; ``derive``
reads ``i`` only to name rejected records (and sorts by it), and the rows keep
their relative order. The simulator asks for the oracle at every processed
prefix of its source, and a soak asks for it in hundreds of sources: here each
source is gathered and classified once (``classify_many`` does a whole batch of
sources in one pass) and every prefix only pays for ``derive``.

``derive`` itself splits the same way: rejected rows (``reason`` set) give the
rejections, one per row, and nothing else; everything else (projections,
conflicts, reason counts, a close out of range) comes from the accepted rows
alone, through ``unique()`` over their canonical columns, i.e. from the *set*
of canonical assertions. A prefix whose set equals one already derived (its new
records were rejected, or canonical duplicates) takes that part from the
earlier result and its rejections from a ``derive`` over the rejected rows.

``gather``'s checks hold for every prefix when they hold for the whole source;
when they do not (or classification refuses the whole source for any other
reason) ``classify_many`` yields None and the caller computes each prefix on
its own, which raises exactly where it would have. Tests compare ``derive_prefix``
with ``compute`` over every prefix of generated and hostile sources.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import polars as pl

from amends_core.ledger import CloseOutOfRange, Config, Record, Rejection
from amends_core.oracle.compute import (
    _CANONICAL,
    OracleResult,
    classify_rows,
    derive,
    split,
)
from amends_core.oracle.decode import gc_paused
from amends_core.oracle.source import Source, gather
from amends_core.result import ComputeResult, RejectionRef


@dataclass(slots=True)
class _Batch:
    """A classified frame (row ``n`` is record ``n`` of ``src``) shared by its sources."""

    cfg: Config
    src: Source
    frame: pl.DataFrame
    canonical: list[Hashable | None]
    """Per row: its canonical assertion, None when the row is rejected."""
    rejections: dict[int, Rejection] | None = None
    """Per rejected row, derive's rejection of it (made when first needed)."""

    def rejection(self, row: int) -> Rejection:
        if self.rejections is None:
            rows = [n for n, c in enumerate(self.canonical) if c is None]
            with gc_paused():
                made = derive(self.cfg, self.src, split(self.frame.filter(pl.col("reason").is_not_null())))
            self.rejections = dict(zip(rows, made.rejections, strict=True))
        return self.rejections[row]


@dataclass(frozen=True, slots=True)
class Classified:
    """One source's rows of a classified frame (which may hold other sources' rows too)."""

    parts: tuple[tuple[Record, ...], ...]
    """The classified records per partition, in offset order."""
    starts: tuple[int, ...]
    """Row of the frame where each partition's records begin."""
    batch: _Batch
    _accepted: dict[frozenset[Hashable], OracleResult | CloseOutOfRange] = field(
        default_factory=dict, compare=False
    )
    """Derived results (or the close out of range) by set of canonical accepted assertions."""

    def covers(self, cfg: Config, source: Mapping[int, Sequence[Record]]) -> bool:
        """Whether this is the classification of exactly ``source`` under ``cfg``."""
        if cfg != self.batch.cfg or len(source) != len(self.parts):
            return False
        return all(tuple(source[p]) == recs for p, recs in enumerate(self.parts))

    def derive_prefix(self, counts: Sequence[int]) -> OracleResult:
        """``compute`` over the first ``counts[p]`` records of every partition (not all zero).

        Raises CloseOutOfRange as ``compute`` does.
        """
        spans = [(self.starts[p], self.starts[p] + n) for p, n in enumerate(counts) if n]
        if not spans:
            msg = "derive_prefix needs at least one record"
            raise ValueError(msg)
        b = self.batch
        canonical = b.canonical
        key = frozenset(c for lo, hi in spans for c in canonical[lo:hi] if c is not None)
        known = self._accepted.get(key)
        if isinstance(known, CloseOutOfRange):
            raise known
        if known is not None:
            return self._with_rejections(known, spans)
        rows = [b.frame.slice(lo, hi - lo) for lo, hi in spans]
        frame = rows[0] if len(rows) == 1 else pl.concat(rows)
        try:
            with gc_paused():
                result = derive(b.cfg, b.src, split(frame))
        except CloseOutOfRange as e:
            self._accepted[key] = e
            raise
        self._accepted[key] = result
        return result

    def _with_rejections(self, accepted: OracleResult, spans: list[tuple[int, int]]) -> OracleResult:
        """``accepted``'s projections, conflicts and reason counts with the prefix's rejections."""
        b = self.batch
        rejections = tuple(
            b.rejection(n) for lo, hi in spans for n in range(lo, hi) if b.canonical[n] is None
        )
        refs = [
            RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason) for r in rejections
        ]
        keys = {p.key: p for p in accepted.result.keys}
        result = ComputeResult.build(b.cfg, keys, refs, list(accepted.result.conflicts))
        return OracleResult(result, rejections, accepted.reason_counts)


def classify_many(
    cfg: Config, sources: Sequence[Mapping[int, Sequence[Record]]]
) -> list[Classified | None]:
    """Classify the records of every source in one pass (None where a source is refused).

    Each source maps every configured partition to its records in offset order.
    """
    out: list[Classified | None] = [None] * len(sources)
    try:
        cfg.validate()
    except Exception:  # compute refuses the configuration; leave that to it
        return out
    gathered: list[tuple[int, tuple[tuple[Record, ...], ...], Source]] = []
    for n, source in enumerate(sources):
        try:
            parts = tuple(tuple(source.get(p, ())) for p in range(cfg.partitions))
            if len(source) != cfg.partitions or not any(parts):
                continue
            gathered.append((n, parts, gather(cfg, source)))
        except Exception:  # compute raises for the prefixes that hold the offending record
            continue
    if not gathered:
        return out
    firsts: list[int] = []
    at = 0
    for _, _, s in gathered:
        firsts.append(at)
        at += len(s)
    src = Source.concat(cfg.source_incarnation, [s for _, _, s in gathered])
    try:
        with gc_paused():
            frame = classify_rows(cfg, src)  # row n is record n
            rows = frame.select("reason", *_CANONICAL).rows()
    except Exception:  # refused as a batch: every source computes its prefixes on its own
        return out
    canonical: list[Hashable | None] = [None if r[0] is not None else r[1:] for r in rows]
    batch = _Batch(cfg, src, frame, canonical)
    for (n, parts, _), first in zip(gathered, firsts, strict=True):
        starts = []
        row = first
        for recs in parts:
            starts.append(row)
            row += len(recs)
        out[n] = Classified(parts, tuple(starts), batch)
    return out


__all__ = ["Classified", "classify_many"]
