"""A real Apache Kafka broker for development and tests: fetch, format, start, stop.

The broker is the pinned ``org.apache.kafka:kafka_2.13`` from Maven Central,
fetched once with ``mvn`` into a git-ignored cache (``var/kafka/<version>/libs``
in the checkout, or ``AMENDS_KAFKA_CACHE``) and run with the installed Java
(17+) as a single KRaft node that is both broker and controller, listening on
loopback at free ports. Storage is formatted in a fresh folder per broker.

This is the same broker users run in production, so tests see real topic IDs,
log segments deleted by retention, compaction, transactions and a process that
really dies. librdkafka's mock cluster (``devbroker``) remains for faults a real
broker cannot produce on demand (injected request errors).

Nothing here is used by the pipeline itself: the roles only ever see a
bootstrap address.
"""

from __future__ import annotations

import base64
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

KAFKA_VERSION = "4.4.0"
ARTIFACT = f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}"
LOG4J_VERSION = "2.25.5"
ROOT = Path(__file__).resolve().parents[2]

_POM = f"""<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by amends: the Kafka broker's runtime class path, fetched from Maven Central. -->
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>amends.local</groupId>
  <artifactId>kafka-broker-classpath</artifactId>
  <version>{KAFKA_VERSION}</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{KAFKA_VERSION}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{LOG4J_VERSION}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """\
status = error
appender.file.type = File
appender.file.name = file
appender.file.fileName = ${sys:kafka.logs.dir}/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.org.name = org.apache.kafka
logger.org.level = WARN
"""


class RealBrokerError(Exception):
    """The real broker could not be fetched, formatted or started; the message says why."""


def cache_dir() -> Path:
    """Where the broker's jars live: ``AMENDS_KAFKA_CACHE`` or ``var/kafka/<version>``."""
    env = os.environ.get("AMENDS_KAFKA_CACHE")
    return Path(env) if env else ROOT / "var" / "kafka" / KAFKA_VERSION


def java_binary() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        msg = "java is not installed: Kafka 4 needs Java 17 or newer on PATH (or JAVA_HOME)"
        raise RealBrokerError(msg)
    return found


