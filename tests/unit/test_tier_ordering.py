"""The run's order gives every pytest-xdist worker its share of the slow tests first."""

from __future__ import annotations

from dataclasses import dataclass

from tests.conftest import _slow_first


@dataclass
class Item:
    name: str
    slow: bool

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def _blocks(n: int, workers: int) -> list[int]:
    """The sizes of worksteal's first contiguous blocks (xdist's check_schedule)."""
    sizes, rest = [], n
    for j in range(workers):
        sizes.append(rest // (workers - j))
        rest -= sizes[-1]
    return sizes


def test_each_workers_first_block_starts_with_its_round_robin_share_of_the_slow_tests() -> None:
    items = [Item(f"f{i}", False) for i in range(20)] + [Item(f"s{i}", True) for i in range(7)]
    _slow_first(items, 3)  # type: ignore[arg-type]
    names = [i.name for i in items]
    assert sorted(names) == sorted([f"f{i}" for i in range(20)] + [f"s{i}" for i in range(7)])
    start = 0
    heads = []
    for size in _blocks(len(items), 3):
        block = names[start:start + size]
        slow = [n for n in block if n.startswith("s")]
        assert block[: len(slow)] == slow  # slow ones lead their block
        heads.append(slow)
        start += size
    assert heads == [["s0", "s3", "s6"], ["s1", "s4"], ["s2", "s5"]]


def test_one_worker_runs_the_slow_tests_first() -> None:
    items = [Item("f0", False), Item("s0", True), Item("f1", False), Item("s1", True)]
    _slow_first(items, 1)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["s0", "s1", "f0", "f1"]
