"""An unreachable Kafka or PostgreSQL ends every command fast, with exit 2 and one line naming it.

Real processes against the real broker and server: the namespace is
provisioned, loaded and processed first (so that every command meets live
state), then each command runs with ``AMENDS_KAFKA_BOOTSTRAP`` or
``AMENDS_PG_DSN`` pointing at a loopback port where nothing listens (a bound,
never listening socket: connection refused), at a port that accepts
connections and never answers (the timeouts must bound the wait), or at a
broker that was stopped. Each must exit with exactly the code stated, say why
in at most three lines on stderr (one, plus a progress line for ``rebuild``)
naming the address, and never show a password. How long each took is printed
(run with ``-s``) for docs/operations.md; no duration is asserted.

``amends view`` reads Kafka only for the lag of each partition: with Kafka
unreachable it still shows the view, marks every partition "lag unknown" with
the reason, and exits 0 (``--certified`` exits 1); that is
tests/e2e/test_view_staleness.py's subject, measured here too.

``--verbose`` (before the command) prints librdkafka's own lines, every
reconnection attempt, redacted; ``AMENDS_DEBUG=1`` alone shows one line per
endpoint and distinct failure.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e.conftest import AMENDS, FIXTURE, Pipeline

PG_PASSWORD = "unreach-pw-7d1f0c"
SASL_PASSWORD = "unreach-sasl-93be2a"
TIMINGS: list[tuple[str, str, int, int, float]] = []
"""(command, endpoint, exit code, stderr lines, seconds) of every run, printed at the end."""


@pytest.fixture(scope="module", autouse=True)
def timing_table() -> Iterator[None]:
    yield
    if TIMINGS:
        print("\n| command | endpoint | exit | stderr lines | seconds |")
        print("| --- | --- | --- | --- | --- |")
        for cmd, endpoint, code, lines, seconds in TIMINGS:
            print(f"| `amends {cmd}` | {endpoint} | {code} | {lines} | {seconds:.1f} |")


@contextmanager
def refused_port() -> Iterator[int]:
    """A loopback port that is bound but never listens: every connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@contextmanager
def silent_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


def commands(p: Pipeline, fresh_config: Path) -> dict[str, tuple[str, ...]]:
    """Every command that talks to PostgreSQL or Kafka, as a user runs it."""
    cfg = str(p.config)
    return {
        "load": ("load", "--config", cfg, str(FIXTURE / "correction.jsonl")),
        "verify": ("verify", "--config", cfg),
        "view": ("view", "--config", cfg),
        "provision": ("provision", "--config", str(fresh_config)),
        "replay": ("replay", "--config", cfg, "--partition", "0", "--from", "0", "--until", "1"),
        "rebuild": ("rebuild", "--config", cfg, "--new-namespace", "unreach-rebuilt",
                    "--output-topic", "unreach-rebuilt-output"),
        "role worker": ("role", "worker", "--config", cfg),
        "role relay": ("role", "relay", "--config", cfg),
        "role view": ("role", "view", "--config", cfg),
    }


def processed(p: Pipeline) -> Path:
    """Provision, load and process the worked example; a second, unprovisioned namespace's config."""
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    p.roles_until_idle()
    r = p.verify()
    assert r.returncode == 0, r.stdout + r.stderr
    cfg = json.loads((FIXTURE / "config.json").read_text())
    cfg["namespace"] = "unreach-fresh"
    fresh = p.tmp / "fresh-config.json"
    fresh.write_text(json.dumps(cfg))
    return fresh


def run(env: dict[str, str], args: tuple[str, ...], endpoint: str) -> subprocess.CompletedProcess[str]:
    start = time.monotonic()
    r = subprocess.run([AMENDS, *args], env=env, capture_output=True, text=True, timeout=180, check=False)
    seconds = time.monotonic() - start
    words = [a for a in args if not a.startswith("--")]
    name = " ".join(words[:2]) if words[0] == "role" else words[0]
    if args[0] == "--verbose":
        name = f"--verbose {name}"
    TIMINGS.append((name, endpoint, r.returncode, len(r.stderr.splitlines()), seconds))
    return r


def assert_fails_in_one_line(
    r: subprocess.CompletedProcess[str], args: tuple[str, ...], address: str, *, code: int = 2
) -> str:
    """Exit ``code``, at most three stderr lines, the last naming ``address``; no password anywhere."""
    out = r.stdout + r.stderr
    what = f"amends {' '.join(args)}"
    assert PG_PASSWORD not in out and SASL_PASSWORD not in out, f"{what} showed a password:\n{out}"
    assert r.returncode == code, f"{what} -> {r.returncode}, expected {code}:\n{out[-3000:]}"
    lines = r.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 3, f"{what}: {len(lines)} lines on stderr:\n{r.stderr[-3000:]}"
    assert "Traceback" not in out, out
    assert address in lines[-1], f"{what}: the last line does not name {address}:\n{r.stderr}"
    return lines[-1]


@pytest.mark.slow
def test_an_unreachable_kafka_ends_every_command_with_exit_2_in_one_line(pipeline: Pipeline) -> None:
    p = pipeline
    fresh = processed(p)
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        env = {**p.env, "AMENDS_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
               "AMENDS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "AMENDS_KAFKA_SASL_MECHANISM": "PLAIN",
               "AMENDS_KAFKA_SASL_USERNAME": "amends", "AMENDS_KAFKA_BOOTSTRAP": address}
        for name, args in commands(p, fresh).items():
            r = run(env, args, "Kafka: connection refused")
            if name == "view":
                # The view is in PostgreSQL: shown, each partition marked with why its lag is unknown.
                assert r.returncode == 0 and r.stderr == "", r.stdout + r.stderr
                assert f"lag unknown: the output topic could not be read: cannot reach Kafka at {address}" in r.stdout
                continue
            line = assert_fails_in_one_line(r, args, address)
            assert f"cannot reach Kafka at {address} (AMENDS_KAFKA_BOOTSTRAP): connection refused" in line, line
            assert "start the broker or point AMENDS_KAFKA_BOOTSTRAP at the address it listens on" in line


