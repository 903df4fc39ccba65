"""What the Dagster sensors decide and what the UI is shown, without Dagster running anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dagster as dg

from amends_core.ledger import Conflict, Coordinates, Record, Rejection, RejectReason, StockKey
from amends_core.result import RejectionRef
from amends_core.verify import Counts, Difference, DiffKind, Report, VerifyStatus
from amends_pipeline.defs import metadata
from amends_pipeline.defs.definitions import defs
from amends_pipeline.ops.certify import Verification
from amends_pipeline.ops.orchestration import PartitionState, Snapshot
from amends_pipeline.ops.sensing import boundary_request, refold_requests

ROOT = Path(__file__).resolve().parents[2]


def state(p: int, high: int, frontier: int, pending: int = 0, out: int = 0, view: int = 0) -> PartitionState:
    return PartitionState(p, 0, high, frontier, pending, out, view, None)


def snap(*parts: PartitionState) -> Snapshot:
    return Snapshot("ns", "src", "out", "topic id X", tuple(parts))


def test_a_refold_is_wanted_only_for_partitions_behind_their_source_end() -> None:
    s = snap(state(0, 10, 10), state(1, 12, 7))
    assert [(w.partition, w.target, w.run_key) for w in refold_requests(s, [], [])] == [(1, 12, "refold:ns:1:12")]


def test_no_refold_is_requested_for_a_partition_with_a_run_in_flight() -> None:
    assert refold_requests(snap(state(0, 10, 3)), in_flight=[0], failed=[]) == []


def test_a_failed_run_never_wedges_its_run_key() -> None:
    s = snap(state(0, 10, 3))
    keys = [refold_requests(s, [], failed)[0].run_key for failed in ([], [(0, 10)], [(0, 10), (0, 10)], [(0, 9)])]
    assert keys == ["refold:ns:0:10", "refold:ns:0:10:retry-1", "refold:ns:0:10:retry-2", "refold:ns:0:10"]


def test_verification_is_launched_once_per_drained_boundary() -> None:
    drained = snap(state(0, 5, 5, 0, 7, 7))
    key = drained.boundary_key
    assert boundary_request(drained, None) == f"boundary:ns:{key}"
    assert boundary_request(drained, key) is None
    assert boundary_request(snap(state(0, 6, 6, 0, 9, 9)), key) is not None


def test_no_verification_is_launched_while_any_partition_has_work_left() -> None:
    for s in (state(0, 5, 4), state(0, 5, 5, pending=1), state(0, 5, 5, 0, 7, 6)):
        assert boundary_request(snap(s), None) is None
    stopped = PartitionState(0, 0, 5, 5, 0, 7, 7, "protocol error")
    assert boundary_request(snap(stopped), None) is None


def test_the_check_metadata_lists_every_difference_exclusion_and_conflict_as_tables() -> None:
    key = StockKey("ITEM", "LOC")
    diffs = tuple(
        Difference(DiffKind.BALANCE, f"balance day {i}", i, i + 1)
        for i in range(60)
    )
    r = Report(
        VerifyStatus.DRIFT, "ns", "d" * 64, differences=diffs, counts=Counts(1, 0, 60),
        conflicts=(Conflict(key, "T\u001b[31m", 2),),
    )
    md = metadata.verification(Verification(r, "0:5:7", False))
    assert md["status"] == "DRIFT" and md["accepted"] is False and md["differences"] == 60
    text = md["report"].value
    assert "| kind | subject | expected | actual |" in text
    assert "balance day 0" in text and "balance day 49" in text and "balance day 50" not in text
    assert "10 more rows not shown" in text
    assert "\u001b" not in text  # control characters never reach the UI


def test_rejections_appear_in_the_report_with_coordinates_and_reason() -> None:
    rej = Rejection(Record(b"x", None, Coordinates("src", 0, 7)), RejectReason.MALFORMED)
    r = Report(VerifyStatus.PASS_WITH_EXCLUSIONS, "ns", "d", rejections=(rej,))
    text = metadata.report_markdown(r)
    assert RejectionRef(0, 7, RejectReason.MALFORMED) in r.rejection_refs
    assert "| 0 | 7 | MALFORMED |" in text


def test_the_definitions_have_the_assets_check_jobs_and_sensors_the_ui_shows() -> None:
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {
        "source_snapshot", "refold", "published_envelopes", "view", "oracle_partition", "oracle", "certified_balances"
    }
    assert {c.name for c in graph.asset_check_keys} == {"verification"}
    assert {s.name for s in defs.sensors or []} == {"source_sensor", "relay_sensor", "view_sensor", "boundary_sensor"}
    refold_job = defs.resolve_job_def("refold_job")
    assert refold_job.partitions_def is not None and refold_job.partitions_def.get_partition_keys() == ["0"]
    part_job = defs.resolve_job_def("oracle_part_job")
    assert part_job.partitions_def is not None and part_job.partitions_def.get_partition_keys() == ["0"]
    assert {k.asset_key for k in graph.asset_check_keys} == {dg.AssetKey("oracle")}


def test_the_workspace_loads_and_validates() -> None:
    r = subprocess.run(
        [str(Path(sys.executable).with_name("dagster")), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "All code locations passed validation" in r.stdout + r.stderr


def test_a_run_left_started_by_a_killed_daemon_stops_holding_its_partition_back() -> None:
    from amends_pipeline.ops.sensing import STALE_RUN_SECONDS, live_partitions

    now = 10_000.0
    runs = [(0, False, now - STALE_RUN_SECONDS - 1), (1, False, now - 5), (2, True, now - 10 * STALE_RUN_SECONDS)]
    assert live_partitions(runs, now) == {1, 2}
    assert refold_requests(snap(state(0, 10, 3)), live_partitions(runs, now), []) != []


def test_the_view_metadata_shows_each_partition_as_ok_lagging_or_stopped_with_its_frontier() -> None:
    from amends_pipeline.ops.orchestration import ViewSummary

    ok = PartitionState(0, 0, 5, 5, 0, 7, 7, None, 0)
    lagging = PartitionState(1, 0, 5, 5, 0, 9, 4, None, 0)
    lost = PartitionState(2, 0, 5, 5, 0, 9, 4, None, 6)
    stopped = PartitionState(3, 0, 5, 5, 0, 9, 4, "offset 4: equal version, other content", 0)
    s = snap(ok, lagging, lost, stopped)
    assert [metadata.partition_state(p, s)["view_state"] for p in s.partitions] == [
        "ok",
        "lagging 5",
        "stopped: OutputLost: the output log starts at offset 6, after the view frontier",
        "stopped: offset 4: equal version, other content",
    ]
    table = metadata.view_partitions(s.partitions)
    assert table["view_current"] is False
    assert "| 1 | lagging 5 | 4 | 9 |" in table["view_partitions"].value
    assert metadata.view_partitions([ok])["view_current"] is True
    run = metadata.view(ViewSummary(0, 2, 7, 9, 5, 5, 0, 0.1))
    assert (run["view_state"], run["view_frontier"]) == ("lagging 2", 7)
