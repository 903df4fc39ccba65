"""``amends provision``: bind a namespace to its source and output topics."""

from __future__ import annotations

import argparse

from amends_pipeline.commands._common import load_config, operational
from amends_pipeline.kafka.topics import DEFAULT_OUTPUT_TOPIC, DEFAULT_SOURCE_TOPIC
from amends_pipeline.ops.provision import provision
from amends_pipeline.runtime import Runtime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "provision",
        help="migrate the database, register the namespace and bind its topics",
        description=(
            "Applies pending migrations, registers the namespace of CONFIG, checks (or, on a"
            " real cluster, creates) the source and output topics with the configured number"
            " of partitions, writes an incarnation marker into every source partition and"
            " records the manifest in PostgreSQL. Idempotent. Exit 0, 1 when the topics or an"
            " existing manifest do not fit, 2 on unusable arguments or environment."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument("--source-topic", default=DEFAULT_SOURCE_TOPIC)
    p.add_argument("--output-topic", default=DEFAULT_OUTPUT_TOPIC)
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    rt = Runtime(load_config(args.config))
    res = provision(rt, args.source_topic, args.output_topic)
    m = res.manifest
    state = "provisioned" if res.created else "already provisioned"
    marks = ", ".join(f"p{p}@{o}" for p, o in sorted(m.markers.items()))
    bound = f"topic id {m.source_topic_id}" if m.source_topic_id else "no topic ids: bound by markers"
    print(
        f"{m.namespace}: {state}; source {m.source_topic!r} ({bound}) -> output {m.output_topic!r};"
        f" markers {marks}"
    )
    return 0
