"""`scripts/ensure-postgres.sh` never puts the DSN (or its password) on a command line (issue 14).

A command line is readable by every local user (``ps``, ``/proc/PID/cmdline``),
so the DSN travels in the environment only. The script runs here with
recording stand-ins for the PostgreSQL client programs and for the Python it
starts (``PYTHON``); each records its argument vector and then does what the
real one would (the stand-in client programs fail like an unreachable
server). The DSN points at a port nothing listens on, so nothing is created.
"""

from __future__ import annotations

import os
import secrets
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-postgres.sh"
CLIENTS = ("psql", "pg_isready", "createdb", "dropdb", "createuser", "pg_dump")


def recorder(path: Path, log: Path, then: str) -> None:
    path.write_text(
        "#!/bin/bash\n"
        f"{{ printf '%s\\0' \"$0\" \"$@\"; printf '\\n'; }} >> '{log}'\n"
        f"{then}\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_ensure_postgres_never_puts_the_dsn_or_its_password_on_a_command_line(tmp_path: Path) -> None:
    password = f"Pw-{secrets.token_hex(8)}"
    user = f"u{secrets.token_hex(4)}"
    dsn = f"postgresql://{user}:{password}@127.0.0.1:1/amends_never_created"
    log = tmp_path / "argv.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in CLIENTS:
        recorder(bin_dir / name, log, "exit 2")
    python = tmp_path / "python"
    recorder(python, log, f'exec "{sys.executable}" "$@"')
    env = {
        **os.environ,
        "AMENDS_PG_DSN": dsn,
        "PYTHON": str(python),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    r = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode != 0, r.stdout + r.stderr  # nothing listens on port 1
    argvs = log.read_bytes().decode(errors="replace").splitlines()
    assert argvs, "the script ran no client program and no Python: nothing was observed"
    for argv in argvs:
        assert password not in argv and user not in argv and "127.0.0.1:1" not in argv, argv.split("\0")
