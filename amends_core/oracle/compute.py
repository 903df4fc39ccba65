"""Full-history recomputation from raw source records, over whole Polars columns.

Route: check configuration and coordinates; decode every value and transport
key through the oracle's own decoder; classify rejections with one ordered
``when`` chain; among accepted assertions find the distinct canonical
candidates of every (key, txn_id, revision); record a conflict wherever there
is more than one; take each identity's highest revision as authority (BLOCKED
when that revision is conflicted); sum active quantities per key and UTC day in
Int128; cumulate closes from the opening balance; mark downward crossings.

Nothing here looks at how the incremental path got its answer: no evidence,
suffix repair, output versions or view state. Python loops touch only rejected
records, output rows and, when the input comes as ``Record`` values rather than
``Columns``, each record's coordinates (to build the columns).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import polars as pl

from amends_core import limits, timefmt
from amends_core.ledger import (
    INT64_MAX,
    INT64_MIN,
    KINDS,
    AlertRow,
    BalanceRow,
    CloseOutOfRange,
    Config,
    ConfigError,
    Conflict,
    ConflictRef,
    Coordinates,
    Kind,
    Projection,
    Record,
    Rejection,
    RejectReason,
    Status,
    StockKey,
)
from amends_core.oracle.decode import decode_keys, decode_values, gc_paused
from amends_core.oracle.source import Columns, OracleInputError, Source, gather
from amends_core.result import ComputeResult, RejectionRef

_SECONDS_PER_DAY = 86_400

T = TypeVar("T")
_CANONICAL = ["kid", "txn_id", "revision", "kind", "valid_s", "valid_nanos", "qty"]
"""What canonical equality compares (the key as ``kid``); never source time or coordinates."""


@dataclass(frozen=True, slots=True)
class OracleResult:
    """What the oracle derived from the full history."""

    result: ComputeResult
    """Same shape and, when no close overflows, same value as the incremental engine."""
    rejections: tuple[Rejection, ...]
    """Every rejected raw record with its reason, sorted by coordinates."""
    reason_counts: Mapping[StockKey, int] = field(default_factory=dict)
    """Current conflict references per BLOCKED key; projections carry only the first
    ``limits.MAX_STATUS_REASONS`` of them (as key-status envelopes do)."""

    @property
    def conflicts(self) -> tuple[Conflict, ...]:
        return self.result.conflicts

    @property
    def blocked(self) -> tuple[Projection, ...]:
        """Projections of the keys whose highest-revision authority is unresolved."""
        return tuple(p for p in self.result.keys if p.status is Status.BLOCKED)


# ---------------------------------------------------------------- input checks


def _check_config(cfg: Config) -> None:
    try:
        cfg.validate()
    except ConfigError as e:
        msg = f"configuration is unusable: {e}"
        raise OracleInputError(msg) from e


# ---------------------------------------------------------------- frames


def _key_table(cfg: Config) -> tuple[list[StockKey], pl.DataFrame]:
    keys = sorted(cfg.keys, key=lambda kc: kc.key)
    table = pl.DataFrame(
        {
            "kid": pl.Series(range(len(keys)), dtype=pl.Int64),
            "item": pl.Series([kc.key.item for kc in keys], dtype=pl.String),
            "location": pl.Series([kc.key.location for kc in keys], dtype=pl.String),
            "k_partition": pl.Series([kc.partition for kc in keys], dtype=pl.Int64),
            "opening": pl.Series([kc.opening_balance for kc in keys], dtype=pl.Int64),
            "threshold": pl.Series([kc.reorder_threshold for kc in keys], dtype=pl.Int64),
        }
    )
    return [kc.key for kc in keys], table


_BLOCK = 1 << 20
"""Records decoded and classified together: bounds the Binary copies of values and
keys and the decoded columns that classification drops, whatever the history's size."""

