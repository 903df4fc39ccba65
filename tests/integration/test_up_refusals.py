"""`amends up` refuses what would clash with a running session before it resets or starts anything."""

from __future__ import annotations

import fcntl
import socket
import subprocess
import sys
from pathlib import Path

AMENDS = str(Path(sys.executable).with_name("amends"))


def _up(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [AMENDS, "up", "--state-dir", str(tmp_path / "up"), *args],
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_up_refuses_a_port_in_use_with_exit_2_and_leaves_the_session_folder_alone(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _up(tmp_path, "--port", str(port))
    assert r.returncode == 2, r.stderr
    assert f"port {port} on 127.0.0.1 is in use" in r.stderr and "--port" in r.stderr
    assert not (tmp_path / "up").exists()


def test_up_refuses_a_session_folder_another_up_holds_with_exit_2(tmp_path: Path) -> None:
    state = tmp_path / "up"
    state.mkdir()
    (state / "kafka").mkdir()
    with open(state / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        r = _up(tmp_path, "--port", str(port))
    assert r.returncode == 2, r.stderr
    assert "another `amends up` is running" in r.stderr
    assert (state / "kafka").exists()  # nothing was reset


def test_up_refuses_a_rate_that_is_not_positive(tmp_path: Path) -> None:
    r = _up(tmp_path, "--live", "--rate", "0")
    assert r.returncode == 2 and "--rate must be positive" in r.stderr
