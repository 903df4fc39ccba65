"""Progress for commands that can take more than a few seconds.

On a terminal: a live bar (or status line) on stderr. Not on a terminal: plain
lines, at most one per tenth of the work, so logs stay short. ``quiet``
silences both; results still go to stdout.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO


class Progress:
    def __init__(self, what: str, total: int | None = None, *, quiet: bool = False,
                 stream: TextIO | None = None) -> None:
        self.what = what
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.done = 0
        self._t0 = time.monotonic()
        self._next_line = 0.0
        self._bar: Any = None
        if not quiet and total and self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=what, unit="msg", file=self.stream, leave=False)

    def step(self, text: str) -> None:
        """One phase of the work began (a line in both modes)."""
        if not self.quiet:
            print(f"[{time.monotonic() - self._t0:6.1f}s] {self.what}: {text}", file=self.stream, flush=True)

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.quiet or not self.total:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        share = self.done / self.total
        if share >= self._next_line or self.done == self.total:
            self.step(f"{self.done:,} of {self.total:,} ({share:.0%})")
            self._next_line = min(1.0, share + 0.1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
