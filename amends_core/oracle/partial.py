"""The oracle split by source partition: one partition's result, and many combined into one.

Every configured key lives in exactly one source partition, and every rule the
oracle applies (decoding, rejection, authority, daily closes) looks at one
record alone or at the records of one key. So partition ``p``'s records decide
exactly the facts of ``p``'s keys plus ``p``'s own rejections and conflicts, and
the full result is those parts put side by side. That is what lets one machine
(or one Dagster run) compute each partition, and verification combine them.

A ``PartitionResult`` travels as bytes (``encode``/``decode``, MessagePack with
a format number): a part computed on one host is combined on another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

import msgspec
import polars as pl

from amends_core.ledger import CloseOutOfRange, Config, Conflict, Projection, Record, Rejection, StockKey
from amends_core.oracle.compute import OracleResult, _check_config, compute, derive_rows
from amends_core.oracle.source import Columns
from amends_core.result import ComputeResult, RejectionRef

FORMAT = 1
"""Bumped whenever the encoded layout changes; a part of another format is refused."""


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """What the oracle derived from one source partition's records."""

    partition: int
    keys: tuple[Projection, ...]
    """Projections of the keys configured on this partition, in the configuration's key order."""
    refs: tuple[RejectionRef, ...]
    rejections: tuple[Rejection, ...]
    conflicts: tuple[Conflict, ...]
    reason_counts: tuple[tuple[StockKey, int], ...]
    overflow: tuple[StockKey, int, str] | None = None
    """Key, day and value (as text: it is outside 64-bit) of a daily close that left signed
    64-bit (``CloseOutOfRange``); the rest of the part is then empty."""


class PartError(ValueError):
    """Parts that cannot be combined or decoded; the message says which and why."""


def compute_partition(cfg: Config, partition: int, records: Sequence[Record] | Columns) -> PartitionResult:
    """The oracle over one partition's records (in offset order).

    A daily close out of range is kept in the part (``overflow``), not raised: the
    combination raises it, as the oracle over everything would.
    """
    _check_config(cfg)
    return _part(cfg, partition, lambda: compute(
        cfg, {q: (records if q == partition else ()) for q in range(cfg.partitions)}
    ))


def partition_from_rows(cfg: Config, partition: int, rows: pl.DataFrame | pl.LazyFrame) -> PartitionResult:
    """``compute_partition`` from the partition's kept classified rows (``classify_partition``)
    instead of its records: decoding is not repeated."""
    _check_config(cfg)
    return _part(cfg, partition, lambda: derive_rows(cfg, rows))


def _part(cfg: Config, partition: int, run: Callable[[], OracleResult]) -> PartitionResult:
    if not 0 <= partition < cfg.partitions:
        msg = f"partition {partition} is not one of the configuration's {cfg.partitions} partitions"
        raise PartError(msg)
    try:
        one = run()
    except CloseOutOfRange as e:
        return PartitionResult(partition, (), (), (), (), (), overflow=(e.key, e.day, str(e.value)))
    mine = {kc.key for kc in cfg.keys if kc.partition == partition}
    return PartitionResult(
        partition,
        tuple(k for k in one.result.keys if k.key in mine),
        one.result.rejections,
        one.rejections,
        one.result.conflicts,
        tuple(sorted((k, n) for k, n in one.reason_counts.items() if k in mine)),
    )


def combine(cfg: Config, parts: Iterable[PartitionResult]) -> OracleResult:
    """The oracle's result over every partition, from one part per partition.

    Equals ``compute`` over all partitions' records. Raises PartError when a partition's
    part is missing or given twice, and CloseOutOfRange when a part recorded one.
    """
    by_partition: dict[int, PartitionResult] = {}
    for part in parts:
        if part.partition in by_partition:
            msg = f"two results for source partition {part.partition}"
            raise PartError(msg)
        by_partition[part.partition] = part
    missing = [p for p in range(cfg.partitions) if p not in by_partition]
    extra = sorted(set(by_partition) - set(range(cfg.partitions)))
    if missing or extra:
        msg = f"partition results do not match the {cfg.partitions} configured partitions"
        msg += f" (missing {missing})" if missing else ""
        msg += f" (unknown {extra})" if extra else ""
        raise PartError(msg)
    ordered = [by_partition[p] for p in range(cfg.partitions)]
    for part in ordered:
        if part.overflow is not None:
            key, day, value = part.overflow
            raise CloseOutOfRange(key, day, int(value))
    projections = {k.key: k for part in ordered for k in part.keys}
    rejections = [r for part in ordered for r in part.rejections]
    at = [(r.record.coords.partition, r.record.coords.offset) for r in rejections]
    if any(a > b for a, b in pairwise(at)):  # each part lists its own in offset order, as a rule
        order = sorted(range(len(at)), key=at.__getitem__)
        rejections = [rejections[i] for i in order]
    return OracleResult(
        ComputeResult.build(
            cfg,
            projections,
            [r for part in ordered for r in part.refs],
            [c for part in ordered for c in part.conflicts],
        ),
        tuple(rejections),
        {k: n for part in ordered for k, n in part.reason_counts},
    )


def compute_by_partition(cfg: Config, read: Callable[[int], Sequence[Record] | Columns]) -> OracleResult:
    """``compute`` one source partition at a time: memory holds one partition's history.

    ``read(p)`` returns partition ``p``'s records in offset order; it is called once
    per partition, in order, and its result is dropped before the next partition is
    read. The result equals ``compute(cfg, {p: read(p) ...})``.
    """
    _check_config(cfg)
    return combine(cfg, [compute_partition(cfg, p, read(p)) for p in range(cfg.partitions)])


class _Encoded(msgspec.Struct, array_like=True):
    format: int
    part: PartitionResult


def encode(part: PartitionResult) -> bytes:
    return msgspec.msgpack.encode(_Encoded(FORMAT, part))


def decode(data: bytes) -> PartitionResult:
    """A part from ``encode``'s bytes; PartError for bytes of another format or none at all."""
    try:
        fmt = msgspec.msgpack.decode(data, type=tuple[int, msgspec.Raw])[0]
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        msg = f"not an encoded oracle partition result: {e}"
        raise PartError(msg) from None
    if fmt != FORMAT:
        msg = f"the oracle partition result has format {fmt}; this version reads format {FORMAT}"
        raise PartError(msg)
    try:
        return msgspec.msgpack.decode(data, type=_Encoded).part
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        msg = f"the oracle partition result is damaged: {e}"
        raise PartError(msg) from None
