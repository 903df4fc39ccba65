"""A real Kafka broker that dies or stops under running roles: no role exits, nothing is lost.

Worker, relay and view run as long-running ``amends role`` processes against a
real Apache Kafka broker this test owns. The broker process is stopped with
SIGKILL (a crash: no controlled shutdown, segments recovered on start) or
SIGTERM (a clean shutdown: leadership handed over, logs flushed) while the
roles are busy with a backlog or idle between stages; a stage is loaded while
the broker is down; the broker is restarted on the same ports with the same
data. The roles ride the outage out in their loop (``roles/loop.py`` retries
transient failures: broker unreachable, no leader for a partition, delivery
timed out) and, once the broker is back, the view ends exactly as the worked
example's hand-written expectations say (``fixtures/worked-example/expected``)
with an accepted verification. Finally every role stops on SIGTERM with exit 0.

Waits are bounded polls with deadlines (verification is polled until it is
accepted); no duration is ever asserted.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest

from amends_pipeline.inputs import load_config
from amends_pipeline.postgres.view_store import PgViewStore
from tests.e2e.conftest import AMENDS, FIXTURE, Pipeline

STAGES = ["before.jsonl", "correction.jsonl", "cancel-last-day.jsonl"]
EXPECTED = ["1-initial.json", "2-amendment.json", "3-cancellation.json"]
ROLES = ("worker", "relay", "view")
SIGNALS = [pytest.param(signal.SIGKILL, id="SIGKILL"), pytest.param(signal.SIGTERM, id="SIGTERM")]
CATCH_UP = 240.0
"""Deadline (seconds) for the pipeline to catch up after the broker is back; a bound, not a measure."""

BULK_KEY = {"item": "BULK-PART", "location": "DEPOT-B", "opening_balance": 10**12, "reorder_threshold": 0, "partition": 0}
BULK_RECORDS = 5_000
"""Backlog that keeps the three roles busy when the broker is stopped (one record per day)."""


class Roles:
    """The three roles as long-running processes, their stderr in files (never a pipe that fills)."""

    def __init__(self, p: Pipeline) -> None:
        self.p = p
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}

    def start(self) -> None:
        for role in ROLES:
            log = self.p.tmp / f"{role}.log"
            with open(log, "wb") as err:
                self.procs[role] = subprocess.Popen(
                    [AMENDS, "role", role, "--config", str(self.p.config)],
                    env=self.p.env, stdout=subprocess.DEVNULL, stderr=err,
                )
            self.logs[role] = log

    def tail(self, role: str) -> str:
        text = self.logs[role].read_text(errors="replace").splitlines()
        return "\n".join(line for line in text if not line.startswith("%"))[-3000:] or "(no output)"

    def report(self) -> str:
        return "\n".join(f"--- {r} (exit {self.procs[r].poll()}):\n{self.tail(r)}" for r in ROLES)

    def assert_running(self) -> None:
        gone = [r for r, proc in self.procs.items() if proc.poll() is not None]
        assert not gone, f"{', '.join(gone)} exited during the outage\n{self.report()}"

    def stop(self) -> dict[str, int]:
        """SIGTERM every role and collect the exit codes."""
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        return {r: proc.wait(60) for r, proc in self.procs.items()}

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


@contextmanager
def running_roles(p: Pipeline) -> Iterator[Roles]:
    roles = Roles(p)
    try:
        roles.start()
        yield roles
    finally:
        roles.kill()  # only after a failure: the tests stop them with SIGTERM themselves


def wait_until_verified(p: Pipeline, roles: Roles) -> dict[str, Any]:
    """Poll ``amends verify`` until it accepts the boundary; every role must stay up meanwhile."""
    deadline = time.monotonic() + CATCH_UP
    while True:
        roles.assert_running()
        r = p.verify("--json")
        if r.returncode == 0:
            report: dict[str, Any] = json.loads(r.stdout)
            return report
        if time.monotonic() > deadline:
            pytest.fail(
                f"verification not accepted {CATCH_UP:.0f}s after the broker came back:\n"
                f"{r.stdout[-1500:]}\n{roles.report()}",
                pytrace=False,
            )
        time.sleep(0.5)


def expected_key(stage: int) -> dict[str, Any]:
    doc = json.loads((FIXTURE / "expected" / EXPECTED[stage]).read_text())
    assert doc["view"]["rejections"] == [] and doc["view"]["conflicts"] == []
    key: dict[str, Any] = doc["view"]["keys"][0]
    return key


def assert_view_is_stage(p: Pipeline, report: dict[str, Any], stage: int) -> None:
    """The verified view shows the worked-example key exactly as the hand-written expectation."""
    assert report["status"] == "PASS", report
    assert report["rejections"] == [] and report["conflicts"] == []
    cfg = load_config(p.config)
    with PgViewStore.open(p.env["AMENDS_PG_DSN"], cfg, schema=p.env["AMENDS_PG_SCHEMA"]) as vs:
        shown = {f"{k.item}/{k.location}": proj.to_json() for k, proj in vs.projections().items()}
    want = expected_key(stage)
    assert shown[f"{want['item']}/{want['location']}"] == want


def load_while_down_then_restart(p: Pipeline, stage: Path) -> None:
    """Start ``amends load`` with the broker down, restart the broker, and see the stage loaded.

    The load's idempotent producer keeps its messages queued and delivers them
    once the broker is back. It gives up after ``message.timeout.ms`` (30 s):
    if the restart took longer than that on a slow machine, the stage is
    loaded again now that the broker answers; a canonical duplicate changes
    nothing, so the expectations hold either way.
    """
    loading = subprocess.Popen(
        [AMENDS, "load", "--config", str(p.config), str(stage)],
        env=p.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    bootstrap = p.broker.bootstrap
    p.broker.start()  # same ports, same data directory
    assert p.broker.bootstrap == bootstrap
    out, err = loading.communicate(timeout=180)
    if loading.returncode != 0:
        assert "timed out" in err or "not delivered" in err, f"load failed otherwise: {out}\n{err}"
        p.load(stage)


def bulk_config(p: Pipeline) -> None:
    """The worked example's configuration plus one key for a backlog that keeps the roles busy."""
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg["keys"].append(BULK_KEY)
    path = p.tmp / "config.json"
    path.write_text(json.dumps(cfg))
    p.config = path
    first = date(2026, 1, 1)
    lines = [
        json.dumps({
            "txn_id": f"BULK-{i}", "revision": 1, "kind": "NEW",
            "stock_key": {"item": BULK_KEY["item"], "location": BULK_KEY["location"]},
            "valid_time": f"{(first + timedelta(days=i)).isoformat()}T00:00:00Z", "qty": -1,
            "source_time": "2026-01-01T00:00:00Z",
        }, separators=(",", ":"))
        for i in range(BULK_RECORDS)
    ]
    (p.tmp / "bulk.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_busy_roles_survive_a_broker_stopped_mid_backlog_and_the_view_ends_as_expected(
    pipeline_on: Callable[..., Pipeline], sig: signal.Signals
) -> None:
    p = pipeline_on()
    bulk_config(p)
    p.provision()
    with running_roles(p) as roles:
        p.load(FIXTURE / STAGES[0], p.tmp / "bulk.jsonl")
        p.broker.stop(sig)  # the roles are working through the backlog
        roles.assert_running()
        load_while_down_then_restart(p, FIXTURE / STAGES[1])
        p.load(FIXTURE / STAGES[2])
        report = wait_until_verified(p, roles)
        assert_view_is_stage(p, report, 2)
        assert report["counts"]["keys"] == 2
        assert roles.stop() == dict.fromkeys(ROLES, 0), roles.report()


@pytest.mark.slow
@pytest.mark.parametrize("sig", SIGNALS)
def test_idle_roles_survive_a_broker_outage_between_stages_and_every_stage_verifies(
    pipeline_on: Callable[..., Pipeline], sig: signal.Signals
) -> None:
    p = pipeline_on()
    p.provision()
    with running_roles(p) as roles:
        p.load(FIXTURE / STAGES[0])
        assert_view_is_stage(p, wait_until_verified(p, roles), 0)
        p.broker.stop(sig)  # every role is idle, polling the broker
        roles.assert_running()
        load_while_down_then_restart(p, FIXTURE / STAGES[1])
        assert_view_is_stage(p, wait_until_verified(p, roles), 1)
        p.load(FIXTURE / STAGES[2])
        assert_view_is_stage(p, wait_until_verified(p, roles), 2)
        assert roles.stop() == dict.fromkeys(ROLES, 0), roles.report()
