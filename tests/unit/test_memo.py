"""The bounded memo every hot-path cache of the core uses."""

from __future__ import annotations

from amends_core.memo import remember


def test_a_value_is_kept_and_returned_as_the_same_object() -> None:
    memo: dict[str, object] = {}
    value = object()
    assert remember(memo, "a", value, 4) is value
    assert memo == {"a": value}


def test_a_full_memo_is_emptied_before_the_next_value_so_it_never_exceeds_its_bound() -> None:
    memo: dict[int, int] = {}
    sizes = []
    for k in range(7):
        remember(memo, k, k * 10, 3)
        sizes.append(len(memo))
    assert sizes == [1, 2, 3, 1, 2, 3, 1]
    assert memo == {6: 60}


def test_a_key_kept_again_replaces_its_value() -> None:
    memo = {"a": 1}
    assert remember(memo, "a", 2, 4) == 2
    assert memo == {"a": 2}
