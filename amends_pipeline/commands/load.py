"""``amends load``: produce fixture, generated or framed records to the source topic."""

from __future__ import annotations

import argparse
import json

from amends_core.records import RecordsError
from amends_pipeline.commands._common import load_config, operational, read_bytes
from amends_pipeline.commands._progress import Progress
from amends_pipeline.errors import UsageError
from amends_pipeline.kafka.load import plan
from amends_pipeline.runtime import Runtime


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "load",
        help="produce source values (fixture JSONL or framed RECORDS.jsonl) to the source topic",
        description=(
            "Each non-empty line is either a raw source value (routed to its key's partition"
            " with the canonical transport key; undecodable or unknown-key values go to"
            " --default-partition without a key, to be quarantined by the worker) or a framed"
            ' record {"partition","offset","key","value"|"value_b64"} (sent to its partition'
            " with its key; offsets only order the lines, Kafka assigns its own). Uses an"
            " idempotent producer. Exit 0 when every message was acknowledged by the broker."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--default-partition", type=int, default=0)
    p.add_argument("--topic", help="override the manifest's source topic")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help='print {"topic", "messages"} instead of a sentence')
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not 0 <= args.default_partition < cfg.partitions:
        msg = f"--default-partition must be in 0..{cfg.partitions - 1}"
        raise UsageError(msg)
    lines = []
    for f in args.files:
        for n, line in enumerate(read_bytes(f, "input file").splitlines(), 1):
            lines.append((f"{f}:{n}", line))
    try:
        msgs = plan(cfg, lines, args.default_partition)
    except RecordsError as e:
        raise UsageError(str(e)) from None
    rt = Runtime(cfg, read_only=True)  # reads the manifest only; never provisions
    topic = args.topic
    if topic is None:
        with rt.store("amends-load") as store:
            topic = rt.manifest(store).source_topic
    w = rt.writer()
    progress = Progress(f"loading into {topic}", len(msgs), quiet=args.quiet or len(msgs) < 1000)
    try:
        for m in msgs:
            w.produce(topic, m.partition, m.value, m.key)
            progress.advance()
        w.flush()
    finally:
        progress.close()
    if args.json:
        print(json.dumps({"topic": topic, "messages": len(msgs)}))
    else:
        print(f"loaded {len(msgs)} messages into {topic!r}")
    return 0
