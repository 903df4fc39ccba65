"""The processes of ``amends up``: a Kafka broker, the Dagster daemon and webserver, and their stopping.

A session owns everything it starts and starts from a clean slate: its folder
(broker data, ``DAGSTER_HOME``, logs), its PostgreSQL schema and its Dagster
storage database are reset when it starts, so run keys, sensor cursors and
topic IDs of an earlier session can never confuse this one. Each child runs
in a process group of its own; stopping sends SIGTERM to the whole group (the
daemon's and the webserver's code-server processes included) and SIGKILL to
whatever is still there after a grace period.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


class UpError(Exception):
    """The session could not be brought up; the message says why and what to do."""


@dataclass
class Child:
    """One child process in a process group of its own, with its output in a log file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @classmethod
    def start(cls, name: str, cmd: list[str], log: Path, env: Mapping[str, str], cwd: Path) -> Child:
        out = open(log, "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(
                cmd, cwd=cwd, env=dict(env), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        finally:
            out.close()
        return cls(name, proc, log)

    def exited(self) -> int | None:
        return self.proc.poll()

    def log_tail(self, chars: int = 800) -> str:
        try:
            return " ".join(self.log.read_text(errors="replace")[-chars:].split())
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 30.0) -> None:
        stop_all([self], grace)


def stop_all(children: list[Child], grace: float = 30.0) -> None:
    """SIGTERM to every child's group at once, wait for them, then SIGKILL whatever remains of a group."""
    for c in children:
        _signal_group(c.proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for c in children:
        try:
            c.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(c.proc.pid, signal.SIGKILL)
            c.proc.wait(10)
    # Grandchildren (code servers, runs) share the group and may outlive their parent briefly.
    deadline = time.monotonic() + 10
    while any(_group_alive(c.proc.pid) for c in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    for c in children:
        if _group_alive(c.proc.pid):
            _signal_group(c.proc.pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    """Whether any process (not a zombie) of the group is left."""
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def lock_state_dir(state: Path) -> IO[str]:
    """Hold an exclusive lock on the session folder for the life of the process."""
    state.mkdir(parents=True, exist_ok=True)
    f = open(state / ".lock", "w")  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        msg = f"another `amends up` is running on {state}: stop it first, or give --state-dir"
        raise UpError(msg) from None
    return f


def reset_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def dagster_home(state: Path) -> Path:
    """A fresh ``DAGSTER_HOME`` in the session folder with the project's instance settings."""
    home = reset_dir(state / "dagster_home")
    shutil.copy(ROOT / "dagster_home" / "dagster.yaml", home / "dagster.yaml")
    return home


def start_dagster(env: Mapping[str, str], logs: Path, port: int) -> tuple[Child, Child]:
    """``dagster-daemon run`` and ``dagster-webserver`` on this checkout's workspace (not ``dagster dev``)."""
    workspace = str(ROOT / "workspace.yaml")
    daemon = Child.start(
        "dagster-daemon", [str(BIN / "dagster-daemon"), "run", "-w", workspace],
        logs / "dagster-daemon.log", env, ROOT,
    )
    web = Child.start(
        "dagster-webserver",
        [str(BIN / "dagster-webserver"), "-w", workspace, "-h", "127.0.0.1", "-p", str(port)],
        logs / "dagster-webserver.log", env, ROOT,
    )
    return daemon, web


def wait_http(url: str, children: list[Child], timeout: float, stopped: Callable[[], bool]) -> None:
    """Until ``url`` answers 200; UpError when a child exits or the deadline passes."""
    deadline = time.monotonic() + timeout
    while not stopped():
        for c in children:
            if c.exited() is not None:
                msg = f"{c.name} exited with {c.exited()} while starting: {c.log_tail()} (log: {c.log})"
                raise UpError(msg)
        try:
            with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 - loopback only
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            msg = f"{url} did not answer within {timeout:.0f}s (logs: {children[0].log.parent})"
            raise UpError(msg)
        time.sleep(0.5)


