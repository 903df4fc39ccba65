"""The development broker as a real process, driven by real confluent-kafka clients."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from amends_pipeline import cli
from amends_pipeline.kafka.brokerctl import BrokerControl, BrokerControlError
from amends_pipeline.kafka.devbroker import RETENTION_BYTES, DevBroker, has_symbol

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def broker() -> Iterator[DevBroker]:
    b = DevBroker(topics={"src": 2})
    b.start()
    try:
        yield b
    finally:
        b.stop()


def producer(bootstrap: str, **conf: object) -> Producer:
    base: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
        "reconnect.backoff.max.ms": 500,
        "message.timeout.ms": 15000,
    }
    base.update(conf)
    return Producer(base)


def produce(p: Producer, topic: str, partition: int, values: list[bytes]) -> list[KafkaError | int]:
    """Produce and flush; per message, the error or the offset, in produce order."""
    results: list[KafkaError | int | None] = [None] * len(values)

    def report(i: int):
        def cb(err: KafkaError | None, msg: object) -> None:
            results[i] = err if err is not None else msg.offset()  # type: ignore[attr-defined]

        return cb

    for i, v in enumerate(values):
        while True:
            try:
                p.produce(
                    topic, value=v, key=b"k%d" % i, partition=partition, on_delivery=report(i)
                )
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(20) == 0, "messages still in flight after 20 s"
    assert all(r is not None for r in results)
    return results  # type: ignore[return-value]


def consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "devbroker-test",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
            "auto.offset.reset": "error",
        }
    )


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int
) -> list[tuple[int, bytes]]:
    """(offset, value) from ``start`` up to the end of the partition."""
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise KafkaException(msg.error())
            out.append((msg.offset(), msg.value()))
        pytest.fail(f"no end of partition {topic}[{partition}] within 15 s")
    finally:
        c.close()


def watermarks(bootstrap: str, topic: str, partition: int) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def test_start_prints_bootstrap_and_writes_state(tmp_path: Path) -> None:
    with DevBroker(topics={"a": 3, "b": 1}, brokers=3, workdir=tmp_path) as b:
        assert b.stdout_file.read_text() == f"bootstrap={b.bootstrap}\n"
        assert len(b.bootstrap.split(",")) == 3
        state = json.loads(b.state_file.read_text())
        assert state["pid"] == b.pid
        assert state["topics"] == {"a": 3, "b": 1}
        assert state["bootstrap"] == b.bootstrap
        assert BrokerControl.from_state_file(b.state_file).request("ping")["pid"] == b.pid
        assert b.env()["AMENDS_KAFKA_BOOTSTRAP"] == b.bootstrap


def test_idempotent_produce_reads_back_exactly(broker: DevBroker) -> None:
    p = producer(broker.bootstrap)
    values = {part: [b"p%d-%05d" % (part, i) for i in range(500)] for part in (0, 1)}
    for part, vals in values.items():
        assert produce(p, "src", part, vals) == list(range(500))
    for part, vals in values.items():
        assert read_partition(broker.bootstrap, "src", part, 0) == list(enumerate(vals))
        assert watermarks(broker.bootstrap, "src", part) == (0, 500)
    # seek into the middle
    assert read_partition(broker.bootstrap, "src", 1, 490) == [
        (i, values[1][i]) for i in range(490, 500)
    ]


def test_create_topic_via_control(broker: DevBroker) -> None:
    assert broker.create_topic("late", 3)["partitions"] == 3
    assert broker.refresh_state()["topics"] == {"late": 3, "src": 2}
    p = producer(broker.bootstrap)
    assert produce(p, "late", 2, [b"x", b"y"]) == [0, 1]
    assert watermarks(broker.bootstrap, "late", 2) == (0, 2)
    with pytest.raises(BrokerControlError) as e:
        broker.create_topic("late", 1)
    assert e.value.reply["name"] == "TOPIC_ALREADY_EXISTS"
    with pytest.raises(BrokerControlError):
        broker.control("create-topic", topic="bad/name", partitions=1)
    with pytest.raises(BrokerControlError, match="unknown command"):
        broker.control("no-such-command")


@pytest.mark.skipif(not has_symbol("rd_kafka_mock_topic_delete"), reason="no topic delete")
def test_delete_and_recreate_gives_fresh_topic(broker: DevBroker) -> None:
    assert produce(producer(broker.bootstrap), "src", 0, [b"old"] * 10)[-1] == 9
    broker.delete_topic("src")
    assert "src" not in broker.refresh_state()["topics"]
    with pytest.raises(BrokerControlError) as e:
        broker.delete_topic("src")
    assert e.value.reply["name"] == "UNKNOWN_TOPIC_OR_PART"
    broker.create_topic("src", 1)
    assert watermarks(broker.bootstrap, "src", 0) == (0, 0)
    assert produce(producer(broker.bootstrap), "src", 0, [b"new"]) == [0]
    assert read_partition(broker.bootstrap, "src", 0, 0) == [(0, b"new")]


def test_broker_down_fails_produce_and_up_lets_retries_through(broker: DevBroker) -> None:
    assert produce(producer(broker.bootstrap), "src", 0, [b"before"]) == [0]
    broker.broker_down(1)
    assert broker.refresh_state()["down_brokers"] == [1]

    # A short delivery timeout: the message fails while the broker is down.
    short = producer(broker.bootstrap, **{"message.timeout.ms": 1500})
    [result] = produce(short, "src", 0, [b"lost"])
    assert isinstance(result, KafkaError)
    assert result.code() == KafkaError._MSG_TIMED_OUT

    # A patient idempotent producer retries through the outage.
    patient = producer(broker.bootstrap, **{"message.timeout.ms": 20000})
    delivered: list[int] = []
    patient.produce(
        "src", value=b"after", partition=0, on_delivery=lambda err, m: delivered.append(m.offset())
    )
    patient.poll(1.0)
    assert delivered == []
    broker.broker_up(1)
    assert patient.flush(15) == 0
    assert delivered == [1]
    assert read_partition(broker.bootstrap, "src", 0, 0) == [(0, b"before"), (1, b"after")]


def test_push_request_errors_are_retried_through(broker: DevBroker) -> None:
    broker.control("track-requests", enabled=True)
    reply = broker.push_request_errors(
        "Produce", ["NOT_ENOUGH_REPLICAS", "LEADER_NOT_AVAILABLE", KafkaError.REQUEST_TIMED_OUT]
    )
    assert reply["errors"] == ["NOT_ENOUGH_REPLICAS", "LEADER_NOT_AVAILABLE", "REQUEST_TIMED_OUT"]
    p = producer(broker.bootstrap, **{"retry.backoff.ms": 20})
    assert produce(p, "src", 0, [b"a", b"b", b"c"]) == [0, 1, 2]
    counts = broker.control("requests", clear=True)["counts"]
    assert counts.get("Produce", 0) >= 4  # three refused, then accepted
    # Fetch errors: the consumer retries too, and nothing is duplicated.
    broker.push_request_errors("Fetch", ["NOT_LEADER_FOR_PARTITION", "_TRANSPORT"])
    assert read_partition(broker.bootstrap, "src", 0, 0) == [(0, b"a"), (1, b"b"), (2, b"c")]
    with pytest.raises(BrokerControlError, match="unknown api key"):
        broker.push_request_errors("Nope", [1])
    with pytest.raises(BrokerControlError, match="unknown Kafka error"):
        broker.push_request_errors("Produce", ["NO_SUCH_ERROR"])


def test_retention_loss_raises_low_watermark(broker: DevBroker) -> None:
    size = 1024
    count = (RETENTION_BYTES // size) * 3 // 2  # 7.5 MiB of values to one partition
    p = producer(broker.bootstrap, **{"linger.ms": 20})
    offsets = produce(p, "src", 0, [b"%08d" % i + b"x" * (size - 8) for i in range(count)])
    assert offsets == list(range(count))
    low, high = watermarks(broker.bootstrap, "src", 0)
    assert high == count
    assert low > 0, "the oldest messages should have dropped off"
    assert (high - low) * size <= RETENTION_BYTES
    assert (high - low) * size > RETENTION_BYTES // 2
    # Reading from the lost prefix is an error the consumer sees, not a silent skip.
    c = consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition("src", 0, 0)])
        deadline = time.monotonic() + 10
        err = None
        while err is None and time.monotonic() < deadline:
            msg = c.poll(0.5)
            if msg is not None:
                assert msg.error() is not None, f"read offset {msg.offset()} from a lost prefix"
                err = msg.error()
        assert err is not None and err.code() == KafkaError._AUTO_OFFSET_RESET
    finally:
        c.close()
    # The retained suffix reads back intact.
    tail = read_partition(broker.bootstrap, "src", 0, high - 3)
    assert [o for o, _ in tail] == [high - 3, high - 2, high - 1]
    assert tail[-1][1].startswith(b"%08d" % (high - 1))


@pytest.mark.skipif(
    not has_symbol("rd_kafka_mock_partition_delete_records"), reason="no delete records"
)
def test_delete_records_sets_low_watermark(broker: DevBroker) -> None:
    produce(producer(broker.bootstrap), "src", 1, [b"%d" % i for i in range(20)])
    assert broker.delete_records("src", 1, 12)["low_watermark"] == 12
    assert watermarks(broker.bootstrap, "src", 1) == (12, 20)
    assert read_partition(broker.bootstrap, "src", 1, 12)[0] == (12, b"12")
    with pytest.raises(BrokerControlError) as e:
        broker.delete_records("src", 1, 99)
    assert e.value.reply["name"] == "OFFSET_OUT_OF_RANGE"


def test_sigterm_exits_zero_and_removes_state_file(tmp_path: Path) -> None:
    b = DevBroker(topics={"t": 1}, workdir=tmp_path).start()
    assert b.state_file.exists()
    assert b.stop() == 0
    assert not b.state_file.exists()
    assert "stopping (SIGTERM)" in b.log()


def test_amends_broker_entry_point_stops_on_sigint(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    sock = tmp_path / "ctl.sock"
    cmd = [sys.executable, "-m", "amends_pipeline.cli", "broker", "--topic", "x:2"]
    cmd += ["--state-file", str(state), "--control", str(sock)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("bootstrap=127.0.0.1:")
        info = json.loads(state.read_text())
        assert info["control"] == str(sock) and info["topics"] == {"x": 2}
        assert BrokerControl(str(sock)).request("status")["bootstrap"] == line.strip()[10:]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(10) == 0
        assert not state.exists() and not sock.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_stop_command_and_exit_with_parent(tmp_path: Path) -> None:
    b = DevBroker(workdir=tmp_path).start()
    try:
        assert b.control("stop")["stopping"] is True
        assert b.proc is not None and b.proc.wait(10) == 0
    finally:
        b.stop()
    # A broker whose parent exits stops by itself (no leaked processes).
    state = tmp_path / "orphan.json"
    script = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-m', 'amends_pipeline.kafka.devbroker',"
        f" '--exit-with-parent', '--state-file', {str(state)!r}],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        f"while not __import__('os').path.exists({str(state)!r}): time.sleep(0.02)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=20)
    pid = json.loads(state.read_text())["pid"]
    deadline = time.monotonic() + 10
    while state.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if state.exists():
        os.kill(pid, signal.SIGKILL)
        pytest.fail("orphaned broker did not stop")


def test_unusable_arguments_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["broker", "--topic", "bad name:1"],
        ["broker", "--topic", "t:0"],
        ["broker", "--topic", "t:1", "--topic", "t:2"],
        ["broker", "--control", "0.0.0.0:9000"],
        ["broker", "--brokers", "0"],
        ["broker", "--state-file", str(tmp_path / "missing" / "s.json")],
    ):
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("amends broker: ") and err.count("\n") == 1, err


def test_refuses_state_file_of_a_running_broker(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with DevBroker(workdir=tmp_path) as b:
        assert cli.main(["broker", "--state-file", str(b.state_file)]) == 2
        assert "a broker is running there" in capsys.readouterr().err
        assert b.running()
