"""Hostile input: every byte string ends as an accepted transaction or a coded rejection.

Nothing else may escape validation. `make fuzz-nightly` raises the example
count (AMENDS_FUZZ_EXAMPLES) for a long run.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core.ledger import Rejection, RejectReason
from amends_core.store.memory import MemoryStore
from tests.builders import K1, record, txn
from tests.fuzz.checks import CFG, KEY, VALID, outcome_is_coded

EXAMPLES = int(os.environ.get("AMENDS_FUZZ_EXAMPLES", "400"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=12,
)
FIELDS = ["txn_id", "revision", "kind", "stock_key", "valid_time", "qty", "source_time", "Qty", "extra"]



@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "dup", "splice"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "flip" and data:
            data[i] = draw(st.integers(0, 255))
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete" and data:
            del data[i : i + draw(st.integers(1, 8))]
        elif op == "dup":
            j = draw(st.integers(i, len(data)))
            data[j:j] = data[i:j]
        else:
            data[i:i] = draw(
                st.sampled_from(
                    [b"\\ud800", b"\x00", b"\\u0000", b"NaN", b"1e400", b"\xef\xbb\xbf", b"[" * 50, b'"qty":1,', b"\xed\xa0\x80", b"-0", b"9" * 30]
                )
            )
    return bytes(data)


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_accepted_or_rejected_with_a_code(raw: bytes) -> None:
    outcome_is_coded(raw)


@FUZZ
@given(mutated())
def test_byte_mutations_of_a_valid_record_are_accepted_or_rejected_with_a_code(raw: bytes) -> None:
    outcome_is_coded(raw)


@FUZZ
@given(st.dictionaries(st.sampled_from(FIELDS), json_value, max_size=9), st.booleans())
def test_structurally_plausible_objects_are_accepted_or_rejected_with_a_code(obj: dict[str, Any], merge: bool) -> None:
    base = txn() if merge else {}
    base.update(obj)
    raw = json.dumps(base).encode()
    outcome_is_coded(raw)


@FUZZ
@given(st.one_of(st.none(), st.binary(max_size=40), mutated()))
def test_any_transport_key_is_accepted_or_rejected_with_a_code(key: bytes | None) -> None:
    outcome_is_coded(VALID, key)


def test_named_hostile_inputs_are_rejected_as_malformed() -> None:
    hostile = [
        b"[" * 200_000,
        b'{"a":' * 100_000,
        VALID.replace(b'"qty":-10', b'"qty":' + b"1" * 10_000),
        VALID.replace(b'"T1"', b'"\\udfff"'),
        VALID.replace(b'"T1"', b'"\xff\xfe"'),
        VALID.replace(b'"qty":-10', b'"qty":NaN'),
        VALID.replace(b'"qty":-10', b'"qty":Infinity'),
        b"\xef\xbb\xbf" + VALID,
        VALID.replace(b'"T1"', b'"T\\u00001"'),
        VALID.replace(b'"T1"', b'"' + b"x" * (1 << 21) + b'"'),
        b"\x00" * 64,
    ]
    for raw in hostile:
        out = outcome_is_coded(raw)
        assert isinstance(out, Rejection) and out.reason is RejectReason.MALFORMED


@settings(max_examples=max(50, EXAMPLES // 4), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(mutated(), st.binary(max_size=60), st.just(VALID)), min_size=1, max_size=12))
def test_hostile_input_never_stalls_the_store_every_offset_ends_applied_or_quarantined(raws: list[bytes]) -> None:
    s = MemoryStore(CFG)
    tok = s.claim(0)
    for off, raw in enumerate(raws):
        s.process(tok, record(raw, off, key=KEY))
    assert s.frontier(0) == len(raws)
    applied = {c.offset for ident in s.keys[K1].identities.values() for g in ident.revisions.values() for cand in g for c in cand.sources}
    quarantined = {r.record.coords.offset for r in s.rejections}
    assert applied | quarantined == set(range(len(raws))) and not applied & quarantined
