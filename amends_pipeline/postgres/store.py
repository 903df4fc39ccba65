"""Durable processing store on PostgreSQL: fenced ownership, atomic batches, ordered outbox.

Semantics are those of ``amends_core.store.memory.MemoryStore``; the
differences are real transactions, row locks and batches.

Resume contract: ``frontier(p)`` is the *exclusive* next source offset of
partition ``p``. Every delivered offset below it is either applied (its
evidence row is in ``observations``), quarantined (its raw record is in
``quarantine``) or skipped by an operator after its processing failed (its
raw record and the audit entry are in ``operator_skips``, see ``skip``),
exactly one of them. A batch installs its evidence,
projection, output intent, outbox rows or quarantine, and the new frontier in
one transaction, or nothing at all. Reprocessing from a frontier that is one
too high would silently skip a record; one too low is refused (the frontier
check) rather than double-applied.

Fencing: ``claim(p)`` increments the partition's epoch under the partition row
lock. A processing transaction takes the same lock (``SELECT ... FOR
UPDATE``) and then checks namespace, configuration digest, epoch and expected
frontier before doing anything, so a replaced owner can never commit: if the
claim commits first the old owner's check fails; if the old owner holds the
lock first the claim waits for it and installs the new epoch afterwards.

Per-key state is read at most once per batch (in one set-based query per
table) and written once at its end. With ``cache=True`` (the default) the
store keeps the key states it loaded between batches and trusts them only
while the partition row still shows the (epoch, frontier) its own last commit
installed: anybody else's commit would have had to claim a new epoch first.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import secrets
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg

from amends_core import fence, fold, preflight
from amends_core.errors import CommitUnknown as LostReply  # any adapter's; the core hands back ours
from amends_core.errors import (
    OutboxOrderError,
    SourceMismatch,
)
from amends_core.ledger import (
    Config,
    Conflict,
    Coordinates,
    Envelope,
    KeyConfig,
    OutputID,
    Projection,
    Record,
    Rejection,
    RejectReason,
    StockKey,
)
from amends_core.ports import Token
from amends_pipeline.postgres import codec
from amends_pipeline.postgres import migrate as migrations
from amends_pipeline.postgres.batch import (
    BatchContext,
    BatchResult,
    BatchState,
    KeyCache,
    PendingCommit,
    ProcessingTx,
    guard_ownership,
)
from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, Database
from amends_pipeline.postgres.errors import (
    BatchAborted,
    CommitUnknown,
    ConfigMismatch,
    StoreError,
)
from amends_pipeline.postgres.namespace import lookup_namespace, register_namespace
from amends_pipeline.postgres.sql import (
    CLAIM,
    CURRENT_STOPS,
    LOAD_DAYS,
    LOAD_OBSERVATIONS,
    LOAD_OUTPUTS,
    LOCK_PARTITION,
    OBSERVE_CLAIM,
    READ_SKIP,
    READ_SKIPS,
)
from amends_pipeline.postgres.wake import outbox_channel

# ---------------------------------------------------------------- values

_RESERVED = RejectReason.RESERVED_HEADER.value
"""Quarantine rows of this reason came from messages carrying the reserved marker header."""
_REASONS = {r.value: r for r in RejectReason}
"""A stored reason's member by a dictionary look-up (calling the enum costs 6 us a row, 0.3 s
over the 50,000 rejections of a ten million record history)."""

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class PartitionProgress:
    epoch: int
    next: int
    """Exclusive source frontier."""
    sequence: int
    """Last outbox sequence committed (0 = none)."""
    acked: int
    """Outbox rows 1..acked are acknowledged."""


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One outbox row as stored: the exact bytes to publish and its receipt."""

    partition: int
    sequence: int
    envelope: bytes
    acked: bool
    output_partition: int | None
    output_offset: int | None


@dataclass(frozen=True, slots=True)
class Measurement:
    """One committed batch, as sampled in the ``measurements`` table."""

    partition: int
    batch: int
    first_offset: int | None
    next_offset: int
    records: int
    rejected: int
    envelopes: int
    compute_us: int


@dataclass(frozen=True, slots=True)
class SkipEntry:
    """One operator skip as audited in ``operator_skips``."""

    partition: int
    offset: int
    reason: str
    operator: str
    skipped_at: datetime
    error: str
    """The operation error processing the record raised."""
    epoch: int
    """The ownership epoch the skip claimed (older owners are fenced out)."""
    frontier_before: int
    value_sha256: str
    value_size: int

    @property
    def when(self) -> str:
        """``skipped_at`` in UTC, ISO 8601 to the second."""
        return self.skipped_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class PartitionStop:
    """The operation error a worker stopped on, while the frontier has not passed it."""

    partition: int
    offset: int
    error: str
    stopped_at: datetime



