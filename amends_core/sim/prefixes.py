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

``gather``'s checks hold for every prefix when they hold for the whole source;
when they do not (or classification refuses the whole source for any other
reason) ``classify_many`` yields None and the caller computes each prefix on
its own, which raises exactly where it would have. Tests compare ``derive_prefix``
with ``compute`` over every prefix of generated sources.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from amends_core.ledger import Config, Record
from amends_core.oracle.compute import OracleResult, Source, classify, derive, gather
from amends_core.oracle.decode import gc_paused


@dataclass(frozen=True, slots=True)
class Classified:
    """One source's rows of a classified frame (which may hold other sources' rows too)."""

    cfg: Config
    parts: tuple[tuple[Record, ...], ...]
    """The classified records per partition, in offset order."""
    src: Source
    frame: pl.DataFrame
    starts: tuple[int, ...]
    """Row of the frame where each partition's records begin."""

    def covers(self, cfg: Config, source: Mapping[int, Sequence[Record]]) -> bool:
        """Whether this is the classification of exactly ``source`` under ``cfg``."""
        if cfg != self.cfg or len(source) != len(self.parts):
            return False
        return all(tuple(source[p]) == recs for p, recs in enumerate(self.parts))

    def derive_prefix(self, counts: Sequence[int]) -> OracleResult:
        """``compute`` over the first ``counts[p]`` records of every partition (not all zero).

        Raises CloseOutOfRange as ``compute`` does.
        """
        rows = [self.frame.slice(self.starts[p], n) for p, n in enumerate(counts) if n]
        if not rows:
            msg = "derive_prefix needs at least one record"
            raise ValueError(msg)
        frame = rows[0] if len(rows) == 1 else pl.concat(rows)
        with gc_paused():
            return derive(self.cfg, self.src, frame)


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
    records: list[Record] = []
    values: list[bytes] = []
    keys: list[bytes | None] = []
    partition: list[pl.Series] = []
    reserved: list[int] = []
    firsts: list[int] = []
    for _, _, s in gathered:
        firsts.append(len(records))
        reserved += [len(records) + i for i in s.reserved]
        records += s.records
        values += s.values
        keys += s.keys
        partition.append(s.partition)
    src = Source(records, values, keys, pl.concat(partition).alias("partition"), tuple(reserved))
    try:
        with gc_paused():
            frame = classify(cfg, src)
    except Exception:  # refused as a batch: every source computes its prefixes on its own
        return out
    for (n, parts, _), first in zip(gathered, firsts, strict=True):
        starts = []
        row = first
        for recs in parts:
            starts.append(row)
            row += len(recs)
        out[n] = Classified(cfg, parts, src, frame, tuple(starts))
    return out


__all__ = ["Classified", "classify_many"]
