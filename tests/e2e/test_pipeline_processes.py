"""The pipeline as separate processes: real Kafka broker, PostgreSQL, worker, relay, view.

Every command here is the real `amends` console script; Kafka is a real Apache
Kafka broker process (the mock cluster only where a test says so) and
PostgreSQL the real server.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.e2e.conftest import FIXTURE, Pipeline

CFG = str(FIXTURE / "config.json")
STAGES = ["before.jsonl", "correction.jsonl", "cancel-last-day.jsonl"]


def view_of(p: Pipeline) -> dict[str, object]:
    out = p.ok("verify", "--config", CFG, "--json")
    return json.loads(out)


def expected_view(stage: int) -> dict[str, object]:
    name = ["1-initial.json", "2-amendment.json", "3-cancellation.json"][stage]
    return json.loads((FIXTURE / "expected" / name).read_text())["view"]


@pytest.mark.slow
def test_the_three_fixture_stages_flow_through_real_processes_and_verify_pass(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    for i, stage in enumerate(STAGES):
        p.ok("load", "--config", CFG, str(FIXTURE / stage))
        p.roles_until_idle()
        report = view_of(p)
        assert report["status"] == "PASS", report
        shown = p.ok("view", "--config", CFG, "--last", "0")
        for row in expected_view(i)["keys"][0]["balances"]:  # type: ignore[index]
            assert f"{row['day']}" in shown and f"{row['close']:,}" in shown
    # frontiers of the worked example: 5 records (+ the marker) and 11 envelopes
    r = p.verify()
    assert r.returncode == 0 and "PASS" in r.stdout


@pytest.mark.slow
def test_verify_is_incomplete_until_every_role_has_caught_up(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    p.ok("load", "--config", CFG, str(FIXTURE / "before.jsonl"))
    r = p.verify()
    assert r.returncode == 1 and "INCOMPLETE" in r.stdout and "worker frontier" in r.stdout
    p.ok("role", "worker", "--config", CFG, "--until-idle", "--quiet")
    r = p.verify()
    assert "INCOMPLETE" in r.stdout and "not yet published" in r.stdout
    p.ok("role", "relay", "--config", CFG, "--until-idle", "--quiet")
    r = p.verify()
    assert "INCOMPLETE" in r.stdout and "view frontier" in r.stdout
    p.ok("role", "view", "--config", CFG, "--until-idle", "--quiet")
    assert p.verify().returncode == 0


@pytest.mark.slow
def test_rejections_and_conflicts_verify_only_against_an_exact_manifest(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    bad = p.tmp / "bad.jsonl"
    bad.write_text(
        "not json at all\n"
        '{"txn_id":"X","revision":1,"kind":"NEW","stock_key":{"item":"DEMO-PART","location":"DEPOT-A"},'
        '"valid_time":"2026-01-02T00:00:00Z","qty":-1,"source_time":"2026-01-02T00:00:00Z"}\n'
        '{"txn_id":"X","revision":1,"kind":"NEW","stock_key":{"item":"DEMO-PART","location":"DEPOT-A"},'
        '"valid_time":"2026-01-02T00:00:00Z","qty":-2,"source_time":"2026-01-02T00:00:00Z"}\n'
    )
    p.ok("load", "--config", CFG, str(FIXTURE / "before.jsonl"), str(bad))
    p.roles_until_idle()
    r = p.verify("--json")
    report = json.loads(r.stdout)
    assert report["status"] == "BLOCKED" and r.returncode == 1
    assert [x["reason"] for x in report["rejections"]] == ["MALFORMED"]
    # resolve the conflict with a higher revision: PASS_WITH_EXCLUSIONS, accepted only with the manifest
    fix = p.tmp / "fix.jsonl"
    fix.write_text(
        '{"txn_id":"X","revision":2,"kind":"AMEND","stock_key":{"item":"DEMO-PART","location":"DEPOT-A"},'
        '"valid_time":"2026-01-02T00:00:00Z","qty":-3,"source_time":"2026-01-03T00:00:00Z"}\n'
    )
    p.ok("load", "--config", CFG, str(fix))
    p.roles_until_idle()
    r = p.verify("--json")
    report = json.loads(r.stdout)
    assert report["status"] == "PASS_WITH_EXCLUSIONS" and r.returncode == 1
    rej = report["rejections"][0]
    expect = p.tmp / "expect.json"
    expect.write_text(
        json.dumps(
            {
                "rejections": [{"partition": 0, "offset": rej["offset"], "reason": "MALFORMED"}],
                "conflicts": [{"item": "DEMO-PART", "location": "DEPOT-A", "txn_id": "X", "revision": 1}],
            }
        )
    )
    assert p.verify("--expect", str(expect)).returncode == 0


@pytest.mark.slow
def test_relay_and_view_ride_out_a_broker_outage_and_request_errors(mock_pipeline: Pipeline) -> None:
    # Mock cluster: a real broker cannot be made to answer Produce and Fetch with
    # NOT_LEADER_FOR_PARTITION or REQUEST_TIMED_OUT on demand.
    p = mock_pipeline
    p.provision()
    for stage in STAGES:
        p.ok("load", "--config", CFG, str(FIXTURE / stage))
    p.ok("role", "worker", "--config", CFG, "--until-idle", "--quiet")
    p.broker.control("push-request-errors", api_key="Produce", errors=["NOT_LEADER_FOR_PARTITION", "REQUEST_TIMED_OUT"])
    p.broker.control("push-request-errors", api_key="Fetch", errors=["NOT_LEADER_FOR_PARTITION"])
    p.broker.control("broker-down", broker=-1)
    relay = p.start("role", "relay", "--config", CFG, "--quiet")
    view = p.start("role", "view", "--config", CFG, "--quiet")
    time.sleep(3)
    p.broker.control("broker-up", broker=-1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if p.verify().returncode == 0:
            break
        time.sleep(0.5)
    for proc in (relay, view):
        proc.terminate()
        assert proc.wait(30) == 0, proc.stderr.read() if proc.stderr else ""
    r = p.verify("--json")
    assert json.loads(r.stdout)["status"] == "PASS", r.stdout


def test_retention_loss_stops_the_worker_and_makes_verify_incomplete(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    p.ok("load", "--config", CFG, str(FIXTURE / "before.jsonl"), str(FIXTURE / "correction.jsonl"))
    p.delete_records(0, 2)
    r = p.run("role", "worker", "--config", CFG, "--until-idle")
    assert r.returncode == 1
    assert "SourceLost" in r.stderr and "never skipped" not in r.stdout
    r = p.verify()
    assert r.returncode == 1 and "INCOMPLETE" in r.stdout


def test_a_recreated_source_topic_is_refused_not_reprocessed(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    p.ok("load", "--config", CFG, str(FIXTURE / "before.jsonl"))
    p.roles_until_idle()
    p.broker.delete_topic(p.source_topic)
    p.broker.create_topic(p.source_topic, 1)
    p.ok("load", "--config", CFG, str(FIXTURE / "before.jsonl"), str(FIXTURE / "correction.jsonl"))
    r = p.run("role", "worker", "--config", CFG, "--until-idle")
    assert r.returncode == 1 and "IncarnationMismatch" in r.stderr
    r = p.verify()
    assert r.returncode == 1 and "INCOMPLETE" in r.stdout


@pytest.mark.slow
def test_replay_of_a_consumed_interval_and_a_rebuild_into_a_fresh_namespace(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    for stage in STAGES:
        p.ok("load", "--config", CFG, str(FIXTURE / stage))
    p.roles_until_idle()
    assert "dry run" in p.ok("replay", "--config", CFG, "--partition", "0", "--from", "0", "--until", "6")
    assert "claimed epoch" in p.ok("replay", "--config", CFG, "--partition", "0", "--from", "1", "--until", "6", "--execute")
    assert p.verify().returncode == 0  # nothing changed
    assert p.run("replay", "--config", CFG, "--partition", "0", "--from", "0", "--until", "9").returncode == 1
    rebuilt = p.output_topic + "-rebuilt"
    p.broker.create_topic(rebuilt, 1, {"cleanup.policy": "compact"})  # or let rebuild create it
    assert "dry run" in p.ok("rebuild", "--config", CFG, "--new-namespace", "core-demo-rebuilt", "--output-topic", rebuilt)
    out = p.ok("rebuild", "--config", CFG, "--new-namespace", "core-demo-rebuilt", "--output-topic", rebuilt, "--execute", "--in-process", timeout=180)
    assert "verification PASS" in out and "core-demo-rebuilt" in out
    assert p.verify().returncode == 0  # the original is untouched


def test_commands_fail_with_one_line_on_a_wrong_dsn_or_missing_bootstrap(pipeline: Pipeline) -> None:
    p = pipeline
    env = dict(p.env, AMENDS_PG_DSN="postgresql://postgres@127.0.0.1:1/nope")
    import subprocess

    from tests.e2e.conftest import AMENDS

    r = subprocess.run([AMENDS, "provision", "--config", CFG], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    env = dict(p.env)
    env.pop("AMENDS_KAFKA_BOOTSTRAP")
    r = subprocess.run([AMENDS, "provision", "--config", CFG], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "AMENDS_KAFKA_BOOTSTRAP" in r.stderr


@pytest.mark.slow
def test_load_and_rebuild_report_progress_on_stderr_and_machine_readable_results_on_stdout(pipeline: Pipeline) -> None:
    p = pipeline
    p.provision()
    r = p.run("load", "--config", CFG, "--json", str(FIXTURE / "before.jsonl"))
    assert r.returncode == 0 and json.loads(r.stdout) == {"topic": p.source_topic, "messages": 3}
    p.roles_until_idle()
    rebuilt = p.output_topic + "-rb"
    r = p.run("rebuild", "--config", CFG, "--new-namespace", "core-demo-rb", "--output-topic", rebuilt,
              "--execute", "--in-process", "--json", timeout=180)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["accepted"] is True and doc["report"]["status"] == "PASS"
    phases = [line.split("rebuild: ", 1)[1] for line in r.stderr.splitlines() if "rebuild: " in line]
    assert phases[0] == "checking that the whole source is still held (the topic, or the source snapshot below it)"
    assert phases[-1] == "verifying against the oracle"
    quiet = p.run("rebuild", "--config", CFG, "--new-namespace", "core-demo-rb", "--output-topic", rebuilt,
                  "--execute", "--in-process", "--quiet", timeout=180)
    assert quiet.returncode == 0 and "rebuild: " not in quiet.stderr
