"""The cyclic garbage collector's settings in long-running role processes.

A worker keeps its partitions' key states in memory between batches; with the
interpreter's default thresholds the cyclic collector rescans that long-lived
heap again and again (about a quarter of a worker's CPU). Role processes
collect once, freeze what exists, and collect young objects far less often.
The durable benchmark measures the worker under the same settings.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

THRESHOLD = (50_000, 20, 20)
"""``gc.set_threshold`` of role processes (the default is (700, 10, 10))."""


def settle() -> None:
    """Collect, freeze the surviving heap and raise the thresholds (for the rest of the process)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLD)


@contextmanager
def settled() -> Iterator[None]:
    """``settle`` for the duration of a block, then the previous thresholds (for benchmarks)."""
    before = gc.get_threshold()
    settle()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


SNIPPET = f"import gc\ngc.collect()\ngc.freeze()\ngc.set_threshold{THRESHOLD!r}\n"
"""``settle`` as source text, for measuring another checkout's code under the same settings."""
