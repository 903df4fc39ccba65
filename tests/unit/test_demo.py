"""The worked example reproduces its hand-written stages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from amends_core import demo, wire

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "worked-example"


def stages() -> list[demo.Stage]:
    return demo.load_stages((FIX / "stages.json").read_bytes(), lambda n: (FIX / n).read_bytes())


def test_the_three_stages_match_their_hand_written_expectations() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    results = demo.run(cfg, stages())
    assert [(r.source_frontier, r.output_frontier) for r in results] == [(3, 5), (4, 10), (5, 11)]
    assert all(r.matches_expected for r in results)


def test_a_wrong_expectation_is_reported_as_disagreement() -> None:
    cfg = wire.decode_config((FIX / "config.json").read_bytes())
    st = stages()
    broken = dict(st[1].expected, output_frontier=9)
    st[1] = demo.Stage(st[1].name, st[1].values, broken)
    results = demo.run(cfg, st)
    assert [r.matches_expected for r in results] == [True, False, True]


def test_amends_demo_in_memory_exits_0_and_prints_agreement() -> None:
    exe = Path(sys.executable).with_name("amends")
    out = subprocess.run([str(exe), "demo", "--in-memory"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "CORE_AGREEMENT" in out.stdout
    assert "frontiers: source 5, output/view 11" in out.stdout
