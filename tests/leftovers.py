"""Find the processes a test run leaves behind (Linux ``/proc``), so the run can fail on them.

The controlling pytest process puts a token of its own into its environment
(``AMENDS_TEST_RUN``) before any worker or test starts. Every process the run
starts inherits it, and so do their children, wherever they are re-parented
(a broker JVM whose test died, a code server whose daemon was killed, a
server that forked into the background). At the end of the session every
live process whose initial environment holds the token, other than pytest's
own, is a leftover of the run.

(A child subreaper would find the same processes by parentage, but then the
orphans it adopts must be reaped by pytest, and a command that waits for a
daemon it started to exit, such as ``amends kafka stop``, would see a zombie
that never goes away.)
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

TOKEN_ENV = "AMENDS_TEST_RUN"

KINDS = (
    ("kafka.Kafka", "Kafka broker"),
    ("dagster-daemon", "Dagster daemon"),
    ("api grpc", "Dagster code server"),
    ("dagster-webserver", "Dagster webserver"),
    ("dagster_webserver", "Dagster webserver"),
    ("postgres", "PostgreSQL server"),
    ("prometheus", "Prometheus"),
    ("chrom", "browser"),
    ("amends", "amends process"),
)
"""Substrings of a command line and the name a leftover report gives it (first match wins)."""

OWN_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")
"""Python's own helper processes: they belong to the interpreter that started them and end with it."""

XDIST_WORKER = "exec(eval(sys.stdin.readline()))"
"""How a pytest-xdist worker's command line reads (execnet starts it so)."""


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str

    @property
    def what(self) -> str:
        return next((name for needle, name in KINDS if needle in self.cmdline), "process")


def mark_run() -> str:
    """Put this run's token into the environment every process started from now on inherits."""
    token = os.environ.get(TOKEN_ENV) or f"{os.getpid()}-{secrets.token_hex(6)}"
    os.environ[TOKEN_ENV] = token
    return token


def read_proc(pid: int) -> Proc | None:
    """Process ``pid`` as ``/proc`` shows it, or None when it is gone."""
    base = Path("/proc") / str(pid)
    try:
        stat = (base / "stat").read_text()
        raw = (base / "cmdline").read_bytes()
    except OSError:
        return None
    # The command name in field 2 is in parentheses and may hold spaces: split after the last ')'.
    rest = stat[stat.rindex(")") + 2 :].split()
    cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    return Proc(pid, int(rest[1]), rest[0], cmd)


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in (Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return False


def started_by_run(token: str, exclude: frozenset[int] = frozenset()) -> list[Proc]:
    """Every live (not zombie) process carrying the run's token, but pytest's own, in pid order.

    pytest's own: ``exclude`` (the controlling process) and its pytest-xdist workers.
    """
    entry = f"{TOKEN_ENV}={token}".encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in exclude or not _environ_has(int(d), entry):
            continue
        p = read_proc(int(d))
        if p is None or p.state == "Z" or any(h in p.cmdline for h in OWN_HELPERS):
            continue
        if p.ppid in exclude and XDIST_WORKER in p.cmdline:
            continue
        found.append(p)
    return sorted(found, key=lambda p: p.pid)


def wait_for_leftovers(token: str, exclude: frozenset[int], grace_s: float) -> list[Proc]:
    """The run's processes still alive after waiting up to ``grace_s`` for them to end by themselves."""
    deadline = time.monotonic() + grace_s
    while True:
        left = started_by_run(token, exclude)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.25)


def kill(procs: list[Proc]) -> None:
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
