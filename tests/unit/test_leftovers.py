"""The session-end leftover check finds an orphan the run left, and only what is still alive."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests import leftovers

PROBE = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from tests import leftovers
    os.environ.pop(leftovers.TOKEN_ENV, None)
    token = leftovers.mark_run()
    # The shell starts a sleeper in the background and exits at once: the sleeper is an orphan.
    subprocess.run(["bash", "-c", "(exec -a amends-orphan-probe sleep 60) & exit 0"], check=True)
    # A process started with an environment of its own, without the token, is not the run's.
    other = subprocess.Popen(["sleep", "60"], env={"PATH": os.environ["PATH"]})
    found = leftovers.wait_for_leftovers(token, frozenset({os.getpid()}), grace_s=0)
    print(json.dumps([[p.what, p.cmdline] for p in found]))
    leftovers.kill(found)
    print(json.dumps([p.pid for p in leftovers.wait_for_leftovers(token, frozenset({os.getpid()}), 5)]))
    other.kill()
    """
)


def test_an_orphan_of_a_finished_child_is_found_by_the_run_token_and_gone_once_killed() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    found, after_kill = json.loads(out[0]), json.loads(out[1])
    assert found == [["amends process", "amends-orphan-probe 60"]]
    assert after_kill == []


def test_leftovers_are_named_by_what_they_are() -> None:
    def named(cmd: str) -> str:
        return leftovers.Proc(1, 0, "S", cmd).what

    assert named("java -Xmx512m -cp x kafka.Kafka /tmp/server.properties") == "Kafka broker"
    assert named("/v/bin/python /v/bin/dagster api grpc --lazy-load-user-code") == "Dagster code server"
    assert named("/v/bin/python /v/bin/dagster-daemon run -w workspace.yaml") == "Dagster daemon"
    assert named("/usr/lib/postgresql/15/bin/postgres -D /var/lib/x") == "PostgreSQL server"
    assert named("sleep 5") == "process"
