"""Parser cases as (format, fixture log, expected records) triples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.records import parse_fixture

FIXTURES = Path(__file__).parent / "fixtures"
CASES = sorted(FIXTURES.glob("*/*.expected.json"))


@pytest.mark.parametrize("expected_file", CASES, ids=lambda path: f"{path.parent.name}/{path.name.split('.')[0]}")
def test_fixture_parses_to_expected_records(expected_file: Path) -> None:
    log_file = expected_file.with_name(expected_file.name.replace(".expected.json", ".log"))
    expected = json.loads(expected_file.read_text())
    assert parse_fixture(log_file) == expected


def test_every_fixture_log_has_expectations() -> None:
    logs = sorted(FIXTURES.glob("*/*.log"))
    assert logs, "no fixtures found"
    missing = [log.name for log in logs if not log.with_name(log.stem + ".expected.json").exists()]
    assert missing == []
