"""``amends load``: produce fixture, generated or framed records to the source topic.

``read_inputs`` is also how ``amends compute`` reads its files: both commands
read and check input files the same way (``amends_core.records``).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator

from amends_core import limits
from amends_core.records import InputReader, RecordsError
from amends_pipeline.commands._common import Subparsers, add_config, operational
from amends_pipeline.commands._progress import Progress
from amends_pipeline.errors import UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.kafka.load import load_plan
from amends_pipeline.runtime import Runtime


def _chunks(path: str) -> Iterator[bytes]:
    """The file's lines, each cut at ``limits.CHUNK_BYTES`` (a longer line is refused)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > limits.MAX_FILE_BYTES:
                msg = f"{path}: file of {size} bytes is above the {limits.MAX_FILE_BYTES} byte limit"
                raise UsageError(msg)
            while chunk := fh.readline(limits.CHUNK_BYTES):
                yield chunk
    except OSError as e:
        msg = f"cannot read input file {path!r}: {e.strerror or e}"
        raise UsageError(msg) from None


def read_inputs(paths: list[str], partitions: int) -> InputReader:
    """Read and check input files in order; UsageError (exit 2) naming FILE:LINE otherwise."""
    reader = InputReader(partitions)
    try:
        for path in paths:
            reader.add_file(path, _chunks(path))
        reader.framed()  # a repeated (partition, offset) is refused here, whichever command reads
    except RecordsError as e:
        raise UsageError(str(e)) from None
    return reader


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "load",
        help="produce source values (fixture JSONL or framed RECORDS.jsonl) to the source topic",
        description=(
            "Each non-empty line is either a raw source value (routed to its key's partition"
            " with the canonical transport key; undecodable or unknown-key values go to"
            " --default-partition without a key, to be quarantined by the worker) or a framed"
            ' record {"partition","offset","key","value"|"value_b64"} (sent to its partition'
            " with its key; offsets only order the lines, Kafka assigns its own). A file holds"
            " one kind of line; files are checked exactly as `amends compute` checks them"
            " (the first unusable line is exit 2, naming FILE:LINE). Uses an idempotent"
            " producer. Exit 0 when every message was acknowledged by the broker."
        ),
    )
    add_config(p)
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--default-partition", type=int, default=0)
    p.add_argument("--topic", help="override the manifest's source topic")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--json", action="store_true", help='print {"topic", "messages"} instead of a sentence')
    p.add_argument(
        "--check", action="store_true",
        help="read and check the files only: connect to nothing, send nothing",
    )
    p.set_defaults(func=run)


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    if not 0 <= args.default_partition < cfg.partitions:
        msg = f"--default-partition must be in 0..{cfg.partitions - 1}"
        raise UsageError(msg)
    reader = read_inputs(args.files, cfg.partitions)
    msgs = load_plan(cfg, reader, args.default_partition)
    if args.check:
        print(f"{len(msgs)} messages would be loaded ({len(reader.raw_lines)} raw values,"
              f" {len(reader.framed_records)} framed records); nothing was sent")
        return 0
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