@dataclass(frozen=True, slots=True)
class ProcessingSnapshot:
    """Processing state read in one REPEATABLE READ transaction."""

    cfg: Config
    partitions: dict[int, PartitionProgress]
    keys: dict[StockKey, fold.KeyState]
    """Evidence and projection per key (empty when taken with ``evidence=False``)."""
    outputs: dict[OutputID, Envelope]
    """Latest committed envelope per output ID (empty when taken with ``evidence=False``)."""
    outbox: dict[int, tuple[OutboxEntry, ...]]
    rejections: tuple[Rejection, ...]
    """Quarantine in (partition, offset) order."""
    conflict_list: tuple[Conflict, ...]
    skips: tuple[SkipEntry, ...] = ()
    """Operator skips in (partition, offset) order."""
    stops: tuple[PartitionStop, ...] = ()
    """Partitions stopped by an operation error the frontier has not passed."""

    def frontier(self, partition: int) -> int:
        return self.partitions[partition].next

    def pending(self, partition: int) -> tuple[OutboxEntry, ...]:
        return tuple(e for e in self.outbox.get(partition, ()) if not e.acked)

    def conflicts(self) -> list[Conflict]:
        """Every conflict observed, current and superseded, sorted."""
        return list(self.conflict_list)

    def projection(self, key: StockKey) -> Projection:
        return self.keys[key].projection()


# ---------------------------------------------------------------- the store


PENDING_OUTBOX = (
    "SELECT o.sequence, o.envelope FROM outbox o"
    " WHERE o.ns_id = %s AND o.partition = %s AND o.sequence > ("
    "SELECT r.acked_sequence FROM relay_progress r WHERE r.ns_id = %s AND r.partition = %s)"
    " ORDER BY o.sequence LIMIT %s"
)
"""The earliest pending outbox rows of a partition (params: ns_id, partition, ns_id, partition, limit).

The acknowledged sequence is a scalar subquery, so the rows are read in primary-key order
and the LIMIT ends the scan: a join on relay_progress let the planner sort every pending
row first, and each relay batch cost grew with the backlog. ``pending`` reads it with
binary results (envelopes arrive as bytes, not hex text to decode)."""

PENDING_RECEIPTS = (
    "SELECT first_sequence, output_partition, first_offset FROM outbox_receipts"
    " WHERE ns_id = %s AND partition = %s AND first_sequence BETWEEN %s AND %s"
)
"""Receipts recorded for pending rows (each a run of one row) in a sequence range."""


def receipt_runs(receipts: Sequence[tuple[int, int | None]]) -> list[tuple[int, int, int]]:
    """(first sequence, last sequence, first offset) runs of consecutive sequences that landed
    at consecutive offsets; rows without an offset belong to no run."""
    runs: list[tuple[int, int, int]] = []
    for seq, off in receipts:
        if off is None:
            continue
        if runs:
            first, last, first_off = runs[-1]
            if seq == last + 1 and off == first_off + (seq - first):
                runs[-1] = (first, seq, first_off)
                continue
        runs.append((seq, seq, off))
    return runs


CONSUMED_OFFSETS_PER_ARRAY = 1 << 22
"""Offsets ``consumed_offsets`` reads in one array value (a range of that many offsets:
32 MiB at most)."""


