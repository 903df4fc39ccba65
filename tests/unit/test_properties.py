"""Property tests: order independence, idempotence of duplicates, view convergence."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amends_core.ledger import Envelope, OutputID
from amends_core.pipeline import MemoryPipeline
from amends_core.view import ViewState
from tests.builders import K1, K2, config, day, record, txn

CFG = config([(K1, 100, 60, 0), (K2, 20, 10, 0)])
EXAMPLES = int(os.environ.get("AMENDS_PROPERTY_EXAMPLES", "150"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Ident = tuple[Any, str, int]


@st.composite
def conflict_free_history(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Assertions where each (key, txn_id, revision) has exactly one canonical value."""
    idents = draw(
        st.lists(
            st.tuples(st.sampled_from([K1, K2]), st.sampled_from(["A", "B", "C", "D"]), st.integers(1, 4)),
            min_size=1,
            max_size=14,
            unique=True,
        )
    )
    out = []
    for key, tid, rev in idents:
        kind = draw(st.sampled_from(["NEW", "AMEND", "CANCEL"]))
        qty = 0 if kind == "CANCEL" else draw(st.integers(-40, 40))
        out.append(txn(tid, rev, kind, qty, valid=day(draw(st.integers(1, 6)), draw(st.integers(0, 23))), key=key))
    return out


def run(objs: list[dict[str, Any]]) -> MemoryPipeline:
    pipe = MemoryPipeline(CFG)
    pipe.append([record(o, i) for i, o in enumerate(objs)])
    pipe.drain()
    return pipe


def view_json(pipe: MemoryPipeline) -> dict[str, Any]:
    return {k.item: p.to_json() for k, p in pipe.view.projections().items()}


@SETTINGS
@given(conflict_free_history(), st.randoms(use_true_random=False))
def test_any_delivery_order_of_a_conflict_free_history_gives_the_same_view(
    hist: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = list(hist)
    rnd.shuffle(shuffled)
    assert view_json(run(hist)) == view_json(run(shuffled))


@SETTINGS
@given(conflict_free_history(), st.data())
def test_canonical_duplicates_never_change_the_view(hist: list[dict[str, Any]], data: st.DataObject) -> None:
    with_dups = list(hist)
    for _ in range(data.draw(st.integers(1, 6))):
        original = data.draw(st.sampled_from(hist))
        dup = dict(original, source_time="2027-06-01T00:00:00+05:00")  # source time is not canonical
        with_dups.insert(data.draw(st.integers(0, len(with_dups))), dup)
    base = run(hist)
    other = run(with_dups)
    assert view_json(base) == view_json(other)


@st.composite
def any_history(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Histories that may contain same-revision conflicts and their resolutions."""
    n = draw(st.integers(1, 16))
    out = []
    for _ in range(n):
        kind = draw(st.sampled_from(["NEW", "AMEND", "CANCEL"]))
        out.append(
            txn(
                draw(st.sampled_from(["A", "B", "C"])),
                draw(st.integers(1, 3)),
                kind,
                0 if kind == "CANCEL" else draw(st.integers(-40, 40)),
                valid=day(draw(st.integers(1, 5))),
                key=draw(st.sampled_from([K1, K2])),
            )
        )
    return out


@SETTINGS
@given(any_history(), st.randoms(use_true_random=False))
def test_the_reported_business_result_does_not_depend_on_delivery_order(
    hist: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = list(hist)
    rnd.shuffle(shuffled)
    a, b = run(hist).result().to_json(), run(shuffled).result().to_json()
    assert a["keys"] == b["keys"] and a["conflicts"] == b["conflicts"]


@SETTINGS
@given(any_history(), st.data())
def test_a_view_fed_any_interleaving_with_duplicates_and_stale_redelivery_converges_to_the_outbox(
    hist: list[dict[str, Any]], data: st.DataObject
) -> None:
    pipe = MemoryPipeline(CFG)
    pipe.append([record(o, i) for i, o in enumerate(hist)])
    pipe.run_worker(0)
    committed: list[Envelope] = [r.envelope for r in pipe.store.outbox[0]]
    latest: dict[OutputID, Envelope] = {}
    for e in committed:
        latest[e.output_id] = e
    # every committed envelope at least once, plus redeliveries, in any order
    deliveries = list(committed) + data.draw(st.lists(st.sampled_from(committed), max_size=20)) if committed else []
    deliveries = data.draw(st.permutations(deliveries))
    v = ViewState(CFG)
    for off, e in enumerate(deliveries):
        v.apply(0, off, e.to_bytes())
    assert not v.stopped
    assert v.rows == latest
    # what the view shows is exactly what the worker computed, frozen values included
    for kc in CFG.keys:
        assert v.projections()[kc.key] == pipe.store.projection(kc.key)
