"""Suite-wide pytest options.

Tests marked ``slow`` (long property and fuzz runs) are skipped unless
``--run-slow`` is given or ``AMENDS_RUN_SLOW=1`` is set, so the default suite
stays quick; CI's nightly job turns them on.
"""

from __future__ import annotations

import os

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-slow", action="store_true", default=False, help="also run tests marked slow"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow") or os.environ.get("AMENDS_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or AMENDS_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
