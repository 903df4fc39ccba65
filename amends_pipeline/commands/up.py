"""``amends up``: the worked example on real services with the Dagster UI, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amends_pipeline.commands._common import FIXTURES, REPO_ROOT, Subparsers, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config

FIXTURE = FIXTURES / "worked-example"
STAGE_DEADLINE_S = 240.0
"""How long a stage (or a live day) may take to verify before ``up`` says so and moves on."""

DESCRIPTION = """\
Brings the worked example up on real services and keeps it running, with the
Dagster UI to watch it in:

  1. makes sure PostgreSQL runs and the databases exist (AMENDS_PG_DSN; without
     it the local server, installed and started by scripts/ensure-postgres.sh),
  2. starts a real Apache Kafka broker on loopback (data in STATE_DIR/kafka),
  3. provisions the worked example (fixtures/worked-example/config.json) in its
     own PostgreSQL schema (--schema),
  4. starts dagster-daemon and dagster-webserver (directly, not `dagster dev`)
     with DAGSTER_HOME=STATE_DIR/dagster_home and run storage in the PostgreSQL
     database --dagster-db, and prints the UI's address,
  5. loads the worked example's stages (initial history, amendment,
     cancellation) one at a time, each once the previous one verified PASS, so
     the UI shows three rounds of refold, relay, view, oracle, verification and
     certified balances,
  6. with --live, goes on producing a day of new movements at a time, now and
     then with a late correction (AMEND or CANCEL) of an earlier day, at most
     --rate records a minute and each day only after the previous one verified,
     so verification repeats and keeps passing.

