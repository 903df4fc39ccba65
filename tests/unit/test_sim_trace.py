"""Traces: versioned JSON, strict loading, exact round trip without the generator."""

from __future__ import annotations

import json
from typing import Any

import pytest

from amends_core.sim import trace as tr
from amends_core.sim.generate import generate
from amends_core.sim.model import Actor, Model, Outcome, Step
from amends_core.sim.trace import Trace, TraceError, dumps, loads


def doc(seed: int = 3) -> dict[str, Any]:
    return json.loads(dumps(generate(seed, toolchain="CPython test")))


def encode(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode()


def test_a_trace_round_trips_exactly_through_its_json_form() -> None:
    t = generate(11, toolchain="CPython test")
    back = loads(dumps(t))
    assert back == t
    assert dumps(back) == dumps(t)


def test_a_trace_records_provenance_configuration_digest_seed_records_and_steps() -> None:
    d = doc()
    assert d["format"] == "amends-sim-trace" and d["trace_version"] == 1
    assert d["implementation"] == tr.IMPLEMENTATION_ID and d["toolchain"] == "CPython test"
    assert d["config_digest"] == generate(3).cfg.digest()
    assert d["seed"] == 3
    assert set(d["records"][0]) == {"partition", "offset", "key_b64", "value_b64"}
    assert {"actor", "partition", "outcome"} <= set(d["steps"][0])


def test_raw_record_bytes_survive_even_when_they_are_not_utf8() -> None:
    t = generate(1)
    rec = t.records[0]
    odd = type(rec)(b"\xff\xfe{", b"\x80", rec.coords)
    t2 = t.with_parts(records=(odd, *t.records[1:]))
    assert loads(dumps(t2)).records[0] == odd


def test_worker_steps_of_more_than_one_batch_are_recorded_and_only_then() -> None:
    one = generate(11, toolchain="CPython test")
    two = generate(11, toolchain="CPython test", ahead=2)
    assert "worker_ahead" not in json.loads(dumps(one))  # traces written before it load unchanged
    assert json.loads(dumps(two))["worker_ahead"] == 2
    back = loads(dumps(two))
    assert back == two and back.ahead == 2 and dumps(back) == dumps(two)
    assert (two.records, two.steps) == (one.records, one.steps)  # it draws nothing from the seed
    assert back.with_parts(steps=two.steps[:3]).ahead == 2  # shrinking keeps it


def test_a_trace_with_worker_ahead_replays_with_that_many_batches_per_worker_step() -> None:
    from amends_core.sim.run import run_trace

    t = loads(dumps(generate(11, toolchain="CPython test", ahead=2)))
    r = run_trace(t)
    assert r.ok and r.model.ahead == 2
    assert {w.ahead for w in r.model.workers.values()} == {2}
    assert any(", 2 batches" in e.detail for e in r.model.events)


def test_replay_uses_the_saved_records_and_steps_not_the_seed() -> None:
    t = generate(5)
    changed = Trace(t.cfg, t.records[:1], (Step(Actor.WORKER, 0, Outcome.COMMIT),), seed=5, toolchain="x")
    back = loads(dumps(changed))
    assert back.records == t.records[:1] and len(back.steps) == 1


def test_replaying_a_trace_twice_gives_the_same_event_log() -> None:
    t = loads(dumps(generate(21)))
    logs = []
    for _ in range(2):
        m = Model(t.cfg, t.records)
        m.run(t.steps)
        m.drain()
        logs.append([str(e) for e in m.events])
    assert logs[0] == logs[1]


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(extra=1), "unknown member 'extra'"),
        (lambda d: d["records"][0].update(note="x"), "unknown member 'note'"),
        (lambda d: d["steps"][0].update(why="x"), "unknown member 'why'"),
        (lambda d: d["config"].update(colour="red"), "unusable"),
        (lambda d: d.pop("steps"), "missing member 'steps'"),
        (lambda d: d.update(trace_version=2), "unsupported trace_version"),
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(implementation="go-phase1"), "implementation"),
        (lambda d: d.update(toolchain=""), "no toolchain"),
        (lambda d: d.update(config_digest="0" * 64), "config_digest"),
        (lambda d: d["config"].update(namespace="elsewhere"), "config_digest"),
        (lambda d: d.update(seed="7"), "seed"),
        (lambda d: d["records"][0].update(partition=9), "partition 9"),
        (lambda d: d["records"].append(dict(d["records"][0])), "repeats offset"),
        (lambda d: d["records"][0].update(value_b64="***"), "base64"),
        (lambda d: d["steps"][0].update(actor="gremlin"), "unknown actor"),
        (lambda d: d["steps"][0].update(outcome="maybe"), "unknown actor or outcome"),
        (lambda d: d["steps"].append({"actor": "redeliver", "partition": 0, "outcome": "commit"}), "missing member 'offset'"),
        (lambda d: d["steps"].append({"actor": "worker", "partition": 0, "outcome": "commit", "offset": 1}), "unknown member 'offset'"),
        (lambda d: d["steps"][0].update(partition=1.0), "integer"),
        (lambda d: d.update(worker_ahead=0), "worker_ahead must be an integer >= 1"),
        (lambda d: d.update(worker_ahead="2"), "worker_ahead must be an integer >= 1"),
        (lambda d: d.update(worker_ahead=True), "worker_ahead must be an integer >= 1"),
        (lambda d: d.update(worker_ahead=tr.MAX_AHEAD + 1), "worker_ahead must be at most"),
    ],
)
def test_loading_refuses_unknown_missing_or_inconsistent_members(mutate: Any, message: str) -> None:
    d = doc()
    mutate(d)
    with pytest.raises(TraceError, match=message):
        loads(encode(d))


def test_loading_refuses_trailing_content() -> None:
    data = dumps(generate(2))
    with pytest.raises(TraceError, match="one JSON document"):
        loads(data + b'{"again":1}')


def test_loading_refuses_duplicate_members_and_non_utf8() -> None:
    data = dumps(generate(2))
    with pytest.raises(TraceError, match="duplicate member"):
        loads(data.replace(b'"seed":2', b'"seed":2,"seed":3'))
    with pytest.raises(TraceError, match="UTF-8"):
        loads(b"\xff" + data)


def test_loading_refuses_a_trace_of_another_implementation_unless_asked_for_it() -> None:
    d = doc()
    d["implementation"] = "other/9"
    with pytest.raises(TraceError, match="implementation"):
        loads(encode(d))
    assert loads(encode(d), implementation="other/9").implementation == "other/9"
