"""Hostile input files: `amends load` and `amends compute` read them alike and fail in one line.

Every failure is exit 2 with one line ``FILE:LINE: problem`` (never exit 70,
never a traceback), and both commands give the same line for the same file:
one reading (``amends_core.records``) serves both. ``amends load`` checks
its files before it connects to anything, so these run without PostgreSQL or
Kafka (plain ``load`` is used where the real command matters, ``--check``
where only the reading does).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from amends_core import limits, records, wire
from amends_core.ledger import INT64_MAX
from amends_core.records import InputReader, RecordsError
from amends_pipeline.cli import main
from amends_pipeline.kafka.load import load_plan
from tests.builders import K1, txn, value

AMENDS = str(Path(sys.executable).with_name("amends"))
CONFIG = {
    "schema_version": 1,
    "namespace": "files-test",
    "source_incarnation": "src-1",
    "partitions": 2,
    "origin": "2026-01-01T00:00:00Z",
    "keys": [
        {"item": K1.item, "location": K1.location, "opening_balance": 100, "reorder_threshold": 60, "partition": 0},
    ],
}
TKEY = K1.transport_key().decode()


def framed(partition: int = 0, offset: int = 0, **extra: Any) -> str:
    obj: dict[str, Any] = {"partition": partition, "offset": offset, "key": TKEY,
                           "value": value(txn(f"T{offset}", qty=-1)).decode()}
    obj.update(extra)
    return json.dumps(obj, separators=(",", ":"))


@pytest.fixture
def cfg(tmp_path: Path) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    return str(path)


def write(tmp_path: Path, text: str | bytes, name: str = "in.jsonl") -> str:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def both_via_subprocess(cfg: str, path: str) -> list[subprocess.CompletedProcess[str]]:
    env_free = {"PATH": "/usr/bin:/bin", "AMENDS_PG_DSN": "postgresql://nobody@127.0.0.1:1/none"}
    return [
        subprocess.run([AMENDS, "load", "--config", cfg, path], capture_output=True, text=True,
                       timeout=120, env=env_free, check=False),
        subprocess.run([AMENDS, "compute", "--config", cfg, "--engine", "incremental", "--records", path],
                       capture_output=True, text=True, timeout=120, check=False),
        subprocess.run([AMENDS, "compute", "--config", cfg, "--engine", "oracle", "--records", path],
                       capture_output=True, text=True, timeout=120, check=False),
    ]


def assert_one_line_exit_2(runs: list[subprocess.CompletedProcess[str]], where: str, problem: str) -> None:
    lines = []
    for r in runs:
        assert r.returncode == 2, (r.args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr
        (line,) = r.stderr.strip().splitlines()
        assert f"{where}: " in line and problem in line, line
        lines.append(line.split(": ", 1)[1])  # without the "amends <command>" prefix
    assert len(set(lines)) == 1, lines  # the same words from load and from compute


# ---------------------------------------------------------------- one line, exit 2, never 70


def test_a_deeply_nested_line_is_exit_2_naming_file_and_line_in_load_and_compute(tmp_path: Path, cfg: str) -> None:
    path = write(tmp_path, framed(0, 0) + "\n" + "[" * 200_000 + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:2", "nests deeper than 32")


def test_a_deeply_nested_framing_object_is_refused_like_any_deep_line(tmp_path: Path, cfg: str) -> None:
    path = write(tmp_path, '{"partition":0,"offset":0,"key":null,"value":' + '{"a":' * 50_000 + "1" + "}" * 50_001 + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:1", "nests deeper than 32")


def test_duplicate_framing_members_are_refused_instead_of_keeping_the_last(tmp_path: Path, cfg: str) -> None:
    line = framed(0, 0)[:-1] + ',"offset":7}'
    path = write(tmp_path, framed(1, 3) + "\n" + line + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:2", "member 'offset' appears more than once")


def test_a_line_above_the_line_limit_is_refused_before_it_is_parsed(tmp_path: Path, cfg: str) -> None:
    big = framed(0, 0, value="x" * (limits.MAX_LINE_BYTES + 10))
    path = write(tmp_path, framed(0, 1) + "\n\n" + big + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:3", "byte limit")


def test_an_offset_above_int64_is_refused_by_load_and_both_engines(tmp_path: Path, cfg: str) -> None:
    path = write(tmp_path, framed(0, INT64_MAX) + "\n" + framed(0, INT64_MAX + 1) + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:2", f"offset {INT64_MAX + 1} is above")


def test_a_partition_outside_the_configuration_names_its_line(tmp_path: Path, cfg: str) -> None:
    path = write(tmp_path, framed(1, 0) + "\n" + framed(2, 0) + "\n")
    assert_one_line_exit_2(both_via_subprocess(cfg, path), f"{path}:2", "partition 2 outside 0..1")


# ---------------------------------------------------------------- load and compute agree


def run_in_process(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    return code, err.split(": ", 1)[1] if err else ""


def verdicts(capsys: pytest.CaptureFixture[str], cfg: str, paths: list[str]) -> tuple[tuple[int, str], ...]:
    load = run_in_process(capsys, ["load", "--config", cfg, "--check", *paths])
    rec = [a for p in paths for a in ("--records", p)]
    inc = run_in_process(capsys, ["compute", "--config", cfg, "--engine", "incremental", *rec])
    ora = run_in_process(capsys, ["compute", "--config", cfg, "--engine", "oracle", *rec])
    return load, inc, ora


HOSTILE_LINES = [
    '{"partition":0,"offset":1.0,"key":null,"value":"x"}',  # a float offset
    '{"partition":0,"key":null,"value":"x"}',  # no offset (load used to send it as a raw value)
    '{"partition":true,"offset":0,"key":null,"value":"x"}',
    '{"partition":0,"offset":0,"key":null,"value":"x","value_b64":"eA=="}',
    '{"partition":0,"offset":0,"key":null,"value":"x","extra":1}',
    '{"partition":0,"offset":0,"key":7,"value":"x"}',
    '{"partition":0,"offset":0,"key":null,"value_b64":"***"}',
    '{"partition":0,"offset":-1,"key":null,"value":"x"}',
    '{"partition":0,"offset":NaN,"key":null,"value":"x"}',
    '{"offset":3}',
    "not json",  # a raw value among framed records
    '{"txn_id":"X"}',  # a raw value among framed records
    "\xff\xfe",
    framed(0, 0),  # the offset repeated
]


@pytest.mark.parametrize("bad", HOSTILE_LINES)
def test_load_and_compute_refuse_a_framed_file_with_one_bad_line_in_the_same_words(
    tmp_path: Path, cfg: str, capsys: pytest.CaptureFixture[str], bad: str
) -> None:
    path = write(tmp_path, (framed(0, 0) + "\n" + framed(1, 5) + "\n" + bad + "\n").encode("utf-8", "surrogateescape"))
    load, inc, ora = verdicts(capsys, cfg, [path])
    assert load == inc == ora and load[0] == 2, (load, inc, ora)
    assert load[1].startswith(f"{path}:3: "), load


def test_a_file_load_accepts_is_exactly_a_file_compute_accepts_over_random_framed_files(
    tmp_path: Path, cfg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(14)
    seen = {0: 0, 2: 0}
    good = [framed(0, 0), framed(1, 2), framed(0, 9, key=None), framed(1, 0, value_b64="/w==", value=None)]
    good[3] = good[3].replace(',"value":null', "")
    for i in range(60):
        lines = rng.sample(good, rng.randint(1, len(good)))
        if rng.random() < 0.6:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(HOSTILE_LINES))
        if rng.random() < 0.3:
            lines.insert(rng.randrange(len(lines) + 1), "   ")
        path = write(tmp_path, ("\r\n" if i % 2 else "\n").join(lines).encode("utf-8", "surrogateescape"), f"f{i}.jsonl")
        load, inc, ora = verdicts(capsys, cfg, [path])
        assert load[0] == inc[0] == ora[0], (lines, load, inc, ora)
        assert load[1] == inc[1] == ora[1], (lines, load, inc, ora)
        seen[load[0]] += 1
    assert seen[0] and seen[2], seen  # both outcomes were exercised


def test_every_accepted_framed_line_means_the_same_message_to_load_as_the_record_to_compute() -> None:
    reader = InputReader(2)
    lines = [framed(1, 4), framed(0, 9, key=None), framed(0, 2, value="\ud800")]
    reader.add_file("f", [x.encode("utf-8", "surrogatepass") for x in lines])
    sent = load_plan(wire.decode_config(json.dumps(CONFIG).encode()), reader)
    computed = records.framed_input(reader, "src-1")
    assert [(m.partition, m.key, m.value) for m in sent] == [
        (r.coords.partition, r.key, r.value) for p in sorted(computed) for r in computed[p]
    ]
    assert [r.coords.offset for r in computed[0]] == [2, 9]


def test_a_file_of_raw_values_is_for_load_only_and_compute_says_so_naming_the_first_line(
    tmp_path: Path, cfg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, "\n" + value(txn("A", qty=-1)).decode() + "\nnot json\n")
    load, inc, _ = verdicts(capsys, cfg, [path])
    assert load == (0, "")
    assert inc[0] == 2 and inc[1].startswith(f"{path}:2: not a framed record") and "amends load" in inc[1]


def test_a_framed_record_inside_a_file_of_raw_values_is_refused_by_both(
    tmp_path: Path, cfg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, value(txn("A", qty=-1)).decode() + "\n" + framed(0, 0) + "\n")
    load, inc, _ = verdicts(capsys, cfg, [path])
    assert load[0] == 2 and load[1].startswith(f"{path}:2: a framed record in a file of raw values")
    assert inc[0] == 2


def test_a_repeated_offset_across_files_names_both_lines(tmp_path: Path, cfg: str, capsys: pytest.CaptureFixture[str]) -> None:
    a = write(tmp_path, framed(0, 0) + "\n" + framed(0, 3) + "\n", "a.jsonl")
    b = write(tmp_path, framed(1, 3) + "\n" + framed(0, 3) + "\n", "b.jsonl")
    load, inc, ora = verdicts(capsys, cfg, [a, b])
    assert load == inc == ora
    assert load[0] == 2 and load[1] == f"{b}:2: partition 0 has offset 3 twice (also at {a}:2)"


def test_reading_stops_at_a_chunk_cut_at_the_line_limit() -> None:
    reader = InputReader(1)
    with pytest.raises(RecordsError, match=r"^f:2: line is above"):
        reader.add_file("f", [framed(0, 0).encode() + b"\n", b"x" * limits.CHUNK_BYTES])
