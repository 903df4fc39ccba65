"""The main job: the worked-example correction end to end through the Dagster definitions.

Real components on their embedded defaults: the local PostgreSQL server (a
schema of its own, dropped afterwards), a Kafka broker started for the run (the
real Apache Kafka broker when Java and its jars are available, else the
development broker), and Dagster in process (an ephemeral instance, no
daemon). For each stage of ``fixtures/worked-example``: load the source
records, run ``refold_job``, tick ``relay_sensor`` (publish and apply),
run ``boundary_job`` (oracle, the blocking ``verification`` check, certified
balances), then compare the view and the certified rows with the hand-written
expectations.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amends_core.ledger import Projection
from amends_pipeline.postgres.connection import dsn_from_env
from amends_pipeline.postgres.ensure import ensure_database
from amends_pipeline.postgres.migrate import scratch_schema

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "worked-example"
Progress = Callable[[str], None]
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Run configuration that keeps Dagster's per-event debug lines off the terminal."""


@dataclass(frozen=True, slots=True)
class StageOutcome:
    name: str
    status: str
    """The verification check's status (PASS, ...)."""
    accepted: bool
    view: list[dict[str, Any]]
    """Per key, as ``amends compute`` shows it."""
    changes: list[str]
    """What this stage restated, withdrew or raised, against the previous stage's view."""
    matches_expected: bool
    certified: bool
    """certified_balances was materialized and its rows equal the expectation."""
    seconds: float
    report: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "PASS" and self.accepted and self.matches_expected and self.certified


@dataclass
class Broker:
    kind: str
    bootstrap: str
    _stop: Callable[[], object] = field(repr=False)
    topics: tuple[str, str] | None = None
    """Source and output topics created with the broker (the development broker cannot create them later)."""

    def stop(self) -> None:
        self._stop()


@contextmanager
def broker(workdir: Path, progress: Progress, prefer: str = "auto") -> Iterator[Broker]:
    """A Kafka broker for the run: the real one where Java and its jars are there, else the mock."""
    from amends_pipeline.kafka.realbroker import RealBroker, RealBrokerError, cache_dir

    real_possible = shutil.which("java") is not None and (
        (cache_dir() / "complete").exists() or shutil.which("mvn") is not None
    )
    if prefer == "real" or (prefer == "auto" and real_possible):
        try:
            progress("starting a real Apache Kafka broker (KRaft, loopback)")
            b = RealBroker(workdir / "kafka").start()
        except RealBrokerError as e:
            if prefer == "real":
                raise
            progress(f"the real broker did not start ({str(e)[:120]}); using the development broker")
        else:
            try:
                yield Broker("Apache Kafka", b.bootstrap, b.stop)
            finally:
                b.stop()
            return
    from amends_pipeline.kafka.devbroker_launcher import DevBroker

    progress("starting the development broker (librdkafka mock cluster)")
    with DevBroker(topics={"amends-source": 1, "amends-output": 1}, workdir=workdir) as d:
        yield Broker("development broker", d.bootstrap, lambda: None, ("amends-source", "amends-output"))


def _expected(stage: dict[str, str]) -> dict[str, Any]:
    return json.loads((FIXTURE / stage["expected"]).read_text())["view"]  # type: ignore[no-any-return]


