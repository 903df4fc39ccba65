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
from concurrent.futures import Future
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import psycopg

from amends_core import diff, fence, fold, process, wire
from amends_core.errors import PredecessorFailed, SourceMismatch
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

    Use as a context manager; leaving the block without ``commit`` (or ``commit_ahead``)
    rolls back. Not thread-safe; one at a time per store.

    With ``after`` (the ``PendingCommit`` of the partition's previous batch, still
    committing on the database's background thread) the transaction folds ahead: it
    starts from the key states that batch left in the cache, without a session, and
    opens its own transaction (lock, guard) only once that commit has finished, at the
    first moment it needs the session (a key to load, rows to send, its own commit).
    If the previous batch did not commit, nothing of this one is written either
    (PredecessorFailed) and the cache is dropped.
    """

    def __init__(
        self,
        ctx: BatchContext,
        token: Token,
        expected_next: int,
        after: PendingCommit | None = None,
    ) -> None:
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
        self._conn: psycopg.Connection[Any] | None = None
        self._obs_stream: _RowStream | None = None
        """Observation rows COPYed during ``apply``: the leading ``sent`` of ``_obs``."""
        self._after: PendingCommit | None = None
        """The previous batch's commit this transaction folds ahead of, until it opens."""
        self.handed_on = False
        """A later transaction took this one's cache while this one was committing."""
        self.epoch: int
        self.sequence: int
        self._batch: int
        self._cache: KeyCache
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
        self._open = True
        if after is not None and after.continued_by(self):
            prev = after.tx
            self._after = after
            self.epoch = prev.epoch
            self.sequence = prev.sequence
            self._batch = prev._batch + 1
            self._cache = prev._cache
        else:
            if after is not None:
                self._wait_for(after)
            self._connect()

    def _wait_for(self, after: PendingCommit) -> None:
        """Wait for the previous batch's commit; if it did not commit, neither does this batch."""
        if not after.committed():
            self._abort()
            msg = (
                f"partition {self.partition}: the batch before this one did not commit,"
                " so nothing of this batch was written"
            )
            raise PredecessorFailed(msg)

    def _connect(self) -> psycopg.Connection[Any]:
        """BEGIN, lock the partition row and pass the fence: the transaction's own session."""
        ctx, p = self.ctx, self.partition
        conn = ctx.db.begin(self._label)
        self._conn = conn
        self._obs_stream = _RowStream(conn, OBSERVATIONS)
        with self._aborting():
            row = conn.execute(LOCK_PARTITION, (ctx.ns_id, p)).fetchone()
        assert row is not None
        epoch, installed, last_sequence, batches, digest = row
        with self._aborting():
            guard_ownership(ctx.cfg, self.token, self.expected_next, digest, epoch, installed)
        if self._after is None:
            self.epoch = epoch
            self.sequence = last_sequence
            self._batch = batches + 1
            self._cache = ctx.state.cache_for(p, epoch, installed)
        else:
            # The fence held, so the row is what the previous batch committed: the cache
            # this transaction folded from is that batch's, and nobody has written since.
            self._after = None
        return conn

    def _session(self) -> psycopg.Connection[Any]:
        """The transaction's session, opened (after the previous batch's commit) if not yet."""
        conn = self._conn
        if conn is not None:
            return conn
        after = self._after
        assert after is not None
        self._wait_for(after)
        return self._connect()

    def _session_if_ready(self) -> _RowStream | None:
        """The observation stream, opening the session only if that needs no waiting."""
        if self._conn is None:
            after = self._after
            if after is None or not after.done():
                return None
            self._session()
        return self._obs_stream

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
            if self._conn is not None:
                # an open COPY must end before the session can roll back
                if self._obs_stream is not None:
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
        conn = self._session()
        assert self._obs_stream is not None
        self._obs_stream.pause()  # the connection answers one statement at a time
        # A kept cache holds compact key states: memory follows the live state, while
        # lower revisions' candidates and delivery places stay in ``observations``.
        try:
            self.ctx.load_keys(conn, self._cache, keys, compact=self.ctx.state.cache)
        except psycopg.Error as e:
            raise translate(e, self._label) from e

    def _restore(self, e: EvidenceNotHeld) -> None:
        """Hold again the lower revisions of ``e``'s identity, in offset order: the rows in
        the table (committed, or streamed by this batch) and this batch's rows not sent yet."""
        kid = self.ctx.key_ids[e.key]
        conn = self._session()
        stream = self._obs_stream
        assert stream is not None
        try:
            stream.pause()
            rows = conn.execute(LOAD_IDENTITY_BELOW, (kid, e.txn_id, e.below)).fetchall()
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
        # A large batch's observation rows go to the server while the records are folded
        # (once the transaction has its session: folding ahead, not before the previous
        # batch has committed).
        streaming = len(records) >= COPY_MIN_ROWS
        step = STREAM_ROWS
        send_at = len(obs_rows) + step if streaming else len(records) + len(obs_rows) + 1
        for r in records:
            if len(obs_rows) >= send_at:
                stream = self._session_if_ready()
                if stream is not None:
                    stream.send(obs_rows)
                send_at = len(obs_rows) + step
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
        stream = self._obs_stream
        if streaming and stream is not None:
            if len(obs_rows) > stream.sent:
                stream.send(obs_rows)
            stream.pause()
        self._compute_ns += time.perf_counter_ns() - t0

    # ---------------------------------------------------------- commit

    def _seal(self) -> _Writes:
        """Every row of the batch, taken from the working copies now: after this the rows
        no longer depend on the cache (which the next batch may go on changing)."""
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
        sent = self._obs_stream.sent if self._obs_stream is not None else 0
        unsent = self._obs[sent:]  # the rest are in the table already
        # Large sets: binary COPY (into staging tables for upserts), encoded here: encoding
        # is the CPU part of a COPY, and must not wait for (or compete with) a commit in
        # flight. Small sets: one pipelined statement with array parameters and no staging
        # table at all, because emptying a temporary table at commit costs more than tiny
        # batches.
        conn = self._conn
        assert conn is not None
        cur = conn.cursor()
        copies: list[tuple[Sink, bytes]] = []
        statements: list[tuple[Any, Any]] = []
        for sink, rows in [
            (OBSERVATIONS, unsent), (OUTBOX, outbox), (KEY_DAYS, new_days), (OUTPUTS, new_out)
        ]:
            if len(rows) >= COPY_MIN_ROWS:
                copies.append((sink, sink.encode_rows(cur, rows)))
            elif rows:
                statements.append((sink.insert_statement(), _columns(rows, len(sink.types))))
        staging = False
        changed = (deleted, day_rows, out_rows)
        for (sink, staged_stmt, unnest_stmt), rows in zip(UPSERTS, changed, strict=True):
            if len(rows) >= COPY_MIN_ROWS:
                copies.append((sink, sink.encode_rows(cur, rows)))
                statements.append((staged_stmt, None))
                staging = True
            elif rows:
                statements.append((unnest_stmt, _columns(rows, len(sink.types))))
        rs = self._rejections
        if rs:
            statements.append((
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
            ))
        statements += [
            (ADVANCE, (self.next, self.sequence, self._records, len(rs), len(self._outbox), ns_id, p)),
            (
                MEASURE,
                (
                    ns_id, p, self._batch, self._first, self.next, self._records, len(rs),
                    len(self._outbox), self._compute_ns // 1000,
                ),
            ),
            (PRUNE_MEASUREMENTS, (ns_id, p, self._batch - MEASUREMENTS_KEPT)),
        ]
        if self._notify is not None and self._outbox:
            statements.append(("SELECT pg_notify(%s, '')", (self._notify,)))
        return _Writes(copies, staging, statements)

    def _send(self, conn: psycopg.Connection[Any], w: _Writes) -> None:
        """Send a sealed batch: its COPYs, then its statements in one pipeline.

        Uses nothing of the transaction but ``w`` and the session (it may run on the
        database's background thread), and notes only whether it created staging tables.
        """
        if w.staging and conn is not self.ctx.state.staged:
            conn.execute(CREATE_STAGING)  # remembered only once this transaction commits
            self._staging_created = True
        cur = conn.cursor()
        for sink, data in w.copies:
            sink.copy_encoded(cur, data)
        with conn.pipeline():
            for stmt, params in w.statements:
                conn.execute(stmt, params)

    def commit(self) -> BatchResult:
        """Write everything, advance the frontier and COMMIT; returns what was installed."""
        if not self._open:
            msg = "the processing transaction is no longer open"
            raise StoreError(msg)
        conn = self._session()
        db = self.ctx.db
        with self._aborting():
            self._send(conn, self._seal())
        self._open = False
        try:
            db.commit(conn, self._label)
        except BaseException as e:
            self._commit_failed(e)
            raise
        return self._committed(conn)

    def commit_ahead(self) -> PendingCommit:
        """``commit`` on the database's background thread, returning at once.

        The rows are sealed here (they no longer depend on the cache); the writes and
        COMMIT run while the caller goes on, typically folding the partition's next batch
        in a transaction opened with this ``after``. Its outcome is ``PendingCommit.result``;
        until that is known the database serves nothing else.
        """
        if not self._open:
            msg = "the processing transaction is no longer open"
            raise StoreError(msg)
        conn = self._session()
        with self._aborting():
            writes = self._seal()
        self._open = False
        db, label = self.ctx.db, self._label

        def write_and_commit() -> None:
            try:
                self._send(conn, writes)
            except psycopg.Error as e:
                db.rollback()
                raise translate(e, label) from e
            except BaseException:
                db.rollback()
                raise
            db.commit(conn, label)

        return PendingCommit(self, conn, db.submit(write_and_commit))

    def _committed(self, conn: psycopg.Connection[Any]) -> BatchResult:
        """What a commit that succeeded installed; the cache is trusted again from here."""
        state = self.ctx.state
        if self._staging_created:
            state.staged = conn
        if state.cache and not self.handed_on:
            self._cache.stamp = (self.epoch, self.next)
        return BatchResult(
            self.partition,
            self.next,
            tuple(self._outbox),
            tuple(self._rejections),
            self._records - len(self._rejections),
        )

    def _commit_failed(self, e: BaseException) -> None:
        """Nothing of the working copies may be trusted after a commit that failed or is unknown."""
        self.ctx.state.forget(self.partition)
        if isinstance(e, CommitUnknown):
            e.partition = self.partition
            e.before = self.expected_next
            e.after = self.next


@dataclass(slots=True)
class _Writes:
    """A sealed batch: everything its commit sends, nothing that can still change."""

    copies: list[tuple[Sink, bytes]]
    """Binary COPY data of every set large enough for COPY, in the order they are sent."""
    staging: bool
    """Some of the copies go into the session's staging tables."""
    statements: list[tuple[Any, Any]]
    """(statement, parameters) pipelined after the copies, in order."""


class PendingCommit:
    """A batch whose writes and COMMIT run on the database's background thread.

    ``result`` waits for the outcome: the ``BatchResult``, or the error ``commit`` would
    have raised (StoreUnavailable, CommitUnknown with the batch's frontiers for
    ``resolve_unknown``). Settled once, on the caller's thread, however often asked.
    """

    __slots__ = ("tx", "_conn", "_future", "_outcome")

    def __init__(self, tx: ProcessingTx, conn: psycopg.Connection[Any], future: Future[None]) -> None:
        self.tx = tx
        self._conn = conn
        self._future = future
        self._outcome: BatchResult | BaseException | None = None

    def done(self) -> bool:
        """The commit has finished (either way); ``result`` returns without waiting."""
        return self._outcome is not None or self._future.done()

    def committed(self) -> bool:
        """Wait for the outcome; True when the batch committed."""
        return isinstance(self._settle(), BatchResult)

    def result(self) -> BatchResult:
        """Wait for the outcome: what the batch installed, or its commit's error."""
        out = self._settle()
        if isinstance(out, BaseException):
            raise out
        return out

    def continued_by(self, tx: ProcessingTx) -> bool:
        """Hand this batch's cache to ``tx``, the partition's next batch, if it can fold ahead
        from it (same store with a kept cache, same owner, starting where this one ends)."""
        prev = self.tx
        if (
            self._outcome is not None
            or prev.handed_on
            or tx.ctx is not prev.ctx
            or not tx.ctx.state.cache
            or tx.token != prev.token
            or tx.expected_next != prev.next
        ):
            return False
        prev.handed_on = True
        return True

    def _settle(self) -> BatchResult | BaseException:
        out = self._outcome
        if out is None:
            try:
                self._future.result()
            except BaseException as e:  # noqa: BLE001 - the commit's error is its outcome
                self.tx._commit_failed(e)
                out = e
            else:
                out = self.tx._committed(self._conn)
            self._outcome = out
        return out



__all__ = [
    "BatchContext",
    "BatchResult",
    "BatchState",
    "KeyCache",
    "PendingCommit",
    "ProcessingTx",
    "guard_ownership",
]
