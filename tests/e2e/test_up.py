"""`amends up`: the UI comes up on real services, verification passes, SIGTERM stops everything.

The session runs as its own process with a real broker, the Dagster daemon and
webserver on dagster-postgres storage; the test only reads its output, asks
the UI over HTTP and reads the daemon's verification results from the
session's Dagster instance.
"""

from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.up_process import alive, source_end, up_session

WORKED_EXAMPLE_STAGE_1_END = 4
"""The source end after the worked example's first stage: the marker and three records."""


@pytest.mark.slow
def test_up_serves_the_ui_passes_verification_live_and_sigterm_stops_every_child_with_exit_0(
    pg_dsn: str, tmp_path: Path
) -> None:
    with up_session(pg_dsn, tmp_path, "--stages", "1", "--live", "--rate", "120", "--seed", "7") as up:
        m = up.wait_for_line(r"^Dagster UI: (http://127\.0\.0\.1:\d+)$", 300)
        assert m.group(1) == up.url
        with urllib.request.urlopen(f"{up.url}/server_info", timeout=30) as r:
            assert r.status == 200 and "dagster_webserver_version" in json.loads(r.read())

        first = up.wait_for_verification(300)
        assert first.status == "PASS" and source_end(first.boundary) == WORKED_EXAMPLE_STAGE_1_END

        # The live generator's records are processed and verified too, by the daemon's sensors alone.
        live = up.wait_for_verification(300, beyond_source_end=WORKED_EXAMPLE_STAGE_1_END)
        assert live.status == "PASS"
        up.wait_for_line(r"up: live: \d+ records for day ", 10)

        children = up.descendants()
        kinds = {k for k in ("kafka.Kafka", "dagster-daemon", "dagster-webserver") if any(k in c for c in children.values())}
        assert kinds == {"kafka.Kafka", "dagster-daemon", "dagster-webserver"}, children

        up.proc.send_signal(signal.SIGTERM)
        assert up.proc.wait(120) == 0, up.output()
        assert alive(children) == {}, alive(children)
        up.wait_for_line(r"up: stopped$", 10)
