"""A live source for ``amends up --live``: new movements and late corrections, a day at a time.

``LiveHistory`` is a seeded generator of plausible source transactions for the
configured stock keys. Each call of ``next_day`` gives the movements of the
next day (receipts when stock runs low, issues otherwise) and, now and then, a
late correction of an earlier day's movement: an AMEND of its quantity or a
CANCEL, at the next revision. Everything it emits is valid (no rejection, no
conflict), so verification keeps passing while earlier balances and alerts
are restated. It does no I/O; ``amends up`` produces its records.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from amends_core import wire
from amends_core.ledger import Config, KeyConfig, Kind, Transaction
from amends_core.timefmt import NS_PER_DAY, NS_PER_SECOND, format_day

NS_PER_HOUR = 3600 * NS_PER_SECOND


@dataclass
class _Movement:
    """What the generator remembers of a transaction it emitted (to correct it later)."""

    txn_id: str
    kc: KeyConfig
    valid_ns: int
    qty: int
    revision: int
    cancelled: bool = False


@dataclass(frozen=True, slots=True)
class LiveRecord:
    """One source message to produce."""

    partition: int
    key: bytes
    value: bytes
    correction: bool
    """An AMEND or CANCEL of an earlier day's movement (a late correction)."""
    txn: Transaction


class LiveHistory:
    """Valid source history from ``first_day`` on; the same seed gives the same history."""

    def __init__(
        self,
        cfg: Config,
        rnd: random.Random,
        first_day: int,
        *,
        per_day: int = 3,
        correction_share: float = 0.5,
        balances: dict[KeyConfig, int] | None = None,
    ) -> None:
        self.cfg = cfg
        self.rnd = rnd
        origin_day = -(-cfg.origin_ns // NS_PER_DAY)
        self.day = max(first_day, origin_day) - 1
        """The day of the latest movements (before the first call: the day before ``first_day``)."""
        self.per_day = per_day
        self.correction_share = correction_share
        """The chance that a day also brings a late correction."""
        self.balance = {kc: kc.opening_balance for kc in cfg.keys} | (balances or {})
        """The generator's estimate of each key's current stock (steers receipts and issues)."""
        self.movements: list[_Movement] = []
        self.count = 0

    def day_text(self) -> str:
        """The day of the latest movements, as YYYY-MM-DD."""
        return format_day(self.day)

    def _source_ns(self) -> int:
        """Source time: the evening of the current day (informational only)."""
        return self.day * NS_PER_DAY + 18 * NS_PER_HOUR + self.count * NS_PER_SECOND

    def _new(self) -> tuple[Transaction, KeyConfig]:
        kc = self.rnd.choice(self.cfg.keys)
        low = self.balance[kc] < kc.reorder_threshold + 10
        if low and self.rnd.random() < 0.7:
            qty, prefix = self.rnd.randint(30, 70), "RECEIPT"
        else:
            qty, prefix = -self.rnd.randint(5, 30), "ISSUE"
        valid = self.day * NS_PER_DAY + self.rnd.randint(7, 17) * NS_PER_HOUR
        m = _Movement(f"LIVE-{prefix}-{self.count + 1:06d}", kc, valid, qty, 1)
        self.movements.append(m)
        self.balance[kc] += qty
        return Transaction(m.txn_id, 1, Kind.NEW, kc.key, valid, qty, self._source_ns()), kc

    def _correction(self, candidates: list[_Movement]) -> tuple[Transaction, KeyConfig] | None:
        active = [m for m in candidates if not m.cancelled]
        if not active:
            return None
        m = self.rnd.choice(active)
        m.revision += 1
        if self.rnd.random() < 0.35:
            m.cancelled = True
            self.balance[m.kc] -= m.qty
            txn = Transaction(m.txn_id, m.revision, Kind.CANCEL, m.kc.key, m.valid_ns, 0, self._source_ns())
            return txn, m.kc
        sign = 1 if m.qty > 0 else -1
        qty = sign * max(1, abs(m.qty) + self.rnd.choice((-12, -7, -3, 4, 9, 15)))
        self.balance[m.kc] += qty - m.qty
        m.qty = qty
        txn = Transaction(m.txn_id, m.revision, Kind.AMEND, m.kc.key, m.valid_ns, qty, self._source_ns())
        return txn, m.kc

    def _record(self, txn: Transaction, kc: KeyConfig, correction: bool) -> LiveRecord:
        self.count += 1
        return LiveRecord(
            kc.partition, txn.stock_key.transport_key(), wire.encode_transaction(txn), correction, txn
        )

    def next_day(self) -> list[LiveRecord]:
        """The next day's movements, then now and then a late correction of an earlier day's movement."""
        earlier = self.movements[-30:]
        self.day += 1
        out = []
        for _ in range(self.per_day):
            txn, kc = self._new()
            out.append(self._record(txn, kc, False))
        if earlier and self.rnd.random() < self.correction_share:
            picked = self._correction(earlier)
            if picked is not None:
                out.append(self._record(*picked, True))
        return out
