"""An audited way past an operation error, through real processes on real Kafka and PostgreSQL.

A record whose daily close leaves signed 64-bit stops its partition on every
restart (the frontier never advances past it). `amends verify` names the
partition, the offset, the error and the `amends skip` command line;
`amends skip` records who skipped it, why and when and moves the frontier just
past it; the worker then runs to the end, and verification reports the skip
as an exclusion that is accepted only when `--expect` lists it.
"""

from __future__ import annotations

import hashlib
import json

import psycopg
import pytest
from psycopg import sql

from amends_core.ledger import INT64_MAX
from tests.e2e.conftest import Pipeline

BAD = 2
"""Offset of the overflowing record (0 is the marker, 1 the record before it)."""


def txn(txn_id: str, qty: int, day: int) -> str:
    return json.dumps({
        "txn_id": txn_id, "revision": 1, "kind": "NEW",
        "stock_key": {"item": "PART-1", "location": "DEPOT-A"},
        "valid_time": f"2026-01-{day:02d}T12:00:00Z", "qty": qty,
        "source_time": "2026-02-01T00:00:00Z",
    }, separators=(",", ":"))


def set_up(p: Pipeline) -> None:
    p.config = p.tmp / "skip-config.json"
    p.config.write_text(json.dumps({
        "schema_version": 1, "namespace": "skip-demo", "source_incarnation": "skip-source-v1",
        "partitions": 1, "origin": "2026-01-01T00:00:00Z",
        "keys": [{"item": "PART-1", "location": "DEPOT-A", "opening_balance": INT64_MAX - 10,
                  "reorder_threshold": 0, "partition": 0}],
    }))
    p.provision()
    records = p.tmp / "records.jsonl"
    records.write_text("".join(
        line + "\n" for line in (txn("A", -5, 1), txn("B", 100, 2), txn("C", -1, 3))
    ))
    p.load(records)


def sql_rows(p: Pipeline, query: str) -> list[tuple[object, ...]]:
    with psycopg.connect(p.env["AMENDS_PG_DSN"], autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(p.env["AMENDS_PG_SCHEMA"])))
        return conn.execute(query).fetchall()  # type: ignore[arg-type]


def frontier(p: Pipeline) -> int:
    ((n,),) = sql_rows(p, "SELECT next_offset FROM partitions")
    return int(n)  # type: ignore[call-overload]


def worker(p: Pipeline):  # type: ignore[no-untyped-def]
    return p.run("role", "worker", "--config", str(p.config), "--until-idle", "--quiet")


@pytest.mark.slow
def test_an_operator_skips_the_record_a_partition_stops_on_and_verification_lists_it(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    set_up(p)
    cfg = str(p.config)

    # The operation error stops the partition at the same record on every restart.
    for _ in range(2):
        r = worker(p)
        assert r.returncode == 1, r.stderr
        assert r.stderr.startswith(f"amends: BatchAborted: record 0/{BAD}: daily close")
        assert "outside signed 64-bit" in r.stderr
        assert frontier(p) == BAD
    for role in ("relay", "view"):
        p.ok("role", role, "--config", cfg, "--until-idle", "--quiet")

    # verify names the partition, the offset, the error and the command that moves past it
    r = p.verify()
    assert r.returncode == 1
    assert r.stdout.startswith("verification ERROR: namespace 'skip-demo'")
    (error,) = [x for x in r.stdout.splitlines() if x.startswith("  error: ")]
    assert error.startswith(
        f"  error: source partition 0 is stopped by an operation error at offset {BAD}: CloseOutOfRange: "
    )
    command = f"amends skip --config {cfg} --partition 0 --offset {BAD} --reason TEXT"
    assert f"`{command}`" in error
    assert "  stopped: source partition 0 is stopped by an operation error" in r.stdout

    # refused: not the record the partition is stopped on
    r = p.run("skip", "--config", cfg, "--partition", "0", "--offset", str(BAD + 1), "--reason", "x")
    assert r.returncode == 1 and r.stderr.startswith("amends skip: refused: offset 3 is not the record")
    assert frontier(p) == BAD

    reason = "opening balance loaded in cents by mistake (ticket 4711)"
    out = p.ok("skip", "--config", cfg, "--partition", "0", "--offset", str(BAD),
               "--reason", reason, "--operator", "alice")
    assert out.startswith(f"skipped partition 0 offset {BAD} (CloseOutOfRange: ")
    again = p.ok("skip", "--config", cfg, "--partition", "0", "--offset", str(BAD), "--reason", reason)
    assert "was already skipped by alice" in again and again.rstrip().endswith("nothing changed")
    assert frontier(p) == BAD + 1

    p.roles_until_idle()  # the worker goes on after the skipped offset, to the end
    assert frontier(p) == 4

    r = p.verify()  # agreement, but the skip is an exclusion that must be acknowledged
    assert r.returncode == 1
    assert r.stdout.startswith("verification PASS_WITH_EXCLUSIONS: namespace 'skip-demo'")
    (listed,) = [x for x in r.stdout.splitlines() if x.startswith("  skipped by an operator: ")]
    assert listed.startswith(f"  skipped by an operator: partition/offset 0/{BAD} by alice at 20")
    assert listed.endswith(f": {reason} (error: " + listed.split("(error: ", 1)[1])
    assert "accepted: no (PASS_WITH_EXCLUSIONS" in r.stderr and '"skips"' in r.stderr

    expect = p.tmp / "expect.json"
    expect.write_text(json.dumps({"skips": [{"partition": 0, "offset": BAD}]}))
    r = p.verify("--expect", str(expect))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "  expectations: match" in r.stdout

    wrong = p.tmp / "wrong.json"
    wrong.write_text(json.dumps({"skips": [{"partition": 0, "offset": 1}]}))
    r = p.verify("--expect", str(wrong), "--json")
    assert r.returncode == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "PASS_WITH_EXCLUSIONS"
    assert [(s["partition"], s["offset"], s["operator"], s["reason"]) for s in doc["skips"]] == [
        (0, BAD, "alice", reason)
    ]
    assert doc["expectation_difference"]["missing"]["skips"] == [{"partition": 0, "offset": 1}]
    assert doc["expectation_difference"]["unexpected"]["skips"] == [{"partition": 0, "offset": BAD}]

    # the audit row: who, why, when, the epoch it claimed and the raw record
    ((part, off, who, why, when, raw, sha, size, error, before),) = sql_rows(
        p,
        "SELECT partition, src_offset, operator, reason, skipped_at, raw_value, value_sha256,"
        " value_size, error, frontier_before FROM operator_skips",
    )
    assert (part, off, who, why, before) == (0, BAD, "alice", reason, BAD)
    assert when is not None
    assert bytes(raw) == txn("B", 100, 2).encode()  # type: ignore[arg-type]
    assert sha == hashlib.sha256(bytes(raw)).hexdigest() and size == len(bytes(raw))  # type: ignore[arg-type]
    assert str(error).startswith("CloseOutOfRange: ")
