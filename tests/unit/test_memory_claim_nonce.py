"""Claimant nonces in the memory store: after a lost claim reply, adopt only your own epoch."""

from __future__ import annotations

import pytest

from amends_core.errors import FenceError
from amends_core.store.memory import MemoryStore, Token
from tests.builders import K1, config, record, txn

CFG = config([(K1, 100, 60, 0)])


def test_a_claim_whose_reply_was_lost_is_adopted_when_the_installed_nonce_is_its_own() -> None:
    s = MemoryStore(CFG)
    s.claim(0, "n-1")
    s.claim(0, "mine")  # landed, but the claimant never heard back
    tok = s.settle_claim(0, "mine")
    assert tok == Token(CFG.namespace, CFG.digest(), 0, 2)
    s.process(tok, record(txn(), 0))
    assert s.frontier(0) == 1


def test_a_lost_claim_with_another_claimants_epoch_installed_is_not_adopted() -> None:
    s = MemoryStore(CFG)
    s.claim(0, "mine")  # lands; reply lost
    other = s.claim(0, "other")  # another live worker claims meanwhile
    assert s.settle_claim(0, "mine") is None
    # The old rule (observe and adopt) would share the other worker's epoch:
    assert s.observe(0) == other
    # Claiming again fences the other worker instead.
    again = s.claim(0, "mine-2")
    assert again.epoch == 3
    assert s.settle_claim(0, "mine-2") == again
    with pytest.raises(FenceError, match="replaced"):
        s.process(other, record(txn(), 0))
    s.process(again, record(txn(), 0))
    assert s.frontier(0) == 1


def test_a_claim_that_never_landed_is_not_adopted() -> None:
    s = MemoryStore(CFG)
    assert s.settle_claim(0, "mine") is None  # epoch 0: nobody claimed it
    s.claim(0, "earlier")
    assert s.settle_claim(0, "mine") is None  # the previous claim's epoch 1 is not this one
    assert s.observe(0).epoch == 1


def test_a_claim_without_a_nonce_is_never_adopted_and_settling_needs_one() -> None:
    s = MemoryStore(CFG)
    s.claim(0)
    s.claim(0, "")
    with pytest.raises(ValueError, match="nonce"):
        s.settle_claim(0, "")
    assert s.settle_claim(0, "anything") is None


def test_nonces_are_per_partition() -> None:
    cfg = config([(K1, 100, 60, 0)], partitions=2)
    s = MemoryStore(cfg)
    s.claim(0, "mine")
    s.claim(1, "other")
    assert s.settle_claim(0, "mine") == Token(cfg.namespace, cfg.digest(), 0, 1)
    assert s.settle_claim(1, "mine") is None
