"""Hostile input on the consuming side: what a reader cannot decode is quarantined or stops, never loops.

Real `amends` processes against the real Apache Kafka broker and PostgreSQL.
A header name that is not UTF-8 cannot be produced through confluent-kafka's
Python API (it turns a bytes header name into its ``str()``), so the upstream
producer here calls librdkafka's C API (the copy bundled with confluent-kafka)
through ctypes, as a producer written in another language would. Measured with
confluent-kafka 2.16: ``Message.headers()`` on such a message raises
SystemError once and then returns a list holding a NULL entry; and a plain
``m.headers()`` call site that the interpreter has specialized (after a few
calls) returns that list at once, with no exception, which crashed a reader
with a segmentation fault (see ``topics._HEADERS``).
"""

from __future__ import annotations

import ctypes
import glob
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka
import psycopg
import pytest
from confluent_kafka import Producer

from amends_pipeline.kafka.realbroker import RealBroker
from amends_pipeline.kafka.topics import Writer
from tests.e2e.conftest import FIXTURE, Pipeline
from tests.e2e.test_output_compaction import load, output_end, write_config

KEY = b'["DEMO-PART","DEPOT-A"]'


def txn(txn_id: str, qty: int, day: int = 2) -> bytes:
    return json.dumps(
        {
            "txn_id": txn_id, "revision": 1, "kind": "NEW",
            "stock_key": {"item": "DEMO-PART", "location": "DEPOT-A"},
            "valid_time": f"2026-01-{day:02d}T12:00:00Z", "qty": qty,
            "source_time": f"2026-01-{day:02d}T12:00:01Z",
        },
        separators=(",", ":"),
    ).encode()


# ---------------------------------------------------------------- a producer in C


class _Header(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("val", ctypes.c_void_p), ("size", ctypes.c_ssize_t)]


class _Mem(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t)]


class _Union(ctypes.Union):
    _fields_ = [
        ("cstr", ctypes.c_char_p), ("i32", ctypes.c_int32), ("i", ctypes.c_int),
        ("mem", _Mem), ("header", _Header), ("_pad", ctypes.c_char * 64),
    ]


class _VU(ctypes.Structure):
    """librdkafka's ``rd_kafka_vu_t``: one typed argument of ``rd_kafka_produceva``."""

    _fields_ = [("vtype", ctypes.c_int), ("u", _Union)]


_TOPIC, _PARTITION, _VALUE, _KEY, _MSGFLAGS, _HEADER = 1, 3, 4, 5, 7, 9
_F_COPY = 2


def _librdkafka() -> ctypes.CDLL:
    libs = Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs"
    (path,) = glob.glob(str(libs / "librdkafka*.so*"))
    lib = ctypes.CDLL(path)
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
    ]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_produceva.restype = ctypes.c_void_p
    lib.rd_kafka_produceva.argtypes = [ctypes.c_void_p, ctypes.POINTER(_VU), ctypes.c_size_t]
    lib.rd_kafka_flush.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_outq_len.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_destroy.argtypes = [ctypes.c_void_p]
    return lib


def produce_in_c(
    bootstrap: str, topic: str, value: bytes, key: bytes | None, headers: list[tuple[bytes, bytes]]
) -> None:
    """One message to partition 0, header names as raw bytes (no UTF-8 check anywhere)."""
    lib = _librdkafka()
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for k, v in (("bootstrap.servers", bootstrap), ("enable.idempotence", "true"), ("log_level", "3")):
        assert lib.rd_kafka_conf_set(conf, k.encode(), v.encode(), err, 512) == 0, err.value
    rk = lib.rd_kafka_new(0, conf, err, 512)  # 0: RD_KAFKA_PRODUCER
    assert rk, err.value
    keep: list[Any] = []
    args: list[_VU] = []

    def arg(vtype: int) -> _VU:
        a = _VU()
        a.vtype = vtype
        args.append(a)
        return a

    def mem(a: _VU, data: bytes) -> None:
        buf = ctypes.create_string_buffer(data, len(data))
        keep.append(buf)
        a.u.mem.ptr = ctypes.cast(buf, ctypes.c_void_p)
        a.u.mem.size = len(data)

    arg(_TOPIC).u.cstr = topic.encode()
    arg(_PARTITION).u.i32 = 0
    arg(_MSGFLAGS).u.i = _F_COPY
    mem(arg(_VALUE), value)
    if key is not None:
        mem(arg(_KEY), key)
    for name, val in headers:
        buf = ctypes.create_string_buffer(val, len(val))
        keep.append(buf)
        h = arg(_HEADER)
        h.u.header.name = name
        h.u.header.val = ctypes.cast(buf, ctypes.c_void_p)
        h.u.header.size = len(val)
    try:
        assert not lib.rd_kafka_produceva(rk, (_VU * len(args))(*args), len(args)), "produceva refused"
        lib.rd_kafka_flush(rk, 30_000)
        assert lib.rd_kafka_outq_len(rk) == 0, "the broker did not take the message"
    finally:
        lib.rd_kafka_destroy(rk)


