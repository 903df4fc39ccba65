"""Values built by ``ledger.fast_init`` behave as the dataclass built them; cached hashes never travel."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from amends_core.ledger import (
    Cause,
    ConflictRef,
    Coordinates,
    Envelope,
    Family,
    MessageType,
    OutputID,
    Payload,
    Record,
    Rejection,
    RejectReason,
    Status,
    StockKey,
    fast_init,
)

ROOT = Path(__file__).resolve().parents[2]
K = StockKey("ITEM-1", "DEPOT-ü")
OID = OutputID("ns", Family.BALANCE, K, 19_000)


def test_a_cached_stock_key_hash_is_the_hash_of_its_fields() -> None:
    assert hash(K) == hash(("ITEM-1", "DEPOT-ü"))
    assert hash(StockKey("a", "b")) == hash(StockKey("a", "b")) != hash(StockKey("b", "a"))


def test_a_cached_output_id_hash_is_the_hash_of_its_fields() -> None:
    assert hash(OID) == hash(("ns", Family.BALANCE, K, 19_000))
    status = OutputID("ns", Family.STATUS, K, None)
    assert hash(status) == hash(("ns", Family.STATUS, K, None))


def test_the_cached_hash_is_neither_compared_nor_shown() -> None:
    assert repr(K) == "StockKey(item='ITEM-1', location='DEPOT-ü')"
    assert "_hash" not in repr(OID)
    assert K == StockKey("ITEM-1", "DEPOT-ü") and K < StockKey("ITEM-2", "A")
    assert sorted([StockKey("b", "a"), StockKey("a", "c"), StockKey("a", "b")]) == [
        StockKey("a", "b"), StockKey("a", "c"), StockKey("b", "a"),
    ]


def test_values_still_refuse_assignment_and_support_replace() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        K.item = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        OID.day = 1  # type: ignore[misc]
    moved = dataclasses.replace(OID, day=19_001)
    assert moved.day == 19_001 and hash(moved) == hash(("ns", Family.BALANCE, K, 19_001))
    env = Envelope(2, OID, 1, MessageType.BALANCE_STATED, Payload(True, close=5), Cause("s", 0, 7, "T1", 1))
    assert dataclasses.replace(env, version=2).version == 2


def test_defaults_keywords_and_post_init_are_the_dataclass_ones() -> None:
    p = Payload(True, status=Status.BLOCKED, reasons=(ConflictRef("A", 1), ConflictRef("B", 2)))
    assert (p.close, p.threshold, p.reason_count) == (None, None, 2)  # raised by __post_init__
    assert Payload(present=False) == Payload(False, None, None, None, (), 0)
    r = Record(b"v", None, Coordinates("s", 0, 1))
    assert r.reserved_header is False
    assert Rejection(r, RejectReason.KIND) == Rejection(r, RejectReason.KIND, "detail never compared")
    with pytest.raises(TypeError):
        Cause("s", 0, 7, "T1")  # type: ignore[call-arg]


def test_copies_and_pickles_rebuild_the_hash() -> None:
    for v in (K, OID):
        for twin in (copy.copy(v), copy.deepcopy(v), pickle.loads(pickle.dumps(v))):
            assert twin == v and hash(twin) == hash(v)
    assert b"_hash" not in pickle.dumps(OID)


def test_keys_pickled_in_a_process_with_another_hash_seed_are_found_here() -> None:
    code = (
        "import pickle, sys\n"
        "from amends_core.ledger import Family, OutputID, StockKey\n"
        "k = StockKey('ITEM-1', 'DEPOT-ü')\n"
        "sys.stdout.buffer.write(pickle.dumps({k: 1, OutputID('ns', Family.BALANCE, k, 19000): 2}))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, check=True).stdout
    got = pickle.loads(out)
    assert got[K] == 1 and got[OID] == 2


def test_fast_init_refuses_what_it_cannot_build() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class HashWithoutReduce:
        a: int
        _hash: int = dataclasses.field(init=False, repr=False, compare=False)

        def __hash__(self) -> int:
            return self._hash

    for cls in (Mutable, Factory, HashWithoutReduce):
        with pytest.raises(TypeError):
            fast_init(cls)
