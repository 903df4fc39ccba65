"""``amends role worker|relay|view``: the long-running processes of the pipeline."""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.postgres.connection import wait_available
from amends_pipeline.roles import collector
from amends_pipeline.roles.loop import FALLBACK_POLL, Stop, run_loop
from amends_pipeline.roles.steps import BATCH_SIZE, ROLES, open_role
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "role",
        help="run the worker, relay or view role until stopped",
        description=(
            "worker: source topic -> fenced PostgreSQL batches (claims a new ownership epoch"
            " per partition; a replaced owner stops). relay: outbox -> output topic, in"
            " order, bytes unchanged (one relay per partition, by advisory lock). view: output"
            " topic -> materialized view. SIGTERM/SIGINT finish the step in progress (a worker's step: up to"
            " four batches when it has a backlog, each committed) and exit 0."
            " Exit 1 on an error retrying cannot fix (replaced owner, recreated topic, lost"
            " retention, stopped view partition, a close outside int64); 2 on unusable"
            " arguments or environment (also after repeated transient failures). PostgreSQL"
            " and Kafka must answer at start: an endpoint that never answered within a few"
            " seconds is exit 2 with one line naming it; once running, outages are retried."
        ),
    )
    p.add_argument("role", choices=ROLES)
    add_config(p)
    p.add_argument(
        "--partition", type=int, action="append", metavar="P",
        help="partitions to serve (repeatable); default: all",
    )
    p.add_argument(
        "--batch-size", type=int, default=BATCH_SIZE, metavar="N",
        help="largest batch in records: a step takes what is already there up to N and never"
        f" waits for a batch to fill (default {BATCH_SIZE})",
    )
    p.add_argument("--until-idle", action="store_true", help="exit 0 once no work is left")
    p.add_argument(
        "--fallback-poll", type=float, default=FALLBACK_POLL, metavar="S",
        help="when idle, the role waits for work (worker and view: a Kafka fetch; relay: the"
        " worker's commit notification) and looks anyway after S seconds without a wake-up"
        f" (default {FALLBACK_POLL:g})",
    )
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


PROBE_SECONDS = 5.0
"""How long a starting role waits for PostgreSQL to answer (Kafka: ``settings.PROBE_SECONDS``)."""


def probe(rt: Runtime) -> None:
    """Fail fast when PostgreSQL or Kafka has not answered since the process started.

    Start-up steps and the loop retry transient failures for a while, which is
    right for an outage of a running pipeline but hides a wrong address for
    minutes. So each endpoint must answer once, within a few seconds, before
    anything starts: StoreUnavailable or KafkaUnavailable (one line naming the
    address and what to check; exit 2) otherwise. The Kafka check is the
    runtime's own preflight, done once, so the clients opened next reuse it.
    """
    wait_available(rt.dsn, PROBE_SECONDS)
    rt.kafka_settings()


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    parts = args.partition or list(range(cfg.partitions))
    bad = [p for p in parts if not 0 <= p < cfg.partitions]
    if bad:
        msg = f"partition {bad[0]} is not configured (0..{cfg.partitions - 1})"
        raise UsageError(msg)
    if args.batch_size < 1:
        msg = "--batch-size must be at least 1"
        raise UsageError(msg)
    if not 0 < args.fallback_poll <= 3600:
        msg = "--fallback-poll must be more than 0 and at most 3600 seconds"
        raise UsageError(msg)
    rt = Runtime(cfg)
    stop = Stop()
    stop.install()

    def log(text: str) -> None:
        if not args.quiet:
            print(f"amends {args.role}: {text}", file=sys.stderr, flush=True)

    probe(rt)
    with ExitStack() as stack:
        role = open_role(rt, args.role, parts, args.batch_size, stack, log, stop=stop)
        steps = role.steps
        log(f"serving partitions {parts} of {cfg.namespace!r}")
        collector.settle()  # keep the cyclic collector off the long-lived key states
        total = run_loop(
            steps, stop, until_idle=args.until_idle, wait=role.wait, fallback_poll=args.fallback_poll,
            on_error=lambda e, n: log(f"transient failure {n}: {e}"),
            on_wait_error=lambda e: log(
                f"waiting for work failed ({type(e).__name__}: {e}); polling until a wait succeeds"
            ),
        )
        log(f"stopping after {total} items")
    return 0
