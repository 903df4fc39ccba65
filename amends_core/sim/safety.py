"""Safety properties checked after every simulator step.

Checks, each with the name a violation carries:
  outbox-sequence      outbox rows of a partition carry sequences 1, 2, 3, ...
  worker-recovery      no worker attempt is refused by a store guard: after any
                       reply, lost or not, the worker's token and local frontier
                       are the installed ones (only a held decision of a replaced
                       owner may be fenced, which is the ``fence`` rule working)
  fence                a worker decision is installed only under the epoch it
                       was prepared with (a replaced owner never commits)
  ack-order            the relay acknowledged sequences 1, 2, 3, ... in order,
                       each only after its envelope was published, and the
                       store's pending count agrees with those acknowledgements
  version-consecutive  per output ID, committed versions are 1, 2, 3, ...
  intent               the store's latest output state is the last committed
                       envelope of every ID, and what that intent shows per key
                       is the worker's projection (committed intent is complete)
  published-committed  every envelope in an output log equals one committed on
                       that partition
  viewed-committed     every envelope retained by the view equals a committed one
  view-frontier        a view frontier never passes the end of its output log
  view-protocol        the view never stopped on a protocol error
  worker-oracle        worker trust and READY business projections equal the
                       oracle over exactly the processed source prefix
  quarantine-oracle    quarantined raw records and reasons equal the oracle's
                       rejections over that prefix
  conflicts-oracle     held conflict evidence equals the oracle's conflicts

Work is incremental: new outbox rows, log entries and acknowledgements are
checked once; the oracle runs only when some worker frontier moved (results are
cached by the frontier tuple), so idle, backoff and relay/view steps cost little.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from amends_core import view as view_mod
from amends_core.ledger import CloseOutOfRange, Envelope, OutputID, Projection, StockKey
from amends_core.result import ComputeResult, RejectionRef

if TYPE_CHECKING:
    from amends_core.sim.model import Event, Model


ACK_ORDER = "ack-order"
CONFLICTS_ORACLE = "conflicts-oracle"
FENCE = "fence"
INTENT = "intent"
OUTBOX_SEQUENCE = "outbox-sequence"
PUBLISHED_COMMITTED = "published-committed"
QUARANTINE_ORACLE = "quarantine-oracle"
VERSION_CONSECUTIVE = "version-consecutive"
VIEW_FRONTIER = "view-frontier"
VIEW_PROTOCOL = "view-protocol"
VIEWED_COMMITTED = "viewed-committed"
WORKER_ORACLE = "worker-oracle"
WORKER_RECOVERY = "worker-recovery"
CHECKS = (
    ACK_ORDER, CONFLICTS_ORACLE, FENCE, INTENT, OUTBOX_SEQUENCE, PUBLISHED_COMMITTED,
    QUARANTINE_ORACLE, VERSION_CONSECUTIVE, VIEW_FRONTIER, VIEW_PROTOCOL, VIEWED_COMMITTED,
    WORKER_ORACLE, WORKER_RECOVERY,
)
"""Names a SafetyViolation can carry."""


class SafetyViolation(Exception):
    """A safety property failed; ``check`` names it, ``event`` is the step index."""

    def __init__(self, check: str, detail: str, event: int | None = None) -> None:
        self.check = check
        self.detail = detail
        self.event = event
        at = "" if event is None else f" after step #{event}"
        super().__init__(f"safety violation [{check}]{at}: {detail}")


def _env(e: Envelope) -> str:
    return f"{e.output_id.encoded} v{e.version} {e.type.value}"


def _first_key_difference(
    a: tuple[Projection, ...], b: tuple[Projection, ...]
) -> str:
    for x, y in zip(a, b, strict=False):
        if x != y:
            return f"key {x.key.item}/{x.key.location}: worker {x.to_json()} oracle {y.to_json()}"
    return f"{len(a)} keys against {len(b)}"


class Safety:
    """Incremental checker bound to one model."""

    def __init__(self, model: Model) -> None:
        self.m = model
        parts = range(model.cfg.partitions)
        self._outbox_seen = {p: 0 for p in parts}
        self._log_seen = {p: 0 for p in parts}
        self._acks_seen = {p: 0 for p in parts}
        self._installs_seen = 0
        self._published: dict[int, set[Envelope]] = {p: set() for p in parts}
        self._last_version: dict[OutputID, int] = {}
        self._latest: dict[OutputID, Envelope] = {}
        self._committed: set[Envelope] = set()
        self._committed_on: dict[int, set[Envelope]] = {p: set() for p in parts}
        self._intent_key: tuple[int, ...] | None = None
        self._view_key: tuple[int, ...] | None = None
        self._oracle_key: tuple[int, ...] | None = None
        self.oracle_calls = 0
        self.checks = 0

    def check(self, ev: Event | None = None) -> None:
        """Raise SafetyViolation for the first failing property."""
        idx = None if ev is None else ev.index
        m = self.m
        self.checks += 1
        if ev is not None and ev.observed.value == "refused":
            msg = f"{ev.step} was refused by a store guard: {ev.detail}"
            raise SafetyViolation(WORKER_RECOVERY, msg, idx)
        parts = range(m.cfg.partitions)
        for p in parts:
            self._outbox(p, idx)
        self._fence(idx)
        for p in parts:
            self._log(p, idx)
            self._acks(p, idx)
            if m.view.frontier(p) > len(m.output[p]):
                msg = (
                    f"view frontier {m.view.frontier(p)} of partition {p} passes the"
                    f" output log end {len(m.output[p])}"
                )
                raise SafetyViolation(VIEW_FRONTIER, msg, idx)
        if m.view.stopped:
            p, why = sorted(m.view.stopped.items())[0]
            raise SafetyViolation(VIEW_PROTOCOL, f"partition {p} stopped: {why}", idx)
        fr = tuple(m.store.frontier(p) for p in parts)
        view_key = tuple(m.view.frontier(p) for p in parts)
        if view_key != self._view_key:
            self._viewed(idx)
            self._view_key = view_key
        intent_key = fr + tuple(len(m.store.outbox[p]) for p in parts)
        if intent_key != self._intent_key:
            self._intent(idx)
            self._intent_key = intent_key
        if fr != self._oracle_key:
            self._against_oracle(idx)
            self._oracle_key = fr

    # ------------------------------------------------------------ outbox and transport

    def _outbox(self, p: int, idx: int | None) -> None:
        rows = self.m.store.outbox[p]
        for i in range(self._outbox_seen[p], len(rows)):
            row = rows[i]
            if row.partition != p or row.sequence != i + 1:
                msg = (
                    f"outbox row {i} of partition {p} has partition {row.partition}"
                    f" sequence {row.sequence}, expected sequence {i + 1}"
                )
                raise SafetyViolation(OUTBOX_SEQUENCE, msg, idx)
            env = row.envelope
            oid = env.output_id
            prev = self._last_version.get(oid, 0)
            if env.version != prev + 1:
                msg = f"{_env(env)} committed after version {prev}"
                raise SafetyViolation(VERSION_CONSECUTIVE, msg, idx)
            self._last_version[oid] = env.version
            self._latest[oid] = env
            self._committed.add(env)
            self._committed_on[p].add(env)
        self._outbox_seen[p] = len(rows)

    def _fence(self, idx: int | None) -> None:
        installs = self.m.installs
        for i in range(self._installs_seen, len(installs)):
            p, mine, current = installs[i]
            if mine != current:
                msg = f"partition {p}: a decision of epoch {mine} was installed under epoch {current}"
                raise SafetyViolation(FENCE, msg, idx)
        self._installs_seen = len(installs)

    def _log(self, p: int, idx: int | None) -> None:
        log = self.m.output[p]
        pub = self._published[p]
        for i in range(self._log_seen[p], len(log)):
            env = log[i]
            if env not in self._committed_on[p]:
                msg = (
                    f"output log {p} offset {i} holds {_env(env)}, which was never committed"
                    f" on partition {p}"
                )
                raise SafetyViolation(PUBLISHED_COMMITTED, msg, idx)
            pub.add(env)
        self._log_seen[p] = len(log)

    def _acks(self, p: int, idx: int | None) -> None:
        m = self.m
        acks = m.acks[p]
        rows = m.store.outbox[p]
        for i in range(self._acks_seen[p], len(acks)):
            seq = acks[i]
            if seq != i + 1:
                msg = f"acknowledgement {i + 1} of partition {p} named sequence {seq}"
                raise SafetyViolation(ACK_ORDER, msg, idx)
            env = rows[seq - 1].envelope
            if env not in self._published[p]:
                msg = f"sequence {seq} of partition {p} acknowledged but never published"
                raise SafetyViolation(ACK_ORDER, msg, idx)
        self._acks_seen[p] = len(acks)
        if m.store.pending_count(p) != len(rows) - len(acks):
            msg = (
                f"partition {p}: store reports {m.store.pending_count(p)} pending rows,"
                f" relay acknowledged {len(acks)} of {len(rows)}"
            )
            raise SafetyViolation(ACK_ORDER, msg, idx)

    def _viewed(self, idx: int | None) -> None:
        for env in self.m.view.rows.values():
            if env not in self._committed:
                raise SafetyViolation(
                    VIEWED_COMMITTED, f"view holds {_env(env)}, never committed", idx
                )

    # ------------------------------------------------------------ committed intent

    def _intent(self, idx: int | None) -> None:
        m = self.m
        outputs = m.store.outputs
        if outputs != self._latest:
            for oid in sorted(set(outputs) | set(self._latest), key=lambda o: o.encoded):
                a, b = outputs.get(oid), self._latest.get(oid)
                if a != b:
                    msg = (
                        f"latest output state of {oid.encoded} is"
                        f" {None if a is None else _env(a)}, last committed envelope is"
                        f" {None if b is None else _env(b)}"
                    )
                    raise SafetyViolation(INTENT, msg, idx)
        shown = view_mod.project(m.cfg, outputs.values())
        for kc in m.cfg.keys:
            k = kc.key
            have = m.store.projection(k)
            if shown[k] != have:
                msg = (
                    f"committed intent of {k.item}/{k.location} shows {shown[k].to_json()},"
                    f" worker projection is {have.to_json()}"
                )
                raise SafetyViolation(INTENT, msg, idx)

    # ------------------------------------------------------------ oracle over the prefix

    def _against_oracle(self, idx: int | None) -> None:
        m = self.m
        store = m.store
        self.oracle_calls += 1
        try:
            expected = m.oracle_at([store.frontier(p) for p in range(m.cfg.partitions)])
        except CloseOutOfRange as e:
            raise SafetyViolation(WORKER_ORACLE, f"oracle cannot compute: {e}", idx) from e
        projections: dict[StockKey, Projection] = {
            kc.key: store.projection(kc.key) for kc in m.cfg.keys
        }
        refs = [
            RejectionRef(r.record.coords.partition, r.record.coords.offset, r.reason)
            for r in store.rejections
        ]
        worker = ComputeResult.build(m.cfg, projections, refs, store.conflicts())
        want = expected.result
        if worker.keys != want.keys:
            msg = _first_key_difference(worker.keys, want.keys)
            raise SafetyViolation(WORKER_ORACLE, msg, idx)
        held = sorted(store.rejections, key=lambda r: r.record.coords)
        if worker.rejections != want.rejections or held != list(expected.rejections):
            msg = (
                f"quarantine {[r.to_json() for r in worker.rejections]},"
                f" oracle rejects {[r.to_json() for r in want.rejections]}"
            )
            raise SafetyViolation(QUARANTINE_ORACLE, msg, idx)
        if worker.conflicts != want.conflicts:
            msg = f"conflicts {worker.conflicts}, oracle {want.conflicts}"
            raise SafetyViolation(CONFLICTS_ORACLE, msg, idx)
