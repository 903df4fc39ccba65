"""A large batch COPYs its observation rows while it is still folding.

The rows reach the table before the batch commits, inside its transaction. Three
things must still hold: a restore of dropped revisions reads the streamed rows
from the table and only the unsent ones from memory (never both); a record that
aborts the batch after rows were streamed leaves nothing behind and keeps the
session usable; a key read in the middle of the batch pauses the COPY first.
Each test runs the same records with streaming forced on for every row and with
it off, and compares everything the store holds.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from amends_core.ledger import INT64_MAX, CloseOutOfRange
from amends_pipeline.postgres import batch as pg_batch
from amends_pipeline.postgres.errors import BatchAborted
from tests import builders as b

# A query sent while a COPY is open would wait forever: fail such a mistake in a minute.
pytestmark = pytest.mark.timeout(60)


def _counting(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(cls, name)

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        calls.append(1)
        return real(self, *a, **kw)

    monkeypatch.setattr(cls, name, counted)
    return calls


def _stream_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg_batch, "STREAM_ROWS", 1)
    monkeypatch.setattr(pg_batch, "COPY_MIN_ROWS", 2)


def _same_store(a: Any, c: Any) -> None:
    sa, sc = a.snapshot(), c.snapshot()
    assert sa.keys == sc.keys
    assert [e.envelope.replace(b'"streamed"', b'"held"') for e in sa.outbox[0]] == [
        e.envelope for e in sc.outbox[0]
    ]
    assert a.conflicts() == c.conflicts()


RESTORED = [
    b.txn("A", 1, qty=-50, valid=b.day(1)),
    b.txn("A", 2, "AMEND", qty=-30, valid=b.day(3)),
    # second batch: arrivals at A's dropped revision 1, and at B's, dropped in this batch
    b.txn("A", 1, qty=-50, valid=b.day(1)),
    b.txn("A", 1, qty=-51, valid=b.day(1)),
    b.txn("B", 1, qty=-5, valid=b.day(2)),
    b.txn("B", 1, qty=-5, valid=b.day(2)),
    b.txn("B", 3, "AMEND", qty=-6, valid=b.day(2)),
    b.txn("B", 1, qty=-7, valid=b.day(2)),
    b.txn("A", 1, qty=-51, valid=b.day(1)),
    b.txn("B", 1, qty=-5, valid=b.day(2)),
]


def test_a_restore_reads_streamed_rows_from_the_table_and_the_rest_from_memory(open_store, monkeypatch):
    cfg = b.config([(b.K1, 100, 60, 0)])
    recs = b.records(RESTORED)

    def run(namespace: str) -> Any:
        store = open_store(cfg.with_namespace(namespace))
        tok = store.claim(0)
        store.process(tok, 0, recs[:2])
        store.process(tok, 2, recs[2:])
        return store

    held = run("held")  # 8 records: below COPY_MIN_ROWS, nothing streamed
    _stream_every_row(monkeypatch)
    sends = _counting(monkeypatch, pg_batch._RowStream, "send")
    restored: list[list[int]] = []  # the offsets of each restore's rows
    real_lower = pg_batch.codec.lower_revisions

    def lower(key: Any, source: str, partition: int, rows: list[tuple[Any, ...]]) -> Any:
        restored.append([r[0] for r in rows])
        return real_lower(key, source, partition, rows)

    monkeypatch.setattr(pg_batch.codec, "lower_revisions", lower)
    streamed = run("streamed")
    assert len(sends) >= 6
    # Each stale arrival (offsets 2, 3, 7, 8, 9) reads back every earlier observation of its
    # identity below the highest revision, each exactly once: offset 0 was committed by the
    # first batch, the others were streamed into the table by this one.
    assert restored == [[0], [0, 2], [4, 5], [0, 2, 3], [4, 5, 7]]
    _same_store(streamed, held)
    a1 = streamed.snapshot().keys[b.K1].identities["A"].revisions[1]
    assert [[s.offset for s in x.sources] for x in a1] == [[0, 2], [3, 8]]


def test_an_aborted_batch_leaves_no_streamed_row_and_keeps_its_session(open_store, admin, monkeypatch):
    _stream_every_row(monkeypatch)
    store = open_store(b.config([(b.K1, INT64_MAX - 5, 0, 0)]))
    tok = store.claim(0)
    backend = store.db.backend
    recs = b.records([
        b.txn("A", qty=1, valid=b.day(1)),
        b.txn("B", qty=1, valid=b.day(2)),
        b.txn("C", qty=9, valid=b.day(3)),  # close leaves int64, after two rows were streamed
        b.txn("D", qty=1, valid=b.day(4)),
    ])
    sends = _counting(monkeypatch, pg_batch._RowStream, "send")
    ended_with: list[str] = []  # what each COPY ended with tells the server (and its log)
    real_finish = psycopg.Copy.finish

    def finish(self: Any, exc: BaseException | None) -> None:
        ended_with.append("" if exc is None else str(exc))
        real_finish(self, exc)

    monkeypatch.setattr(psycopg.Copy, "finish", finish)
    with pytest.raises(BatchAborted) as caught:
        store.process(tok, 0, recs)
    assert caught.value.offset == 2 and isinstance(caught.value.__cause__, CloseOutOfRange)
    assert sends  # rows went out before the failing record
    assert ended_with == ["the batch is rolled back"]  # a fixed text, nothing of the record
    for table in ("observations", "key_days", "outputs", "outbox", "measurements"):
        assert admin.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table  # noqa: S608
    assert store.frontier(0) == 0
    assert store.db.backend == backend  # the COPY was ended, not the session
    assert store.process(tok, 0, recs[:2]).frontier == 2
    assert admin.execute("SELECT count(*) FROM observations").fetchone() == (2,)


def test_a_key_read_in_the_middle_of_a_batch_pauses_the_copy(open_store, monkeypatch):
    cfg = b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 0), (b.K3, 100, 60, 0)])
    keys = (b.K1, b.K2, b.K3)
    recs = b.records([
        b.txn(f"T{i}", qty=-(i % 5), valid=b.day(1 + i % 9), key=keys[i % 3]) for i in range(40)
    ] + [b.txn("T4", 2, "AMEND", qty=-9, valid=b.day(2), key=b.K2)])
    held = open_store(cfg.with_namespace("held"))
    held.process(held.claim(0), 0, recs)
    _stream_every_row(monkeypatch)
    # No key is read ahead: each is read when its first record comes, between streamed rows.
    monkeypatch.setattr(pg_batch.BatchContext, "transport_key", lambda self, raw: None)
    loads = _counting(monkeypatch, pg_batch.ProcessingTx, "_load")
    streamed = open_store(cfg.with_namespace("streamed"))
    streamed.process(streamed.claim(0), 0, recs)
    assert len(loads) == 3
    _same_store(streamed, held)


def test_a_large_batch_of_rejected_records_opens_no_copy(open_store, admin, monkeypatch):
    _stream_every_row(monkeypatch)
    store = open_store(b.config())
    tok = store.claim(0)
    sends = _counting(monkeypatch, pg_batch._RowStream, "send")
    res = store.process(tok, 0, [b.record(b"not json", i) for i in range(40)])
    assert (res.frontier, res.accepted, len(res.rejections)) == (40, 0, 40)
    assert sends == []  # no observation row: nothing to stream, no empty COPY either
    assert admin.execute("SELECT count(*) FROM quarantine").fetchone() == (40,)


def test_a_session_ended_while_rows_stream_loses_the_batch_and_says_so(open_store, admin, monkeypatch):
    """The server process ends in the middle of the batch's COPY: the batch fails as
    StoreUnavailable (nothing committed, one line), never hangs, and runs again whole on
    a new session."""
    from amends_pipeline.postgres.errors import StoreUnavailable

    _stream_every_row(monkeypatch)
    store = open_store(b.config([(b.K1, 100, 60, 0), (b.K2, 100, 60, 0)]))
    tok = store.claim(0)
    recs = b.records([
        b.txn(f"T{i}", qty=-(i % 4), valid=b.day(1 + i % 6), key=(b.K1, b.K2)[i % 2]) for i in range(60)
    ])
    real_send = pg_batch._RowStream.send
    sent: list[int] = []

    def send_then_end_the_session(self: Any, rows: list[tuple[Any, ...]]) -> None:
        real_send(self, rows)
        sent.append(len(rows))
        if len(sent) == 5:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (store.db.backend[0],))

    monkeypatch.setattr(pg_batch._RowStream, "send", send_then_end_the_session)
    with pytest.raises(StoreUnavailable) as caught:
        store.process(tok, 0, recs)
    assert "\n" not in str(caught.value)
    assert len(sent) >= 5
    monkeypatch.setattr(pg_batch._RowStream, "send", real_send)
    assert store.frontier(0) == 0
    for table in ("observations", "key_days", "outputs", "outbox"):
        assert admin.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table  # noqa: S608
    assert store.process(tok, 0, recs).frontier == 60
    assert admin.execute("SELECT count(*) FROM observations").fetchone() == (60,)