def fetch(cache: Path | None = None, *, quiet: bool = True) -> Path:
    """The folder of broker jars, fetched with ``mvn`` on first use; safe to call concurrently."""
    cache = cache or cache_dir()
    libs = cache / "libs"
    stamp = cache / "complete"
    if stamp.exists():
        return libs
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists():
            return libs
        mvn = shutil.which("mvn")
        if not mvn:
            msg = "mvn is not installed: it fetches the Kafka broker (apt-get install maven)"
            raise RealBrokerError(msg)
        (cache / "pom.xml").write_text(_POM)
        shutil.rmtree(libs, ignore_errors=True)
        cmd = [
            mvn, "-B", "-f", str(cache / "pom.xml"), "dependency:copy-dependencies",
            f"-DoutputDirectory={libs}", "-DincludeScope=runtime",
        ]
        if quiet:
            cmd.insert(1, "-q")
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            tail = " ".join((r.stdout + r.stderr).split())[-400:]
            msg = f"mvn could not fetch {ARTIFACT}: {tail}"
            raise RealBrokerError(msg)
        jars = sorted(p.name for p in libs.glob("*.jar"))
        if not any(j.startswith(f"kafka_2.13-{KAFKA_VERSION}") for j in jars):
            msg = f"mvn finished but {libs} holds no kafka_2.13-{KAFKA_VERSION}.jar"
            raise RealBrokerError(msg)
        stamp.write_text("\n".join(jars) + "\n")
    return libs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_id() -> str:
    """A random Kafka UUID in its base64url form (never starting with '-', as Kafka's own)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


DEFAULT_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    # Tests shorten retention and compaction; let the cleaner and the retention
    # check run often enough for that to be observable within seconds.
    "log.retention.check.interval.ms": "1000",
    "log.cleaner.backoff.ms": "500",
    "log.segment.delete.delay.ms": "0",
    "file.delete.delay.ms": "0",
    "log.cleaner.dedupe.buffer.size": "8388608",
}


class RealBroker:
    """One single-node KRaft Kafka process on loopback; a context manager.

    ``restart()`` starts a new process on the same ports and the same data, so a
    SIGKILL or SIGTERM followed by a restart is what a real outage looks like.
    """

    def __init__(
        self,
        workdir: Path,
        settings: Mapping[str, str] | None = None,
        *,
        port: int | None = None,
        heap: str = "512m",
        listeners: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = Path(workdir)
        self.settings = {**DEFAULT_SETTINGS, **(settings or {})}
        self._ports_chosen = port is None and not listeners
        """Whether every port was picked here, so a lost race for one may pick again."""
        self._started = False
        self.port = port or free_port()
        self.controller_port = free_port()
        self.listeners = {name.upper(): proto for name, proto in (listeners or {}).items()}
        """Extra client listeners, name -> security protocol (e.g. ``{"SASL": "SASL_PLAINTEXT"}``).

        The broker's own PLAINTEXT listener stays (inter-broker traffic and
        ``admin()`` use it); a test points its clients at ``address(name)``.
        """
        self.listener_ports = {name: free_port() for name in self.listeners}
        self.heap = heap
        self.proc: subprocess.Popen[bytes] | None = None
        self.libs: Path | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def address(self, listener: str) -> str:
        """The bootstrap address of an extra listener given to the constructor."""
        return f"127.0.0.1:{self.listener_ports[listener.upper()]}"

    @property
    def data_dir(self) -> Path:
        return self.workdir / "data"

    @property
    def log_file(self) -> Path:
        return self.workdir / "logs" / "server.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = dict(os.environ if base is None else base)
        env["AMENDS_KAFKA_BOOTSTRAP"] = self.bootstrap
        return env

    def _properties(self) -> str:
        extra = [f"{n}://127.0.0.1:{self.listener_ports[n]}" for n in self.listeners]
        protocols = "".join(f",{n}:{proto}" for n, proto in self.listeners.items())
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": ",".join([
                f"PLAINTEXT://127.0.0.1:{self.port}",
                f"CONTROLLER://127.0.0.1:{self.controller_port}", *extra,
            ]),
            "advertised.listeners": ",".join([f"PLAINTEXT://127.0.0.1:{self.port}", *extra]),
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": f"PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{protocols}",
            "log.dirs": str(self.data_dir),
            **self.settings,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, main: str, *args: str, heap: str = "256m") -> list[str]:
        assert self.libs is not None
        return [
            java_binary(), f"-Xmx{heap}", "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.workdir / 'logs'}",
            f"-Dlog4j2.configurationFile={self.workdir / 'log4j2.properties'}",
            "-cp", f"{self.libs}/*", main, *args,
        ]

    def format(self) -> None:
        """Write the configuration and format fresh KRaft storage (once per broker)."""
        self.libs = fetch()
        self.workdir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "logs").mkdir(exist_ok=True)
        (self.workdir / "server.properties").write_text(self._properties())
        (self.workdir / "log4j2.properties").write_text(_LOG4J2)
        if (self.data_dir / "meta.properties").exists():
            return
        r = subprocess.run(
            self._java(
                "kafka.tools.StorageTool", "format", "--ignore-formatted",
                "-t", _cluster_id(), "-c", str(self.workdir / "server.properties"),
            ),
            capture_output=True, text=True, check=False, timeout=120,
        )
        if r.returncode != 0:
            tail = " ".join((r.stdout + r.stderr).split())[-400:]
            msg = f"formatting Kafka storage in {self.data_dir} failed: {tail}"
            raise RealBrokerError(msg)

    BIND_ATTEMPTS = 3
    """How often a first start picks fresh ports after losing one to another process."""

    def start(self, timeout: float = 60.0) -> RealBroker:
        """Start the broker and wait until it answers.

        Free ports are found by binding port 0 and releasing it, so on a busy
        machine another process can take one before the broker binds it. The
        first start of a broker whose ports were all picked here then picks
        fresh ones and tries again; a restart keeps its ports (clients hold them).
        """
        attempt = 0
        while True:
            attempt += 1
            logs = [self.workdir / "logs" / "stdout.log", self.log_file]
            seen = [f.stat().st_size if f.exists() else 0 for f in logs]
            try:
                self._start_once(timeout)
            except RealBrokerError as e:
                lost_port = any(map(self._bind_failed, logs, seen))
                if lost_port and "Address already in use" not in str(e):
                    e.args = (f"{e}: a port was already in use (java.net.BindException)",)
                if self._started or not self._ports_chosen or not lost_port or attempt == self.BIND_ATTEMPTS:
                    raise
                self.port, self.controller_port = free_port(), free_port()
                (self.workdir / "server.properties").write_text(self._properties())
                continue
            self._started = True
            return self

    @staticmethod
    def _bind_failed(log: Path, since: int) -> bool:
        """Whether the broker's output after byte ``since`` reports a port it could not bind."""
        try:
            with log.open("rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
        except OSError:
            return False
        return "java.net.BindException" in text or "Address already in use" in text

    def _start_once(self, timeout: float) -> None:
        if self.libs is None:
            self.format()
        out = open(self.workdir / "logs" / "stdout.log", "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            self._java("kafka.Kafka", str(self.workdir / "server.properties"), heap=self.heap),
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        out.close()
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Block until the broker answers metadata requests (or its process died)."""
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                msg = f"the Kafka broker exited with {self.proc.returncode} while starting: {self.log_tail()}"
                raise RealBrokerError(msg)
            try:
                md = admin.list_topics(timeout=1.0)
                if md.brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet; retried until the deadline
                pass
            if time.monotonic() > deadline:
                msg = (
                    f"the Kafka broker did not answer on {self.bootstrap} within {timeout:.0f}s:"
                    f" {self.log_tail()}"
                )
                raise RealBrokerError(msg)
            time.sleep(0.2)

    def log_tail(self, chars: int = 600) -> str:
        parts = []
        for f in (self.workdir / "logs" / "stdout.log", self.log_file):
            try:
                parts.append(f.read_text(errors="replace")[-chars:])
            except OSError:
                pass
        return " | ".join(" ".join(p.split()) for p in parts if p.strip()) or "(no log)"

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int | None:
        """Send ``sig`` and wait for the process; SIGKILL if it does not end in time."""
        p = self.proc
        if p is None or p.poll() is not None:
            return None if p is None else p.returncode
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            pass
        try:
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            return p.wait(10)

    def kill(self) -> int | None:
        return self.stop(signal.SIGKILL)

    def restart(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> RealBroker:
        self.stop(sig)
        return self.start(timeout)

    def admin(self, **extra: Any) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3, **extra})

    def create_topic(
        self, topic: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # keep a reference: a destroyed client fails its futures
        fut = admin.create_topics(
            [NewTopic(topic, partitions, 1, config=dict(config or {}))], request_timeout=15.0
        )[topic]
        fut.result(timeout=30.0)

    def topic_id(self, topic: str) -> str:
        """The topic's ID as the broker reports it (changes when a topic is recreated)."""
        from confluent_kafka import TopicCollection

        admin = self.admin()
        desc = admin.describe_topics(TopicCollection([topic]), request_timeout=15.0)[topic]
        return str(desc.result(timeout=30.0).topic_id)

    def delete_topic(self, topic: str, wait: float = 30.0) -> None:
        """Delete a topic and wait until the broker no longer lists it."""
        admin = self.admin()
        admin.delete_topics([topic], request_timeout=15.0)[topic].result(timeout=30.0)
        deadline = time.monotonic() + wait
        while topic in admin.list_topics(timeout=5.0).topics:
            if time.monotonic() > deadline:
                msg = f"topic {topic!r} still listed {wait:.0f}s after its deletion"
                raise RealBrokerError(msg)
            time.sleep(0.2)

    def __enter__(self) -> RealBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
