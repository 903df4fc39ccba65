"""The README's by-hand walkthrough, run exactly as written (bar `make setup`).

It starts a real broker in the background, captures its address from the
state file, provisions, loads, starts the three roles in the background,
verifies twice, and stops every process it started. The test runs the block
from README.md itself, so the README cannot drift from what works. The folder
`var/walkthrough` becomes a temporary one and PostgreSQL a scratch schema;
nothing else is changed.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from amends_pipeline.postgres.migrate import scratch_schema

ROOT = Path(__file__).resolve().parents[2]


def walkthrough_block() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Running the pipeline by hand"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.split(")")[-1].split()[0] != "Z"


@pytest.mark.slow
def test_the_readme_walkthrough_runs_verifies_and_stops_everything_it_started(
    pg_dsn: str, tmp_path: Path
) -> None:
    block = walkthrough_block()
    assert block.startswith("make setup\n"), "the walkthrough starts with make setup"
    w = tmp_path / "walkthrough"
    script = block.removeprefix("make setup\n").replace("W=var/walkthrough", f"W={w}")
    assert f"W={w}" in script
    with scratch_schema(pg_dsn, "t_readme") as schema:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AMENDS_")}
        env.update({"AMENDS_PG_DSN": pg_dsn, "AMENDS_PG_SCHEMA": schema})
        r = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env,
            capture_output=True, text=True, timeout=400, check=False,
        )
    out = r.stdout
    assert r.returncode == 0, f"walkthrough failed ({r.returncode}):\n{out}\n{r.stderr}"
    # Two verifications, both PASS (the report's status line).
    assert len(re.findall(r"^verification PASS:", out, re.M)) == 2, out
    # The view after each stage: the hand-derived closes of the worked example
    # (fixtures/worked-example/expected/1-initial.json and 2-amendment.json).
    views = re.split(r"^view frontiers:", out, flags=re.M)[1:]
    assert len(views) == 2, out

    def closes(view: str) -> list[int]:
        return [int(m.replace(",", "")) for m in re.findall(r"^  2026-01-0\d\s+([\d,]+)", view, re.M)]

    assert closes(views[0]) == [50, 30, 80]
    assert closes(views[1]) == [70, 50, 100]
    # Every background process it started is gone: the roles ended on SIGTERM
    # (their last log line says so) and the broker's state file is removed.
    for role in ("worker", "relay", "view"):
        log = (w / f"{role}.log").read_text()
        assert re.search(rf"^amends {role}: stopping after \d+ items$", log, re.M), log
    assert not (w / "roles.pid").exists()
    assert not (w / "kafka" / "state.json").exists()
    leftovers = subprocess.run(
        ["pgrep", "-f", str(w)], capture_output=True, text=True, check=False
    ).stdout.split()
    assert not [p for p in leftovers if _alive(int(p))], leftovers
