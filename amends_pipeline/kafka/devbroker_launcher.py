"""Starting a development broker as a child process, and talking to it.

``DevBroker`` runs ``python -m amends_pipeline.kafka.devbroker`` (the broker
process, ``devbroker``), waits for its state file, sends control commands over
``brokerctl`` and stops it; tests, benchmarks and ``amends demo`` use it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from amends_pipeline.kafka import BOOTSTRAP_ENV
from amends_pipeline.kafka.brokerctl import BrokerControl


class DevBrokerError(Exception):
    """The broker process did not start or did not stop as expected."""


class DevBroker:
    """A development broker in a separate process, for tests and tools.

    ::

        with DevBroker(topics={"source": 4}) as broker:
            Producer({"bootstrap.servers": broker.bootstrap, ...})
            broker.control("broker-down", broker=1)

    The process is ``python -m amends_pipeline.kafka.devbroker``; readiness is
    its state file appearing; ``stop()`` sends SIGTERM (SIGKILL after a
    timeout) and returns the exit code. The process also stops by itself if
    the process that started it exits.
    """

    def __init__(
        self,
        topics: Mapping[str, int] | Iterable[tuple[str, int]] = (),
        brokers: int = 1,
        *,
        control: str | None = None,
        workdir: str | Path | None = None,
        python: str | None = None,
        startup_timeout: float = 20.0,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.topics = dict(topics.items() if isinstance(topics, Mapping) else topics)
        self.brokers = brokers
        self._control_spec = control
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.python = python or sys.executable
        self.startup_timeout = startup_timeout
        self.extra_env = dict(extra_env or {})
        self.proc: subprocess.Popen[bytes] | None = None
        self.state: dict[str, Any] = {}
        self.returncode: int | None = None

    # -- paths
    @property
    def state_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "broker.json"

    @property
    def log_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "broker.log"

    @property
    def stdout_file(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "broker.out"

    # -- facts of the running broker
    @property
    def bootstrap(self) -> str:
        return str(self.state["bootstrap"])

    @property
    def control_address(self) -> str:
        return str(self.state["control"])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment for child processes with AMENDS_KAFKA_BOOTSTRAP set."""
        env = dict(os.environ if base is None else base)
        env[BOOTSTRAP_ENV] = self.bootstrap
        return env

    def command(self) -> list[str]:
        cmd = [self.python, "-m", "amends_pipeline.kafka.devbroker", "--exit-with-parent"]
        cmd += ["--brokers", str(self.brokers), "--state-file", str(self.state_file)]
        for name, partitions in self.topics.items():
            cmd += ["--topic", f"{name}:{partitions}"]
        if self._control_spec is not None:
            cmd += ["--control", self._control_spec]
        return cmd

    def log(self) -> str:
        try:
            return self.log_file.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    # -- lifecycle
    def start(self) -> DevBroker:
        if self.proc is not None:
            msg = "already started"
            raise DevBrokerError(msg)
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="amends-broker-"))
        env = dict(os.environ)
        env.update(self.extra_env)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.stdout_file, "wb") as out, open(self.log_file, "wb") as err:
            self.proc = subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env
            )
        deadline = time.monotonic() + self.startup_timeout
        try:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self.returncode = code
                    msg = f"broker exited with {code} before it was ready:\n{self.log()}"
                    raise DevBrokerError(msg)
                state = self._read_state()
                if state is not None and state.get("pid") == self.proc.pid:
                    self.state = state
                    return self
                if time.monotonic() > deadline:
                    msg = f"broker not ready after {self.startup_timeout:.0f}s:\n{self.log()}"
                    raise DevBrokerError(msg)
                time.sleep(0.02)
        except BaseException:
            self.stop()
            raise

    def _read_state(self) -> dict[str, Any] | None:
        try:
            state: dict[str, Any] = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return state

    def refresh_state(self) -> dict[str, Any]:
        state = self._read_state()
        if state is not None:
            self.state = state
        return self.state

    def control(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one control command; raises BrokerControlError unless it succeeded."""
        return BrokerControl(self.control_address, token=self.state.get("token")).request(
            cmd, **fields
        )

    def create_topic(self, topic: str, partitions: int = 1) -> dict[str, Any]:
        return self.control("create-topic", topic=topic, partitions=partitions)

    def delete_topic(self, topic: str) -> dict[str, Any]:
        return self.control("delete-topic", topic=topic)

    def broker_down(self, broker: int = -1) -> dict[str, Any]:
        return self.control("broker-down", broker=broker)

    def broker_up(self, broker: int = -1) -> dict[str, Any]:
        return self.control("broker-up", broker=broker)

    def push_request_errors(self, api: int | str, errors: Sequence[int | str]) -> dict[str, Any]:
        return self.control("push-request-errors", api_key=api, errors=list(errors))

    def delete_records(self, topic: str, partition: int, offset: int) -> dict[str, Any]:
        return self.control("delete-records", topic=topic, partition=partition, offset=offset)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; return the exit code. Idempotent."""
        proc = self.proc
        if proc is not None and self.returncode is None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            self.returncode = proc.returncode
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.returncode

    def __enter__(self) -> DevBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