# ---------------------------------------------------------------- helpers


def db(p: Pipeline) -> psycopg.Connection[Any]:
    conn = psycopg.connect(p.env["AMENDS_PG_DSN"], autocommit=True)
    conn.execute(psycopg.sql.SQL("SET search_path TO {}").format(psycopg.sql.Identifier(p.env["AMENDS_PG_SCHEMA"])))
    return conn


def source_high(p: Pipeline) -> int:
    from amends_pipeline.kafka.topics import Reader

    with Reader(p.broker.bootstrap, p.source_topic) as r:
        return r.watermarks(0).high


def frontier(p: Pipeline, partition: int = 0) -> int:
    with db(p) as conn:
        row = conn.execute("SELECT next_offset FROM partitions WHERE partition = %s", (partition,)).fetchone()
    return -1 if row is None else int(row[0])


def view_progress(p: Pipeline, partition: int) -> tuple[int, str | None]:
    with db(p) as conn:
        row = conn.execute(
            "SELECT next_offset, stopped FROM view_progress WHERE partition = %s", (partition,)
        ).fetchone()
    assert row is not None
    return int(row[0]), row[1]


# ---------------------------------------------------------------- worker side


def test_the_python_client_cannot_send_a_non_utf8_header_name_so_the_test_producer_uses_c(
    pipeline: Pipeline,
) -> None:
    """Why ``produce_in_c`` exists: confluent-kafka sends ``str(b'\\xff\\xfe')`` instead."""
    p = pipeline
    p.provision()
    prod = Producer({"bootstrap.servers": p.broker.bootstrap, "log_level": 3})
    prod.produce(p.source_topic, b"v", partition=0, headers=[(b"\xff\xfe", b"v")])  # type: ignore[list-item]
    assert prod.flush(30) == 0
    produce_in_c(p.broker.bootstrap, p.source_topic, b"w", None, [(b"\xff\xfe", b"v")])
    from amends_pipeline.kafka.topics import Reader

    with Reader(p.broker.bootstrap, p.source_topic) as r:
        msgs = list(r.messages(0, 1, r.watermarks(0).high))
    assert msgs[0].headers() == [("b'\\xff\\xfe'", b"v")]
    with pytest.raises(SystemError):
        msgs[1].headers()


def test_a_source_record_whose_header_name_is_not_utf8_is_quarantined_and_the_worker_reaches_the_end(
    pipeline: Pipeline,
) -> None:
    p = pipeline
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    bad_at = source_high(p)
    produce_in_c(p.broker.bootstrap, p.source_topic, txn("HIDDEN", -90, day=3), KEY, [(b"\xff\xfe", b"v")])
    p.load(FIXTURE / "correction.jsonl")
    high = source_high(p)
    r = p.run("role", "worker", "--config", str(p.config), "--until-idle", "--quiet")
    assert r.returncode == 0, r.stderr
    assert frontier(p) == high  # past the hostile message, to the end of the partition
    with db(p) as conn:
        rows = conn.execute("SELECT src_offset, reason, detail, raw_value FROM quarantine").fetchall()
    assert [(o, reason) for o, reason, _, _ in rows] == [(bad_at, "RESERVED_HEADER")]
    assert bytes(rows[0][3]) == txn("HIDDEN", -90, day=3)  # the raw value survives quarantine unchanged
    assert "headers the Kafka client cannot read" in rows[0][2]  # the stored detail says why
    p.ok("role", "relay", "--config", str(p.config), "--until-idle", "--quiet")
    p.ok("role", "view", "--config", str(p.config), "--until-idle", "--quiet")
    # The oracle reads the same message through the same route and agrees.
    v = p.verify("--json")
    report = json.loads(v.stdout)
    assert v.returncode == 1 and report["status"] == "PASS_WITH_EXCLUSIONS", report
    assert [(x["offset"], x["reason"]) for x in report["rejections"]] == [(bad_at, "RESERVED_HEADER")]


