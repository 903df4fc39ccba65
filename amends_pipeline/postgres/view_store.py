"""The materialized view in PostgreSQL: the core view's version rule under a row lock.

Resume contract: ``frontier(p)`` is the *exclusive* next output offset of
output partition ``p``; every offset below it has been applied (stored,
recognised as a duplicate, or ignored as older). Values, deletion markers
(withdrawals, kept with their version) and the frontier commit together, so a
crash can never leave a row applied without its offset or the reverse.

The decision for each record is ``amends_core.view.ViewState.decide``, run on
a working ViewState holding just the rows the batch names, so both views
apply the identical rule. An equal version with different content records the
diagnostic, stops the output partition and leaves its frontier before the
offending offset; a stopped partition refuses everything until an operator
intervenes.

A batch may name the range it covers (``start``, ``end``): it is applied only
if the frontier is still ``start`` (a rebuild or another applier may have moved
it since the batch was read), and the frontier then moves to ``end`` even when
the last offsets of the range hold no record (compaction leaves gaps).
``rebuild`` is the operator's reset: it moves a partition's frontier back to
the start of the retained output log and clears its stop diagnostic, keeping
the rows (so re-application can only move each row forward) unless told to
discard them.

Writes: a large batch's output IDs that the lookup under the lock did not find
go straight into ``view_rows`` by binary COPY (a fresh view catching up, a
rebuild after discarding rows); the rest are upserted. Only an applier of
another output partition naming the same output ID (a misrouted envelope)
could insert one of them first, and the COPY then fails on the primary key. An
upsert never moves a row to a lower version: a row such an applier wrote since
the lookup is left alone, and the statement reports fewer rows. Either way the
transaction rolls back and the batch is applied once more after a fresh
lookup; overtaken again, it ends in StoreConflict, which the role retries.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from psycopg import errors as pgerr

from amends_core import wire
from amends_core.errors import CommitUnknown as LostReply  # any adapter's; the core hands back ours
from amends_core.ledger import Config, Envelope, Family, OutputID, Projection, StockKey
from amends_core.view import Effect, Projected, ViewDecision, ViewState, reason_counts
from amends_core.view import projections as project_keys
from amends_pipeline.postgres import migrate as migrations
from amends_pipeline.postgres.connection import DEFAULT_SCHEMA, Database
from amends_pipeline.postgres.errors import CommitUnknown, StoreConflict, StoreError
from amends_pipeline.postgres.namespace import lookup_namespace, register_namespace
from amends_pipeline.postgres.sql import COPY_MIN_ROWS, VIEW_ROWS, VIEW_ROWS_STAGE

_UPSERT_FROM = """
INSERT INTO view_rows (ns_id, output_id, partition, family, item, location, day, version, present,
                       envelope, applied_offset, close, threshold)
SELECT %s, * FROM {}
ON CONFLICT (ns_id, output_id) DO UPDATE
SET partition = excluded.partition, version = excluded.version, present = excluded.present,
    envelope = excluded.envelope, applied_offset = excluded.applied_offset,
    close = excluded.close, threshold = excluded.threshold
WHERE view_rows.version < excluded.version
"""
"""Every row a batch stores has a higher version than the row its lookup found (the version
rule), so the WHERE holds unless another session wrote the row since the lookup; the row is
then left alone, the statement reports fewer rows than it was given, and the batch is applied
again (``_Overtaken``). A row never moves back to a lower version."""
_UPSERT_ROWS = _UPSERT_FROM.format(
    "unnest(%b::text[], %b::int[], %b::text[], %b::text[], %b::text[], %b::int[],"
    " %b::bigint[], %b::boolean[], %b::bytea[], %b::bigint[], %b::bigint[], %b::bigint[])"
)
"""A small batch's rows as array parameters."""
_UPSERT_STAGED = _UPSERT_FROM.format("pg_temp.amends_stage_view_rows")
"""A large batch's rows, staged in VIEW_ROWS_STAGE (from COPY_MIN_ROWS rows)."""
_CREATE_STAGE = """
CREATE TEMP TABLE IF NOT EXISTS amends_stage_view_rows
    (output_id text, partition int, family text, item text, location text, day int,
     version bigint, present boolean, envelope bytea, applied_offset bigint, close bigint,
     threshold bigint)
    ON COMMIT DELETE ROWS
"""

