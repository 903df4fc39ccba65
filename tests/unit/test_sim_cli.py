"""`amends sim`: soak summary and exit codes, shrunk failure traces, exact replay, strict trace files."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

from amends_core import wire
from amends_core.ledger import INT64_MAX, Coordinates, Record, Transaction
from amends_core.sim import run as sim_run
from amends_core.sim.generate import KEY_A, SIM_CONFIG, generate, instant
from amends_core.sim.trace import dumps, loads
from amends_core.sim.variants import VARIANTS, RelaySkips
from amends_pipeline.cli import main
from amends_pipeline.commands import sim as sim_cmd


def overflow_trace(path: Path) -> Path:
    """A correct-model failure: a close outside int64 stalls partition 0 (liveness)."""
    t = generate(4)
    huge = Transaction("HUGE", 1, "NEW", KEY_A, instant(1, 5), INT64_MAX, instant(40, 0))
    rec = Record(wire.encode_transaction(huge), KEY_A.transport_key(), Coordinates(SIM_CONFIG.source_incarnation, 0, 50))
    path.write_bytes(dumps(t.with_parts(records=(*t.records, rec))))
    return path


def test_a_clean_soak_prints_a_status_table_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["sim", "--seed", "0", "--runs", "30", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "seeds 0..29, 30 schedules" in out and "schedules/min" in out
    assert "PASS " in out and "failures                      0" in out


def test_a_soak_of_worker_steps_running_ahead_says_so_and_writes_traces_that_replay_that_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["sim", "--seed", "0", "--runs", "20", "--ahead", "2", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "seeds 0..19, worker steps of up to 2 batches, 20 schedules" in out
    # a failing seed's traces carry the setting, and --replay uses it without an option
    variant = VARIANTS["ahead-ignores-failed-predecessor"]
    monkeypatch.setattr(sim_cmd, "soak_chunk", functools.partial(sim_run.soak_chunk, model_class=variant))
    monkeypatch.setattr(sim_cmd, "run_trace", functools.partial(sim_run.run_trace, model_class=variant))
    monkeypatch.setattr(sim_cmd, "shrink_trace", functools.partial(sim_run.shrink_trace, model_class=variant))
    code = main([
        "sim", "--seed", "0", "--runs", "40", "--ahead", "2", "--no-progress", "--keep", "1",
        "--out", str(tmp_path),
    ])
    out = capsys.readouterr().out
    assert code == 1 and "safety/worker-recovery" in out
    small = next(tmp_path.glob("seed-*.min.trace.json"))
    assert loads(small.read_bytes()).ahead == 2
    assert main(["sim", "--replay", str(small)]) == 1
    assert "worker steps of up to 2 batches" in capsys.readouterr().out
    assert main(["sim", "--seed", "0", "--runs", "1", "--ahead", "0"]) == 2


def test_the_ahead_help_names_the_worker_roles_own_setting() -> None:
    """The help of --ahead quotes the worker role's AHEAD as a number (the simulator command
    does not load the Kafka role module to read it), so this test keeps the two equal."""
    from amends_pipeline.roles.worker import AHEAD
    from tests.unit.test_readme_options import subcommands

    [ahead] = [a for a in subcommands()["sim"]._actions if "--ahead" in a.option_strings]
    assert f"the worker role runs {AHEAD};" in " ".join(str(ahead.help).split())


def test_a_soak_with_failures_exits_one_and_writes_a_shrunk_trace_that_replays_the_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Switch the broken relay on for this test only, by wrapping what the command calls.
    monkeypatch.setattr(sim_cmd, "soak_chunk", functools.partial(sim_run.soak_chunk, model_class=RelaySkips))
    monkeypatch.setattr(sim_cmd, "run_trace", functools.partial(sim_run.run_trace, model_class=RelaySkips))
    monkeypatch.setattr(sim_cmd, "shrink_trace", functools.partial(sim_run.shrink_trace, model_class=RelaySkips))
    code = main(["sim", "--seed", "0", "--runs", "4", "--no-progress", "--keep", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "minimal trace:" in out and "safety/ack-order" in out
    small = tmp_path / "seed-0.min.trace.json"
    full = tmp_path / "seed-0.trace.json"
    assert small.exists() and full.exists()
    t = loads(small.read_bytes())
    assert t.failure == ("safety", "ack-order") and len(t.steps) < len(loads(full.read_bytes()).steps)
    replayed = sim_run.run_trace(t, RelaySkips)
    assert replayed.failure is not None and replayed.failure.signature == t.failure


def test_replay_of_a_passing_trace_exits_zero_and_shows_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(dumps(generate(4)))
    assert main(["sim", "--replay", str(path), "-v"]) == 0
    out = capsys.readouterr().out
    assert "verification PASS" in out and "#0 t=0" in out and "passed" in out


def test_shrink_writes_a_minimal_trace_that_replays_to_the_same_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = overflow_trace(tmp_path / "over.json")
    assert main(["sim", "--replay", str(path)]) == 1
    assert "FAILED: liveness/drain" in capsys.readouterr().out
    assert main(["sim", "--shrink", str(path)]) == 0
    out = capsys.readouterr().out
    small = tmp_path / "over.min.json"
    assert f"minimal trace: {small}" in out
    t = loads(small.read_bytes())
    assert len(t.records) == 1 and t.steps == () and t.failure == ("liveness", "drain")
    assert main(["sim", "--replay", str(small)]) == 1
    assert "this run reproduces it" in capsys.readouterr().out


def test_shrinking_a_passing_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.json"
    path.write_bytes(dumps(generate(4)))
    assert main(["sim", "--shrink", str(path)]) == 2
    assert "does not fail" in capsys.readouterr().err


def test_a_trace_with_unknown_fields_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = json.loads(dumps(generate(1)))
    d["surprise"] = True
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(d))
    assert main(["sim", "--replay", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown member 'surprise'" in err and err.count("\n") == 1


def test_unusable_arguments_exit_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--seed", "0", "--runs", "0"]) == 2
    assert main(["sim", "--replay", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(SystemExit) as e:
        main(["sim", "--seed", "0", "--replay", "x"])
    assert e.value.code == 2