_READ_EVERY_WAY = """
import json, sys
from amends_pipeline.kafka.topics import Reader, reserved_flag, reserved_flags, to_record, to_records
bootstrap, topic, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
seen = {}
with Reader(bootstrap, topic) as r:
    for round in range(3):  # the same messages again: every call site warm
        seen.setdefault("per message", []).append([reserved_flag(m, None) for m in r.messages(0, 0, n)])
        seen.setdefault("runs", []).append([f for run in r.scan(0, 0, n) for f in reserved_flags(run, None)])
        seen.setdefault("record", []).append([to_record("s", 0, m, None)[1] for m in r.messages(0, 0, n)])
        seen.setdefault("records", []).append(
            [rec.reserved_header for run in r.scan(0, 0, n) for rec in to_records("s", 0, run, None)]
        )
print(json.dumps(seen))
"""


def test_a_header_name_that_is_not_utf8_after_many_messages_with_headers_never_crashes_a_reader(
    kafka_broker: RealBroker, topic_name: Callable[[str], str]
) -> None:
    """Reading it where every call site is warm flags it, by every route, again and again.

    In a child process, so that a crash fails this test instead of ending the run.
    """
    t = topic_name("hdr")
    kafka_broker.create_topic(t, 1)
    w = Writer(kafka_broker.bootstrap)
    for i in range(60):
        w.produce(t, 0, b"before-%d" % i, KEY, [("trace", b"x")])
    w.flush()
    produce_in_c(kafka_broker.bootstrap, t, b"hidden", KEY, [(b"\xff\xfe", b"v")])
    for i in range(20):
        w.produce(t, 0, b"after-%d" % i, KEY, [("trace", b"y")])
    w.flush()
    done = subprocess.run(
        [sys.executable, "-c", _READ_EVERY_WAY, kafka_broker.bootstrap, t, "81"],
        capture_output=True, text=True, timeout=300, cwd=Path(__file__).parents[2], check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    want = [False] * 60 + [True] + [False] * 20
    seen = json.loads(done.stdout)
    assert set(seen) == {"per message", "runs", "record", "records"}
    for route, rounds in seen.items():
        assert rounds == [want] * 3, route


# ---------------------------------------------------------------- view side


@pytest.mark.parametrize(
    ("garbage", "problem"),
    [
        (b"\xff\xfe not UTF-8", "not valid UTF-8"),
        (b"[" * 100_000, "not a JSON object"),
        (b'{"a":' * 5_000 + b"1" + b"}" * 5_000, "nests deeper"),
    ],
    ids=["invalid-utf8", "deep-array", "deep-object"],
)
@pytest.mark.slow
def test_an_undecodable_output_message_stops_its_partition_with_a_diagnostic_and_never_crash_loops(
    pipeline: Pipeline, garbage: bytes, problem: str
) -> None:
    p = pipeline
    p.config = write_config(p.tmp)
    p.provision()
    load(p, "initial")
    for name in ("worker", "relay"):
        p.ok("role", name, "--config", str(p.config), "--until-idle", "--quiet")
    bad_at = output_end(p, 0)
    produce_in_c(p.broker.bootstrap, p.output_topic, garbage, b"\xff", [(b"\xfe", b"\xff")])
    load(p, "amend")
    for name in ("worker", "relay"):
        p.ok("role", name, "--config", str(p.config), "--until-idle", "--quiet")
    for attempt in range(2):  # a restarted view reports the same stop, it does not retry the record
        r = p.run("role", "view", "--config", str(p.config), "--until-idle", "--quiet")
        assert r.returncode == 1, (attempt, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert f"offset {bad_at}:" in r.stderr and problem in r.stderr, r.stderr
        assert view_progress(p, 0) == (bad_at, view_progress(p, 0)[1])
        assert problem in (view_progress(p, 0)[1] or "")
    # the other output partition is untouched by the stop and is served when asked for
    p.ok("role", "view", "--config", str(p.config), "--until-idle", "--quiet", "--partition", "1")
    assert view_progress(p, 1) == (output_end(p, 1), None)
