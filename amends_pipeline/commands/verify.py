"""``amends verify``: certify the view against the independent oracle at a complete boundary."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, NamedTuple

from amends_core.ledger import Conflict, RejectReason, StockKey
from amends_core.result import RejectionRef
from amends_core.verify import ExpectationDifference, Report, SkipRef, VerifyStatus
from amends_pipeline.commands._common import load_config, operational, read_bytes
from amends_pipeline.errors import UsageError
from amends_pipeline.ops.verify import verify_namespace
from amends_pipeline.runtime import Runtime
from amends_pipeline.text import terminal_safe


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "verify",
        help="compare the view with the oracle over the source topic",
        description=(
            "Establishes a complete boundary (the provisioned source incarnation, still holding"
            " every record the worker consumed; worker frontier at the source end, outbox"
            " drained, view frontier at the output end), takes consistent snapshots, recomputes"
            " everything from the source"
            " topic with the independent oracle and prints the report: PASS,"
            " PASS_WITH_EXCLUSIONS, BLOCKED, DRIFT, INCOMPLETE or ERROR with every differing"
            " row, the rejections found (by reason, with partition/offset) and the conflicts."
            " With --expect it also prints which expected entries are missing and which found"
            " entries are unexpected. Exit 0 only for an accepted report: PASS, or"
            " PASS_WITH_EXCLUSIONS when --expect lists exactly the rejections, conflicts and"
            " operator skips (`amends skip`) found. A source partition stopped by an operation"
            " error is ERROR naming the partition, offset, error and the `amends skip` command"
            " line. Exit 1 otherwise; 2 for an unusable expectations file (one line naming the"
            " field at fault) or environment."
        ),
    )
    p.add_argument("--config", required=True, metavar="CONFIG.json")
    p.add_argument(
        "--expect", metavar="EXPECTED.json",
        help='{"rejections":[{"partition","offset","reason"}],"conflicts":[{"item","location","txn_id","revision"}],'
        '"skips":[{"partition","offset"}]} (skips: the operator skips, optional)',
    )
    p.add_argument(
        "--json", action="store_true",
        help="print the machine-readable report (with --expect: plus expectation_difference)",
    )
    p.add_argument(
        "--wait", type=float, default=0.0, metavar="SECONDS",
        help="while the report is INCOMPLETE (the roles may still be catching up), try again"
        " every second for up to SECONDS before reporting (default 0: report at once)",
    )
    p.add_argument(
        "--max-rows", type=int, default=20,
        help="text report: at most this many entries per list (default 20)",
    )
    p.set_defaults(func=run)


EXPECT_FORMAT = (
    '{"rejections": [{"partition", "offset", "reason"}],'
    ' "conflicts": [{"item", "location", "txn_id", "revision"}]}'
)


class ExpectationsError(ValueError):
    """An expectations document is unusable; the message names the field at fault."""


class Expectations(NamedTuple):
    """The manifests of an expectations file: what PASS_WITH_EXCLUSIONS must list exactly."""

    rejections: list[RejectionRef]
    conflicts: list[Conflict]
    skips: list[SkipRef]


def load_expectations(path: str | None) -> Expectations:
    if path is None:
        return Expectations([], [], [])
    raw = read_bytes(path, "expectations file")
    try:
        return parse_expectation_file(raw)
    except ExpectationsError as e:
        msg = f"expectations file {path!r}: {e}"
        raise UsageError(msg) from None


def parse_expectation_file(raw: bytes) -> Expectations:
    """Rejection, conflict and operator-skip manifests (``"skips": [{"partition", "offset"}]``).

    Raises ExpectationsError with one line naming the field at fault and where.
    """
    rej, con = parse_expectations(raw)
    doc = json.loads(raw.decode("utf-8-sig"))  # parse_expectations vouched for it
    skips = [
        SkipRef(_natural(e, "partition", where), _natural(e, "offset", where))
        for where, e in _entries(doc, "skips")
    ]
    return Expectations(rej, con, skips)


def parse_expectations(raw: bytes) -> tuple[list[RejectionRef], list[Conflict]]:
    """Rejection and conflict manifests from an expectations document.

    Raises ExpectationsError with one line naming the field at fault and where.
    """
    try:
        doc = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        msg = f"not UTF-8 text: byte {e.start}: {e.reason}"
        raise ExpectationsError(msg) from None
    except json.JSONDecodeError as e:
        msg = f"not JSON: line {e.lineno} column {e.colno}: {e.msg}"
        raise ExpectationsError(msg) from None
    if not isinstance(doc, dict):
        msg = f"the document is {_kind(doc)}; expected an object {EXPECT_FORMAT}"
        raise ExpectationsError(msg)
    rej = [
        RejectionRef(
            _natural(r, "partition", where), _natural(r, "offset", where), _reason(r, where)
        )
        for where, r in _entries(doc, "rejections")
    ]
    con = [
        Conflict(
            StockKey(_string(c, "item", where), _string(c, "location", where)),
            _string(c, "txn_id", where),
            _integer(c, "revision", where),
        )
        for where, c in _entries(doc, "conflicts")
    ]
    return rej, con


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _entries(doc: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    entries = doc.get(name, [])
    if not isinstance(entries, list):
        msg = f"{name} is {_kind(entries)}; expected a list"
        raise ExpectationsError(msg)
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            msg = f"{name}[{i}] is {_kind(e)}; expected an object"
            raise ExpectationsError(msg)
        out.append((f"{name}[{i}]", e))
    return out


def _field(entry: dict[str, Any], name: str, where: str) -> Any:
    if name not in entry:
        msg = f'{where} has no "{name}"'
        raise ExpectationsError(msg)
    return entry[name]


def _integer(entry: dict[str, Any], name: str, where: str) -> int:
    value = _field(entry, name, where)
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{where}.{name}: {_show(value)} is not an integer"
        raise ExpectationsError(msg)
    return value


def _natural(entry: dict[str, Any], name: str, where: str) -> int:
    value = _integer(entry, name, where)
    if value < 0:
        msg = f"{where}.{name}: {value} is negative"
        raise ExpectationsError(msg)
    return value


def _string(entry: dict[str, Any], name: str, where: str) -> str:
    value = _field(entry, name, where)
    if not isinstance(value, str):
        msg = f"{where}.{name}: {_show(value)} is not a string"
        raise ExpectationsError(msg)
    return value


def _reason(entry: dict[str, Any], where: str) -> RejectReason:
    value = _field(entry, "reason", where)
    try:
        return RejectReason(value)
    except ValueError:
        allowed = ", ".join(r.value for r in RejectReason)
        msg = f"{where}.reason: {_show(value)} is not one of {allowed}"
        raise ExpectationsError(msg) from None


def _show(value: object, limit: int = 60) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, ensure_ascii=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


@operational
def run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config)
    rej, con, skips = load_expectations(args.expect)
    if not args.wait >= 0:
        msg = "--wait takes a number of seconds, 0 or more"
        raise UsageError(msg)
    rt = Runtime(cfg)
    deadline = time.monotonic() + args.wait
    report = verify_namespace(rt, args.config)
    while report.status is VerifyStatus.INCOMPLETE and time.monotonic() < deadline:
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        report = verify_namespace(rt, args.config)
    accepted = report.accepts(rej, con, skips)
    diff = report.expectation_difference(rej, con, skips) if args.expect is not None else None
    if args.json:
        doc = report.to_json()
        if diff is not None:
            doc["expectation_difference"] = diff.to_json()
        print(json.dumps(doc, indent=2, ensure_ascii=False))
    else:
        print(terminal_safe(report.render(args.max_rows)))  # data is escaped; JSON stays exact
        if diff is not None:
            print(terminal_safe(diff.render(args.max_rows)))
    print(f"accepted: {'yes' if accepted else 'no'}{_why_not(report, diff, accepted)}", file=sys.stderr)
    return 0 if accepted else 1


def _why_not(report: Report, diff: ExpectationDifference | None, accepted: bool) -> str:
    if accepted:
        return ""
    status = report.status
    if status not in (VerifyStatus.PASS, VerifyStatus.PASS_WITH_EXCLUSIONS):
        return f" ({status.value} is never accepted)"
    if diff is None and report.skips:
        return (
            f" ({status.value}: acknowledge the {len(report.rejections)} rejections,"
            f" {len(report.conflicts)} conflicts and {len(report.skips)} operator skips above"
            f' with --expect {EXPECT_FORMAT[:-1]}, "skips": [{{"partition", "offset"}}]}})'
        )
    if diff is None:
        return (
            f" ({status.value}: acknowledge the {len(report.rejections)} rejections and"
            f" {len(report.conflicts)} conflicts above with --expect {EXPECT_FORMAT})"
        )
    return f" ({status.value}, but --expect does not match: see the missing and unexpected entries)"
