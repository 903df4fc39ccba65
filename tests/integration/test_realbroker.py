"""The real Apache Kafka broker that development and tests use: start, answer, stop, restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from amends_pipeline.kafka.realbroker import RealBroker, fetch
from amends_pipeline.kafka.topics import Reader, Writer

AMENDS = str(Path(sys.executable).with_name("amends"))


def _roundtrip(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    w = Writer(bootstrap)
    for v in values:
        w.produce(topic, 0, v, None)
    w.flush()
    with Reader(bootstrap, topic) as r:
        high = r.watermarks(0).high
        return [m.value() for m in r.messages(0, 0, high)]


def test_fetch_is_done_once_and_reused() -> None:
    first = fetch()
    assert (first.parent / "complete").exists()
    assert fetch() == first
    assert any(p.name.startswith("kafka_2.13-4.4.0") for p in first.glob("*.jar"))


def test_the_shared_broker_stores_and_serves_messages(kafka_broker: RealBroker, topic_name: Callable[[str], str]) -> None:
    t = topic_name("t")
    kafka_broker.create_topic(t, 1)
    assert _roundtrip(kafka_broker.bootstrap, t, [b"a", b"b"]) == [b"a", b"b"]


@pytest.mark.slow
def test_a_killed_broker_restarts_on_the_same_port_with_its_data_and_topic_id(
    make_broker: Callable[..., RealBroker],
) -> None:
    b = make_broker()
    b.create_topic("kept", 1)
    assert _roundtrip(b.bootstrap, "kept", [b"x"]) == [b"x"]
    before = b.topic_id("kept")
    assert b.kill() == -signal.SIGKILL
    b.start()
    assert b.topic_id("kept") == before
    assert _roundtrip(b.bootstrap, "kept", [b"y"]) == [b"x", b"y"]


@pytest.mark.slow
def test_amends_kafka_start_prints_a_bootstrap_and_stop_ends_the_broker(tmp_path: Path) -> None:
    d = tmp_path / "k"
    r = subprocess.run(
        [AMENDS, "kafka", "start", "--dir", str(d), "--topic", "cli-topic:2"],
        capture_output=True, text=True, timeout=180, check=False,
    )
    assert r.returncode == 0, r.stderr
    bootstrap = next(x.split("=", 1)[1] for x in r.stdout.splitlines() if x.startswith("bootstrap="))
    try:
        addr = subprocess.run(
            [AMENDS, "kafka", "address", "--dir", str(d)], capture_output=True, text=True, timeout=60, check=False
        )
        assert (addr.returncode, addr.stdout) == (0, bootstrap + "\n"), addr.stderr
        with Reader(bootstrap, "cli-topic") as rd:
            assert rd.partitions() == 2
    finally:
        stop = subprocess.run(
            [AMENDS, "kafka", "stop", "--dir", str(d)], capture_output=True, text=True, timeout=120, check=False
        )
    assert stop.returncode == 0, stop.stderr
    pids = subprocess.run(["pgrep", "-f", str(d / "server.properties")], capture_output=True, text=True, check=False)
    assert pids.stdout.strip() == "", f"broker still running: {pids.stdout}"
    assert not (d / "state.json").exists()
    gone = subprocess.run(
        [AMENDS, "kafka", "address", "--dir", str(d)], capture_output=True, text=True, timeout=60, check=False
    )
    assert gone.returncode == 1 and gone.stdout == "" and "no running broker" in gone.stderr


def test_amends_kafka_stop_without_a_started_broker_says_so(tmp_path: Path) -> None:
    r = subprocess.run(
        [AMENDS, "kafka", "stop", "--dir", str(tmp_path)], capture_output=True, text=True, timeout=60,
        check=False, env=dict(os.environ),
    )
    assert r.returncode == 1 and "no broker state" in r.stderr


def test_a_first_start_that_loses_its_port_to_another_process_picks_fresh_ports(tmp_path: Path) -> None:
    import socket

    broker = RealBroker(tmp_path / "kafka", heap="256m")
    taken = broker.port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        squatter.bind(("127.0.0.1", taken))  # another process took the port after it was picked
        squatter.listen()
        try:
            broker.start()
            assert broker.port != taken
            from confluent_kafka.admin import AdminClient

            md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
            assert [b.port for b in md.brokers.values()] == [broker.port]  # it answers, on the new port
        finally:
            broker.kill()


def test_a_broker_given_its_port_does_not_move_when_the_port_is_taken(tmp_path: Path) -> None:
    import socket

    import pytest

    from amends_pipeline.kafka.realbroker import RealBrokerError, free_port

    port = free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        broker = RealBroker(tmp_path / "kafka", port=port, heap="256m")
        try:
            with pytest.raises(RealBrokerError, match="Address already in use|BindException"):
                broker.start()
        finally:
            broker.kill()
