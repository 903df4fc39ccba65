"""``amends kafka``: fetch, run, start and stop a real single-node Apache Kafka broker."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from amends_pipeline.errors import UsageError
from amends_pipeline.kafka.devbroker import parse_topic
from amends_pipeline.kafka.realbroker import ARTIFACT, RealBroker, RealBrokerError, cache_dir, fetch

DESCRIPTION = f"""\
A real Apache Kafka broker ({ARTIFACT}) for development and tests, run with
the installed Java as one KRaft node (broker and controller) on loopback.

  fetch            download the broker's jars with mvn into the cache
                   ({cache_dir()}; AMENDS_KAFKA_CACHE overrides)
  run              run a broker in the foreground; prints bootstrap=HOST:PORT,
                   stops on SIGTERM or SIGINT (exit 0)
  start --dir D    start a broker in the background with its data and logs in D;
                   prints bootstrap=HOST:PORT and writes D/state.json
  stop --dir D     stop the broker started in D (by its PID)
  address --dir D  print the bootstrap address of the broker running from D,
                   e.g. export AMENDS_KAFKA_BOOTSTRAP=$(amends kafka address --dir D)

Export the printed address as AMENDS_KAFKA_BOOTSTRAP.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "kafka",
        help="fetch, run, start or stop a real Apache Kafka broker on loopback",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["fetch", "run", "start", "stop", "address"])
    parser.add_argument("--dir", type=Path, help="data and log folder (default: a new temporary folder)")
    parser.add_argument("--port", type=int, help="listener port (default: a free one)")
    parser.add_argument(
        "--topic", action="append", default=[], metavar="NAME:N", help="create a topic with N partitions"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="an extra server.properties setting"
    )
    parser.set_defaults(func=run)


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for p in pairs:
        k, sep, v = p.partition("=")
        if not sep or not k.strip():
            msg = f"--set wants KEY=VALUE, got {p!r}"
            raise UsageError(msg)
        out[k.strip()] = v.strip()
    return out


def _state_path(d: Path) -> Path:
    return d / "state.json"


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except RealBrokerError as e:
        print(f"amends kafka: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if args.action == "fetch":
        libs = fetch(quiet=False)
        print(f"libs={libs}")
        return 0
    if args.action == "stop":
        if args.dir is None:
            msg = "stop needs --dir, the folder given to start"
            raise UsageError(msg)
        return _stop(args.dir)
    if args.action == "address":
        if args.dir is None:
            msg = "address needs --dir, the folder given to start"
            raise UsageError(msg)
        return _address(args.dir)
    topics = [parse_topic(t) for t in args.topic]
    settings = _settings(args.set)
    workdir = args.dir or Path(tempfile.mkdtemp(prefix="amends-kafka-"))
    if args.action == "start":
        return _start_background(workdir, args)
    broker = RealBroker(workdir, settings, port=args.port)
    stopping = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    broker.start()
    try:
        for name, n in topics:
            broker.create_topic(name, n)
        _state_path(workdir).write_text(
            json.dumps({"bootstrap": broker.bootstrap, "pid": os.getpid(), "broker_pid": broker.pid})
        )
        print(f"bootstrap={broker.bootstrap}", flush=True)
        print(f"dir={workdir}", flush=True)
        while not stopping.wait(0.5):
            if broker.proc is not None and broker.proc.poll() is not None:
                print(f"amends kafka: the broker exited with {broker.proc.returncode}", file=sys.stderr)
                return 1
    finally:
        broker.stop()
        _state_path(workdir).unlink(missing_ok=True)
    return 0


def _start_background(workdir: Path, args: argparse.Namespace) -> int:
    import subprocess

    workdir.mkdir(parents=True, exist_ok=True)
    state = _state_path(workdir)
    state.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "amends_pipeline.cli", "kafka", "run", "--dir", str(workdir)]
    if args.port:
        cmd += ["--port", str(args.port)]
    for t in args.topic:
        cmd += ["--topic", t]
    for s in args.set:
        cmd += ["--set", s]
    log = open(workdir / "amends-kafka.log", "ab")  # noqa: SIM115 - handed to the child
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    log.close()
    deadline = time.monotonic() + 120
    while not state.exists():
        if proc.poll() is not None:
            tail = (workdir / "amends-kafka.log").read_text(errors="replace")[-600:]
            print(f"amends kafka: the broker did not start: {' '.join(tail.split())}", file=sys.stderr)
            return 1
        if time.monotonic() > deadline:
            proc.terminate()
            print("amends kafka: the broker did not start within 120s", file=sys.stderr)
            return 1
        time.sleep(0.2)
    info = json.loads(state.read_text())
    print(f"bootstrap={info['bootstrap']}")
    print(f"dir={workdir}")
    return 0


def _address(workdir: Path) -> int:
    """Print the bootstrap address of the broker running from ``workdir`` (for shell capture)."""
    state = _state_path(workdir)
    try:
        info = json.loads(state.read_text())
        pid = int(info["pid"])
        address = str(info["bootstrap"])
    except (OSError, ValueError, KeyError, TypeError):
        print(f"amends kafka: no running broker in {workdir}: start one with"
              f" `amends kafka start --dir {workdir}`", file=sys.stderr)
        return 1
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        print(f"amends kafka: the broker of {workdir} (process {pid}) is not running: start it with"
              f" `amends kafka start --dir {workdir}`", file=sys.stderr)
        return 1
    print(address)
    return 0


def _stop(workdir: Path) -> int:
    state = _state_path(workdir)
    if not state.exists():
        print(f"amends kafka: no broker state in {workdir}", file=sys.stderr)
        return 1
    pid = int(json.loads(state.read_text())["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state.unlink(missing_ok=True)
        return 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            state.unlink(missing_ok=True)
            return 0
        time.sleep(0.2)
    print(f"amends kafka: process {pid} did not stop within 60s", file=sys.stderr)
    return 1
