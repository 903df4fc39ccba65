"""The batch transaction: one fenced batch locked, guarded, folded and written in one go.

``PgStore.begin`` opens a ``ProcessingTx`` with its ``BatchContext``: the
namespace's fixed facts, the ``BatchState`` the store keeps between batches and
the few store operations a batch calls. The transaction uses nothing else of
the store.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from amends_core import diff, fence, fold, process, wire
from amends_core.errors import SourceMismatch
from amends_core.fence import check_coordinates
from amends_core.fold import EvidenceNotHeld
from amends_core.ledger import (
    INT64_MAX,
    CloseOutOfRange,
    Config,
    Envelope,
    KeyConfig,
    OutputID,
    Record,
    Rejection,
    StockKey,
)
from amends_core.ports import BatchResult, OutboxRow, Token
from amends_pipeline.postgres import codec
from amends_pipeline.postgres.connection import Database
from amends_pipeline.postgres.errors import BatchAborted, CommitUnknown, StoreError, translate
from amends_pipeline.postgres.sql import (
    ADVANCE,
    COPY_MIN_ROWS,
    CREATE_STAGING,
    INSERT_QUARANTINE,
    KEY_DAYS,
    LOAD_IDENTITY_BELOW,
    LOCK_PARTITION,
    MEASURE,
    OBSERVATIONS,
    OUTBOX,
    OUTPUTS,
    PRUNE_MEASUREMENTS,
    UPSERTS,
    Sink,
)

MEASUREMENTS_KEPT = 32
STREAM_ROWS = 256
"""Observation rows a large batch gathers before sending them on by COPY while it folds."""


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    if not rows:
        return [[] for _ in range(width)]
    return [list(c) for c in zip(*rows, strict=True)]


# ---------------------------------------------------------------- the cache


class KeyCache:
    """Working copies of one partition's key states and latest outputs.

    ``stamp`` is the (epoch, frontier) this content reflects, or None while a
    batch is modifying it in place (then it is trusted by nobody).
    """

    __slots__ = ("stamp", "keys", "outputs")

    def __init__(self, stamp: tuple[int, int] | None) -> None:
        self.stamp = stamp
        self.keys: dict[StockKey, fold.KeyState] = {}
        self.outputs: dict[OutputID, Envelope] = {}


class BatchState:
    """What a store keeps between its batches, shared with its transactions.

    ``caches``: the working copies per partition, trusted only while their stamp is
    the partition row's (epoch, frontier); ``staged``: the session whose staging
    tables exist; ``transport_keys``: raw transport keys already decoded.
    """

    __slots__ = ("cache", "caches", "staged", "transport_keys")

    def __init__(self, cache: bool) -> None:
        self.cache = cache
        """Keep key states between batches (``PgStore(cache=...)``)."""
        self.caches: dict[int, KeyCache] = {}
        self.staged: object = None
        """The session whose staging tables exist (temp tables live per session)."""
        self.transport_keys: dict[bytes, StockKey] = {}

    def cache_for(self, partition: int, epoch: int, frontier: int) -> KeyCache:
        c = self.caches.get(partition)
        if c is None or c.stamp != (epoch, frontier):
            c = KeyCache((epoch, frontier))
            if self.cache:
                self.caches[partition] = c
            else:
                self.caches.pop(partition, None)
        return c

    def forget(self, partition: int) -> None:
        """Drop the partition's working copies: nobody may trust them any more."""
        self.caches.pop(partition, None)


