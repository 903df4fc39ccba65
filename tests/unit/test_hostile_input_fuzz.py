"""Hostile input files and output-topic bytes: every input ends in a value or one named error.

Targets: the input-file reading shared by ``amends load`` and ``amends compute``
(``amends_core.records``) and the view's decoding of output-topic bytes
(``wire.decode_envelope`` through ``ViewState.decide``). Nothing but
``RecordsError`` (files) may escape, and the view turns every undecodable
message into a protocol stop with a diagnostic, never an exception.
`make fuzz-nightly` raises the example count (AMENDS_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import txn, value
from tests.fuzz.checks import ENVELOPES, FRAMED, check_input_file, check_read_line, check_view

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


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
    check_input_file(chunks)


@FUZZ
@given(mutated(ENVELOPES))
def test_a_mutated_output_message_is_applied_or_stops_its_partition_with_a_diagnostic(raw: bytes) -> None:
    check_view(raw)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_output_bytes_are_applied_or_stop_the_partition_with_a_diagnostic(raw: bytes) -> None:
    check_view(raw)