_REJECTED = ["i", "reason", "error", "tk_error", "revision", "kind", "qty", "partition", "k_partition"]
"""What ``derive`` reads of a rejected record (its detail line)."""
_CLASSIFIED = [c for c in dict.fromkeys(_REJECTED + _CANONICAL) if c != "reason"]
"""Columns a classified block keeps, besides ``reason``."""


def _source_block(src: Source, start: int, stop: int) -> pl.DataFrame:
    """Records ``start:stop`` decoded: coordinates, value members and transport key."""
    n = stop - start
    meta = pl.DataFrame(
        [
            pl.int_range(start, stop, dtype=pl.Int64, eager=True).alias("i"),
            src.partition.slice(start, n),
            src.reserved.slice(start, n),
        ]
    )
    values, keys = decode_values(src.value.slice(start, n)), decode_keys(src.key.slice(start, n))
    return pl.concat([meta, values, keys], how="horizontal")


def _reason(cfg: Config) -> pl.Expr:
    """The first broken rule, in the documented order; null when accepted."""
    c = pl.col
    origin_s, origin_nanos = divmod(cfg.origin_ns, timefmt.NS_PER_SECOND)
    day = c("valid_s") // _SECONDS_PER_DAY
    before_origin = (c("valid_s") < origin_s) | (
        (c("valid_s") == origin_s) & (c("valid_nanos") < origin_nanos)
    )
    key_differs = c("tk_item").is_null() | (c("tk_item") != c("item")) | (c("tk_location") != c("location"))
    chain = (
        pl.when(c("reserved"))
        .then(pl.lit(RejectReason.RESERVED_HEADER.value))
        .when(c("error").is_not_null())
        .then(pl.lit(RejectReason.MALFORMED.value))
        .when((c("txn_id") == "") | (c("item") == "") | (c("location") == ""))
        .then(pl.lit(RejectReason.IDENTITY.value))
        .when(c("revision") < 1)
        .then(pl.lit(RejectReason.REVISION.value))
        .when(~c("kind").is_in(sorted(KINDS)))
        .then(pl.lit(RejectReason.KIND.value))
        .when((c("kind") == Kind.CANCEL.value) & (c("qty") != 0))
        .then(pl.lit(RejectReason.CANCEL_QUANTITY.value))
        .when(~day.is_between(timefmt.MIN_DAY, timefmt.MAX_DAY) | before_origin)
        .then(pl.lit(RejectReason.VALID_TIME.value))
        .when(c("kid").is_null())
        .then(pl.lit(RejectReason.UNKNOWN_KEY.value))
        .when(key_differs)
        .then(pl.lit(RejectReason.KEY_MISMATCH.value))
        .when(c("partition") != c("k_partition"))
        .then(pl.lit(RejectReason.ROUTING.value))
    )
    return chain.otherwise(pl.lit(None, dtype=pl.String))


def _detail(row: dict[str, object]) -> str:
    """One readable line for a rejection (informational; never compared)."""
    reason = RejectReason(str(row["reason"]))
    if reason is RejectReason.RESERVED_HEADER:
        return (
            "the message carries the amends-marker header but is not the recorded marker,"
            " or its headers cannot be read"
        )
    if reason is RejectReason.MALFORMED:
        return str(row["error"])
    if reason is RejectReason.IDENTITY:
        return "txn_id, item and location must be non-empty"
    if reason is RejectReason.REVISION:
        return f"revision {row['revision']} is below 1"
    if reason is RejectReason.KIND:
        return f"kind {str(row['kind'])[:32]!r} is none of NEW, AMEND, CANCEL"
    if reason is RejectReason.CANCEL_QUANTITY:
        return f"a CANCEL must carry qty 0, not {row['qty']}"
    if reason is RejectReason.VALID_TIME:
        return "valid_time lies before the ledger origin or outside years 1-9999 (UTC)"
    if reason is RejectReason.UNKNOWN_KEY:
        return "the stock key is not in the configuration"
    if reason is RejectReason.KEY_MISMATCH:
        if row["tk_error"] is not None:
            return str(row["tk_error"])
        return "the transport key names a different stock key"
    return f"record sits on partition {row['partition']}, its key is routed to {row['k_partition']}"


