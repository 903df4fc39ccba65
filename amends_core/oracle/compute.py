"""Full-history recomputation from raw source records, over whole Polars columns.

Route: check configuration and coordinates; decode every value and transport
key through the oracle's own decoder; classify rejections with one ordered
``when`` chain; among accepted assertions find the distinct canonical
candidates of every (key, txn_id, revision); record a conflict wherever there
is more than one; take each identity's highest revision as authority (BLOCKED
when that revision is conflicted); sum active quantities per key and UTC day in
Int128; cumulate closes from the opening balance; mark downward crossings.

Nothing here looks at how the incremental path got its answer: no evidence,
suffix repair, output versions or view state. Python loops touch only input
coordinates (to build columns), rejected records and output rows.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter

import polars as pl

from amends_core import timefmt
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
    Kind,
    Projection,
    Record,
    Rejection,
    RejectReason,
    Status,
    StockKey,
)
from amends_core.oracle.decode import decode_keys, decode_values, gc_paused
from amends_core.result import ComputeResult, RejectionRef

_SECONDS_PER_DAY = 86_400


class OracleInputError(ValueError):
    """Configuration or source coordinates cannot be recomputed; one line says why."""


@dataclass(frozen=True, slots=True)
class OracleResult:
    """What the oracle derived from the full history."""

    result: ComputeResult
    """Same shape and, when no close overflows, same value as the incremental engine."""
    rejections: tuple[Rejection, ...]
    """Every rejected raw record with its reason, sorted by coordinates."""

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


def _ordered_records(cfg: Config, by_partition: Mapping[int, Sequence[Record]]) -> list[Record]:
    """All records in (partition, offset) order after checking their coordinates."""
    source = cfg.source_incarnation
    for p, recs in by_partition.items():
        if type(p) is not int or not 0 <= p < cfg.partitions:
            msg = f"partition {p!r} is outside 0..{cfg.partitions - 1}"
            raise OracleInputError(msg)
        if not recs:
            continue
        sources = set(map(attrgetter("coords.source"), recs))
        if sources != {source}:
            other = sorted(s for s in sources if s != source)[0]
            msg = f"partition {p} holds a record from source {other!r}, expected {source!r}"
            raise OracleInputError(msg)
        parts = set(map(attrgetter("coords.partition"), recs))
        if parts != {p}:
            other_p = sorted(x for x in parts if x != p)[0]
            msg = f"records listed under partition {p} carry partition {other_p}"
            raise OracleInputError(msg)
        offsets = pl.Series(list(map(attrgetter("coords.offset"), recs)), dtype=pl.Int64)
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
    return list(itertools.chain.from_iterable(by_partition[p] for p in sorted(by_partition)))


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


def _source_frame(records: list[Record]) -> pl.DataFrame:
    values = pl.Series("value", list(map(attrgetter("value"), records)), dtype=pl.Binary)
    keys = pl.Series("key", list(map(attrgetter("key"), records)), dtype=pl.Binary)
    meta = pl.DataFrame(
        {
            "i": pl.Series(range(len(records)), dtype=pl.Int64),
            "partition": pl.Series(
                list(map(attrgetter("coords.partition"), records)), dtype=pl.Int64
            ),
        }
    )
    return pl.concat([meta, decode_values(values), decode_keys(keys)], how="horizontal")


def _reason(cfg: Config) -> pl.Expr:
    """The first broken rule, in the documented order; null when accepted."""
    c = pl.col
    origin_s, origin_nanos = divmod(cfg.origin_ns, timefmt.NS_PER_SECOND)
    day = c("valid_s") // _SECONDS_PER_DAY
    before_origin = (c("valid_s") < origin_s) | (
        (c("valid_s") == origin_s) & (c("valid_nanos") < origin_nanos)
    )
    key_differs = (
        c("tk_item").is_null() | (c("tk_item") != c("item")) | (c("tk_location") != c("location"))
    )
    chain = (
        pl.when(c("error").is_not_null())
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


def _authority(accepted: pl.LazyFrame) -> tuple[pl.LazyFrame, pl.LazyFrame, pl.LazyFrame]:
    """(conflicts, blocked identities, active contributions) from accepted assertions."""
    canonical = ["kid", "txn_id", "revision", "kind", "valid_s", "valid_nanos", "qty"]
    groups = (
        accepted.select(canonical)
        .unique()
        .group_by("kid", "txn_id", "revision")
        .agg(
            pl.len().alias("candidates"),
            pl.col("kind").first(),
            pl.col("valid_s").first(),
            pl.col("qty").first(),
        )
    )
    conflicts = groups.filter(pl.col("candidates") > 1).select("kid", "txn_id", "revision")
    highest = groups.filter(pl.col("revision") == pl.col("revision").max().over("kid", "txn_id"))
    blocked = highest.filter(pl.col("candidates") > 1).select("kid", "txn_id", "revision")
    active = (
        highest.filter((pl.col("candidates") == 1) & (pl.col("kind") != Kind.CANCEL.value))
        .join(blocked.select("kid").unique(), on="kid", how="anti")
        .select("kid", (pl.col("valid_s") // _SECONDS_PER_DAY).alias("day"), "qty")
    )
    return conflicts, blocked, active


def _daily(active: pl.LazyFrame, key_table: pl.DataFrame) -> pl.LazyFrame:
    """Closes and crossings per (key, activity day), exact in Int128."""
    return (
        active.group_by("kid", "day")
        .agg(pl.col("qty").cast(pl.Int128).sum().alias("total"))
        .join(key_table.lazy().select("kid", "opening", "threshold"), on="kid")
        .sort("kid", "day")
        .with_columns(
            (pl.col("opening").cast(pl.Int128) + pl.col("total").cum_sum().over("kid")).alias(
                "close"
            )
        )
        .with_columns((pl.col("close") - pl.col("total")).alias("before"))
        .with_columns(
            (
                (pl.col("before") >= pl.col("threshold")) & (pl.col("close") < pl.col("threshold"))
            ).alias("crossing")
        )
        .select("kid", "day", "close", "threshold", "crossing")
    )


# ---------------------------------------------------------------- entry point


def compute(cfg: Config, by_partition: Mapping[int, Sequence[Record]]) -> OracleResult:
    """Recompute every business fact from raw records (per partition, in offset order).

    Raises OracleInputError for an unusable configuration or incompatible
    coordinates, and CloseOutOfRange (naming key and day) when a daily close of
    a key that is not BLOCKED leaves signed 64-bit.
    """
    _check_config(cfg)
    with gc_paused():
        return _compute(cfg, by_partition)


def _compute(cfg: Config, by_partition: Mapping[int, Sequence[Record]]) -> OracleResult:
    records = _ordered_records(cfg, by_partition)
    stock_keys, key_table = _key_table(cfg)
    frame = (
        _source_frame(records)
        .join(key_table, on=["item", "location"], how="left")
        .with_columns(_reason(cfg).alias("reason"))
    )

    rejected_rows = (
        frame.filter(pl.col("reason").is_not_null())
        .select(
            "i",
            "reason",
            "error",
            "tk_error",
            "revision",
            "kind",
            "qty",
            "partition",
            "k_partition",
        )
        .sort("i")
    )
    rejections = tuple(
        Rejection(records[row["i"]], RejectReason(row["reason"]), _detail(row))
        for row in rejected_rows.iter_rows(named=True)
    )

    accepted = frame.lazy().filter(pl.col("reason").is_null())
    conflicts_lf, blocked_lf, active_lf = _authority(accepted)
    conflicts_df, blocked_df, daily_df = pl.collect_all(
        [conflicts_lf, blocked_lf, _daily(active_lf, key_table)]
    )
    touched = set(accepted.select("kid").unique().collect().get_column("kid").to_list())

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
    balances: dict[int, list[BalanceRow]] = {}
    alerts: dict[int, list[AlertRow]] = {}
    for kid, day, close, threshold, crossing in daily_df.iter_rows():
        balances.setdefault(kid, []).append(BalanceRow(day, close))
        if crossing:
            alerts.setdefault(kid, []).append(AlertRow(day, threshold, close))

    projections: dict[StockKey, Projection] = {}
    for kid in touched:
        key = stock_keys[kid]
        if kid in reasons:
            projections[key] = Projection(key, Status.BLOCKED, tuple(sorted(reasons[kid])), (), ())
        else:
            projections[key] = Projection(
                key,
                Status.READY,
                (),
                tuple(balances.get(kid, ())),
                tuple(alerts.get(kid, ())),
            )
    conflicts = [
        Conflict(stock_keys[kid], txn_id, revision)
        for kid, txn_id, revision in conflicts_df.iter_rows()
    ]
    refs = [
        RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)
        for r in rejections
    ]
    return OracleResult(ComputeResult.build(cfg, projections, refs, conflicts), rejections)


__all__ = ["OracleInputError", "OracleResult", "compute"]
