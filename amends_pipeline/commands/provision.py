"""``amends provision``: bind a namespace to its source and output topics."""

from __future__ import annotations

import argparse

from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.inputs import load_config
from amends_pipeline.kafka.topics import DEFAULT_OUTPUT_TOPIC, DEFAULT_SOURCE_TOPIC
from amends_pipeline.ops.provision import binding_text, provision
from amends_pipeline.runtime import Runtime


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "provision",
        help="migrate the database, register the namespace and bind its topics",
        description=(
            "Applies pending migrations, registers the namespace of CONFIG, checks (or, on a"
            " real cluster, creates) the source and output topics with the configured number"
            " of partitions, writes an incarnation marker into every source partition and"
            " records the manifest in PostgreSQL. Idempotent: on a namespace already bound it"
            " says what is bound and changes nothing, with or without the same topic flags."
            " Exit 0, 1 when the topics cannot be used or created, or when other topics are"
            " given for a bound namespace (both bindings are named), 2 on unusable arguments"
            " or environment."
        ),
    )
    add_config(p)
    p.add_argument(
        "--source-topic",
        help=f"for a new binding (default {DEFAULT_SOURCE_TOPIC}); a bound namespace keeps its own",
    )
    p.add_argument(
        "--output-topic",
        help=f"for a new binding (default {DEFAULT_OUTPUT_TOPIC}); a bound namespace keeps its own",
    )
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    rt = Runtime(load_config(args.config))
    res = provision(rt, args.source_topic, args.output_topic)
    m = res.manifest
    marks = ", ".join(f"p{p}@{o}" for p, o in sorted(m.markers.items()))
    if res.created:
        print(f"namespace {m.namespace!r} provisioned: bound to {binding_text(m)}; markers {marks}")
    else:
        done = "recorded the source topic id" if res.recorded_topic_id else "nothing to do"
        print(
            f"namespace {m.namespace!r} already bound to {binding_text(m)}; markers {marks};"
            f" {done} (already provisioned)"
        )
    return 0