# ---------------------------------------------------------------- authority and days


_AUTHORITY_ENGINE: Final = "in-memory"
"""The engine of the authority query. Polars' default ("auto") runs this sort-and-shift query
on its streaming engine, which costs about 2.5 ms a call whatever the size: the simulator
calls the oracle on every processed prefix of a few records and ran at 0.6x. The in-memory
engine takes 0.3 ms on a few rows and the same time as the default at 2^20 rows (one key
part, the most a call sees), and the result is materialised whole either way."""


def _identity_hash() -> pl.Expr:
    """A 64-bit hash of an identity (key and ``txn_id``); equal identities hash equally."""
    return pl.col("txn_id").hash() ^ pl.col("kid").hash()


_HASH_SORT_ROWS = 1 << 14
"""From this many accepted rows on, ``_authority`` orders rows by a hash of the identity;
below it, the string sort costs less than hashing and the collision check."""


def _authority_rows(accepted: pl.DataFrame, hashed: bool) -> pl.DataFrame:
    """Accepted rows ordered by identity and revision, with ``rival``, ``last``, ``highest``
    and ``split``.

    Rows are sorted so that every identity is a run of adjacent rows in
    ascending revision, and so is every revision group: on (key, ``txn_id``,
    revision), or when ``hashed`` on (hash of the identity, revision), which
    compares numbers instead of strings. Distinct identities sharing a hash
    would share a run of rows; that happens exactly when two adjacent rows
    have equal hashes and differ in key or ``txn_id``, and ``split`` marks
    such a row (the caller then sorts on the identity itself).
    """
    c = pl.col
    compared = [x for x in _CANONICAL if x not in ("kid", "txn_id", "revision")]
    same_identity = (c("kid") == c("kid").shift(1)) & (c("txn_id") == c("txn_id").shift(1))
    same_group = same_identity & (c("revision") == c("revision").shift(1))
    differs = pl.any_horizontal(c(x) != c(x).shift(1) for x in compared)
    if hashed:
        ordered = accepted.lazy().with_columns(_identity_hash().alias("_h")).sort("_h", "revision")
        split = ((c("_h") == c("_h").shift(1)) & ~same_identity).fill_null(False)
    else:
        ordered = accepted.lazy().sort("kid", "txn_id", "revision")
        split = pl.lit(False)
    return (
        ordered.with_columns(
            (same_group & differs).fill_null(False).alias("rival"),
            (~same_identity.shift(-1).fill_null(False)).alias("last"),
            split.alias("split"),
        )
        .with_columns(
            (c("revision") == pl.when(c("last")).then(c("revision")).fill_null(strategy="backward")).alias(
                "highest"
            )
        )
        .select("kid", "txn_id", "revision", "kind", "valid_s", "qty", "rival", "last", "highest", "split")
        .collect(engine=_AUTHORITY_ENGINE)
    )


