"""The `amends compute` contract: arguments, output shape, exit codes."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from amends_core.ledger import INT64_MAX
from amends_pipeline.cli import main
from tests.builders import K1, K2, day, txn, value

CONFIG = {
    "schema_version": 1,
    "namespace": "cli-test",
    "source_incarnation": "src-1",
    "partitions": 2,
    "origin": "2026-01-01T00:00:00Z",
    "keys": [
        {"item": K2.item, "location": K2.location, "opening_balance": 5, "reorder_threshold": 1, "partition": 1},
        {"item": K1.item, "location": K1.location, "opening_balance": 100, "reorder_threshold": 60, "partition": 0},
        {"item": "UNTOUCHED", "location": "X", "opening_balance": 0, "reorder_threshold": 0, "partition": 0},
    ],
}


def line(partition: int, offset: int, obj: dict[str, Any] | bytes, key: str | None = "auto") -> str:
    raw = obj if isinstance(obj, bytes) else value(obj)
    if key == "auto":
        assert isinstance(obj, dict)
        key = json.dumps([obj["stock_key"]["item"], obj["stock_key"]["location"]], separators=(",", ":"))
    out: dict[str, Any] = {"partition": partition, "offset": offset, "key": key}
    try:
        out["value"] = raw.decode("utf-8")
    except UnicodeDecodeError:
        out["value_b64"] = base64.b64encode(raw).decode()
    return json.dumps(out)


def write(tmp: Path, cfg: dict[str, Any], lines: list[str]) -> tuple[str, str]:
    c, r = tmp / "config.json", tmp / "records.jsonl"
    c.write_text(json.dumps(cfg))
    r.write_text("\n".join(lines) + "\n")
    return str(c), str(r)


ENGINES = pytest.mark.parametrize("engine", ["incremental", "oracle"])


def compute(capsys: pytest.CaptureFixture[str], cfg: str, recs: str, engine: str = "incremental") -> tuple[int, Any, str]:
    code = main(["compute", "--config", cfg, "--engine", engine, "--records", recs])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


@ENGINES
def test_compute_reports_every_configured_key_sorted_with_rejections_and_conflicts(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    lines = [
        line(0, 0, txn("A", qty=-50)),
        line(0, 1, txn("B", qty=-5, valid=day(2))),
        line(0, 2, txn("B", qty=-6, valid=day(2))),
        line(0, 3, txn("B", revision=2, qty=-7, valid=day(2))),
        line(0, 5, b"\xff not json", key=None),
        line(1, 0, txn("C", key=K2, qty=-2)),
        line(1, 1, txn("C", key=K2, qty=-2), key=None),
    ]
    code, out, _ = compute(capsys, *write(tmp_path, CONFIG, lines), engine=engine)
    assert code == 0
    assert [(k["item"], k["location"]) for k in out["keys"]] == [("PART-1", "DEPOT-A"), ("PART-2", "DEPOT-A"), ("UNTOUCHED", "X")]
    k1 = out["keys"][0]
    assert k1 == {
        "item": "PART-1", "location": "DEPOT-A", "status": "READY", "reasons": [],
        "balances": [{"day": "2026-01-01", "close": 50}, {"day": "2026-01-02", "close": 43}],
        "alerts": [{"day": "2026-01-01", "threshold": 60, "close": 50}],
    }
    assert out["keys"][2] == {"item": "UNTOUCHED", "location": "X", "status": "READY", "reasons": [], "balances": [], "alerts": []}
    assert out["rejections"] == [
        {"partition": 0, "offset": 5, "reason": "MALFORMED"},
        {"partition": 1, "offset": 1, "reason": "KEY_MISMATCH"},
    ]
    assert out["conflicts"] == [{"item": "PART-1", "location": "DEPOT-A", "txn_id": "B", "revision": 1}]


@ENGINES
def test_a_blocked_key_reports_status_and_reasons_with_empty_business_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    lines = [line(0, 0, txn("A", qty=-5)), line(0, 1, txn("A", qty=-6))]
    code, out, _ = compute(capsys, *write(tmp_path, CONFIG, lines), engine=engine)
    assert code == 0
    assert out["keys"][0]["status"] == "BLOCKED"
    assert out["keys"][0]["reasons"] == [{"txn_id": "A", "revision": 1}]
    assert out["keys"][0]["balances"] == [] and out["keys"][0]["alerts"] == []


@ENGINES
def test_records_are_processed_per_partition_in_offset_order_whatever_the_file_order(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    lines = [line(0, 9, txn("A", revision=1, qty=-1)), line(0, 3, txn("A", revision=1, qty=-2))]
    code, out, _ = compute(capsys, *write(tmp_path, CONFIG, lines), engine=engine)
    assert code == 0 and out["keys"][0]["status"] == "BLOCKED"
    assert out["conflicts"] == [{"item": "PART-1", "location": "DEPOT-A", "txn_id": "A", "revision": 1}]


def test_several_records_files_are_combined(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c, r = write(tmp_path, CONFIG, [line(0, 0, txn("A", qty=-1))])
    r2 = tmp_path / "more.jsonl"
    r2.write_text(line(0, 1, txn("A", revision=2, qty=-3)) + "\n")
    assert main(["compute", "--config", c, "--engine", "incremental", "--records", r, "--records", str(r2)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["keys"][0]["balances"] == [{"day": "2026-01-01", "close": 97}]


@ENGINES
def test_a_close_outside_int64_exits_3_naming_key_and_day(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    cfg = json.loads(json.dumps(CONFIG))
    cfg["keys"][1]["opening_balance"] = INT64_MAX
    code, _, err = compute(capsys, *write(tmp_path, cfg, [line(0, 0, txn("A", qty=1, valid=day(3)))]), engine=engine)
    assert code == 3
    assert "PART-1" in err and "2026-01-03" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "mutate",
    [
        lambda c: c.update(schema_version=2),
        lambda c: c.update(partitions=0),
        lambda c: c.update(keys=[]),
        lambda c: c["keys"][0].update(partition=7),
        lambda c: c.update(origin="yesterday"),
        lambda c: c.update(unknown=True),
    ],
)
@ENGINES
def test_an_invalid_configuration_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, engine: str) -> None:
    cfg = json.loads(json.dumps(CONFIG))
    mutate(cfg)
    code, _, err = compute(capsys, *write(tmp_path, cfg, []), engine=engine)
    assert code == 2 and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "bad_line",
    [
        "not json",
        '{"partition":0,"offset":0,"key":null}',
        '{"partition":5,"offset":0,"key":null,"value":"{}"}',
        '{"partition":0,"offset":-1,"key":null,"value":"{}"}',
        '{"partition":0,"offset":0,"key":null,"value_b64":"***"}',
        '{"partition":0,"offset":0,"value":"{}"}',
    ],
)
@ENGINES
def test_unusable_records_files_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], bad_line: str, engine: str) -> None:
    code, _, err = compute(capsys, *write(tmp_path, CONFIG, [bad_line]), engine=engine)
    assert code == 2 and len(err.strip().splitlines()) == 1


@ENGINES
def test_a_repeated_offset_in_one_partition_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    code, _, err = compute(capsys, *write(tmp_path, CONFIG, [line(0, 1, txn()), line(0, 1, txn())]), engine=engine)
    assert code == 2 and "offset 1" in err


def test_missing_files_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compute", "--config", str(tmp_path / "none.json"), "--engine", "incremental", "--records", "x"])
    assert code == 2 and "cannot read" in capsys.readouterr().err


@ENGINES
def test_value_text_with_a_lone_surrogate_is_rejected_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str], engine: str) -> None:
    raw = '{"partition":0,"offset":0,"key":"[\\"PART-1\\",\\"DEPOT-A\\"]","value":"\\ud800"}'
    code, out, _ = compute(capsys, *write(tmp_path, CONFIG, [raw]), engine=engine)
    assert code == 0 and out["rejections"] == [{"partition": 0, "offset": 0, "reason": "MALFORMED"}]


def test_the_console_script_runs_compute_and_never_prints_a_traceback(tmp_path: Path) -> None:
    c, r = write(tmp_path, CONFIG, [line(0, 0, txn("A", qty=-1))])
    exe = Path(sys.executable).with_name("amends")
    ok = subprocess.run([str(exe), "compute", "--config", c, "--engine", "incremental", "--records", r], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["keys"][0]["balances"][0]["close"] == 99
    bad = subprocess.run([str(exe), "compute", "--config", r, "--engine", "incremental", "--records", r], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
