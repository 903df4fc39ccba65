"""`amends bench` declares its options without loading benchmark code (issue 15).

The production CLI must not import the ``benchmarks`` package: only running
``amends bench`` does. The suite names the command offers are exactly the
suites ``benchmarks.run`` has.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from amends_pipeline.commands import bench
from benchmarks import run

ROOT = Path(__file__).resolve().parents[2]


def test_the_command_offers_exactly_the_suites_the_benchmarks_have() -> None:
    assert tuple(run.SUITES) == bench.SUITE_NAMES
    assert tuple(run.OPT_IN) == bench.OPT_IN_NAMES


def test_building_the_cli_and_running_another_command_loads_no_benchmark_code() -> None:
    code = (
        "import sys\n"
        "from amends_pipeline.cli import build_parser\n"
        "build_parser().parse_args(['bench', '--tiny'])\n"
        "from amends_pipeline.cli import main\n"
        "try:\n"
        "    main(['compute', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m == 'benchmarks' or m.startswith('benchmarks.'))\n"
        "print(loaded)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout + p.stderr
