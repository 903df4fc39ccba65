"""What must hold for any input, hostile or not.

Each function takes one input and returns normally when the input ended in an
allowed outcome: a transaction or a coded rejection, a framed record or a raw
value or one named error line, a stored envelope or a protocol stop with a
diagnostic. Anything else (an uncaught exception, a failed assertion) is an
escape. The Hypothesis tests in tests/unit and the atheris driver in
``tests.fuzz`` call these same functions.
"""

from __future__ import annotations

import json

from amends_core import fold, limits, records, wire
from amends_core.ledger import Rejection, RejectReason, Transaction
from amends_core.oracle.decode import Malformed, decode_key, decode_many, decode_transaction
from amends_core.pipeline import MemoryPipeline
from amends_core.records import FramedRecord, InputReader, RawLine, RecordsError
from amends_core.view import Effect, ViewState
from tests import builders as b
from tests.builders import K1, config, day, record, txn, value

CFG = config([(K1, 100, 60, 0)])
VALID = value(txn())
KEY = K1.transport_key()
FRAMED = json.dumps(
    {"partition": 0, "offset": 3, "key": KEY.decode(), "value": VALID.decode()},
    separators=(",", ":"),
).encode()


def _envelopes() -> list[bytes]:
    """Output bytes of a short history as the relay publishes them (balances, an alert, status)."""
    pipe = MemoryPipeline(CFG)
    pipe.append(b.records([txn("A", qty=-50), txn("B", qty=-20, valid=day(2)), txn("A", revision=2, kind="AMEND", qty=-5)]))
    pipe.drain()
    return list(pipe.output[0])


ENVELOPES = _envelopes()


# ---------------------------------------------------------------- source values and keys


def outcome_is_coded(raw: bytes, key: bytes | None = KEY) -> Transaction | Rejection:
    """The strict decoder ends every value (and transport key) in a transaction or a coded rejection."""
    out = fold.validate(CFG, record(raw, 0, key=key))
    assert isinstance(out, (Transaction, Rejection))
    if isinstance(out, Rejection):
        assert out.reason in RejectReason
    return out


def agree(values: list[bytes]) -> list[bool]:
    """The oracle's bulk decoder and ``wire`` agree on every value: both reject, or both accept
    with equal transactions. Returns, per value, whether it was accepted."""
    ours = decode_many(values)
    assert len(ours) == len(values)
    accepted = []
    for raw, mine in zip(values, ours, strict=True):
        theirs = wire.decode_transaction(raw)
        if isinstance(theirs, wire.DecodeError):
            assert isinstance(mine, Malformed), (raw, theirs.message, mine)
        else:
            assert isinstance(mine, Transaction), (raw, mine)
            assert mine == theirs, raw
        accepted.append(not isinstance(theirs, wire.DecodeError))
    return accepted


def agree_one(raw: bytes) -> None:
    """As ``agree``, through the oracle's single-value route."""
    mine = decode_transaction(raw)
    theirs = wire.decode_transaction(raw)
    if isinstance(theirs, wire.DecodeError):
        assert isinstance(mine, Malformed), (raw, theirs.message, mine)
    else:
        assert mine == theirs, raw


def agree_key(raw: bytes | None) -> None:
    """The oracle's key decoder and ``wire`` agree on every transport key."""
    mine = decode_key(raw)
    theirs = wire.decode_transport_key(raw)
    if isinstance(theirs, wire.DecodeError):
        assert isinstance(mine, Malformed), (raw, theirs.message)
    else:
        assert mine == theirs, raw


# ---------------------------------------------------------------- input files


def check_read_line(line: bytes) -> None:
    """One input line is a framed record, a raw value, or one named error line."""
    try:
        got = records.read_line(line, "f:1", 2)
    except RecordsError as e:
        assert str(e).startswith("f:1: ") and "\n" not in str(e), str(e)
        return
    assert isinstance(got, (FramedRecord, RawLine))
    if isinstance(got, FramedRecord):
        assert 0 <= got.partition < 2 and 0 <= got.offset <= limits.MAX_OFFSET
        # a framed record frames back to the same record
        again = records.read_line(records.encode_line(got.record("s")).encode(), "g:1", 2)
        assert again == got


def check_input_file(chunks: list[bytes]) -> None:
    """A whole file is read (one kind of line, no repeated offset) or refused with one named line."""
    reader = InputReader(2)
    try:
        reader.add_file("f", chunks)
        framed = reader.framed()
    except RecordsError as e:
        assert str(e).startswith("f:") and "\n" not in str(e), str(e)
        return
    assert not (framed and reader.raw())  # one kind of line per file
    keys = [(f.partition, f.offset) for f in framed]
    assert keys == sorted(set(keys))


# ---------------------------------------------------------------- output topic (view side)


def check_view(raw: bytes) -> None:
    """An output message is stored, or stops its partition with a diagnostic until an operator acts."""
    view = ViewState(CFG)
    d = view.apply(0, 0, raw)
    assert d.effect in (Effect.STORED, Effect.PROTOCOL_ERROR), d
    if d.effect is Effect.PROTOCOL_ERROR:
        assert d.diagnostic and view.frontier(0) == 0 and view.stopped[0].startswith("offset 0: ")
        assert view.apply(0, 0, ENVELOPES[0]).effect is Effect.STOPPED  # stopped until an operator acts
    else:
        assert view.frontier(0) == 1
