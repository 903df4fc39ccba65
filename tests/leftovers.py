"""Find the processes a test run leaves behind (Linux ``/proc``), so the run can fail on them.

The controlling pytest process makes itself a child subreaper
(``PR_SET_CHILD_SUBREAPER``): an orphan among its descendants (a broker JVM
whose test died, a code server whose daemon was killed, a server that forked
into the background) is re-parented to it instead of to init. At the end of
the session every live descendant is therefore a leftover of the run.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36

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


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    state: str
    cmdline: str

    @property
    def what(self) -> str:
        return next((name for needle, name in KINDS if needle in self.cmdline), "process")


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants; False where Linux refuses."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _read(pid: int) -> Proc | None:
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


def descendants(root: int) -> list[Proc]:
    """Every live (not zombie) process below ``root``, in pid order."""
    procs = [p for p in (_read(int(d)) for d in os.listdir("/proc") if d.isdigit()) if p is not None]
    children: dict[int, list[Proc]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p)
    found: list[Proc] = []
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    live = (p for p in found if p.state != "Z" and not any(h in p.cmdline for h in OWN_HELPERS))
    return sorted(live, key=lambda p: p.pid)


def wait_for_descendants(root: int, grace_s: float) -> list[Proc]:
    """The descendants still alive after waiting up to ``grace_s`` for them to end by themselves."""
    deadline = time.monotonic() + grace_s
    while True:
        left = descendants(root)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.25)


def kill(procs: list[Proc]) -> None:
    for p in procs:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
