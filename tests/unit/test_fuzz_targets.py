"""The fuzz targets and their driver (`make fuzz-nightly`) stay honest.

The nightly run is only evidence if its targets check what they say and its
driver reports an escape: every target accepts its seeds and a seeded set of
mutations, the value target names a value the oracle disagrees on, and a short
real atheris run counts its inputs and turns a deliberate escape into exit 1.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from amends_core import wire
from tests.fuzz import targets
from tests.fuzz.targets import CANARY, TARGETS

ROOT = Path(__file__).resolve().parents[2]


def _mutations(seed: bytes, rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        data = bytearray(seed)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data) + 1)
            op = rng.choice(["flip", "insert", "delete"])
            if op == "flip" and i < len(data):
                data[i] = rng.randrange(256)
            elif op == "insert":
                data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            else:
                del data[i : i + rng.randint(1, 4)]
        out.append(bytes(data))
    return out


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_fuzz_target_accepts_its_seeds_and_their_mutations(name: str) -> None:
    rng = random.Random(name)
    target = TARGETS[name]
    for seed in target.seeds():
        target.run(seed)
        for raw in _mutations(seed, rng, 300):
            target.run(raw)
    targets._flush_oracle()


def test_the_value_target_names_a_value_the_oracle_disagrees_on(monkeypatch: pytest.MonkeyPatch) -> None:
    real = wire.decode_transaction

    def lying(raw: bytes) -> object:
        got = real(raw)
        return got if b"LIE" not in raw else wire.DecodeError("invented rejection")

    targets._flush_oracle()
    monkeypatch.setattr(wire, "decode_transaction", lying)
    good = TARGETS["value"].seeds()[0]
    bad = good.replace(b'"T1"', b'"LIE"')
    assert bad != good
    TARGETS["value"].run(good)
    TARGETS["value"].run(bad)
    with pytest.raises(AssertionError, match="LIE"):
        targets._flush_oracle()


def _fuzz(*args: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.fuzz", "--out", str(out), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_short_atheris_run_counts_every_input_and_finds_no_escape(tmp_path: Path) -> None:
    p = _fuzz("--runs", "1500", "--targets", "envelope,input-line", out=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fuzz: 2 targets, 3,000 inputs, 0 with an escape" in p.stdout, p.stdout


def test_the_driver_reports_a_deliberate_escape_and_keeps_the_input(tmp_path: Path) -> None:
    p = _fuzz("--runs", "100000", "--targets", CANARY.name, out=tmp_path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "ESCAPE" in p.stdout and "1 with an escape" in p.stdout, p.stdout
    crashes = list(tmp_path.glob("canary-crash-*"))
    assert crashes and len(crashes[0].read_bytes()) > 4
