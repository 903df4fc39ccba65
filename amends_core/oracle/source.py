"""The oracle's input: raw source records, partition by partition, as columns.

A reader hands the oracle each source partition either as ``Record`` values
or as ``Columns``: the partition's offsets, keys, values and reserved-header
flags, one Arrow-backed column each. Columns are what a long history should
travel as: one buffer per column instead of several Python objects per
record, and the decoder reads the value column as it is. ``gather`` checks
either form and lays every partition out as one ``Source``.

Only coordinates are checked here (partitions, offsets, source incarnation);
what the bytes mean is left to decoding and classification.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import polars as pl

from amends_core.ledger import INT64_MAX, Config, Coordinates, Record


class OracleInputError(ValueError):
    """Configuration or source coordinates cannot be recomputed; one line says why."""


_DTYPES = {"offset": pl.Int64, "key": pl.Binary, "value": pl.Binary, "reserved": pl.Boolean}
"""Each column's type; only ``key`` may hold nulls (a message without a key)."""


@dataclass(frozen=True, slots=True)
class Columns:
    """One source partition's records in offset order, one column per field.

    Row ``n`` is one record: ``offset`` (Int64), ``key`` (Binary, null when the
    message carried no key), ``value`` (Binary) and ``reserved`` (Boolean: the
    message carried the reserved marker header, or headers that could not be
    read, as ``Record.reserved_header``). Raises OracleInputError for another
    column type, columns of different lengths, or nulls outside ``key``.
    Offsets are checked by ``gather``.
    """

    offset: pl.Series
    key: pl.Series
    value: pl.Series
    reserved: pl.Series

    def __post_init__(self) -> None:
        lengths = set()
        for name, dtype in _DTYPES.items():
            col = getattr(self, name)
            if not isinstance(col, pl.Series) or col.dtype != dtype:
                got = col.dtype if isinstance(col, pl.Series) else type(col).__name__
                msg = f"source column {name!r} must be a {dtype} series, not {got}"
                raise OracleInputError(msg)
            if name != "key" and col.null_count():
                msg = f"source column {name!r} holds {col.null_count()} nulls"
                raise OracleInputError(msg)
            lengths.add(len(col))
        if len(lengths) > 1:
            msg = f"source columns differ in length: {sorted(lengths)}"
            raise OracleInputError(msg)

    def __len__(self) -> int:
        return len(self.offset)

    @classmethod
    def empty(cls) -> Columns:
        return cls(*(pl.Series(name, [], dtype=dtype) for name, dtype in _DTYPES.items()))

    @classmethod
    def of(
        cls,
        offsets: list[int],
        keys: list[bytes | None],
        values: list[bytes],
        reserved: list[bool] | None = None,
        *,
        where: str = "the offset column",
    ) -> Columns:
        """Columns from plain lists (what a reader collects); ``reserved`` defaults to
        no row carrying the reserved header. ``where`` names the offsets in an error."""
        if offsets and max(offsets) > INT64_MAX:  # Kafka offsets are int64; Polars would refuse
            msg = f"{where} has offset {max(offsets)}, above the int64 range"
            raise OracleInputError(msg)
        return cls(
            pl.Series("offset", offsets, dtype=pl.Int64),
            pl.Series("key", keys, dtype=pl.Binary),
            pl.Series("value", values, dtype=pl.Binary),
            pl.Series("reserved", [False] * len(offsets) if reserved is None else reserved, dtype=pl.Boolean),
        )


_SOURCE_COLUMNS = ("partition", *_DTYPES)
"""``Source``'s columns, in its fields' order."""


