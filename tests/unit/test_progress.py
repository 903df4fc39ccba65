"""Progress of long commands: plain, bounded lines when not on a terminal; nothing with quiet."""

from __future__ import annotations

import io

from amends_pipeline.commands._progress import Progress


def test_off_a_terminal_progress_is_at_most_one_line_per_tenth_plus_the_end() -> None:
    out = io.StringIO()
    p = Progress("loading", 1000, stream=out)
    for _ in range(1000):
        p.advance()
    p.close()
    lines = out.getvalue().splitlines()
    assert 2 <= len(lines) <= 12
    assert lines[-1].endswith("1,000 of 1,000 (100%)")


def test_phases_are_one_line_each_and_quiet_prints_nothing() -> None:
    out = io.StringIO()
    p = Progress("rebuild", stream=out)
    p.step("verifying against the oracle")
    assert out.getvalue().rstrip().endswith("rebuild: verifying against the oracle")
    quiet = io.StringIO()
    q = Progress("rebuild", 10, quiet=True, stream=quiet)
    q.step("x")
    q.advance(10)
    assert quiet.getvalue() == ""