def changes(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[str]:
    """Restated and withdrawn balances and alerts between two views, in words."""
    out: list[str] = []
    old = {(k["item"], k["location"]): k for k in before}
    for k in after:
        prev = old.get((k["item"], k["location"]), {"balances": [], "alerts": []})
        was = {b["day"]: b["close"] for b in prev["balances"]}
        now = {b["day"]: b["close"] for b in k["balances"]}
        for day in sorted(was.keys() | now.keys()):
            if day not in now:
                out.append(f"withdrawn balance {day} (was {was[day]})")
            elif day not in was:
                out.append(f"new balance {day}: {now[day]}")
            elif was[day] != now[day]:
                out.append(f"restated balance {day}: {was[day]} -> {now[day]}")
        was_a = {a["day"] for a in prev["alerts"]}
        now_a = {a["day"]: a for a in k["alerts"]}
        for day in sorted(was_a - now_a.keys()):
            out.append(f"withdrawn alert {day}")
        for day in sorted(now_a.keys() - was_a):
            a = now_a[day]
            out.append(f"new alert {day}: close {a['close']} below threshold {a['threshold']}")
    return out


def run(progress: Progress, *, prefer_broker: str = "auto") -> tuple[str, list[StageOutcome]]:
    """Run the three stages; returns the broker kind and each stage's outcome."""
    import dagster as dg

    from amends_pipeline.defs.definitions import build
    from amends_pipeline.defs.jobs import boundary_job, refold_job
    from amends_pipeline.defs.resources import AmendsResource
    from amends_pipeline.defs.sensors import relay_sensor
    from amends_pipeline.defs.verification_record import VERIFICATION_KEY
    from amends_pipeline.kafka.load import plan_file
    from amends_pipeline.ops.provision import provision
    from amends_pipeline.postgres.reports import read_certified

    stages = json.loads((FIXTURE / "stages.json").read_text())["stages"]
    dsn = dsn_from_env()
    progress("checking PostgreSQL")
    ensure_database(dsn)
    outcomes: list[StageOutcome] = []
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="amends-demo-")))
        b = stack.enter_context(broker(tmp, progress, prefer_broker))
        schema = stack.enter_context(scratch_schema(dsn, "demo"))
        res = AmendsResource(
            config_path=str(FIXTURE / "config.json"), pg_dsn=dsn, pg_schema=schema,
            kafka_bootstrap=b.bootstrap, snapshot_uri=str(tmp / "snapshot"),
        )
        rt = res.runtime()
        suffix = schema.rsplit("_", 1)[-1]
        progress(f"provisioning namespace {rt.cfg.namespace!r} (PostgreSQL schema {schema})")
        source, output = b.topics or (f"amends-demo-{suffix}-source", f"amends-demo-{suffix}-output")
        m = provision(rt, source, output).manifest
        defs = build(res)
        instance = stack.enter_context(dg.DagsterInstance.ephemeral())
        previous: list[dict[str, Any]] = []
        for i, stage in enumerate(stages):
            t0 = time.perf_counter()
            name = stage["name"]
            msgs = plan_file(rt.cfg, stage["source"], (FIXTURE / stage["source"]).read_bytes())
            progress(f"stage {i + 1}/{len(stages)} {name}: loading {len(msgs)} records into {m.source_topic}")
            w = rt.writer()
            for outgoing in msgs:
                w.produce(m.source_topic, outgoing.partition, outgoing.value, outgoing.key)
            w.flush()
            for p in range(rt.cfg.partitions):
                progress(f"stage {i + 1}: refold_job, partition {p}")
                r = defs.resolve_job_def(refold_job.name).execute_in_process(
                    instance=instance, partition_key=str(p), run_config=QUIET
                )
                if not r.success:
                    msg = f"refold_job failed on partition {p}"
                    raise RuntimeError(msg)
            progress(f"stage {i + 1}: relay_sensor tick (publish the outbox, apply the view)")
            relay_sensor(dg.build_sensor_context(instance=instance, resources={"amends": res}))
            progress(f"stage {i + 1}: boundary_job (oracle, verification check, certified_balances)")
            br = defs.resolve_job_def(boundary_job.name).execute_in_process(
                instance=instance, raise_on_error=False, run_config=QUIET
            )
            evals = [e for e in br.get_asset_check_evaluations() if e.asset_check_key == VERIFICATION_KEY]
            md = {k: getattr(v, "value", v) for k, v in evals[0].metadata.items()} if evals else {}
            with rt.view_store() as vstore:
                view = [p.to_json() for p in _sorted(vstore.projections())]
            with rt.store("amends-demo") as store:
                certified_rows, _ = read_certified(store)
            expected = _expected(stage)
            want_bal = [
                (k["item"], k["location"], bb["day"], bb["close"])
                for k in expected["keys"] for bb in k["balances"]
            ]
            materialized = {
                e.asset_key.to_user_string()
                for e in br.get_asset_materialization_events() if e.asset_key is not None
            }
            outcomes.append(
                StageOutcome(
                    name, str(md.get("status", "ERROR")), md.get("accepted") is True, view,
                    changes(previous, view), view == expected["keys"],
                    "certified_balances" in materialized and [tuple(x) for x in certified_rows] == want_bal,
                    time.perf_counter() - t0, str(md.get("report", "")),
                )
            )
            previous = view
        return b.kind, outcomes


def _sorted(projections: dict[Any, Projection]) -> list[Projection]:
    return [projections[k] for k in sorted(projections, key=lambda k: (k.item, k.location))]
