"""``amends compute``: the business result of a history, from either engine."""

from __future__ import annotations

import argparse
import json
import sys

from amends_core import oracle
from amends_core.ledger import CloseOutOfRange, Config, Record
from amends_core.pipeline import compute_incremental
from amends_core.records import RecordsError, framed_input
from amends_core.result import ComputeResult
from amends_pipeline.commands._common import Subparsers, add_config
from amends_pipeline.commands.load import read_inputs
from amends_pipeline.errors import ComputeError, UsageError
from amends_pipeline.inputs import load_config
from amends_pipeline.text import terminal_safe


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "compute",
        help="compute balances, alerts, rejections and conflicts of a history",
        description=(
            "Read a configuration and framed source records (RECORDS.jsonl: one"
            ' {"partition","offset","key","value"|"value_b64"} object per line), process'
            " them per partition in offset order, and print the result as JSON. Files are"
            " read and checked exactly as `amends load` reads them (raw source values are"
            " for `amends load` only). Exit 0 on success, 2 on unusable arguments,"
            " configuration or input (one line naming FILE:LINE), 3 when a daily close"
            " leaves signed 64-bit."
        ),
    )
    add_config(p)
    p.add_argument("--engine", required=True, choices=["incremental", "oracle"])
    p.add_argument(
        "--records", required=True, action="append", metavar="RECORDS.jsonl",
        help="framed records; may be given several times",
    )
    p.set_defaults(func=run)


def _oracle(cfg: Config, by_partition: dict[int, list[Record]]) -> ComputeResult:
    try:
        return oracle.compute(cfg, by_partition).result
    except oracle.OracleInputError as e:
        raise UsageError(terminal_safe(str(e))) from None


def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    reader = read_inputs(args.records, cfg.partitions)
    try:
        by_partition = framed_input(reader, cfg.source_incarnation)
    except RecordsError as e:
        raise UsageError(str(e)) from None
    try:
        if args.engine == "incremental":
            result = compute_incremental(cfg, by_partition)
        else:
            result = _oracle(cfg, by_partition)
    except CloseOutOfRange as e:
        raise ComputeError(terminal_safe(str(e))) from None
    # JSON output stays exact (JSON escapes what it must); only messages are escaped.
    sys.stdout.write(json.dumps(result.to_json(), ensure_ascii=False, separators=(",", ":")))
    sys.stdout.write("\n")
    return 0