@pytest.mark.slow
def test_an_unreachable_postgres_ends_every_command_with_exit_2_in_one_line(pipeline: Pipeline) -> None:
    p = pipeline
    fresh = processed(p)
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        env = {**p.env, "AMENDS_PG_DSN": f"postgresql://amends:{PG_PASSWORD}@{address}/amends"}
        for args in commands(p, fresh).values():
            line = assert_fails_in_one_line(run(env, args, "PostgreSQL: connection refused"), args, address)
            assert f"PostgreSQL {address}/amends: cannot connect: connection refused" in line, line
            assert "start PostgreSQL or point AMENDS_PG_DSN at a running server" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("args", [("verify",), ("role", "worker")], ids=["verify", "role-worker"])
def test_an_address_that_never_answers_is_given_up_on_within_the_connect_timeouts(
    pipeline: Pipeline, args: tuple[str, ...]
) -> None:
    """Nothing refuses, nothing answers: the connect timeouts bound the wait for both services."""
    p = pipeline
    processed(p)
    argv = (*args, "--config", str(p.config))
    with silent_port() as port:
        address = f"127.0.0.1:{port}"
        env = {**p.env, "AMENDS_KAFKA_BOOTSTRAP": address}
        line = assert_fails_in_one_line(run(env, argv, "Kafka: no answer"), argv, address)
        assert f"cannot reach Kafka at {address} (AMENDS_KAFKA_BOOTSTRAP): no answer" in line, line
        env = {**p.env, "AMENDS_PG_DSN": f"postgresql://amends:{PG_PASSWORD}@{address}/amends"}
        line = assert_fails_in_one_line(run(env, argv, "PostgreSQL: no answer"), argv, address)
        assert f"PostgreSQL {address}/amends: cannot connect: no answer within 5s" in line, line


@pytest.mark.slow
def test_a_stopped_broker_ends_new_commands_fast_while_a_running_role_rides_it_out_quietly(
    pipeline_on: Callable[..., Pipeline],
) -> None:
    """The broker the namespace was provisioned on stops: a running worker retries with one line per
    failure and no client-library chatter; commands started now fail in one line with exit 2."""
    p = pipeline_on()
    p.provision()
    p.load(FIXTURE / "before.jsonl")
    address = p.broker.bootstrap
    log = p.tmp / "worker.log"
    with open(log, "wb") as err:
        worker = subprocess.Popen([AMENDS, "role", "worker", "--config", str(p.config)],
                                  env=p.env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while "serving partitions" not in log.read_text() and time.monotonic() < deadline:
            assert worker.poll() is None, log.read_text()
            time.sleep(0.2)
        p.broker.stop(signal.SIGKILL)
        for args in (("load", "--config", str(p.config), str(FIXTURE / "correction.jsonl")),
                     ("verify", "--config", str(p.config)),
                     ("role", "relay", "--config", str(p.config))):
            r = run(p.env, args, "Kafka: broker stopped")
            line = assert_fails_in_one_line(r, args, address)
            assert f"cannot reach Kafka at {address}" in line, line
        assert worker.poll() is None, f"the worker exited during the outage:\n{log.read_text()}"
        p.broker.start()
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(60)
    text = log.read_text()
    assert code == 0, text
    lines = text.splitlines()
    assert all(line.startswith("amends worker: ") for line in lines), text
    assert len([line for line in lines if "transient failure" in line]) <= 9, text


@pytest.mark.slow
def test_verbose_shows_every_client_log_line_redacted_and_debug_only_a_summary(pipeline: Pipeline) -> None:
    p = pipeline
    processed(p)
    with refused_port() as port:
        address = f"127.0.0.1:{port}"
        env = {**p.env, "AMENDS_KAFKA_BOOTSTRAP": address, "AMENDS_KAFKA_SASL_PASSWORD": SASL_PASSWORD,
               "AMENDS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "AMENDS_KAFKA_SASL_MECHANISM": "PLAIN",
               "AMENDS_KAFKA_SASL_USERNAME": "amends",
               "AMENDS_PG_DSN": p.env["AMENDS_PG_DSN"]}
        verify = ("verify", "--config", str(p.config))

        quiet = run(env, verify, "Kafka: connection refused")
        verbose = run(env, ("--verbose", *verify), "Kafka: connection refused, --verbose")
        debug = run({**env, "AMENDS_DEBUG": "1"}, verify, "Kafka: connection refused, AMENDS_DEBUG=1")
    for r in (quiet, verbose, debug):
        out = r.stdout + r.stderr
        assert r.returncode == 2 and SASL_PASSWORD not in out and PG_PASSWORD not in out, out
        assert r.stderr.splitlines()[-1].startswith(f"amends verify: cannot reach Kafka at {address}")

    def attempts(r: subprocess.CompletedProcess[str]) -> int:
        return sum("Connection refused" in line for line in r.stderr.splitlines())

    assert len(quiet.stderr.splitlines()) == 1
    assert attempts(verbose) > 1, verbose.stderr  # every reconnection attempt
    assert all(line.startswith("amends") for line in verbose.stderr.splitlines()), verbose.stderr
    assert attempts(debug) == 1 and len(debug.stderr.splitlines()) <= 3, debug.stderr
