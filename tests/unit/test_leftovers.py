"""The session-end leftover check finds an orphan the run left, and only what is still alive."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests import leftovers

PROBE = textwrap.dedent(
    """
    import json, subprocess, sys, time
    from tests import leftovers
    ok = leftovers.become_subreaper()
    # The shell starts a sleeper in the background and exits at once: the sleeper is an orphan.
    subprocess.run(["bash", "-c", "(exec -a amends-orphan-probe sleep 60) & exit 0"], check=True)
    time.sleep(0.2)
    found = leftovers.wait_for_descendants(__import__("os").getpid(), grace_s=0)
    print(json.dumps({"subreaper": ok, "found": [[p.pid, p.what, p.cmdline] for p in found]}))
    leftovers.kill(found)
    print(json.dumps([p.pid for p in leftovers.wait_for_descendants(__import__("os").getpid(), grace_s=5)]))
    """
)


def test_an_orphan_of_a_finished_child_is_found_below_a_subreaper_and_gone_once_killed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    first, after_kill = json.loads(out[0]), json.loads(out[1])
    assert first["subreaper"] is True
    assert [(what, cmd) for _, what, cmd in first["found"]] == [("amends process", "amends-orphan-probe 60")]
    assert after_kill == []


def test_leftovers_are_named_by_what_they_are() -> None:
    def named(cmd: str) -> str:
        return leftovers.Proc(1, 0, "S", cmd).what

    assert named("java -Xmx512m -cp x kafka.Kafka /tmp/server.properties") == "Kafka broker"
    assert named("/v/bin/python /v/bin/dagster api grpc --lazy-load-user-code") == "Dagster code server"
    assert named("/v/bin/python /v/bin/dagster-daemon run -w workspace.yaml") == "Dagster daemon"
    assert named("/usr/lib/postgresql/15/bin/postgres -D /var/lib/x") == "PostgreSQL server"
    assert named("sleep 5") == "process"
