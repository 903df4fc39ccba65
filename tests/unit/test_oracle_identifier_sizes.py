"""Identifier byte limits on the oracle's per-record route, around its short-identifier shortcut.

``_identifiers_ok`` skips encoding when every identifier has at most
``MAX_ID_BYTES // 4`` characters; these cases sit on both sides of that
bound with characters of one to four UTF-8 bytes (and lone surrogates,
three bytes when passed through).
"""

from __future__ import annotations

import itertools
import json

from amends_core import limits
from amends_core.oracle import decode as oracle_decode
from amends_core.oracle.decode import Malformed

WIDTHS = ("x", "é", "€", "😀", "\ud800")
"""Characters of 1, 2, 3 and 4 UTF-8 bytes, and a lone surrogate."""


def expected(txn_id: str, item: str, location: str) -> str | None:
    for name, s in (("txn_id", txn_id), ("item", item), ("location", location)):
        size = len(s.encode("utf-8", "surrogatepass"))
        if size > limits.MAX_ID_BYTES:
            return f"member {name!r} is {size} bytes, above the {limits.MAX_ID_BYTES} byte limit"
    return None


def lengths() -> list[int]:
    short = limits.MAX_ID_BYTES // 4
    return sorted(
        {
            1,
            short - 1,
            short,
            short + 1,
            limits.MAX_ID_BYTES // 3,
            limits.MAX_ID_BYTES // 3 + 1,
            limits.MAX_ID_BYTES // 2,
            limits.MAX_ID_BYTES // 2 + 1,
            limits.MAX_ID_BYTES,
            limits.MAX_ID_BYTES + 1,
        }
    )


def test_identifier_sizes_on_both_sides_of_the_shortcut() -> None:
    ids = [c * n for c, n in itertools.product(WIDTHS, lengths())]
    for member in ("txn_id", "item", "location"):
        for s in ids:
            parts = {"txn_id": "T", "item": "I", "location": "L", member: s}
            doc = oracle_decode._TxnDoc(
                parts["txn_id"],
                1,
                "NEW",
                oracle_decode._StockKeyDoc(parts["item"], parts["location"]),
                "2025-01-01T00:00:00Z",
                1,
                "2025-01-01T00:00:00Z",
            )
            assert oracle_decode._identifiers_ok(doc) == expected(
                parts["txn_id"], parts["item"], parts["location"]
            )


def test_values_with_long_identifiers_in_another_layout() -> None:
    for c, n in itertools.product(WIDTHS[:4], lengths()):
        value = json.dumps(
            {
                "txn_id": c * n,
                "revision": 1,
                "kind": "NEW",
                "stock_key": {"location": "L", "item": "I"},
                "valid_time": "2025-01-01T00:00:00Z",
                "qty": 1,
                "source_time": "2025-01-01T00:00:00Z",
            },
            ensure_ascii=False,
            indent=1,
        ).encode()
        got = oracle_decode._decode_struct(value)
        want = expected(c * n, "I", "L")
        if want is None:
            assert not isinstance(got, Malformed)
        else:
            assert got == Malformed(want)