Every start is a fresh session: STATE_DIR, the schema and the Dagster database
are reset. Ctrl-C or SIGTERM stops the generator, the webserver, the daemon
and the broker, and exits 0. Progress lines go to stderr; the UI's address
goes to stdout. Exit 1 when a service fails to start or dies, 2 on unusable
arguments or environment.
"""


class Stop(BaseException):
    """Raised in the main thread by SIGTERM or SIGINT: unwind, stop every child, exit 0."""


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "up",
        help="run the worked example on PostgreSQL, Kafka and the Dagster daemon, with the UI",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--port", type=int, default=3000, help="the UI's port on 127.0.0.1 (default 3000)")
    p.add_argument("--stages", type=int, default=3, choices=[0, 1, 2, 3],
                   help="how many of the worked example's stages to load (default 3)")
    p.add_argument("--live", action="store_true",
                   help="then keep producing new movements and late corrections")
    p.add_argument("--rate", type=float, default=12.0, metavar="PER_MINUTE",
                   help="--live: at most this many records a minute (default 12)")
    p.add_argument("--live-limit", type=int, default=2000, metavar="N",
                   help="--live: stop producing after N records; the UI stays up (default 2000)")
    p.add_argument("--seed", type=int, help="--live: seed of the generator (default: a random one, printed)")
    p.add_argument("--state-dir", default=str(REPO_ROOT / "var" / "up"), metavar="DIR",
                   help="broker data, DAGSTER_HOME and logs (default var/up; reset at start)")
    p.add_argument("--schema", default="amends_up",
                   help="PostgreSQL schema of the session (default amends_up; dropped and recreated)")
    p.add_argument("--dagster-db", default="amends_up_dagster", metavar="NAME",
                   help="database of Dagster's run storage on AMENDS_PG_DSN's server"
                        " (default amends_up_dagster; dropped and recreated)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def _progress(quiet: bool) -> Callable[[str], None]:
    t0 = time.monotonic()

    def say(text: str) -> None:
        if quiet:
            return
        try:
            print(f"[{time.monotonic() - t0:6.1f}s] up: {text}", file=sys.stderr, flush=True)
        except (OSError, ValueError):  # nobody reads stderr any more: stopping must go on
            pass

    return say


def _on_signal(signum: int, _frame: Any) -> None:
    # Later signals must not interrupt the stopping itself.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stop(signal.Signals(signum).name)


@operational
def run(args: argparse.Namespace) -> int:
    from amends_pipeline.upsession import UpError, lock_state_dir, port_free

    if not 1 <= args.port <= 65535:
        msg = f"--port {args.port} is not a TCP port"
        raise UsageError(msg)
    if args.rate <= 0 or args.live_limit < 0:
        msg = "--rate must be positive and --live-limit not negative"
        raise UsageError(msg)
    if not port_free(args.port):
        msg = f"port {args.port} on 127.0.0.1 is in use (another UI?): choose another with --port"
        raise UsageError(msg)
    state = Path(args.state_dir).resolve()
    try:
        lock = lock_state_dir(state)
    except UpError as e:
        raise UsageError(str(e)) from None
    say = _progress(args.quiet)
    old = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        with ExitStack() as stack:
            try:
                return Session(args, state, say, stack).run()
            except Stop as e:
                say(f"{e}: stopping")
                return 0
            except UpError as e:
                print(f"amends up: {e}", file=sys.stderr)
                return 1
            finally:
                stack.close()
                say("stopped")
    except Stop:  # a signal between the session's end and the restoring of the handlers
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        lock.close()


@dataclass(frozen=True, slots=True)
class Batch:
    """Records loaded together, then verified before the next batch."""

    what: str
    """How progress lines name it ("stage 1", "live")."""
    text: str
    """The progress line announcing it."""
    records: list[tuple[int, bytes, bytes | None]]
    """(partition, value, key) in order."""
    live: bool = False


class Session:
    """One ``amends up`` session; ``stack`` stops what it started, in reverse order."""

    def __init__(self, args: argparse.Namespace, state: Path, say: Callable[[str], None], stack: ExitStack):
        self.args = args
        self.state = state
        self.say = say
        self.stack = stack
        self.children: list[Any] = []

    def run(self) -> int:
        from amends_pipeline.ops.provision import provision
        from amends_pipeline.runtime import Runtime
        from amends_pipeline.upsession import dagster_home, reset_dir

        cfg = load_config(FIXTURE / "config.json")
        dsn = self._postgres()
        logs = reset_dir(self.state / "logs")
        broker = self._broker()
        rt = Runtime(cfg, dsn=dsn, schema=self.args.schema, bootstrap=broker.bootstrap)
        self.say(f"provisioning namespace {cfg.namespace!r} in schema {self.args.schema!r}")
        self.topic = provision(rt, "amends-source", "amends-output").manifest.source_topic
        self.writer = rt.writer()
        batches = self._batches(rt)
        # The first batch goes in before the daemon starts: its first verification then
        # sees a settled boundary instead of one that moves while it runs.
        first = next(batches, None)
        if first is not None:
            self._load(first)
        instance = self._dagster(dsn, dagster_home(self.state), logs, broker.bootstrap)
        url = f"http://127.0.0.1:{self.args.port}"
        try:
            print(f"Dagster UI: {url}", flush=True)
        except (OSError, ValueError):
            pass
        self.say(f"Dagster UI at {url} (logs in {logs}); Ctrl-C stops everything")
        if first is not None:
            self._await_verification(rt, instance, first.what)
        for b in batches:
            t0 = time.monotonic()
            self._load(b)
            self._await_verification(rt, instance, b.what)
            if b.live:
                self._pause(len(b.records) * 60.0 / self.args.rate - (time.monotonic() - t0))
        if self.args.live:
            self.say(f"live: the limit of {self.args.live_limit} records is reached")
        self.say("serving the UI; Ctrl-C stops everything")
        while True:
            self._check_children()
            time.sleep(1)

    def _batches(self, rt: Any) -> Iterator[Batch]:
        """The worked example's stages, then (with --live) a day of live records at a time."""
        from amends_pipeline.kafka.load import plan_file

        stages = json.loads((FIXTURE / "stages.json").read_text())["stages"][: self.args.stages]
        expected: dict[str, Any] = {}
        for i, stage in enumerate(stages, 1):
            msgs = plan_file(rt.cfg, stage["source"], (FIXTURE / stage["source"]).read_bytes())
            yield Batch(
                f"stage {i}", f"stage {i}/{len(stages)} {stage['name']}: loading {len(msgs)} records",
                [(m.partition, m.value, m.key) for m in msgs],
            )
            expected = json.loads((FIXTURE / stage["expected"]).read_text())["view"]
        if self.args.live:
            yield from self._live(rt, expected)

    def _live(self, rt: Any, expected: dict[str, Any]) -> Iterator[Batch]:
        from amends_core.timefmt import NS_PER_DAY, parse_day
        from amends_pipeline.live import LiveHistory

        seed = self.args.seed if self.args.seed is not None else random.SystemRandom().randrange(2**32)
        balances = {}
        first_day = -(-rt.cfg.origin_ns // NS_PER_DAY)
        by_name = {(c.key.item, c.key.location): c for c in rt.cfg.keys}
        for k in expected.get("keys", []):
            kc = by_name.get((k["item"], k["location"]))
            if kc is not None and k["balances"]:
                balances[kc] = k["balances"][-1]["close"]
                first_day = max(first_day, parse_day(k["balances"][-1]["day"]) + 1)
        history = LiveHistory(rt.cfg, random.Random(seed), first_day, balances=balances)
        self.say(f"live: a day of movements at a time, at most {self.args.rate:g} records a minute,"
                 f" up to {self.args.live_limit} records (seed {seed})")
        sent = corrections = 0
        while sent < self.args.live_limit:
            day = history.next_day()[: self.args.live_limit - sent]
            sent += len(day)
            corrections += sum(r.correction for r in day)
            fixes = [f"{r.txn.kind} {r.txn.txn_id} r{r.txn.revision}" for r in day if r.correction]
            late = f" and late {', '.join(fixes)}" if fixes else ""
            yield Batch(
                "live",
                f"live: {len(day)} records for day {history.day_text()}{late}"
                f" ({sent} sent, {corrections} late corrections)",
                [(r.partition, r.value, r.key) for r in day], live=True,
            )

    def _load(self, b: Batch) -> None:
        self.say(b.text)
        for partition, value, key in b.records:
            self.writer.produce(self.topic, partition, value, key)
        self.writer.flush()

    def _pause(self, seconds: float) -> None:
        end = time.monotonic() + max(0.0, seconds)
        while time.monotonic() < end:
            self._check_children()
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))

    def _postgres(self) -> str:
        from amends_pipeline.postgres.connection import dsn_from_env
        from amends_pipeline.postgres.ensure import create_database, drop_database, ensure_database
        from amends_pipeline.postgres.errors import StoreUnavailable
        from amends_pipeline.postgres.migrate import drop_schema

        dsn = dsn_from_env()
        self.say("checking PostgreSQL")
        try:
            ensure_database(dsn)
        except StoreUnavailable:
            if os.environ.get("AMENDS_PG_DSN"):
                raise
            self.say("no usable local PostgreSQL: running scripts/ensure-postgres.sh")
            r = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "ensure-postgres.sh")], check=False)
            if r.returncode != 0:
                msg = "scripts/ensure-postgres.sh could not make PostgreSQL usable (see above)"
                raise UsageError(msg) from None
            ensure_database(dsn)
        self.say(f"recreating schema {self.args.schema!r} and Dagster database {self.args.dagster_db!r}")
        drop_schema(dsn, self.args.schema)
        drop_database(dsn, self.args.dagster_db)
        create_database(dsn, self.args.dagster_db)
        return dsn

    def _broker(self) -> Any:
        from amends_pipeline.kafka.realbroker import RealBroker, RealBrokerError, cache_dir
        from amends_pipeline.upsession import UpError, reset_dir

        if not (cache_dir() / "complete").exists():
            self.say("fetching the Kafka broker's jars with mvn (first time only)")
        self.say("starting a real Apache Kafka broker (KRaft, loopback)")
        broker = RealBroker(reset_dir(self.state / "kafka"))
        self.stack.callback(self._stop_broker, broker)
        try:
            broker.start(timeout=120)
        except RealBrokerError as e:
            raise UpError(str(e)) from None
        self.say(f"Kafka broker at {broker.bootstrap} (pid {broker.pid})")
        return broker

    def _stop_broker(self, broker: Any) -> None:
        self.say("stopping the Kafka broker")
        broker.stop()

    def _dagster(self, dsn: str, home: Path, logs: Path, bootstrap: str) -> Any:
        import dagster as dg

        from amends_pipeline.postgres.urls import sqlalchemy_url
        from amends_pipeline.upsession import start_dagster, wait_http

        env = dict(os.environ)
        env.update({
            "DAGSTER_HOME": str(home),
            "AMENDS_DAGSTER_PG_URL": sqlalchemy_url(dsn, self.args.dagster_db),
            "AMENDS_CONFIG": str(FIXTURE / "config.json"),
            "AMENDS_PG_DSN": dsn,
            "AMENDS_PG_SCHEMA": self.args.schema,
            "AMENDS_KAFKA_BOOTSTRAP": bootstrap,
            # A fresh session (a new broker, new topic IDs) keeps its source snapshot beside its data.
            "AMENDS_SNAPSHOT_URI": str(home.parent / "snapshot"),
        })
        # The instance this process reads verification results from is the children's.
        os.environ["DAGSTER_HOME"] = env["DAGSTER_HOME"]
        os.environ["AMENDS_DAGSTER_PG_URL"] = env["AMENDS_DAGSTER_PG_URL"]
        self.say(f"starting dagster-daemon and dagster-webserver (DAGSTER_HOME={home})")
        daemon, web = start_dagster(env, logs, self.args.port)
        self.children = [daemon, web]
        self.stack.callback(self._stop_children, [web, daemon])
        wait_http(f"http://127.0.0.1:{self.args.port}/server_info", self.children, 180, lambda: False)
        return self.stack.enter_context(dg.DagsterInstance.from_config(str(home)))

    def _stop_children(self, children: list[Any]) -> None:
        from amends_pipeline.upsession import stop_all

        self.say("stopping " + " and ".join(f"{c.name} (pid {c.proc.pid})" for c in children))
        stop_all(children)

    def _check_children(self) -> None:
        from amends_pipeline.upsession import UpError

        for c in self.children:
            if c.exited() is not None:
                msg = f"{c.name} exited with {c.exited()}: {c.log_tail()} (log: {c.log})"
                raise UpError(msg)

    def _await_verification(self, rt: Any, instance: Any, what: str) -> bool:
        """Wait until the daemon verified the current boundary and that run (with certification) ended."""
        from amends_pipeline.defs.verification_record import latest_verification
        from amends_pipeline.ops.orchestration import snapshot

        t0 = time.monotonic()
        while time.monotonic() - t0 < STAGE_DEADLINE_S:
            self._check_children()
            snap = snapshot(rt)
            v = latest_verification(instance)
            if snap.drained and v is not None and v.boundary == snap.boundary_key:
                run = instance.get_run_by_id(v.run_id)
                if run is None or run.is_finished:
                    certified = run is not None and run.is_success
                    tail = "certified_balances written" if certified else "not certified: see its run"
                    self.say(f"{what}: verification {v.status} at boundary {v.boundary}; {tail}"
                             f" ({time.monotonic() - t0:.0f}s)")
                    return v.passed and certified
            time.sleep(1)
        self.say(f"{what}: not verified within {STAGE_DEADLINE_S:.0f}s; the UI shows where it stands")
        return False
