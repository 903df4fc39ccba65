"""One real Kafka broker for a whole test run, shared by every pytest-xdist worker.

Each worker used to start a broker of its own: four JVMs formatting storage,
starting and then idling (about 4% of a core each) for the length of the run,
on a machine whose two cores the suite keeps busy. Now the first worker that
asks for the broker starts it, under a file lock in a folder of the run
(``SHARED_ENV``, made by the controlling pytest process), and writes where it
listens; the other workers attach to it. A worker never stops it, as others may
still use it: the controlling process stops it when the session ends, before
the leftover check looks for processes the run left behind.

Tests on it use topics of their own (``topic_name``); a test that kills,
restarts or reconfigures a broker starts its own with ``make_broker``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from pathlib import Path

from amends_pipeline.kafka.realbroker import RealBroker
from tests.leftovers import read_proc

SHARED_ENV = "AMENDS_TEST_SHARED_DIR"
"""The run's shared folder; set by the controlling pytest process, inherited by workers."""


def _info(shared: Path) -> Path:
    return shared / "broker.json"


def _alive(pid: int) -> bool:
    p = read_proc(pid)
    return p is not None and p.state != "Z"


def acquire(shared: Path) -> RealBroker:
    """The run's broker: started here if no live one is recorded in ``shared``, else attached to."""
    shared.mkdir(parents=True, exist_ok=True)
    with open(shared / "broker.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = _info(shared)
        if info.exists():
            known = json.loads(info.read_text())
            if _alive(known["pid"]):
                broker = RealBroker(Path(known["workdir"]), port=known["port"])
                broker.wait_ready(60.0)
                return broker
        broker = RealBroker(shared / f"kafka-{os.getpid()}").start()
        info.write_text(json.dumps({"pid": broker.pid, "port": broker.port, "workdir": str(broker.workdir)}))
        return broker


def release(shared: Path, timeout: float = 30.0) -> int | None:
    """Stop the run's broker, if one was started; its pid, or None when there was none."""
    info = _info(shared)
    if not info.exists():
        return None
    pid = int(json.loads(info.read_text())["pid"])
    info.unlink()
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pid, sig)  # the broker leads a session of its own (start_new_session)
        except ProcessLookupError:
            return pid
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _alive(pid):
                return pid
            time.sleep(0.1)
    return pid