_LOOKUP_ROWS = """
SELECT v.envelope FROM unnest(%b::text[]) AS i(id)
CROSS JOIN LATERAL (SELECT envelope FROM view_rows WHERE ns_id = %s AND output_id = i.id LIMIT 1) AS v
"""
"""The stored rows a batch names, one primary-key probe per output ID.

The LIMIT keeps the subquery from being flattened into a join the planner may
run as a scan of the namespace's whole view (every row shares its ns_id):
the cost stays proportional to the batch, not to the size of the view.
(ns_id, output_id) is the primary key, so the LIMIT never drops a row."""


@dataclass(frozen=True, slots=True)
class ViewRebuilt:
    """What ``PgViewStore.rebuild`` changed on one output partition."""

    partition: int
    frontier_before: int
    frontier: int
    """The new frontier: the start of the retained output log."""
    stopped_before: str | None
    rows_discarded: int


class _Overtaken(Exception):
    """Another session wrote a row of this batch after the batch's lookup (only an applier of
    another output partition naming the same output ID can): roll back and apply again."""


class PgViewStore:
    """The version-aware view of one namespace. One instance per view consumer thread."""

    def __init__(self, db: Database, cfg: Config, ns_id: int) -> None:
        self.db = db
        self.cfg = cfg
        self.ns_id = ns_id
        self._staged: object = None
        """The session that holds the staging table (created in a transaction that committed)."""

    @classmethod
    def open(
        cls,
        conninfo: str,
        cfg: Config,
        *,
        schema: str = DEFAULT_SCHEMA,
        migrate: bool = False,
        application_name: str = "amends-view",
        read_only: bool = False,
    ) -> PgViewStore:
        """Connect, optionally migrate, and register the namespace (idempotent).

        ``read_only``: neither migrate nor register; look the namespace up and
        raise NamespaceUnknown when it was never provisioned.
        """
        cfg.validate()
        if migrate and not read_only:
            migrations.migrate(conninfo, schema)
        db = Database(conninfo, schema, application_name=application_name)
        try:
            ns_id, _ = (lookup_namespace if read_only else register_namespace)(db, cfg)
        except BaseException:
            db.close()
            raise
        return cls(db, cfg, ns_id)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> PgViewStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _label(self, what: str) -> str:
        return self.db.label(f"{what} (view of namespace {self.cfg.namespace!r})")

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self.cfg.partitions:
            msg = f"output partition {partition} is not configured (0..{self.cfg.partitions - 1})"
            raise StoreError(msg)

    # ------------------------------------------------------------ progress

    def frontier(self, partition: int) -> int:
        """The exclusive applied frontier of an output partition."""
        return self.progress(partition)[0]

    def stopped(self, partition: int) -> str | None:
        """The protocol diagnostic that stopped an output partition, or None."""
        return self.progress(partition)[1]

    def progress(self, partition: int) -> tuple[int, str | None]:
        self._check_partition(partition)
        with self.db.transaction(self._label(f"reading progress of {partition}")) as conn:
            row = conn.execute(
                "SELECT next_offset, stopped FROM view_progress"
                " WHERE ns_id = %s AND partition = %s",
                (self.ns_id, partition),
            ).fetchone()
        assert row is not None
        return row[0], row[1]

    def resolve_unknown(self, unknown: LostReply) -> tuple[int, str | None]:
        """After a lost commit reply of ``apply``: end that session, then re-read progress.

        Returns (frontier, stopped) as installed; records below the frontier were
        applied, so re-applying from it is exact. Without this the abandoned
        session could hold the progress lock until the server's idle timeout.
        """
        p = unknown.partition
        if p is None:
            msg = f"{unknown.operation}: not a view application; re-read progress instead"
            raise StoreError(msg)
        with self.db.transaction(self._label(f"resolving an unknown commit on {p}")) as conn:
            self.db.end_backend(conn, unknown.backend)
            row = conn.execute(
                "SELECT next_offset, stopped FROM view_progress"
                " WHERE ns_id = %s AND partition = %s FOR UPDATE",
                (self.ns_id, p),
            ).fetchone()
        assert row is not None
        return row[0], row[1]

    # ------------------------------------------------------------ application

    def apply(
        self,
        partition: int,
        records: Iterable[tuple[int, bytes]],
        *,
        start: int | None = None,
        end: int | None = None,
    ) -> list[ViewDecision]:
        """Apply output records (offset, raw envelope bytes) in offset order, in one transaction.

        Returns one decision per record. Records below the frontier are
        ALREADY_APPLIED; after a PROTOCOL_ERROR every later record is STOPPED.
        With ``start``, the records are every record of [start, end) as read
        from the output log: when the frontier is no longer ``start`` nothing
        is applied and the result is empty (re-read the frontier); otherwise,
        unless the partition stopped, the frontier moves to ``end``.
        A lost commit reply raises CommitUnknown: re-read ``frontier``.
        """
        self._check_partition(partition)
        recs = list(records)
        if (start is None) != (end is None):
            msg = "apply takes both start and end of the range read, or neither"
            raise StoreError(msg)
        if start is not None and end is not None and (
            end < start or any(not start <= off < end for off, _ in recs)
        ):
            msg = f"records of output partition {partition} lie outside [{start}, {end})"
            raise StoreError(msg)
        try:
            for _ in range(2):
                try:
                    return self._apply(partition, recs, start, end)
                except StoreError as e:
                    if not isinstance(e.__cause__, pgerr.UniqueViolation):
                        raise
                except _Overtaken:
                    pass
                # Another partition's applier stored a row of this batch after its lookup:
                # nothing of this attempt committed; again, after a fresh lookup.
        except CommitUnknown as e:
            e.partition = partition
            raise
        msg = (
            f"{self._label(f'applying output partition {partition}')}: another session"
            " wrote rows of this batch while it was applied, twice; nothing was"
            " committed, retry"
        )
        raise StoreConflict(msg)

    def _apply(
        self,
        partition: int,
        recs: list[tuple[int, bytes]],
        expect: int | None,
        end: int | None,
    ) -> list[ViewDecision]:
        label = self._label(f"applying output partition {partition}")
        staging = None
        with self.db.transaction(label) as conn:
            row = conn.execute(
                "SELECT next_offset, stopped FROM view_progress"
                " WHERE ns_id = %s AND partition = %s FOR UPDATE",
                (self.ns_id, partition),
            ).fetchone()
            assert row is not None
            start, stopped = row
            if expect is not None and start != expect:
                return []  # read before the frontier moved (a rebuild, another applier)
            inputs: list[bytes | Envelope] = []
            ids: dict[OutputID, str] = {}  # each output ID of the batch, encoded once for lookup and upsert
            for _, raw in recs:
                dec = wire.decode_envelope(raw)
                if isinstance(dec, wire.DecodeError):
                    inputs.append(raw)  # decide() reports the decode error itself
                else:
                    inputs.append(dec)
                    if dec.output_id not in ids:
                        ids[dec.output_id] = dec.output_id.encoded
            vs = ViewState(self.cfg)
            vs.frontiers[partition] = start
            if stopped is not None:
                vs.stopped[partition] = stopped
            if ids and stopped is None:
                for (raw_env,) in conn.execute(_LOOKUP_ROWS, (sorted(ids.values()), self.ns_id)):
                    env = wire.decode_envelope(bytes(raw_env))
                    if isinstance(env, wire.DecodeError):
                        msg = f"stored view row is not a valid envelope: {env.message}"
                        raise StoreError(msg)
                    vs.rows[env.output_id] = env
            found = set(vs.rows)  # what the lookup found: the batch's other output IDs are new
            decisions: list[ViewDecision] = []
            stored: dict[OutputID, tuple[int, bytes]] = {}
            stop: tuple[int, bytes] | None = None
            for (off, raw), x in zip(recs, inputs, strict=True):
                d = vs.apply(partition, off, x)
                decisions.append(d)
                if d.effect is Effect.STORED and d.envelope is not None:
                    stored[d.envelope.output_id] = (off, raw)
                elif d.effect is Effect.PROTOCOL_ERROR:
                    stop = (off, raw)
            if stored:
                staging = self._write_rows(conn, partition, vs, stored, ids, found)
            if end is not None and partition not in vs.stopped:
                # every record of [start, end) was seen: a gap at the end is no reason to re-read
                vs.frontiers[partition] = max(vs.frontier(partition), end)
            if vs.frontier(partition) != start or stop is not None:
                conn.execute(
                    "UPDATE view_progress SET next_offset = %s, stopped = %s,"
                    " stopped_offset = %s, stopped_envelope = %s"
                    " WHERE ns_id = %s AND partition = %s",
                    (
                        vs.frontier(partition),
                        vs.stopped.get(partition),
                        None if stop is None else stop[0],
                        None if stop is None else stop[1],
                        self.ns_id,
                        partition,
                    ),
                )
        if staging is not None:
            self._staged = staging  # the transaction that created the table committed
        return decisions

    def rebuild(self, partition: int, log_start: int, *, discard_rows: bool = False) -> ViewRebuilt:
        """Move a partition's frontier back to ``log_start`` and clear its stop diagnostic.

        Rows (values and deletion versions) stay unless ``discard_rows``: the
        version rule then lets re-application only move each row forward.
        Batches read before the reset are refused by ``apply(start=...)``.
        """
        self._check_partition(partition)
        if log_start < 0:
            msg = f"log start {log_start} of output partition {partition} is negative"
            raise StoreError(msg)
        with self.db.transaction(self._label(f"rebuilding output partition {partition}")) as conn:
            row = conn.execute(
                "SELECT next_offset, stopped FROM view_progress"
                " WHERE ns_id = %s AND partition = %s FOR UPDATE",
                (self.ns_id, partition),
            ).fetchone()
            assert row is not None
            discarded = 0
            if discard_rows:
                cur = conn.execute(
                    "DELETE FROM view_rows WHERE ns_id = %s AND partition = %s",
                    (self.ns_id, partition),
                )
                discarded = cur.rowcount
            conn.execute(
                "UPDATE view_progress SET next_offset = %s, stopped = NULL,"
                " stopped_offset = NULL, stopped_envelope = NULL"
                " WHERE ns_id = %s AND partition = %s",
                (log_start, self.ns_id, partition),
            )
        return ViewRebuilt(partition, row[0], log_start, row[1], discarded)

    def _write_rows(
        self,
        conn: Any,
        partition: int,
        vs: ViewState,
        stored: dict[OutputID, tuple[int, bytes]],
        encoded: dict[OutputID, str],
        found: set[OutputID],
    ) -> object:
        """Write the stored rows; returns the session when this transaction created its
        staging table.

        Rows of output IDs the lookup did not find (not in ``found``) go in by COPY straight
        into the table when there are enough of them; the rest are upserted.
        """
        rows: list[tuple[Any, ...]] = []
        new: list[tuple[Any, ...]] = []
        for oid, (off, raw) in stored.items():
            env = vs.rows[oid]
            (rows if oid in found else new).append((
                encoded.get(oid) or oid.encoded,
                partition,
                oid.family.value,
                oid.key.item,
                oid.key.location,
                oid.day,
                env.version,
                env.payload.present,
                raw,
                off,
                env.payload.close,
                env.payload.threshold,
            ))
        if len(new) >= COPY_MIN_ROWS:
            ns_id = self.ns_id
            VIEW_ROWS.copy_rows(conn.cursor(), [(ns_id, *r) for r in new])
        else:
            rows += new
        if not rows:
            return None
        created = None
        if len(rows) < COPY_MIN_ROWS:
            cur = conn.execute(_UPSERT_ROWS, (self.ns_id, *(list(c) for c in zip(*rows, strict=True))))
        else:
            if conn is not self._staged:
                conn.execute(_CREATE_STAGE)
                created = conn
            VIEW_ROWS_STAGE.copy_rows(conn.cursor(), rows)
            cur = conn.execute(_UPSERT_STAGED, (self.ns_id,))
        if cur.rowcount != len(rows):
            raise _Overtaken
        return created

    # ------------------------------------------------------------ inspection

    def snapshot(self) -> ViewState:
        """The whole view in one REPEATABLE READ, READ ONLY transaction, as a ViewState.

        ``frontiers`` lists the partitions that have applied something, as the
        in-memory view does.
        """
        vs = ViewState(self.cfg)
        with self.db.transaction(self._label("taking a snapshot"), snapshot=True) as conn:
            self._progress_into(conn, vs)
            for (raw,) in conn.cursor(binary=True).execute(
                "SELECT envelope FROM view_rows WHERE ns_id = %s", (self.ns_id,)
            ):
                env = self._decoded(raw)
                vs.rows[env.output_id] = env
        return vs

    def checked(self) -> tuple[ViewState, Projected]:
        """What verification compares, in one REPEATABLE READ, READ ONLY transaction.

        The ViewState carries the progress (frontiers, stop diagnostics) and the key-status
        rows; the balances and alerts come as the ``close`` and ``threshold`` columns the
        view wrote beside each envelope (migration 0015), already projected per key, so the
        hundreds of thousands of balance and alert envelopes are never decoded. A present
        row without those columns is read from its envelope.
        """
        vs = ViewState(self.cfg)
        keys = {(kc.key.item, kc.key.location): kc.key for kc in self.cfg.keys}
        balances: dict[StockKey, list[tuple[int, int]]] = {}
        alerts: dict[StockKey, list[tuple[int, int, int]]] = {}
        status_family, balance_family = Family.STATUS.value, Family.BALANCE.value
        with self.db.transaction(self._label("reading the view for verification"), snapshot=True) as conn:
            self._progress_into(conn, vs)
            for (raw,) in conn.execute(
                "SELECT envelope FROM view_rows WHERE ns_id = %s AND family = %s", (self.ns_id, status_family)
            ):
                env = self._decoded(raw)
                vs.rows[env.output_id] = env
            for family, item, location, day, close, threshold, raw in conn.cursor(binary=True).execute(
                "SELECT family, item, location, day, close, threshold,"
                " CASE WHEN close IS NULL THEN envelope END"
                " FROM view_rows WHERE ns_id = %s AND present AND family <> %s",
                (self.ns_id, status_family),
            ).fetchall():
                key = keys.get((item, location))
                if key is None:
                    continue  # the view refuses envelopes of keys the configuration lacks
                if raw is not None:  # stored before its values had columns
                    p = self._decoded(raw).payload
                    close, threshold = p.close, p.threshold
                if family == balance_family:
                    balances.setdefault(key, []).append((day, close))
                else:
                    alerts.setdefault(key, []).append((day, threshold, close))
        status = {}
        for oid, env in vs.rows.items():
            if env.payload.status is None:
                msg = f"stored key-status row {oid.encoded} carries no status"
                raise StoreError(msg)
            status[oid.key] = (env.payload.status, env.payload.reasons)
        counts = reason_counts(vs.rows.values())
        return vs, Projected(project_keys(self.cfg, status, balances, alerts), counts)

    @staticmethod
    def _decoded(raw: bytes | memoryview) -> Envelope:
        env = wire.decode_envelope(bytes(raw))
        if isinstance(env, wire.DecodeError):
            msg = f"stored view row is not a valid envelope: {env.message}"
            raise StoreError(msg)
        return env

    def _progress_into(self, conn: Any, vs: ViewState) -> None:
        for p, nxt, stopped in conn.execute(
            "SELECT partition, next_offset, stopped FROM view_progress WHERE ns_id = %s",
            (self.ns_id,),
        ):
            if nxt > 0:
                vs.frontiers[p] = nxt
            if stopped is not None:
                vs.stopped[p] = stopped

    def projections(self) -> dict[StockKey, Projection]:
        """Visible per-key projection (withdrawals hidden) from a consistent snapshot."""
        return self.snapshot().projections()


__all__ = ["PgViewStore", "ViewRebuilt"]
