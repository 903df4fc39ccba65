"""`amends up` as a real child process of a test: start, read its output, watch its instance, stop.

Used by tests/e2e/test_up.py and tests/e2e/test_ui_browser.py. Every session
gets a free port, a folder of its own (broker data, DAGSTER_HOME, logs), a
PostgreSQL schema and a Dagster database of its own, all removed afterwards.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from amends_pipeline.defs.verification_record import CheckedBoundary, latest_verification
from amends_pipeline.kafka.realbroker import free_port
from amends_pipeline.postgres.ensure import drop_database, scratch_database_name
from amends_pipeline.postgres.migrate import drop_schema
from amends_pipeline.postgres.urls import sqlalchemy_url

AMENDS = str(Path(sys.executable).with_name("amends"))


@dataclass
class Up:
    proc: subprocess.Popen[str]
    port: int
    state: Path
    dagster_url: str
    stdout: list[str] = field(default_factory=list)
    stderr: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return "".join(self.stdout) + "".join(self.stderr)

    def wait_for_line(self, pattern: str, deadline_s: float) -> re.Match[str]:
        """The first output line matching ``pattern``; fails when the process ends or time runs out."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            for line in [*self.stdout, *self.stderr]:
                if m := rx.search(line):
                    return m
            if self.proc.poll() is not None:
                time.sleep(0.5)  # let the readers catch the last lines
                raise AssertionError(f"amends up exited with {self.proc.returncode}:\n{self.output()}")
            time.sleep(0.5)
        raise AssertionError(f"no line matching {pattern!r} within {deadline_s:.0f}s:\n{self.output()}")

    @contextmanager
    def instance(self) -> Iterator[dg.DagsterInstance]:
        """The Dagster instance of the session (the daemon's run and event storage)."""
        os.environ["AMENDS_DAGSTER_PG_URL"] = self.dagster_url
        with dg.DagsterInstance.from_config(str(self.state / "dagster_home")) as inst:
            yield inst

    def wait_for_verification(self, deadline_s: float, *, beyond_source_end: int = 0) -> CheckedBoundary:
        """The daemon's latest verification once it PASSed at a boundary past ``beyond_source_end``."""
        deadline = time.monotonic() + deadline_s
        last = None
        with self.instance() as inst:
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, f"amends up exited with {self.proc.returncode}:\n{self.output()}"
                last = latest_verification(inst)
                if last and last.passed and source_end(last.boundary) > beyond_source_end:
                    return last
                time.sleep(1)
        raise AssertionError(f"no PASS past source end {beyond_source_end} within {deadline_s:.0f}s"
                             f" (last: {last}):\n{self.output()}")

    def descendants(self) -> dict[int, str]:
        """Every live process below `amends up` (pid -> command line), from /proc."""
        children: dict[int, list[int]] = {}
        for pid, ppid in _proc_table().items():
            children.setdefault(ppid, []).append(pid)
        out: dict[int, str] = {}
        todo = [self.proc.pid]
        while todo:
            for c in children.get(todo.pop(), []):
                out[c] = _cmdline(c)
                todo.append(c)
        return out


def source_end(boundary: str) -> int:
    """The sum of the source ends of a boundary key (``0:4:5;1:3:3`` -> 7)."""
    return sum(int(p.split(":")[1]) for p in boundary.split(";") if p.count(":") == 2)


def _proc_table() -> dict[int, int]:
    """pid -> parent pid of every process that is not a zombie."""
    table = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] != "Z":
            table[int(d.name)] = int(fields[1])
    return table


def _cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pids: dict[int, str]) -> dict[int, str]:
    """Those of ``pids`` still running the same command (a reused pid runs another one)."""
    table = _proc_table()
    return {p: cmd for p, cmd in pids.items() if p in table and _cmdline(p) == cmd}


def _reader(stream: object, sink: list[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        sink.append(line)


@contextmanager
def up_session(pg_dsn: str, tmp_path: Path, *args: str) -> Iterator[Up]:
    """`amends up ARGS` on a free port with its own folder, schema and Dagster database."""
    port = free_port()
    state = tmp_path / "up"
    schema = f"t_up_{os.getpid()}_{port}"
    dagster_db = scratch_database_name("amends_up_dagster_test")
    env = dict(os.environ)
    env["AMENDS_PG_DSN"] = pg_dsn
    env.pop("AMENDS_DEBUG", None)
    cmd = [AMENDS, "up", "--port", str(port), "--state-dir", str(state), "--schema", schema,
           "--dagster-db", dagster_db, *args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)
    up = Up(proc, port, state, sqlalchemy_url(pg_dsn, dagster_db))
    readers = [
        threading.Thread(target=_reader, args=(proc.stdout, up.stdout), daemon=True),
        threading.Thread(target=_reader, args=(proc.stderr, up.stderr), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        yield up
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(30)
        for t in readers:
            t.join(10)
        drop_database(pg_dsn, dagster_db)
        drop_schema(pg_dsn, schema)
