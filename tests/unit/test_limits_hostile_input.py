"""Hostile input meets the limits of ``amends_core.limits``: refused, bounded, escaped.

Each test names the rule it protects: identifiers are bounded in both
decoders, a key-status envelope stays bounded however many conflicts a key
has, and text meant for people never carries a raw control character while
JSON stays exact.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from amends_core import diff, limits, wire
from amends_core.fold import FoldDelta, validate
from amends_core.ledger import (
    Cause,
    Config,
    ConfigError,
    Conflict,
    ConflictRef,
    Envelope,
    Family,
    KeyConfig,
    MessageType,
    OutputID,
    Payload,
    Projection,
    Rejection,
    RejectReason,
    Status,
    StockKey,
    Transaction,
)
from amends_core.oracle import compute as oracle_compute
from amends_core.oracle.decode import Malformed
from amends_core.oracle.decode import decode_many as oracle_decode_many
from amends_core.pipeline import MemoryPipeline, compute_incremental
from amends_core.verify import (
    Boundary,
    DiffKind,
    Report,
    VerifyStatus,
    verify,
    verify_memory,
)
from amends_core.view import ViewState, check_envelope
from amends_pipeline.commands.view import render
from amends_pipeline.text import printable, terminal_safe
from tests.builders import K1, SOURCE, config, day, record, txn, value

CFG = config([(K1, 100, 60, 0)])
BIG = "X" * 600_000


def decoded_by_both(raw: bytes) -> tuple[Transaction | wire.DecodeError, Transaction | Malformed]:
    return wire.decode_transaction(raw), oracle_decode_many([raw])[0]


def assert_both_refuse(raw: bytes, message: str) -> None:
    """Both decoders refuse ``raw`` with exactly ``message``; validation calls it MALFORMED."""
    mine, oracle = decoded_by_both(raw)
    assert isinstance(mine, wire.DecodeError), mine
    assert isinstance(oracle, Malformed), oracle
    assert mine.message == message
    assert oracle.message == message
    v = validate(CFG, record(raw, 0, key=K1.transport_key()))
    assert isinstance(v, Rejection) and v.reason is RejectReason.MALFORMED


# ---------------------------------------------------------------- identifier limits


def test_a_600_kb_txn_id_is_quarantined_with_the_length_reason_in_both_engines() -> None:
    raw = value(txn(BIG))
    assert len(raw) < limits.MAX_VALUE_BYTES  # only the identifier limit can refuse it
    assert_both_refuse(raw, "member 'txn_id' is 600000 bytes, above the 256 byte limit")
    recs = [record(raw, 0)]
    oracle = oracle_compute(CFG, {0: recs})
    assert [(r.reason, r.detail) for r in oracle.rejections] == [
        (RejectReason.MALFORMED, "member 'txn_id' is 600000 bytes, above the 256 byte limit")
    ]
    pipe = MemoryPipeline(CFG)
    pipe.append(recs)
    pipe.drain()
    assert [(r.reason, r.detail) for r in pipe.store.rejections] == [
        (RejectReason.MALFORMED, "member 'txn_id' is 600000 bytes, above the 256 byte limit")
    ]


@pytest.mark.parametrize("field", ["txn_id", "item", "location"])
def test_identifiers_are_limited_in_utf8_bytes_not_characters_by_both_decoders(field: str) -> None:
    at_limit = "é" * (limits.MAX_ID_BYTES // 2)  # 128 characters, 256 bytes
    over = at_limit + "a"  # 129 characters, 257 bytes
    for text, ok in ((at_limit, True), (over, False)):
        obj = txn("T1")
        if field == "txn_id":
            obj["txn_id"] = text
        else:
            obj["stock_key"][field] = text
        for raw in (value(obj), json.dumps(obj).encode()):  # canonical layout, then escaped
            mine, oracle = decoded_by_both(raw)
            if ok:
                assert isinstance(mine, Transaction) and oracle == mine
            else:
                assert isinstance(mine, wire.DecodeError) and isinstance(oracle, Malformed)
                assert mine.message == oracle.message == (
                    f"member {field!r} is 257 bytes, above the 256 byte limit"
                )


def test_a_configuration_naming_an_identifier_above_its_limit_is_refused() -> None:
    def cfg(ns: str = "ns", item: str = "P") -> Config:
        return Config(1, ns, SOURCE, 1, 0, (KeyConfig(StockKey(item, "D"), 0, 0, 0),))

    with pytest.raises(ConfigError, match="item of stock key .* is 257 bytes, above the 256 byte limit"):
        cfg(item="x" * 257).validate()
    with pytest.raises(ConfigError, match="namespace is 258 bytes, above the 256 byte limit"):
        cfg(ns="é" * 129).validate()
    cfg(item="x" * 256, ns="é" * 128).validate()


# ---------------------------------------------------------------- bounded envelopes


def conflicting_history(n: int, id_bytes: int = limits.MAX_ID_BYTES) -> list[dict[str, Any]]:
    """n identities of the longest legal txn_id, each with two distinct candidates at revision 1."""
    out = []
    for i in range(n):
        tid = f"{i:04d}".ljust(id_bytes, "x")
        out += [txn(tid, qty=-1, valid=day(1)), txn(tid, qty=-2, valid=day(1))]
    return out


def test_n_conflicting_identities_give_a_bounded_status_envelope_carrying_count_n() -> None:
    n = 200
    pipe = MemoryPipeline(CFG)
    pipe.append([record(o, i) for i, o in enumerate(conflicting_history(n))])
    pipe.drain()
    assert not pipe.view.stopped
    sizes = [len(row.envelope.to_bytes()) for row in pipe.committed]
    assert max(sizes) <= limits.MAX_ENVELOPE_BYTES
    statuses = [row.envelope for row in pipe.committed if row.envelope.output_id.family is Family.STATUS]
    last = statuses[-1].payload
    assert last.status is Status.BLOCKED and last.reason_count == n
    assert len(last.reasons) == limits.MAX_STATUS_REASONS
    assert list(last.reasons) == sorted(last.reasons)[: limits.MAX_STATUS_REASONS]
    # Output bytes grow linearly with the number of conflicts, not quadratically:
    # every status envelope is no larger than one carrying MAX_STATUS_REASONS references.
    assert max(len(e.to_bytes()) for e in statuses) == len(statuses[-1].to_bytes())
    decoded = wire.decode_envelope(statuses[-1].to_bytes())
    assert decoded == statuses[-1]


def test_both_engines_and_verification_agree_on_more_conflicts_than_a_status_carries() -> None:
    hist = conflicting_history(limits.MAX_STATUS_REASONS + 4, id_bytes=12)
    recs = [record(o, i) for i, o in enumerate(hist)]
    oracle = oracle_compute(CFG, {0: recs})
    assert compute_incremental(CFG, {0: recs}) == oracle.result
    assert oracle.reason_counts == {K1: limits.MAX_STATUS_REASONS + 4}
    assert len(oracle.result.conflicts) == limits.MAX_STATUS_REASONS + 4  # the full list stays
    pipe = MemoryPipeline(CFG)
    pipe.append(recs)
    pipe.drain()
    report = verify_memory(pipe)
    assert report.status is VerifyStatus.BLOCKED and report.differences == ()


def test_verification_compares_the_total_reason_count_of_a_key_status() -> None:
    hist = conflicting_history(limits.MAX_STATUS_REASONS + 2, id_bytes=12)
    pipe = MemoryPipeline(CFG)
    pipe.append([record(o, i) for i, o in enumerate(hist)])
    pipe.drain()
    sid = OutputID(CFG.namespace, Family.STATUS, K1, None)
    rows = dict(pipe.view.rows)
    p = rows[sid].payload
    rows[sid] = Envelope(
        rows[sid].schema_version, sid, rows[sid].version, rows[sid].type,
        Payload(True, status=p.status, reasons=p.reasons, reason_count=p.reason_count + 1),
        rows[sid].cause,
    )
    report = verify(
        CFG, oracle_compute(CFG, pipe.source), rows, pipe.store.rejections,
        pipe.store.conflicts(), Boundary(True),
    )
    assert [d.kind for d in report.differences] == [DiffKind.KEY_STATUS]
    assert report.differences[0].expected["reason_count"] == limits.MAX_STATUS_REASONS + 2
    assert report.differences[0].actual["reason_count"] == limits.MAX_STATUS_REASONS + 3


def worst_case_envelope() -> Envelope:
    """Every string at its limit and made of characters JSON doubles (quotes)."""
    q = '"' * limits.MAX_ID_BYTES
    key = StockKey(q, q)
    refs = tuple(ConflictRef(q[:-3] + f"{i:03d}", 2**63 - 1) for i in range(limits.MAX_STATUS_REASONS))
    ns = '"' * limits.MAX_NAME_BYTES
    return Envelope(
        2, OutputID(ns, Family.STATUS, key, None), 2**63 - 1, MessageType.KEY_STATUS_STATED,
        Payload(True, status=Status.BLOCKED, reasons=refs, reason_count=2**63 - 1),
        Cause(ns, 65535, 2**63 - 1, q, 2**63 - 1),
    )


def test_the_largest_envelope_the_limits_allow_fits_the_envelope_limit() -> None:
    env = worst_case_envelope()
    assert len(env.to_bytes()) <= limits.MAX_ENVELOPE_BYTES
    assert limits.MAX_ENVELOPE_BYTES < 1 << 20  # well under Kafka's default message size
    diff.check_size(env)
    assert wire.decode_envelope(env.to_bytes()) == env


def test_a_status_envelope_above_the_size_limit_is_refused_before_any_outbox_row() -> None:
    refs = tuple(ConflictRef(f"{i:03d}" + "x" * 5000, 1) for i in range(limits.MAX_STATUS_REASONS))
    t = Transaction(refs[0].txn_id, 1, "NEW", K1, 0, 1, 0)
    delta = FoldDelta(K1, t, record(b"{}", 0).coords, None, None, True, None, Status.BLOCKED, refs, None)
    with pytest.raises(diff.EnvelopeTooLarge, match="envelope limit"):
        diff.reconcile("ns", delta, lambda oid: None, Cause(SOURCE, 0, 0, "T", 1))


def test_the_view_still_applies_version_1_status_envelopes_without_a_count() -> None:
    env = wire.decode_envelope(
        json.dumps(
            {
                "schema_version": 1,
                "output_id": {"namespace": CFG.namespace, "family": "key-status",
                              "stock_key": K1.to_json(), "day": None},
                "version": 1, "type": "KeyStatusStated",
                "payload": {"present": True, "status": "BLOCKED", "reasons": [{"txn_id": "A", "revision": 1}]},
                "cause": {"source": SOURCE, "partition": 0, "offset": 0, "txn_id": "A", "revision": 1},
            }
        ).encode()
    )
    assert isinstance(env, Envelope) and env.payload.reason_count == 1
    assert check_envelope(CFG, 0, env) is None
    assert b"reason_count" not in env.to_bytes()  # re-encoded as the version it is


def test_a_status_envelope_carrying_other_than_the_first_references_is_a_protocol_error() -> None:
    pipe = MemoryPipeline(CFG)
    pipe.append([record(o, i) for i, o in enumerate(conflicting_history(3, id_bytes=8))])
    pipe.drain()
    env = next(e for e in pipe.view.rows.values() if e.output_id.family is Family.STATUS)
    assert env.payload.reason_count == 3
    short = Envelope(
        env.schema_version, env.output_id, env.version, env.type,
        Payload(True, status=Status.BLOCKED, reasons=env.payload.reasons[:1], reason_count=3), env.cause,
    )
    assert "carries 1 of 3 reasons" in (check_envelope(CFG, 0, short) or "")
    view = ViewState(CFG)
    assert wire.decode_envelope(short.to_bytes()) == short
    assert view.apply(0, 0, short.to_bytes()).effect.value == "protocol-error"


# ---------------------------------------------------------------- escaped human output


def test_terminal_safe_escapes_every_unprintable_character_but_newlines() -> None:
    assert terminal_safe("plain Ä text\nsecond line") == "plain Ä text\nsecond line"
    assert terminal_safe("a\x1b[2Jb\rc\x9bd\u202ee\U000e0001") == "a\\x1b[2Jb\\x0dc\\x9bd\\u202ee\\U000e0001"
    assert printable("T\x1b[31m") == "'T\\x1b[31m'"
    assert terminal_safe(printable("T\x1b[31m")) == printable("T\x1b[31m")


def test_amends_view_text_escapes_control_characters_in_keys_and_reasons() -> None:
    key = StockKey("P\x9b1m", "D\x1b[2J")
    proj = Projection(key, Status.BLOCKED, (ConflictRef("T\x1b]0;pwned\x07", 1),), (), ())
    text = render({key: proj}, {0: 3}, {0: "stopped at \x1b[31m"}, None, 10, counts={key: 40})
    assert not any(ch in text for ch in "\x1b\x9b\x07")
    assert "'T\\x1b]0;pwned\\x07'@r1 and 39 more" in text
    assert "'P\\x9b1m'/'D\\x1b[2J': BLOCKED" in text


def hostile_report() -> Report:
    txn_id = "T\x1b[2J"
    key = StockKey("P", "D")
    return Report(
        VerifyStatus.DRIFT, "ns", "0" * 64,
        error="view said \x1b[31m",
        boundary_reasons=("partition 0: \x1b]0;title\x07",),
        blocked=(Projection(key, Status.BLOCKED, (ConflictRef(txn_id, 2),), (), ()),),
        conflicts=(Conflict(key, txn_id, 2),),
    )


def test_amends_verify_escapes_text_output_but_keeps_json_exact(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from amends_pipeline.cli import main
    from amends_pipeline.commands import verify as verify_command

    monkeypatch.setattr(verify_command, "verify_namespace", lambda rt, path: hostile_report())
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(CFG.normalised()))
    assert main(["verify", "--config", str(cfg)]) == 1
    text = capsys.readouterr().out
    assert not any(ch in text for ch in "\x1b\x07")
    assert "txn_id 'T\\x1b[2J' revision 2" in text
    assert "view said \\x1b[31m" in text
    assert main(["verify", "--config", str(cfg), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["conflicts"][0]["txn_id"] == "T\x1b[2J"
    assert doc["error"] == "view said \x1b[31m"


def test_a_status_envelope_without_references_never_encodes_past_the_bound_it_is_trusted_by() -> None:
    """diff.reconcile skips encoding such an envelope for its size check while the limits make
    ``unreferenced_bound`` fit; every string here is made of the character JSON writes longest."""
    c = "\x1f"
    key = StockKey(c * limits.MAX_ID_BYTES, c * limits.MAX_ID_BYTES)
    ns = c * limits.MAX_NAME_BYTES
    env = Envelope(
        2**63 - 1, OutputID(ns, Family.STATUS, key, None), 2**63 - 1, MessageType.KEY_STATUS_STATED,
        Payload(True, status=Status.BLOCKED, reasons=(), reason_count=2**63 - 1),
        Cause(ns, 2**63 - 1, 2**63 - 1, c * limits.MAX_ID_BYTES, 2**63 - 1),
    )
    assert len(env.to_bytes()) <= diff.unreferenced_bound() <= limits.MAX_ENVELOPE_BYTES