@dataclass(frozen=True, slots=True)
class Source:
    """Every checked record of every partition, in (partition, offset) order, as columns.

    Row ``i`` of each column is record ``i``; ``records`` makes rows ``Record`` values
    again (the oracle does that only for rejected records).
    """

    source: str
    """The source incarnation every record came from."""
    partition: pl.Series
    offset: pl.Series
    key: pl.Series
    value: pl.Series
    reserved: pl.Series

    def __len__(self) -> int:
        return len(self.offset)

    def records(self, rows: Sequence[int]) -> list[Record]:
        """Records ``rows`` (indexes into the columns) as ``Record`` values, in that order."""
        if not rows:
            return []
        at = pl.Series(rows, dtype=pl.Int64)
        partition, offset, key, value, reserved = (
            getattr(self, name).gather(at).to_list() for name in _SOURCE_COLUMNS
        )
        source = self.source
        return [
            Record(v, k, Coordinates(source, p, o), r)
            for p, o, k, v, r in zip(partition, offset, key, value, reserved, strict=True)
        ]

    @staticmethod
    def concat(source: str, parts: Sequence[Source]) -> Source:
        """The rows of ``parts`` one after another (each must come from ``source``)."""
        if not parts:
            return _layout(source, [])
        columns = [pl.concat([getattr(s, name) for s in parts]) for name in _SOURCE_COLUMNS]
        return Source(source, *columns)


def _layout(source: str, parts: Sequence[tuple[int, Columns]]) -> Source:
    parts = [(p, c) for p, c in parts if len(c)]
    if not parts:
        empty = Columns.empty()
        partition = pl.Series("partition", [], dtype=pl.Int64)
        return Source(source, partition, *(getattr(empty, name) for name in _DTYPES))
    partition = pl.concat([pl.repeat(p, len(c), dtype=pl.Int64, eager=True) for p, c in parts])
    return Source(
        source,
        partition.alias("partition"),
        *(pl.concat([getattr(c, name) for _, c in parts]).alias(name) for name in _DTYPES),
    )


def _columns_of(source: str, p: int, recs: Sequence[Record]) -> Columns:
    """Records of partition ``p`` as columns, after checking each one's coordinates."""
    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes] = []
    reserved: list[bool] = []
    # One plain loop touches each record once; records are scattered in
    # memory, so this beats several C-level passes over them.
    add_value, add_key, add_offset, add_flag = values.append, keys.append, offsets.append, reserved.append
    for r in recs:
        c = r.coords
        if c.source != source:
            msg = f"partition {p} holds a record from source {c.source!r}, expected {source!r}"
            raise OracleInputError(msg)
        if c.partition != p:
            msg = f"records listed under partition {p} carry partition {c.partition}"
            raise OracleInputError(msg)
        add_flag(r.reserved_header)
        add_value(r.value)
        add_key(r.key)
        add_offset(c.offset)
    return Columns.of(offsets, keys, values, reserved, where=f"partition {p}")


def _check_offsets(p: int, offsets: pl.Series) -> None:
    if not len(offsets):
        return
    if offsets.min() < 0:  # type: ignore[operator]
        msg = f"partition {p} has a negative offset"
        raise OracleInputError(msg)
    steps = offsets.diff().slice(1)
    if len(steps) and steps.min() <= 0:  # type: ignore[operator]
        bad = int(steps.le(0).arg_true()[0])
        msg = (
            f"offsets of partition {p} are not strictly increasing:"
            f" {offsets[bad]} is followed by {offsets[bad + 1]}"
        )
        raise OracleInputError(msg)


def gather(cfg: Config, by_partition: Mapping[int, Sequence[Record] | Columns]) -> Source:
    """Check every coordinate, then lay every partition's records out as one ``Source``.

    Each partition is given as ``Record`` values or as ``Columns`` (whose records
    are that partition's, from the configured source, by construction).
    Raises OracleInputError for a partition outside the configuration, a
    record filed under another partition, another source incarnation, or
    offsets that are negative, above int64 or not strictly increasing.
    """
    source = cfg.source_incarnation
    for p in by_partition:
        if type(p) is not int or not 0 <= p < cfg.partitions:
            msg = f"partition {p!r} is outside 0..{cfg.partitions - 1}"
            raise OracleInputError(msg)
    parts: list[tuple[int, Columns]] = []
    for p in sorted(by_partition):
        given = by_partition[p]
        cols = given if isinstance(given, Columns) else _columns_of(source, p, given)
        _check_offsets(p, cols.offset)
        parts.append((p, cols))
    return _layout(source, parts)


__all__ = ["Columns", "OracleInputError", "Source", "gather"]
