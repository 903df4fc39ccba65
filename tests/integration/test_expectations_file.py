"""A malformed `amends verify --expect` file: exit 2 and one line naming the field at fault.

The expectations file is read before any service is contacted, so these run
the real command without PostgreSQL or Kafka; the environment points at
nothing, which would fail differently if the file were ever read later.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from amends_pipeline.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "fixtures" / "worked-example" / "config.json")
AMENDS = str(Path(sys.executable).with_name("amends"))
REASONS = (
    "RESERVED_HEADER, MALFORMED, IDENTITY, REVISION, KIND, CANCEL_QUANTITY, VALID_TIME,"
    " UNKNOWN_KEY, KEY_MISMATCH, ROUTING"
)
GOOD_REJECTION = '{"partition": 0, "offset": 4, "reason": "MALFORMED"}'
GOOD_CONFLICT = '{"item": "A", "location": "B", "txn_id": "X", "revision": 1}'

CASES = [
    (
        '{"rejections": [' + GOOD_REJECTION + ", " + GOOD_REJECTION + ', {"partition": 0, "reason": "KIND"}]}',
        'rejections[2] has no "offset"',
    ),
    ('{"rejections": [{"partition": 0, "offset": 1, "reason": "FOO"}]}', f"rejections[0].reason: 'FOO' is not one of {REASONS}"),
    ('{\n"rejections": [\n  {"partition": 0,\n    "offset" 5}]}', "not JSON: line 4 column 14: Expecting ':' delimiter"),
    ('{"rejections": [{"partition": "0", "offset": 1, "reason": "KIND"}]}', "rejections[0].partition: '0' is not an integer"),
    ('{"rejections": [{"partition": 0, "offset": -1, "reason": "KIND"}]}', "rejections[0].offset: -1 is negative"),
    ('{"rejections": [{"partition": true, "offset": 1, "reason": "KIND"}]}', "rejections[0].partition: true is not an integer"),
    ('{"rejections": {"partition": 0}}', "rejections is an object; expected a list"),
    ('{"rejections": [' + GOOD_REJECTION + ", 7]}", "rejections[1] is a number; expected an object"),
    ('{"conflicts": [' + GOOD_CONFLICT + ', {"item": "A", "location": "B", "revision": 1}]}', 'conflicts[1] has no "txn_id"'),
    ('{"conflicts": [{"item": "A", "location": "B", "txn_id": 7, "revision": 1}]}', "conflicts[0].txn_id: 7 is not a string"),
    ('{"conflicts": [{"item": "A", "location": "B", "txn_id": "X", "revision": 1.5}]}', "conflicts[0].revision: 1.5 is not an integer"),
    (
        '[{"partition": 0}]',
        'the document is a list; expected an object {"rejections": [{"partition", "offset", "reason"}],'
        ' "conflicts": [{"item", "location", "txn_id", "revision"}]}',
    ),
]


@pytest.fixture
def no_services(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMENDS_KAFKA_BOOTSTRAP", "127.0.0.1:1")
    monkeypatch.setenv("AMENDS_PG_DSN", "host=127.0.0.1 port=1 user=nobody dbname=nothing")


@pytest.mark.parametrize(("content", "fault"), CASES)
def test_a_malformed_expectations_file_is_one_line_naming_the_field(
    content: str, fault: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], no_services: None
) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    code = main(["verify", "--config", CONFIG, "--expect", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err == f"amends verify: expectations file {str(path)!r}: {fault}\n"


def test_undecodable_bytes_are_named_with_their_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_services: None
) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(b'{"rejections": [\xff]}')
    assert main(["verify", "--config", CONFIG, "--expect", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"amends verify: expectations file {str(path)!r}: not UTF-8 text: byte 16: invalid start byte\n"
    )


def test_the_installed_command_prints_exactly_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"rejections": [{"partition": 0, "offset": 3}]}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("AMENDS_")}
    env.update(AMENDS_KAFKA_BOOTSTRAP="127.0.0.1:1", AMENDS_PG_DSN="host=127.0.0.1 port=1 dbname=nothing")
    r = subprocess.run(
        [AMENDS, "verify", "--config", CONFIG, "--expect", str(path)],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f'amends verify: expectations file {str(path)!r}: rejections[0] has no "reason"\n'