class PgStore:
    """Processing state of one namespace in PostgreSQL. One instance per worker thread."""

    def __init__(
        self,
        db: Database,
        cfg: Config,
        ns_id: int,
        key_ids: dict[StockKey, int],
        *,
        cache: bool = True,
    ) -> None:
        self.db = db
        self.cfg = cfg
        self.digest = cfg.digest()
        self.ns_id = ns_id
        self.key_ids = key_ids
        self._kc: dict[StockKey, KeyConfig] = {kc.key: kc for kc in cfg.keys}
        self._kc_by_id: dict[int, KeyConfig] = {key_ids[kc.key]: kc for kc in cfg.keys}
        self._batches = BatchState(cache)
        """Key caches, staging session and decoded transport keys, shared with transactions."""
        self._context = BatchContext(
            db, cfg, self.digest, ns_id, key_ids, self._kc, self._kc_by_id, self._batches,
            self._label, self._check_partition, self._load_keys,
        )
        """All a processing transaction sees of this store."""
        self.outbox_channel = outbox_channel(db.schema, cfg.namespace)
        """Notified by every processing commit (``wake``): a relay's wake-up, carrying no data."""

    @property
    def cache(self) -> bool:
        """Whether key states are kept between batches (``cache=`` at construction)."""
        return self._batches.cache

    @classmethod
    def open(
        cls,
        conninfo: str,
        cfg: Config,
        *,
        schema: str = DEFAULT_SCHEMA,
        cache: bool = True,
        migrate: bool = False,
        application_name: str = "amends-worker",
        read_only: bool = False,
    ) -> PgStore:
        """Connect, optionally migrate, and register the namespace (idempotent).

        ``read_only``: neither migrate nor register; look the namespace up and
        raise NamespaceUnknown when it was never provisioned (for commands that
        only read). Raises StoreUnavailable, SchemaError (not migrated) or ConfigMismatch.
        """
        cfg.validate()
        if migrate and not read_only:
            migrations.migrate(conninfo, schema)
        db = Database(conninfo, schema, application_name=application_name)
        try:
            ns_id, key_ids = (lookup_namespace if read_only else register_namespace)(db, cfg)
        except BaseException:
            db.close()
            raise
        return cls(db, cfg, ns_id, key_ids, cache=cache)

    def close(self) -> None:
        self.db.close()
        self._batches.caches.clear()

    def __enter__(self) -> PgStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _label(self, what: str) -> str:
        return self.db.label(f"{what} (namespace {self.cfg.namespace!r})")

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.cfg.partitions:
            msg = f"partition {partition} is not configured (0..{self.cfg.partitions - 1})"
            raise SourceMismatch(msg)

    # ------------------------------------------------------------ ownership

    @staticmethod
    def new_nonce() -> str:
        """A fresh random claimant nonce (128 bits, hex); one per claim."""
        return secrets.token_hex(16)

    def claim(self, partition: int, nonce: str | None = None) -> Token:
        """Install a new ownership epoch (waiting for a running batch); older tokens stop.

        The claim installs ``nonce`` (default: a fresh one) with the epoch. A
        lost reply raises CommitUnknown: forget any token and settle it with
        ``settle_claim(partition, nonce, error)``, which adopts the installed
        epoch only when the installed nonce is this claim's.
        """
        self._check_partition(partition)
        mine = nonce or self.new_nonce()
        self._batches.forget(partition)
        with self.db.transaction(self._label(f"claiming partition {partition}")) as conn:
            row = conn.execute(CLAIM, (mine, self.ns_id, partition)).fetchone()
            assert row is not None
            if row[1] != self.digest:
                msg = f"namespace {self.cfg.namespace!r} is registered with another configuration"
                raise ConfigMismatch(msg)
        return Token(self.cfg.namespace, self.digest, partition, row[0])

    def settle_claim(
        self, partition: int, nonce: str, unknown: LostReply | None = None
    ) -> Token | None:
        """After an unknown claim outcome: the installed token if the claim with ``nonce`` installed it.

        The server process that received the claim's COMMIT (``unknown.backend``)
        is terminated first, if it still exists, and the partition row lock is
        taken, so the answer is final. None means the installed epoch is not
        this claimant's (the claim did not land, or another claimant's landed
        since): claim again, never adopt it.
        """
        if not nonce:
            msg = "settling a claim needs the claimant's nonce"
            raise ValueError(msg)
        self._check_partition(partition)
        self._batches.forget(partition)
        label = self._label(f"settling an unknown claim on partition {partition}")
        with self.db.transaction(label) as conn:
            if unknown is not None:
                self.db.end_backend(conn, unknown.backend)
            row = conn.execute(OBSERVE_CLAIM, (self.ns_id, partition)).fetchone()
        assert row is not None
        epoch, installed = row
        if installed != nonce:
            return None
        return Token(self.cfg.namespace, self.digest, partition, epoch)

    def observe(self, partition: int) -> Token:
        """The currently installed token, whoever claimed it (inspection; a worker settles a
        lost claim reply with ``settle_claim`` instead of adopting this)."""
        return Token(self.cfg.namespace, self.digest, partition, self.progress(partition).epoch)

    def frontier(self, partition: int) -> int:
        """The exclusive source frontier of a partition."""
        return self.progress(partition).next

    def progress(self, partition: int) -> PartitionProgress:
        self._check_partition(partition)
        with self.db.transaction(self._label(f"reading partition {partition}")) as conn:
            row = conn.execute(
                "SELECT p.epoch, p.next_offset, p.last_sequence, r.acked_sequence"
                " FROM partitions p JOIN relay_progress r"
                " ON r.ns_id = p.ns_id AND r.partition = p.partition"
                " WHERE p.ns_id = %s AND p.partition = %s",
                (self.ns_id, partition),
            ).fetchone()
        assert row is not None
        return PartitionProgress(*row)

    # ------------------------------------------------------------ processing

    def begin(
        self, token: Token, expected_next: int, after: PendingCommit | None = None
    ) -> ProcessingTx:
        """Open a fenced processing transaction (partition row locked, guard checked).

        ``after``: the partition's previous batch, still committing (``process_ahead``);
        the transaction folds ahead from the state it left and locks once it has committed.
        """
        return ProcessingTx(self._context, token, expected_next, after)

    def process(
        self,
        token: Token,
        expected_next: int,
        records: Iterable[Record],
        until: int | None = None,
    ) -> BatchResult:
        """Process a batch in one fenced transaction; all of it commits or none of it.

        ``until`` is the exclusive end of the source range the batch was read
        from: the frontier moves there even when the range's last offsets (or
        all of them) delivered nothing, as transaction control records, aborted
        transactional records and compaction gaps do. Without it the frontier
        moves to the last record's offset + 1.

        Raises FenceError (replaced owner, other configuration), FrontierMismatch,
        SourceMismatch (coordinates, or ``until`` below a record), BatchAborted (a
        record hit an operation error such as CloseOutOfRange; nothing committed),
        StoreUnavailable (nothing committed) or CommitUnknown (resolve with
        ``resolve_unknown``).
        """
        return self._batch(token, expected_next, records, until, None, ProcessingTx.commit)

    def process_ahead(
        self,
        token: Token,
        expected_next: int,
        records: Iterable[Record],
        until: int | None = None,
        after: PendingCommit | None = None,
    ) -> PendingCommit:
        """``process`` with the batch's writes and COMMIT left running on a background thread.

        Returns once the batch is folded and sealed; ``result()`` of the returned value
        is its outcome, raising what ``process`` would raise at commit (StoreUnavailable,
        CommitUnknown). Pass it as ``after`` of the partition's next batch, which then
        folds while this one commits (one commit in flight, one batch folding): that
        batch locks the partition only after this one has committed, and if this one did
        not commit, raises PredecessorFailed having written nothing. Errors of the fold
        itself (BatchAborted, fences, SourceMismatch) are raised here, as by ``process``.
        Nothing else reaches the database until the commit in flight has finished.
        """
        return self._batch(token, expected_next, records, until, after, ProcessingTx.commit_ahead)

    def _batch(
        self,
        token: Token,
        expected_next: int,
        records: Iterable[Record],
        until: int | None,
        after: PendingCommit | None,
        finish: Callable[[ProcessingTx], R],
    ) -> R:
        """One batch folded in a fenced transaction, then ``finish``ed (committed now or ahead)."""
        try:
            with self.begin(token, expected_next, after) as tx:
                tx.apply(records)
                if until is not None:
                    tx.advance_to(until)
                tx.notify(self.outbox_channel)  # wakes an idle relay once this commits
                return finish(tx)
        except BatchAborted as e:
            self._note_stop(e)
            raise

    # ------------------------------------------------------------ operation errors and skips

    def _note_stop(self, e: BatchAborted) -> None:
        """Record which record stopped the partition (diagnostics only; never masks ``e``)."""
        cause = e.__cause__
        text = f"{type(cause).__name__}: {cause}" if cause is not None else str(e)
        try:
            with self.db.transaction(self._label(f"recording the stop of partition {e.partition}")) as conn:
                conn.execute(
                    "INSERT INTO partition_stops (ns_id, partition, src_offset, error)"
                    " VALUES (%s, %s, %s, %s) ON CONFLICT (ns_id, partition) DO UPDATE"
                    " SET src_offset = excluded.src_offset, error = excluded.error,"
                    " stopped_at = now()",
                    (self.ns_id, e.partition, e.offset, text),
                )
        except StoreError:
            pass  # the operation error is what the caller must see

    def stops(self) -> list[PartitionStop]:
        """Partitions stopped by an operation error that the frontier has not moved past."""
        with self.db.transaction(self._label("reading stopped partitions"), snapshot=True) as conn:
            rows = conn.execute(CURRENT_STOPS, (self.ns_id,)).fetchall()
        return [PartitionStop(*r) for r in rows]

    def skips(self) -> list[SkipEntry]:
        """Every operator skip of the namespace, in (partition, offset) order."""
        with self.db.transaction(self._label("reading operator skips"), snapshot=True) as conn:
            return self._read_skips(conn)

    def _read_skips(
        self, conn: psycopg.Connection[Any], at: tuple[int, int] | None = None
    ) -> list[SkipEntry]:
        """Every skip of the namespace, or only the one at ``at`` = (partition, offset)."""
        if at is None:
            rows = conn.execute(READ_SKIPS, (self.ns_id,)).fetchall()
        else:
            rows = conn.execute(READ_SKIP, (self.ns_id, *at)).fetchall()
        return [SkipEntry(*r) for r in rows]

    def skipped(self, partition: int, offset: int) -> SkipEntry | None:
        """The audit entry of an operator skip of exactly this offset, if there is one."""
        self._check_partition(partition)
        with self.db.transaction(self._label("reading operator skips"), snapshot=True) as conn:
            found = self._read_skips(conn, (partition, offset))
        return found[0] if found else None

    def probe(self, partition: int, expected_next: int, record: Record) -> BatchAborted | None:
        """Process ``record`` at the installed state and roll back: the operation error, or None.

        Runs under the currently installed epoch (observed, never claimed) in a
        transaction that never commits, so it changes nothing; FenceError or
        FrontierMismatch when ownership or the frontier moved meanwhile.
        """
        token = self.observe(partition)
        with self.begin(token, expected_next) as tx:
            try:
                tx.apply([record])
            except BatchAborted as e:
                return e
        return None

    def skip(
        self,
        token: Token,
        expected_next: int,
        record: Record,
        *,
        error: str,
        reason: str,
        operator: str,
    ) -> SkipEntry:
        """Move the frontier past ``record`` without applying it, with an audit entry.

        One fenced transaction, guarded like a batch (namespace, configuration,
        epoch, expected frontier): the audit row (raw record, its SHA-256 and
        size, error, reason, operator, epoch, time) and the new frontier
        ``record offset + 1`` commit together or not at all. Whether the record
        is the one processing stops on is the caller's check (``probe``).
        Raises FenceError, FrontierMismatch, SourceMismatch, StoreUnavailable or
        CommitUnknown (settle with ``settle_skip``).
        """
        p, c = token.partition, record.coords
        fence.check_scope(token, namespace=self.cfg.namespace, digest=self.digest)
        self._check_partition(p)
        if c.source != self.cfg.source_incarnation or c.partition != p or c.offset < expected_next:
            msg = (
                f"cannot skip {c.partition}/{c.offset} of {c.source!r} on partition {p}"
                f" at frontier {expected_next}"
            )
            raise SourceMismatch(msg)
        self._batches.forget(p)
        digest = hashlib.sha256(record.value).hexdigest()
        with self.db.transaction(self._label(f"skipping {p}/{c.offset}")) as conn:
            row = conn.execute(LOCK_PARTITION, (self.ns_id, p)).fetchone()
            assert row is not None
            epoch, installed, _, _, registered = row
            guard_ownership(self.cfg, token, expected_next, registered, epoch, installed)
            at = conn.execute(
                "INSERT INTO operator_skips (ns_id, partition, src_offset, source, raw_value,"
                " raw_key, value_sha256, value_size, error, reason, operator, epoch,"
                " frontier_before) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " RETURNING skipped_at",
                (self.ns_id, p, c.offset, c.source, record.value, record.key, digest,
                 len(record.value), error, reason, operator, epoch, expected_next),
            ).fetchone()
            assert at is not None
            conn.execute(
                "UPDATE partitions SET next_offset = %s, last_commit_at = now()"
                " WHERE ns_id = %s AND partition = %s",
                (c.offset + 1, self.ns_id, p),
            )
            conn.execute(
                "DELETE FROM partition_stops WHERE ns_id = %s AND partition = %s"
                " AND src_offset <= %s",
                (self.ns_id, p, c.offset),
            )
        return SkipEntry(p, c.offset, reason, operator, at[0], error, epoch, expected_next,
                         digest, len(record.value))

    def settle_skip(self, unknown: CommitUnknown, partition: int, offset: int) -> SkipEntry | None:
        """After a lost reply to ``skip``: its audit entry if it committed, else None (final)."""
        self._batches.forget(partition)
        with self.db.transaction(self._label(f"settling an unknown skip of {partition}/{offset}")) as conn:
            self.db.end_backend(conn, unknown.backend)
            conn.execute(OBSERVE_CLAIM, (self.ns_id, partition))
            found = self._read_skips(conn, (partition, offset))
        return found[0] if found else None

    def resolve_unknown(self, unknown: LostReply) -> bool:
        """Settle a lost commit reply by re-reading the installed frontier: True if it committed.

        The server process that received the COMMIT is terminated first (if it
        still exists), and the partition row lock is taken, so the answer is
        final: that transaction can no longer commit afterwards.
        """
        p = unknown.partition
        if p is None or unknown.before is None or unknown.after is None:
            msg = f"{unknown.operation}: not a processing commit; re-read state instead"
            raise StoreError(msg)
        self._batches.forget(p)
        label = self._label(f"resolving an unknown commit on partition {p}")
        with self.db.transaction(label) as conn:
            self.db.end_backend(conn, unknown.backend)
            row = conn.execute(
                "SELECT next_offset FROM partitions WHERE ns_id = %s AND partition = %s"
                " FOR UPDATE",
                (self.ns_id, p),
            ).fetchone()
        assert row is not None
        return fence.settled(p, row[0], before=unknown.before, after=unknown.after)

    # ------------------------------------------------------------ key state

    def _load_keys(
        self,
        conn: psycopg.Connection[Any],
        cache: KeyCache,
        keys: Collection[StockKey],
        *,
        compact: bool = False,
    ) -> None:
        """Read evidence, days and outputs of ``keys`` (one query per table); ``compact``
        builds compact key states (the processing cache's)."""
        ids = sorted(self.key_ids[k] for k in keys)
        obs = conn.execute(LOAD_OBSERVATIONS, (ids,)).fetchall()
        days = conn.execute(LOAD_DAYS, (ids,)).fetchall()
        outs = conn.execute(LOAD_OUTPUTS, (ids,)).fetchall()
        obs_by = {k: [r[1:] for r in g] for k, g in itertools.groupby(obs, key=lambda r: r[0])}
        days_by = {k: [r[1:] for r in g] for k, g in itertools.groupby(days, key=lambda r: r[0])}
        src = self.cfg.source_incarnation
        for kid in ids:
            kc = self._kc_by_id[kid]
            cache.keys[kc.key] = codec.rebuild_key_state(
                kc, src, obs_by.get(kid, ()), days_by.get(kid, ()), compact=compact
            )
        ns = self.cfg.namespace
        for r in outs:
            env = codec.envelope_from_row(ns, self._kc_by_id[r[0]], src, r[1:])
            cache.outputs[env.output_id] = env

    # ------------------------------------------------------------ outbox

    def pending(self, partition: int, limit: int = 1) -> list[OutboxEntry]:
        """The earliest unacknowledged outbox rows of a partition, in sequence order."""
        self._check_partition(partition)
        with self.db.transaction(self._label(f"reading pending outbox of {partition}")) as conn:
            rows = conn.execute(
                PENDING_OUTBOX, (self.ns_id, partition, self.ns_id, partition, limit), binary=True
            ).fetchall()
            got: dict[int, tuple[int, int]] = {}
            if rows:
                got = {
                    s: (op, oo)
                    for s, op, oo in conn.execute(
                        PENDING_RECEIPTS, (self.ns_id, partition, rows[0][0], rows[-1][0])
                    )
                }
        out = []
        for s, e in rows:
            op, oo = got.get(s, (None, None))
            out.append(OutboxEntry(partition, s, bytes(e), False, op, oo))
        return out

    def pending_count(self, partition: int) -> int:
        p = self.progress(partition)
        return p.sequence - p.acked

    def record_receipt(
        self,
        partition: int,
        sequence: int,
        output_offset: int,
        *,
        output_partition: int | None = None,
    ) -> None:
        """Record where a publication of a pending row landed (a retry may overwrite it)."""
        self._check_partition(partition)
        label = self._label(f"recording receipt of {partition}/{sequence}")
        with self.db.transaction(label) as conn:
            acked = self._lock_relay(conn, partition)
            if sequence <= acked:
                msg = f"receipt for {sequence} on partition {partition}: already acknowledged"
                raise OutboxOrderError(msg)
            exists = conn.execute(
                "SELECT 1 FROM outbox WHERE ns_id = %s AND partition = %s AND sequence = %s",
                (self.ns_id, partition, sequence),
            ).fetchone()
            if exists is None:
                msg = f"receipt for {sequence} on partition {partition}: no such outbox row"
                raise OutboxOrderError(msg)
            # Above the acknowledged prefix every run is a run of one row: a retry replaces it.
            conn.execute(
                "INSERT INTO outbox_receipts (ns_id, partition, first_sequence, last_sequence,"
                " output_partition, first_offset) VALUES (%s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (ns_id, partition, first_sequence) DO UPDATE"
                " SET output_partition = excluded.output_partition,"
                " first_offset = excluded.first_offset",
                (
                    self.ns_id,
                    partition,
                    sequence,
                    sequence,
                    partition if output_partition is None else output_partition,
                    output_offset,
                ),
            )

    def acknowledge(
        self,
        partition: int,
        sequence: int,
        output_offset: int | None = None,
        *,
        output_partition: int | None = None,
    ) -> None:
        """Acknowledge exactly the earliest pending row (optionally with its receipt)."""
        self.acknowledge_many(partition, [(sequence, output_offset)], output_partition)

    def acknowledge_many(
        self,
        partition: int,
        receipts: Sequence[tuple[int, int | None]],
        output_partition: int | None = None,
    ) -> None:
        """Acknowledge consecutive rows starting at the earliest pending one, or none.

        ``receipts``: (sequence, output offset or None) in order. Anything that is
        not the pending prefix raises OutboxOrderError and acknowledges nothing.
        """
        self._check_partition(partition)
        if not receipts:
            return
        label = self._label(f"acknowledging outbox of {partition}")
        with self.db.transaction(label) as conn:
            acked = self._lock_relay(conn, partition)
            last = conn.execute(
                "SELECT last_sequence FROM partitions WHERE ns_id = %s AND partition = %s",
                (self.ns_id, partition),
            ).fetchone()
            assert last is not None
            want = acked + 1 if acked < last[0] else None
            for i, (seq, _) in enumerate(receipts):
                exp = acked + 1 + i
                if seq != exp or exp > last[0]:
                    shown = want if i == 0 else (exp if exp <= last[0] else None)
                    msg = f"acknowledge {seq} on partition {partition}, pending is {shown}"
                    raise OutboxOrderError(msg)
            first, last_seq = receipts[0][0], receipts[-1][0]
            # Receipts recorded earlier for these rows (runs of one row above the acknowledged
            # prefix; usually none) give way to the new offsets; a row acknowledged without an
            # offset keeps its recorded receipt.
            offered = {s for s, o in receipts if o is not None}
            earlier = [
                s
                for (s,) in conn.execute(
                    "SELECT first_sequence FROM outbox_receipts WHERE ns_id = %s"
                    " AND partition = %s AND first_sequence BETWEEN %s AND %s",
                    (self.ns_id, partition, first, last_seq),
                )
                if s in offered
            ]
            if earlier:
                conn.execute(
                    "DELETE FROM outbox_receipts WHERE ns_id = %s AND partition = %s"
                    " AND first_sequence = ANY(%s)",
                    (self.ns_id, partition, earlier),
                )
            runs = receipt_runs(receipts)
            if runs:
                op = partition if output_partition is None else output_partition
                conn.execute(
                    "INSERT INTO outbox_receipts (ns_id, partition, first_sequence, last_sequence,"
                    " output_partition, first_offset)"
                    " SELECT %s, %s, f, l, %s, o"
                    " FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS u(f, l, o)",
                    (
                        self.ns_id,
                        partition,
                        op,
                        [r[0] for r in runs],
                        [r[1] for r in runs],
                        [r[2] for r in runs],
                    ),
                )
            conn.execute(
                "UPDATE relay_progress SET acked_sequence = %s WHERE ns_id = %s AND partition = %s",
                (last_seq, self.ns_id, partition),
            )

    def _lock_relay(self, conn: psycopg.Connection[Any], partition: int) -> int:
        row = conn.execute(
            "SELECT acked_sequence FROM relay_progress WHERE ns_id = %s AND partition = %s"
            " FOR UPDATE",
            (self.ns_id, partition),
        ).fetchone()
        assert row is not None
        return int(row[0])

    # ------------------------------------------------------------ inspection

    def snapshot(self, *, evidence: bool = True, outbox: str = "all") -> ProcessingSnapshot:
        """A consistent copy of processing state (REPEATABLE READ, READ ONLY).

        ``evidence=False`` skips per-key evidence and the output intents (``keys`` and
        ``outputs`` stay empty: verification and replay read neither, and at ten million
        records the outputs alone were hundreds of thousands of rows to convert);
        ``outbox="pending"`` reads only unacknowledged rows, ``"none"`` none.
        """
        if outbox not in ("all", "pending", "none"):
            msg = f"outbox must be 'all', 'pending' or 'none', not {outbox!r}"
            raise ValueError(msg)
        ns = self.ns_id
        with self.db.transaction(self._label("taking a snapshot"), snapshot=True) as conn:
            parts = {
                p: PartitionProgress(e, n, s, a)
                for p, e, n, s, a in conn.execute(
                    "SELECT p.partition, p.epoch, p.next_offset, p.last_sequence,"
                    " r.acked_sequence FROM partitions p JOIN relay_progress r"
                    " ON r.ns_id = p.ns_id AND r.partition = p.partition WHERE p.ns_id = %s",
                    (ns,),
                )
            }
            cache = KeyCache(None)
            if evidence:
                self._load_keys(conn, cache, [kc.key for kc in self.cfg.keys])
            boxes: dict[int, list[OutboxEntry]] = {p: [] for p in parts}
            if outbox != "none":
                q = (
                    "SELECT o.partition, o.sequence, o.envelope, o.acked, o.output_partition,"
                    " o.output_offset FROM outbox_status o WHERE o.ns_id = %s"
                )
                if outbox == "pending":
                    q += " AND NOT o.acked"
                q += " ORDER BY o.partition, o.sequence"
                for p, s, e, a, op, oo in conn.execute(q, (ns,)):
                    boxes[p].append(OutboxEntry(p, s, bytes(e), a, op, oo))
            rejections = tuple(
                Rejection(
                    Record(bytes(v), None if k is None else bytes(k), Coordinates(s, p, o),
                           r == _RESERVED),
                    _REASONS[r], d,
                )
                for p, o, s, v, k, r, d in conn.execute(
                    "SELECT partition, src_offset, source, raw_value, raw_key, reason, detail"
                    " FROM quarantine WHERE ns_id = %s ORDER BY partition, src_offset",
                    (ns,),
                )
            )
            conflicts = tuple(
                sorted(
                    Conflict(StockKey(i, loc), t, rev)
                    for i, loc, t, rev in conn.execute(
                        "SELECT DISTINCT k.item, k.location, o.txn_id, o.revision"
                        " FROM observations o JOIN stock_keys k ON k.key_id = o.key_id"
                        " WHERE k.ns_id = %s AND o.candidate > 0",
                        (ns,),
                    )
                )
            )
            skips = tuple(self._read_skips(conn))
            stops = tuple(PartitionStop(*r) for r in conn.execute(CURRENT_STOPS, (ns,)))
        return ProcessingSnapshot(
            self.cfg,
            parts,
            cache.keys,
            cache.outputs,
            {p: tuple(v) for p, v in boxes.items()},
            rejections,
            conflicts,
            skips,
            stops,
        )

    def conflicts(self) -> list[Conflict]:
        return self.snapshot(evidence=False, outbox="none").conflicts()

    def projection(self, key: StockKey) -> Projection:
        """The committed projection of one key (read fresh, not from the cache)."""
        kc = self._kc.get(key)
        if kc is None:
            msg = f"stock key {key} is not configured"
            raise KeyError(msg)
        cache = KeyCache(None)
        with self.db.transaction(self._label("reading a projection"), snapshot=True) as conn:
            self._load_keys(conn, cache, [key])
        return cache.keys[key].projection()

    def measurements(self, partition: int) -> list[Measurement]:
        """The latest batch samples of a partition, oldest first (at most 32)."""
        self._check_partition(partition)
        with self.db.transaction(self._label("reading measurements")) as conn:
            rows = conn.execute(
                "SELECT partition, batch, first_offset, next_offset, records, rejected, envelopes,"
                " compute_us FROM measurements WHERE ns_id = %s AND partition = %s"
                " ORDER BY batch",
                (self.ns_id, partition),
            ).fetchall()
        return [Measurement(*r) for r in rows]

    # ------------------------------------------------------------ replay

    def check_replay(self, record: Record) -> None:
        """Require that an already-consumed record is fully reflected in state.

        Same rule as the memory store: accepted input must match held canonical
        evidence at the same coordinates and emit nothing; rejected input must
        match the held raw rejection and reason. Raises ReplayMismatch.
        """
        self._check_replay_all([record])

    def replay(self, partition: int, records: Iterable[Record]) -> Token:
        """Check a consumed interval against intact state, then claim a new epoch.

        The preflight happens before the claim, so a failing replay leaves
        ownership untouched. Frontier, evidence and output versions never change.
        """
        self._check_replay_all(preflight.check_one_partition(partition, records))
        return self.claim(partition)

    def consumed_offsets(self, partition: int, below: int, since: int = 0) -> list[int]:
        """Offsets in [since, below) that the partition applied or quarantined, ascending.

        Verification compares them with what the source still holds: a consumed
        record that retention or compaction removed is history the oracle can no
        longer see. ``since`` skips the offsets a recorded snapshot coverage vouches for.
        """
        self._check_partition(partition)
        with self.db.transaction(self._label("reading consumed offsets"), snapshot=True) as conn:
            # Binary arrays of a range of offsets each instead of a row per offset (a
            # verification reads millions); each array stays far below PostgreSQL's 1 GB
            # limit on one value.
            # Never a prepared statement: psycopg prepares a query from its fifth run on a
            # connection, and PostgreSQL's generic plan for the offset range then read every
            # consumed offset of the partition (2 s at ten million records, not 0.02 s).
            rows = conn.cursor(binary=True).execute(
                "SELECT array_agg(src_offset) FROM ("
                "SELECT o.src_offset FROM observations o JOIN stock_keys k ON k.key_id = o.key_id"
                " WHERE k.ns_id = %s AND k.partition = %s AND o.src_offset >= %s AND o.src_offset < %s"
                " UNION ALL SELECT src_offset FROM quarantine"
                " WHERE ns_id = %s AND partition = %s AND src_offset >= %s AND src_offset < %s) consumed"
                " GROUP BY src_offset / %s",
                (self.ns_id, partition, since, below, self.ns_id, partition, since, below,
                 CONSUMED_OFFSETS_PER_ARRAY),
                prepare=False,
            ).fetchall()
        offsets: list[int] = []
        for (some,) in rows:
            offsets += some
        offsets.sort()
        return offsets

    def _check_replay_all(self, records: Sequence[Record]) -> None:
        cache = KeyCache(None)
        with self.db.transaction(self._label("checking a replay"), snapshot=True) as conn:
            fronts = dict(
                conn.execute(
                    "SELECT partition, next_offset FROM partitions WHERE ns_id = %s",
                    (self.ns_id,),
                ).fetchall()
            )

            def state_of(k: StockKey) -> fold.KeyState:
                if k not in cache.keys:
                    self._load_keys(conn, cache, [k])
                return cache.keys[k]

            skipped = {(s.partition, s.offset): s.value_sha256 for s in self._read_skips(conn)}
            for record in records:
                c = record.coords
                preflight.check_replayed(
                    self.cfg, record,
                    frontier=fronts.get(c.partition),
                    state_of=state_of,
                    latest=cache.outputs.get,
                    held_rejection=functools.partial(self._held_rejection, conn, c),
                    skipped_sha256=skipped.get((c.partition, c.offset)),
                )

    def _held_rejection(self, conn: Any, c: Coordinates) -> Rejection | None:
        """The quarantined record at ``c`` (its partition and offset), if any."""
        row = conn.execute(
            "SELECT source, raw_value, raw_key, reason FROM quarantine"
            " WHERE ns_id = %s AND partition = %s AND src_offset = %s",
            (self.ns_id, c.partition, c.offset),
        ).fetchone()
        if row is None:
            return None
        return Rejection(
            Record(
                bytes(row[1]),
                None if row[2] is None else bytes(row[2]),
                Coordinates(row[0], c.partition, c.offset),
                row[3] == _RESERVED,
            ),
            RejectReason(row[3]),
        )


__all__ = [
    "Measurement",
    "OutboxEntry",
    "PartitionProgress",
    "PartitionStop",
    "PgStore",
    "ProcessingSnapshot",
    "SkipEntry",
]