class LoadKeys(Protocol):
    """Read evidence, days and outputs of ``keys`` into ``cache`` (one query per table);
    ``compact`` builds compact key states (``KeyState.compact``)."""

    def __call__(
        self,
        conn: psycopg.Connection[Any],
        cache: KeyCache,
        keys: Collection[StockKey],
        *,
        compact: bool = False,
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class BatchContext:
    """What a processing transaction needs of its store; ``PgStore`` builds one at construction."""

    db: Database
    cfg: Config
    digest: str
    ns_id: int
    key_ids: Mapping[StockKey, int]
    key_configs: Mapping[StockKey, KeyConfig]
    configs_by_id: Mapping[int, KeyConfig]
    state: BatchState
    label: Callable[[str], str]
    """The store's operation label (``db.label`` naming the namespace)."""
    check_partition: Callable[[int], None]
    """SourceMismatch unless the partition is configured."""
    load_keys: LoadKeys
    """Read evidence, days and outputs of keys into a cache (one query per table)."""

    def transport_key(self, raw: bytes | None) -> StockKey | None:
        """The configured stock key a raw transport key names, or None."""
        if raw is None:
            return None
        memo = self.state.transport_keys
        k = memo.get(raw)
        if k is None:
            dec = wire.decode_transport_key(raw)
            if isinstance(dec, wire.DecodeError) or dec not in self.key_configs:
                return None
            if len(memo) < 1_000_000:
                memo[raw] = dec
            k = dec
        return k


def guard_ownership(
    cfg: Config, token: Token, expected_next: int, registered: str, epoch: int, installed: int
) -> None:
    """The fence every write of a partition passes, on its locked row (``fence.guard`` with
    the namespace's registered digest, epoch and frontier)."""
    fence.guard(
        token, namespace=cfg.namespace, digest=registered, epoch=epoch, installed=installed,
        expected_next=expected_next,
    )


# ---------------------------------------------------------------- the transaction


@dataclass(slots=True)
class _DirtyDays:
    from_day: int
    committed_last: int | None
    """The key's last committed day (before this batch): ``key_days`` has no row after it."""
    removed: set[int] = field(default_factory=set)


_ROLLED_BACK = StoreError("the batch is rolled back")


class _RowStream:
    """Rows COPYed into one table while the batch is still being folded.

    PostgreSQL parses and indexes them on its own CPU while this process folds the
    next records, instead of all at once at commit. One COPY at a time per
    connection: ``pause`` ends it (waiting for the server to take every row) before
    the transaction needs the connection for anything else; the next ``send`` starts
    another. ``sent`` counts the leading rows of the list already in the table.
    """

    def __init__(self, conn: psycopg.Connection[Any], sink: Sink) -> None:
        self._cursor = conn.cursor()
        self._sink = sink
        self._open: AbstractContextManager[psycopg.Copy] | None = None
        self._copy: psycopg.Copy | None = None
        self.sent = 0

    def send(self, rows: list[tuple[Any, ...]]) -> None:
        """COPY ``rows[sent:]``; they are in the table once the stream pauses."""
        cp = self._copy
        if cp is None:
            self._open = block = self._sink.copy(self._cursor)
            self._copy = cp = block.__enter__()
        write = cp.write_row
        for row in rows[self.sent :]:
            write(row)
        self.sent = len(rows)

    def pause(self) -> None:
        """End the COPY (if one is open): every row sent is in the table after this."""
        block, self._open, self._copy = self._open, None, None
        if block is not None:
            block.__exit__(None, None, None)

    def fail(self) -> None:
        """Abandon the open COPY (the server discards its rows) so the session can roll back.

        The server logs the reason it is given: a fixed text, never the error's own (which
        may quote a record) nor anything else of the batch.
        """
        block, self._open, self._copy = self._open, None, None
        if block is not None:
            try:
                block.__exit__(StoreError, _ROLLED_BACK, None)
            except psycopg.Error:
                pass  # the session is rolled back (or dropped) next either way


class ProcessingTx:
    """One fenced processing transaction: lock and guard on open, writes on commit.

    Use as a context manager; leaving the block without ``commit`` rolls back.
    Not thread-safe; one at a time per store.
    """

    def __init__(self, ctx: BatchContext, token: Token, expected_next: int) -> None:
        self.ctx = ctx
        self.token = token
        self.partition = p = token.partition
        self.expected_next = expected_next
        self.next = expected_next
        self._open = False
        self._label = ctx.label(f"processing partition {p}")
        cfg = ctx.cfg
        fence.check_scope(token, namespace=cfg.namespace, digest=ctx.digest)
        ctx.check_partition(p)
        db = ctx.db
        conn = db.begin(self._label)
        self._obs_stream = _RowStream(conn, OBSERVATIONS)
        """Observation rows COPYed during ``apply``: the leading ``sent`` of ``_obs``."""
        self._open = True
        with self._aborting():
            row = conn.execute(LOCK_PARTITION, (ctx.ns_id, p)).fetchone()
        assert row is not None
        epoch, installed, last_sequence, batches, digest = row
        with self._aborting():
            guard_ownership(ctx.cfg, token, expected_next, digest, epoch, installed)
        self._conn = conn
        self.epoch = epoch
        self.sequence = last_sequence
        self._batch = batches + 1
        self._cache = ctx.state.cache_for(p, epoch, installed)
        self._obs: list[tuple[Any, ...]] = []
        self._days: dict[int, _DirtyDays] = {}
        self._outputs: dict[OutputID, Envelope] = {}
        self._new_outputs: set[OutputID] = set()
        """Output IDs without a row in ``outputs`` before this batch."""
        self._outbox: list[OutboxRow] = []
        self._rejections: list[Rejection] = []
        self._first: int | None = None
        self._records = 0
        self._compute_ns = 0
        self._staging_created = False
        self._notify: str | None = None

    # ---------------------------------------------------------- lifecycle

    def __enter__(self) -> ProcessingTx:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self._abort()

    @contextmanager
    def _aborting(self) -> Iterator[None]:
        """Roll the transaction back on any error inside the block; driver errors leave as ours."""
        try:
            yield
        except psycopg.Error as e:
            self._abort()
            raise translate(e, self._label) from e
        except BaseException:
            self._abort()
            raise

    def _abort(self) -> None:
        """Roll back and forget every working copy this transaction touched."""
        self.ctx.state.forget(self.partition)
        if self._open:
            self._open = False
            # an open COPY must end before the session can roll back
            self._obs_stream.fail()
            self.ctx.db.rollback()

    def rollback(self) -> None:
        self._abort()

    def notify(self, channel: str) -> None:
        """NOTIFY ``channel`` (empty payload) with the commit's writes when the batch queued outbox
        rows: delivered only if this transaction commits; a wake-up for the relay, which has
        nothing to do otherwise."""
        self._notify = channel

    def advance_to(self, until: int) -> None:
        """Move the frontier to ``until``: the source range below it was read completely.

        Offsets that delivered no record (transaction control records, aborted
        transactional records, compaction gaps, the recorded marker) are passed
        over this way; the commit is fenced like any batch, with or without records.
        """
        if not self._open:
            msg = "the processing transaction is no longer open"
            raise StoreError(msg)
        if until < self.next:
            self._abort()
            msg = f"cannot move partition {self.partition}'s frontier back from {self.next} to {until}"
            raise SourceMismatch(msg)
        self.next = until

    # ---------------------------------------------------------- work

    def _state_of(self, key: StockKey) -> fold.KeyState:
        st = self._cache.keys.get(key)
        if st is None:
            self._load([key])
            st = self._cache.keys[key]
        return st

    def _load(self, keys: Collection[StockKey]) -> None:
        self._obs_stream.pause()  # the connection answers one statement at a time
        # A kept cache holds compact key states: memory follows the live state, while
        # lower revisions' candidates and delivery places stay in ``observations``.
        try:
            self.ctx.load_keys(self._conn, self._cache, keys, compact=self.ctx.state.cache)
        except psycopg.Error as e:
            raise translate(e, self._label) from e

    def _restore(self, e: EvidenceNotHeld) -> None:
        """Hold again the lower revisions of ``e``'s identity, in offset order: the rows in
        the table (committed, or streamed by this batch) and this batch's rows not sent yet."""
        kid = self.ctx.key_ids[e.key]
        stream = self._obs_stream
        try:
            stream.pause()
            rows = self._conn.execute(LOAD_IDENTITY_BELOW, (kid, e.txn_id, e.below)).fetchall()
        except psycopg.Error as err:
            raise translate(err, self._label) from err
        # this batch's rows the table does not hold yet
        unsent = self._obs[stream.sent :]
        rows += [r[1:] for r in unsent if r[0] == kid and r[2] == e.txn_id and r[3] < e.below]
        lower = codec.lower_revisions(
            e.key, self.ctx.cfg.source_incarnation, self.partition, rows
        )
        self._cache.keys[e.key].identities[e.txn_id].restore(lower)

    def apply(self, records: Iterable[Record]) -> None:
        """Validate, fold and reconcile records in offset order into this transaction."""
        if not self._open:
            msg = "the processing transaction is no longer open"
            raise StoreError(msg)
        try:
            self._apply(list(records))
        except psycopg.Error as e:
            self._abort()
            raise translate(e, self._label) from e
        except BaseException:
            self._abort()
            raise

    def _apply(self, records: list[Record]) -> None:
        t0 = time.perf_counter_ns()
        ctx = self.ctx
        cfg = ctx.cfg
        cache = self._cache
        cache.stamp = None  # modified in place from here on
        p = self.partition
        src = cfg.source_incarnation
        # Prefetch every key the batch can touch in one read per table.
        need: set[StockKey] = set()
        kcs = ctx.key_configs
        for r in records:
            k = ctx.transport_key(r.key)
            if k is not None and k not in cache.keys and kcs[k].partition == p:
                need.add(k)
        if need:
            self._load(need)
        keys = cache.keys
        outputs = cache.outputs
        key_ids = ctx.key_ids
        state_of = self._state_of
        latest = outputs.get
        decide = process.decide
        Rejected = process.Rejected
        observation_row = codec.observation_row
        obs_rows, outbox, mine, dirty_days = self._obs, self._outbox, self._outputs, self._days
        new_outputs = self._new_outputs
        # A large batch's observation rows go to the server while the records are folded.
        stream = self._obs_stream if len(records) >= COPY_MIN_ROWS else None
        step = STREAM_ROWS
        for r in records:
            if stream is not None and len(obs_rows) - stream.sent >= step:
                stream.send(obs_rows)
            c = r.coords
            check_coordinates(r, source=src, partition=p, frontier=self.next)
            try:
                try:
                    out = decide(cfg, r, state_of, latest)
                except EvidenceNotHeld as dropped:
                    self._restore(dropped)
                    out = decide(cfg, r, state_of, latest)
            except (CloseOutOfRange, diff.OutputOperationError) as e:
                msg = (
                    f"record {p}/{c.offset}: {e}; nothing of this batch was committed."
                    " The partition stops on this record: review it, then move past it with"
                    f" `amends skip --config CONFIG --partition {p} --offset {c.offset} --reason TEXT`"
                )
                raise BatchAborted(msg, partition=p, offset=c.offset) from e
            if self._first is None:
                self._first = c.offset
            self._records += 1
            if isinstance(out, Rejected):
                self._rejections.append(out.rejection)
            else:
                d = out.delta
                txn = d.txn
                key = d.key
                st = keys[key]
                if d.duplicate_of is None:
                    ident = st.identities.get(txn.txn_id)
                    held = ident.candidates(txn.revision) if ident is not None else None
                    cand = len(held) if held is not None else 0
                else:
                    cand = d.duplicate_of
                kid = key_ids[key]
                obs_rows.append(observation_row(kid, txn, c.offset, cand))
                rep = d.repair
                if rep is not None:
                    dirty = dirty_days.get(kid)
                    if dirty is None:
                        # the first change of the key's days in this batch: ``st`` is as committed
                        last = st.days[-1] if st.days else None
                        dirty = dirty_days[kid] = _DirtyDays(rep.from_day, last)
                    elif rep.from_day < dirty.from_day:
                        dirty.from_day = rep.from_day
                    if rep.old_days != rep.days:
                        dirty.removed.update(set(rep.old_days).difference(rep.days))
                st.install(d)
                envelopes = out.envelopes
                if envelopes:
                    seq = self.sequence
                    if seq + len(envelopes) > INT64_MAX:
                        msg = f"partition {p} has no outbox sequence left"
                        raise BatchAborted(msg, partition=p, offset=c.offset)
                    for env in envelopes:
                        seq += 1
                        outbox.append(OutboxRow(p, seq, env))
                        oid = env.output_id
                        if oid not in outputs:  # the cache holds every output of a loaded key
                            new_outputs.add(oid)
                        outputs[oid] = env
                        mine[oid] = env
                    self.sequence = seq
            self.next = c.offset + 1
        if stream is not None:
            if len(obs_rows) > stream.sent:
                stream.send(obs_rows)
            stream.pause()
        self._compute_ns += time.perf_counter_ns() - t0

    # ---------------------------------------------------------- commit

    def _write(self, conn: psycopg.Connection[Any]) -> None:
        """Every row of the batch, set-based: COPY for large sets, arrays for tiny ones."""
        ctx = self.ctx
        ns_id, p = ctx.ns_id, self.partition
        keys = self._cache.keys
        kc_by_id = ctx.configs_by_id
        day_rows: list[tuple[Any, ...]] = []
        new_days: list[tuple[Any, ...]] = []
        deleted: list[tuple[int, int]] = []
        for kid, dirty in self._days.items():
            st = keys[kc_by_id[kid].key]
            start = bisect.bisect_left(st.days, dirty.from_day)
            rows = codec.day_rows(kid, st, start)
            last = dirty.committed_last
            cut = 0 if last is None else bisect.bisect_right(st.days, last, lo=start) - start
            day_rows.extend(rows[:cut])
            new_days.extend(rows[cut:])
            if dirty.removed:
                final = set(st.days[start:])
                deleted.extend((kid, d) for d in dirty.removed if d not in final)
        key_ids = ctx.key_ids
        new_outputs = self._new_outputs
        out_rows: list[tuple[Any, ...]] = []
        new_out: list[tuple[Any, ...]] = []
        for oid, env in self._outputs.items():
            (new_out if oid in new_outputs else out_rows).append(codec.output_row(key_ids[oid.key], env))
        # Rows that cannot exist yet (days after a key's last committed day, output IDs never
        # published) go straight into their tables by COPY when there are enough of them;
        # everything else is upserted. A few new rows ride along with the upserts instead.
        if len(new_days) < COPY_MIN_ROWS:
            day_rows += new_days
            new_days = []
        if len(new_out) < COPY_MIN_ROWS:
            out_rows += new_out
            new_out = []
        outbox = [(ns_id, p, r.sequence, r.envelope.to_bytes()) for r in self._outbox]
        unsent = self._obs[self._obs_stream.sent :]  # the rest are in the table already
        appends = [(OBSERVATIONS, unsent), (OUTBOX, outbox), (KEY_DAYS, new_days), (OUTPUTS, new_out)]
        upserts = [
            (sink, rows, staged_stmt, unnest_stmt)
            for (sink, staged_stmt, unnest_stmt), rows in zip(
                UPSERTS, (deleted, day_rows, out_rows), strict=True
            )
        ]
        # Large sets: binary COPY (into staging tables for upserts). Small sets: one
        # pipelined statement with array parameters and no staging table at all,
        # because emptying a temporary table at commit costs more than tiny batches.
        staged = [rows for _, rows, _, _ in upserts if len(rows) >= COPY_MIN_ROWS]
        if staged and conn is not ctx.state.staged:
            conn.execute(CREATE_STAGING)  # remembered only once this transaction commits
            self._staging_created = True
        cur = conn.cursor()
        for sink, rows in [*appends, *[(k, r) for k, r, _, _ in upserts]]:
            if len(rows) >= COPY_MIN_ROWS:
                sink.copy_rows(cur, rows)
        with conn.pipeline():
            for sink, rows in appends:
                if 0 < len(rows) < COPY_MIN_ROWS:
                    conn.execute(sink.insert_statement(), _columns(rows, len(sink.types)))
            for sink, rows, staged_stmt, unnest_stmt in upserts:
                if len(rows) >= COPY_MIN_ROWS:
                    conn.execute(staged_stmt)
                elif rows:
                    conn.execute(unnest_stmt, _columns(rows, len(sink.types)))
            if self._rejections:
                rs = self._rejections
                conn.execute(
                    INSERT_QUARANTINE,
                    (
                        ns_id,
                        p,
                        [x.record.coords.offset for x in rs],
                        [x.record.coords.source for x in rs],
                        [x.record.value for x in rs],
                        [x.record.key for x in rs],
                        [x.reason.value for x in rs],
                        [x.detail for x in rs],
                    ),
                )
            conn.execute(
                ADVANCE,
                (
                    self.next,
                    self.sequence,
                    self._records,
                    len(self._rejections),
                    len(self._outbox),
                    ns_id,
                    p,
                ),
            )
            conn.execute(
                MEASURE,
                (
                    ns_id,
                    p,
                    self._batch,
                    self._first,
                    self.next,
                    self._records,
                    len(self._rejections),
                    len(self._outbox),
                    self._compute_ns // 1000,
                ),
            )
            conn.execute(PRUNE_MEASUREMENTS, (ns_id, p, self._batch - MEASUREMENTS_KEPT))
            if self._notify is not None and self._outbox:
                conn.execute("SELECT pg_notify(%s, '')", (self._notify,))

    def commit(self) -> BatchResult:
        """Write everything, advance the frontier and COMMIT; returns what was installed."""
        if not self._open:
            msg = "the processing transaction is no longer open"
            raise StoreError(msg)
        conn = self._conn
        db = self.ctx.db
        with self._aborting():
            self._write(conn)
        self._open = False
        try:
            db.commit(conn, self._label)
        except CommitUnknown as e:
            self.ctx.state.forget(self.partition)
            e.partition = self.partition
            e.before = self.expected_next
            e.after = self.next
            raise
        except BaseException:
            self.ctx.state.forget(self.partition)
            raise
        if self._staging_created:
            self.ctx.state.staged = conn
        if self.ctx.state.cache:
            self._cache.stamp = (self.epoch, self.next)
        return BatchResult(
            self.partition,
            self.next,
            tuple(self._outbox),
            tuple(self._rejections),
            self._records - len(self._rejections),
        )



__all__ = [
    "BatchContext",
    "BatchResult",
    "BatchState",
    "KeyCache",
    "ProcessingTx",
    "guard_ownership",
]
