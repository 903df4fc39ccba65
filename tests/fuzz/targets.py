"""Fuzz targets: each property of ``checks`` as a function of one byte string.

A target returns normally for an allowed outcome; an exception is an escape.
``seeds()`` gives valid inputs of the target's kind for the starting corpus.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from tests.fuzz import checks

ORACLE_BATCH = 512
"""Values compared with the oracle in one call of its bulk (columnar) decoder."""

_pending: list[bytes] = []
_calls = [0]
_compared = [0]


def _flush_oracle() -> None:
    batch = list(_pending)
    _pending.clear()
    _compared[0] += len(batch)
    try:
        checks.agree(batch)
    except AssertionError:
        for raw in batch:  # name the value that disagrees, not the batch
            try:
                checks.agree([raw])
            except AssertionError as e:
                raise AssertionError(f"oracle and wire disagree on {raw!r}: {e}") from None
        raise


def _value(data: bytes) -> None:
    """The strict decoder codes the value; every value is also compared with the oracle's bulk
    decoder, ORACLE_BATCH at a time (one columnar call per value would cost 6 ms each). The last
    batch is compared at the run's final input (AMENDS_FUZZ_RUNS), since libFuzzer ends the
    process without running exit handlers."""
    checks.outcome_is_coded(data)
    _pending.append(data)
    _calls[0] += 1
    last = _calls[0] == int(os.environ.get("AMENDS_FUZZ_RUNS", "0"))
    if len(_pending) >= ORACLE_BATCH or last:
        _flush_oracle()
    if last:
        print(f"amends-fuzz: {_compared[0]} values compared with the oracle", file=sys.stderr, flush=True)


def _key(data: bytes) -> None:
    checks.outcome_is_coded(checks.VALID, data)
    checks.agree_key(data)


def _input_line(data: bytes) -> None:
    checks.check_read_line(data)


def _input_file(data: bytes) -> None:
    checks.check_input_file(data.split(b"\n"))


def _envelope(data: bytes) -> None:
    checks.check_view(data)


@dataclass(frozen=True)
class Target:
    name: str
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]
    about: str


def _framed_file() -> bytes:
    return b"\n".join([checks.FRAMED, checks.FRAMED.replace(b'"offset":3', b'"offset":4')])


TARGETS: dict[str, Target] = {
    t.name: t
    for t in [
        Target("value", _value, lambda: [checks.VALID], "a source value: coded by wire, equal in the oracle"),
        Target("key", _key, lambda: [checks.KEY, b""], "a transport key: strict decoder and oracle agree"),
        Target("input-line", _input_line, lambda: [checks.FRAMED, checks.VALID], "one line of an input file"),
        Target("input-file", _input_file, lambda: [_framed_file()], "a whole input file (load and compute)"),
        Target("envelope", _envelope, lambda: list(checks.ENVELOPES), "an output-topic message read by the view"),
    ]
}


def _canary(data: bytes) -> None:
    if len(data) > 4:
        raise ValueError("canary: an input longer than 4 bytes (a deliberate escape)")


CANARY = Target("canary", _canary, lambda: [b"ok"], "deliberately escapes: proves the driver reports escapes")
"""Not in TARGETS (never part of a nightly run); ``--targets canary`` runs it."""
