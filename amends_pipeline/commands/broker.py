"""``amends broker``: run the development Kafka broker in the foreground."""

from __future__ import annotations

import argparse
from typing import Any

from amends_pipeline.kafka import devbroker

DESCRIPTION = """\
Run the development Kafka broker: librdkafka's mock cluster (bundled with
confluent-kafka) in this process, in memory only. Creates the --topic topics,
prints `bootstrap=HOST:PORT[,...]` on stdout, writes the --state-file once
ready, answers line-delimited JSON control commands (create-topic,
delete-topic, broker-down, broker-up, push-request-errors, delete-records,
ping, status, stop, ...) and stops cleanly on SIGTERM or SIGINT (exit 0).
Export the printed address as AMENDS_KAFKA_BOOTSTRAP; for a real Kafka or
Redpanda cluster set that variable instead and do not run this. Limits and the
command reference: docs/devbroker.md.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run the development Kafka broker (in-memory mock cluster)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    devbroker.add_arguments(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    return devbroker.serve(args)
