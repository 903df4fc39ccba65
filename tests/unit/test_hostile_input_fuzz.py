"""Hostile input files and output-topic bytes: every input ends in a value or one named error.

Targets: the input-file reading shared by ``amends load`` and ``amends compute``
(``amends_core.records``) and the view's decoding of output-topic bytes
(``wire.decode_envelope`` through ``ViewState.decide``). Nothing but
``RecordsError`` (files) may escape, and the view turns every undecodable
message into a protocol stop with a diagnostic, never an exception.
`make fuzz-nightly` raises the example count (AMENDS_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core import limits, records
from amends_core.pipeline import MemoryPipeline
from amends_core.records import FramedRecord, InputReader, RawLine, RecordsError
from amends_core.view import Effect, ViewState
from tests import builders as b
from tests.builders import K1, config, day, txn, value

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
CFG = config([(K1, 100, 60, 0)])
FRAMED = json.dumps(
    {"partition": 0, "offset": 3, "key": K1.transport_key().decode(), "value": value(txn()).decode()},
    separators=(",", ":"),
).encode()


def _envelopes() -> list[bytes]:
    """Output bytes of a short history as the relay publishes them (balances, an alert, status)."""
    pipe = MemoryPipeline(CFG)
    pipe.append(b.records([txn("A", qty=-50), txn("B", qty=-20, valid=day(2)), txn("A", revision=2, kind="AMEND", qty=-5)]))
    pipe.drain()
    return list(pipe.output[0])


ENVELOPES = _envelopes()


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A valid line or envelope with a few byte-level and structural mutations."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup-member", "nest", "splice", "crlf"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "dup-member" and data.startswith(b"{"):
            member = draw(st.sampled_from([b'"partition":1,', b'"offset":9,', b'"key":null,', b'"value":"",',
                                           b'"version":2,', b'"payload":{},', b'"offset":1e400,']))
            data[1:1] = member
        elif op == "nest":
            depth = draw(st.sampled_from([31, 32, 33, 1000, 100_000]))
            data[i:i] = draw(st.sampled_from([b"[", b"{\"a\":"])) * depth
        elif op == "splice":
            data[i:i] = draw(st.sampled_from([b'"', b"\\", b"\\ud800", b"\\u0000", b"\xff", b"}", b"]", b"\r", b"\n"]))
        elif op == "crlf":
            data += b"\r\n"
    return bytes(data)


def check_read_line(line: bytes) -> None:
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


@FUZZ
@given(mutated([FRAMED, value(txn())]))
def test_a_mutated_input_line_is_framed_raw_or_one_named_error(line: bytes) -> None:
    check_read_line(line)


@FUZZ
@given(st.binary(max_size=200))
def test_arbitrary_bytes_as_an_input_line_are_framed_raw_or_one_named_error(line: bytes) -> None:
    check_read_line(line)


@FUZZ
@given(st.lists(st.one_of(mutated([FRAMED, value(txn())]), st.binary(max_size=40)), max_size=8))
def test_a_hostile_input_file_is_read_whole_or_refused_with_one_named_line(chunks: list[bytes]) -> None:
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


@FUZZ
@given(mutated(ENVELOPES))
def test_a_mutated_output_message_is_applied_or_stops_its_partition_with_a_diagnostic(raw: bytes) -> None:
    check_view(raw)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_output_bytes_are_applied_or_stop_the_partition_with_a_diagnostic(raw: bytes) -> None:
    check_view(raw)


def check_view(raw: bytes) -> None:
    view = ViewState(CFG)
    d = view.apply(0, 0, raw)
    assert d.effect in (Effect.STORED, Effect.PROTOCOL_ERROR), d
    if d.effect is Effect.PROTOCOL_ERROR:
        assert d.diagnostic and view.frontier(0) == 0 and view.stopped[0].startswith("offset 0: ")
        assert view.apply(0, 0, ENVELOPES[0]).effect is Effect.STOPPED  # stopped until an operator acts
    else:
        assert view.frontier(0) == 1