def _authority(accepted: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.LazyFrame]:
    """(conflicts, blocked identities, active contributions) from accepted assertions.

    Every identity and every revision group is a run of adjacent rows
    (``_authority_rows``). A revision group holds more than one distinct
    canonical candidate exactly when two adjacent rows of it differ in a
    compared member (accepted rows have no nulls): such a row marks its group
    as conflicted. An identity's last row carries its highest revision;
    filling that revision backwards gives every row the identity's highest
    revision. Sorting once costs less than grouping on the string identity and
    a window over it.
    """
    c = pl.col
    hashed = len(accepted) >= _HASH_SORT_ROWS
    rows = _authority_rows(accepted, hashed)
    if hashed and rows.get_column("split").any():
        del rows
        rows = _authority_rows(accepted, hashed=False)
    rivals = rows.filter(c("rival"))
    conflicts = rivals.select("kid", "txn_id", "revision").unique()
    blocked = rivals.filter(c("highest")).select("kid", "txn_id", "revision").unique()
    active = (
        rows.lazy()
        .filter(c("last") & (c("kind") != Kind.CANCEL.value))
        .join(blocked.lazy().select("kid").unique(), on="kid", how="anti")
        .select("kid", (c("valid_s") // _SECONDS_PER_DAY).alias("day"), "qty")
    )
    return conflicts, blocked, active


_PART_ROWS = 1 << 20
"""Accepted rows per key part of authority and closes (bounds the grouping's tables)."""


def _by_key_parts(
    accepted: pl.DataFrame, key_table: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(conflicts, blocked identities, daily closes), one part of the keys at a time.

    Authority and closes look only at the rows of one key, so keys can be
    split into parts (by ``kid`` modulo the number of parts) and the results
    concatenated; a part's grouping tables are freed before the next part.
    """
    parts = max(1, -(-len(accepted) // _PART_ROWS))
    conflicts, blocked, daily = [], [], []
    for part in range(parts):
        rows = accepted if parts == 1 else accepted.filter(pl.col("kid") % parts == part)
        c, b, active = _authority(rows)
        del rows
        conflicts.append(c)
        blocked.append(b)
        daily.append(_daily(active, key_table).collect())
    return pl.concat(conflicts), pl.concat(blocked), pl.concat(daily)


def _daily(active: pl.LazyFrame, key_table: pl.DataFrame) -> pl.LazyFrame:
    """Closes and crossings per (key, activity day), exact in Int128."""
    return (
        active.group_by("kid", "day")
        .agg(pl.col("qty").cast(pl.Int128).sum().alias("total"))
        .join(key_table.lazy().select("kid", "opening", "threshold"), on="kid")
        .sort("kid", "day")
        .with_columns(
            (pl.col("opening").cast(pl.Int128) + pl.col("total").cum_sum().over("kid")).alias("close")
        )
        .with_columns((pl.col("close") - pl.col("total")).alias("before"))
        .with_columns(
            ((pl.col("before") >= pl.col("threshold")) & (pl.col("close") < pl.col("threshold"))).alias(
                "crossing"
            )
        )
        .select("kid", "day", "close", "threshold", "crossing")
    )


# ---------------------------------------------------------------- entry point


def compute(cfg: Config, by_partition: Mapping[int, Sequence[Record] | Columns]) -> OracleResult:
    """Recompute every business fact from raw records (per partition, in offset order).

    Each partition's records are ``Record`` values or ``Columns`` (see ``gather``).

    Raises OracleInputError for an unusable configuration or incompatible
    coordinates, and CloseOutOfRange (naming key and day) when a daily close of
    a key that is not BLOCKED leaves signed 64-bit.
    """
    _check_config(cfg)
    with gc_paused():
        src = gather(cfg, by_partition)
        return derive(cfg, src, classify(cfg, src))


@dataclass(frozen=True, slots=True)
class Classified:
    """Every record decoded and checked against the rules, in two frames."""

    rejected: pl.DataFrame
    """Rejected records in record order: ``i`` (row of the ``Source``),
    ``reason`` and what the rejection's detail line needs."""
    accepted: pl.DataFrame
    """The ``_CANONICAL`` members of every accepted record, in no particular order."""


def _classified_blocks(cfg: Config, src: Source) -> Iterator[pl.DataFrame]:
    """Every record decoded and given its reason, ``_BLOCK`` records at a time (rows of a
    block in no particular order; ``i`` is the row of the ``Source``)."""
    _, key_table = _key_table(cfg)
    reason = _reason(cfg).alias("reason")
    n = len(src)
    for start in range(0, max(n, 1), _BLOCK):
        yield (
            _source_block(src, start, min(n, start + _BLOCK))
            .lazy()
            .join(key_table.lazy(), on=["item", "location"], how="left")
            .select(*_CLASSIFIED, reason)
            .collect()
        )


def classify(cfg: Config, src: Source) -> Classified:
    """Decode every record and name the first rule it breaks.

    The first phase of ``compute`` (exposed for benchmarks). Records are
    decoded and classified in blocks of ``_BLOCK``, and each block keeps only
    what ``derive`` reads of it: memory for the whole history holds the
    accepted records' canonical members and the rejected rows, never every
    decoded column of every record. The configuration must be valid.
    """
    rejected, accepted = [], []
    for block in _classified_blocks(cfg, src):
        part = split(block)
        rejected.append(part.rejected)
        accepted.append(part.accepted)
        del block, part
    return Classified(pl.concat(rejected).sort("i"), pl.concat(accepted, rechunk=False))


def classify_rows(cfg: Config, src: Source) -> pl.DataFrame:
    """``classify`` as one frame, row ``n`` being record ``n``: ``reason`` (null when
    accepted) and every column ``split`` keeps.

    For the simulator, which derives many prefixes of one small source: ``split``
    of any run of rows is ``classify`` of those records. Not bounded in memory
    like ``classify``.
    """
    _, key_table = _key_table(cfg)
    return (
        _source_block(src, 0, len(src))
        .lazy()
        .join(key_table.lazy(), on=["item", "location"], how="left")
        .select(*_CLASSIFIED, _reason(cfg).alias("reason"))
        .sort("i")
        .collect()
    )


def split(rows: pl.DataFrame) -> Classified:
    """Classified rows (``classify_rows``, in record order) as ``derive`` reads them."""
    return Classified(
        rows.filter(pl.col("reason").is_not_null()).select(_REJECTED),
        rows.filter(pl.col("reason").is_null()).select(_CANONICAL),
    )


def derive(cfg: Config, src: Source, classified: Classified) -> OracleResult:
    """Rejections, authority, conflicts, closes and crossings from classified records.

    The second phase of ``compute`` (exposed for benchmarks).
    """
    rejected = src.records(classified.rejected.get_column("i").to_list())
    return _derive(cfg, rejected, classified.rejected, classified.accepted)


STORED = ["offset", "reason", *(c for c in _CLASSIFIED if c != "i"), "key", "value", "reserved"]
"""Columns of a kept classified row: the record's offset, its reason (null: accepted),
every member ``derive`` reads of it and, for a rejected record only, its raw transport
key, value and reserved flag (a rejection carries its record; null when accepted)."""


def classify_partition(cfg: Config, partition: int, cols: Columns) -> pl.DataFrame:
    """One partition's records classified, one row per record in offset order (``STORED``).

    A row depends only on its record's bytes and the configuration, never on other
    records: rows classified once can be kept beside the raw records (keyed by the
    oracle's code and the configuration) and combined with rows of later records by
    ``derive_rows``, which gives exactly what ``compute`` gives over all of them.
    Bounded like ``classify``: ``_BLOCK`` records decoded at a time.
    """
    src = gather(cfg, {partition: cols})
    blocks = []
    for unordered in _classified_blocks(cfg, src):
        block = unordered.sort("i")
        del unordered
        at = block.get_column("i")
        rejected = pl.col("reason").is_not_null()
        raw = [
            src.offset.gather(at).alias("offset"),
            *(pl.when(rejected).then(getattr(src, name).gather(at)).alias(name)
              for name in ("key", "value", "reserved")),
        ]
        blocks.append(block.with_columns(raw).select(STORED))
        del block
    return pl.concat(blocks)


def derive_rows(cfg: Config, rows: pl.DataFrame | pl.LazyFrame) -> OracleResult:
    """``derive`` over kept classified rows (``classify_partition``) of one partition.

    ``rows`` hold every record of the partition's history once, in any order; of a lazy
    frame (a scan of kept rows) only the columns and rows needed are read: accepted
    records' canonical members, and rejected records whole.
    """
    rows = rows.lazy()
    rejected_rows, accepted = pl.collect_all([
        rows.filter(pl.col("reason").is_not_null()).sort("offset"),
        rows.filter(pl.col("reason").is_null()).select(_CANONICAL),
    ])  # together: a scan shared by both is read once
    source = cfg.source_incarnation
    rejected = [
        Record(v, k, Coordinates(source, p, o), bool(r))
        for o, p, k, v, r in zip(*(rejected_rows.get_column(c).to_list()
                                   for c in ("offset", "partition", "key", "value", "reserved")), strict=True)
    ]
    with gc_paused():
        return _derive(cfg, rejected, rejected_rows, accepted)


def _per_key(frame: pl.DataFrame, make: Callable[..., T], columns: Sequence[str]) -> dict[int, tuple[T, ...]]:
    """``make(*row)`` for every row of ``frame`` (each key's rows adjacent), grouped by ``kid``.

    Builds the output rows column-wise: one slice of each column per key.
    """
    runs = frame.get_column("kid").rle()
    values = [frame.get_column(c).to_list() for c in columns]
    out: dict[int, tuple[T, ...]] = {}
    at = 0
    for kid, n in zip(runs.struct.field("value").to_list(), runs.struct.field("len").to_list(), strict=True):
        out[kid] = tuple(map(make, *(v[at : at + n] for v in values)))
        at += n
    return out


def _derive(
    cfg: Config, rejected: Sequence[Record], rejected_rows: pl.DataFrame, accepted: pl.DataFrame
) -> OracleResult:
    stock_keys, key_table = _key_table(cfg)
    rejections = tuple(
        Rejection(record, RejectReason(row["reason"]), _detail(row))
        for record, row in zip(rejected, rejected_rows.iter_rows(named=True), strict=True)
    )

    touched = set(accepted.get_column("kid").unique().to_list())
    conflicts_df, blocked_df, daily_df = _by_key_parts(accepted, key_table)
    del accepted

    overflow = daily_df.filter(
        (pl.col("close") > pl.lit(INT64_MAX, dtype=pl.Int128))
        | (pl.col("close") < pl.lit(INT64_MIN, dtype=pl.Int128))
    )
    if len(overflow):
        first = overflow.row(0, named=True)
        raise CloseOutOfRange(stock_keys[first["kid"]], first["day"], first["close"])

    reasons: dict[int, list[ConflictRef]] = {}
    for kid, txn_id, revision in blocked_df.iter_rows():
        reasons.setdefault(kid, []).append(ConflictRef(txn_id, revision))
    daily_df = daily_df.with_columns(pl.col("close").cast(pl.Int64))  # checked above
    balances = _per_key(daily_df, BalanceRow, ("day", "close"))
    alerts = _per_key(daily_df.filter(pl.col("crossing")), AlertRow, ("day", "threshold", "close"))

    projections: dict[StockKey, Projection] = {}
    reason_counts: dict[StockKey, int] = {}
    for kid in touched:
        key = stock_keys[kid]
        if kid in reasons:
            carried = tuple(sorted(reasons[kid])[: limits.MAX_STATUS_REASONS])
            projections[key] = Projection(key, Status.BLOCKED, carried, (), ())
            reason_counts[key] = len(reasons[kid])
        else:
            projections[key] = Projection(
                key,
                Status.READY,
                (),
                tuple(balances.get(kid, ())),
                tuple(alerts.get(kid, ())),
            )
    conflicts = [
        Conflict(stock_keys[kid], txn_id, revision) for kid, txn_id, revision in conflicts_df.iter_rows()
    ]
    refs = [RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason) for r in rejections]
    return OracleResult(
        ComputeResult.build(cfg, projections, refs, conflicts), rejections, reason_counts
    )


__all__ = [
    "Classified",
    "Columns",
    "OracleInputError",
    "OracleResult",
    "Source",
    "classify",
    "compute",
    "derive",
    "gather",
]
