"""The development broker's control channel: token, bounded reads and threads, checked integers.

Runs the real broker process (librdkafka mock cluster) and talks to its
control channel the way a client on the same machine would.
"""

from __future__ import annotations

import json
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from amends_pipeline.errors import UsageError
from amends_pipeline.kafka.brokerctl import BrokerControl, BrokerControlError, split_host_port
from amends_pipeline.kafka.devbroker import (
    CONTROL_MAX_CONNECTIONS,
    CONTROL_MAX_LINE,
    UNAUTHORIZED,
    DevBroker,
    parse_control,
    write_json_atomic,
)


@pytest.fixture
def broker() -> Iterator[DevBroker]:
    b = DevBroker(topics={"src": 1})
    b.start()
    yield b
    b.stop()


def connect(b: DevBroker) -> socket.socket:
    host, port = split_host_port(b.control_address)
    return socket.create_connection((host, port), timeout=10)


def exchange(sock: socket.socket, line: bytes) -> dict[str, object]:
    sock.sendall(line)
    with sock.makefile("rb") as f:
        reply: dict[str, object] = json.loads(f.readline())
    return reply


def test_a_request_without_or_with_a_wrong_token_is_refused(broker: DevBroker) -> None:
    assert broker.state["token"] and len(str(broker.state["token"])) == 64
    anonymous = BrokerControl(broker.control_address).send({"cmd": "broker-down", "broker": 1})
    assert anonymous == {"ok": False, "error": UNAUTHORIZED}
    wrong = BrokerControl(broker.control_address, token="0" * 64).send({"cmd": "ping"})
    assert wrong == {"ok": False, "error": UNAUTHORIZED}
    assert broker.refresh_state()["down_brokers"] == []  # the refused command did nothing
    assert broker.control("ping")["pid"] == broker.pid  # the state file's token works
    assert BrokerControl.from_state_file(broker.state_file).request("ping")["pid"] == broker.pid


def test_the_state_file_is_private_and_written_without_a_predictable_temporary_name(
    broker: DevBroker, tmp_path: Path
) -> None:
    assert stat.S_IMODE(os.stat(broker.state_file).st_mode) == 0o600
    broker.create_topic("later", 2)  # rewritten: still private
    assert stat.S_IMODE(os.stat(broker.state_file).st_mode) == 0o600
    # A link planted at the old predictable temporary name is neither followed nor used.
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "state.json"
    (tmp_path / f".state.json.{os.getpid()}.tmp").symlink_to(victim)
    write_json_atomic(target, {"token": "t"})
    assert victim.read_text() == "untouched"
    assert json.loads(target.read_text()) == {"token": "t"} and not target.is_symlink()
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o600


def test_an_oversized_request_line_is_refused_and_the_broker_keeps_serving(broker: DevBroker) -> None:
    with connect(broker) as sock:
        reply = exchange(sock, b'{"cmd":"ping","pad":"' + b"x" * (CONTROL_MAX_LINE + 10) + b'"}\n')
    assert reply == {"ok": False, "error": f"request line longer than {CONTROL_MAX_LINE} bytes"}
    assert broker.control("ping")["pid"] == broker.pid


@pytest.mark.parametrize(
    ("cmd", "fields", "message"),
    [
        ("delete-records", {"topic": "src", "partition": 2**40, "offset": 0}, "field 'partition' out of range"),
        ("delete-records", {"topic": "src", "partition": 0, "offset": 2**70}, "field 'offset' out of range"),
        ("set-rtt", {"broker": 1, "rtt_ms": 2**31}, "field 'rtt_ms' out of range"),
        ("broker-down", {"broker": 2**33}, "field 'broker' out of range"),
        ("push-request-errors", {"api_key": "Produce", "errors": [2**40]}, "error code out of range"),
        ("topic-error", {"topic": "src", "error": -(2**40)}, "error code out of range"),
        ("create-topic", {"topic": "t", "partitions": 1, "replication_factor": 2**31}, "'replication_factor' out of range"),
        ("delete-topic", {"topic": "src\u0000evil"}, "illegal topic name"),
    ],
)
def test_an_out_of_range_integer_is_refused_before_it_reaches_the_c_library(
    broker: DevBroker, cmd: str, fields: dict[str, object], message: str
) -> None:
    with pytest.raises(BrokerControlError, match=message):
        broker.control(cmd, **fields)
    assert broker.control("ping")["pid"] == broker.pid
    assert broker.refresh_state()["topics"] == {"src": 1}


def test_control_connections_are_bounded(broker: DevBroker) -> None:
    held = [connect(broker) for _ in range(CONTROL_MAX_CONNECTIONS)]
    try:
        for s in held:  # each is being served (its thread waits for a line)
            assert exchange(s, b'{"cmd":"ping","token":"' + str(broker.state["token"]).encode() + b'"}\n')["ok"]
        with connect(broker) as extra, extra.makefile("rb") as f:
            assert json.loads(f.readline()) == {"ok": False, "error": "too many control connections; retry"}
    finally:
        for s in held:
            s.close()
    for _ in range(50):  # the slots free up as the handlers see their peers close
        try:
            assert broker.control("ping")["pid"] == broker.pid
            break
        except BrokerControlError:
            continue
    else:
        pytest.fail("the control channel did not recover after its connections closed")


@pytest.mark.parametrize("spec", ["10.0.0.1:9000", "127.evil.example:9000", "[::ffff:10.0.0.1]:9000", "0.0.0.0:1"])
def test_a_control_address_that_is_not_loopback_is_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="loopback only"):
        parse_control(spec)


@pytest.mark.parametrize("spec", ["127.0.0.1:0", "127.8.9.10:0", "[::1]:0", "localhost:0"])
def test_loopback_control_addresses_are_accepted(spec: str) -> None:
    assert parse_control(spec)[0] == "tcp"
