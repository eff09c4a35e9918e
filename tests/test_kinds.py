"""The table of kinds (exporter/kinds.py): every kind worded, paged or said why not, with a runbook that knows it.

A kind that lacks any of these fails here, so a new kind of failure is one entry of the
table, its signature, its test and its runbook.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from exporter import kinds
from exporter.parse import signatures
from exporter.state import TrainingState

ROOT = Path(__file__).resolve().parent.parent
RUNBOOKS = ROOT / "docs" / "runbooks"
RULES = ROOT / "deploy" / "prometheus" / "rules"
# Every shipped alert -> its severity label.
ALERTS = {rule["alert"]: rule.get("labels", {}).get("severity") for path in RULES.glob("*.yml")
          for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"] if "alert" in rule}
KIND_INFO = re.compile(r'trainlog_kind_info\{kind="([^"]*)",family="([^"]*)",severity="([^"]*)",alert="([^"]*)"')


@pytest.mark.parametrize("kind", kinds.KINDS.values(), ids=lambda kind: kind.name)
def test_every_kind_is_worded_and_paged_or_says_why_not(kind):
    assert kind.family in kinds.FAMILIES and kind.severity in kinds.SEVERITIES
    assert kind.words.strip(), f"{kind.name}: no words for it"
    if kind.alert is None:
        assert kind.quiet, f"{kind.name}: no alert, and no word on why nothing pages"
        return
    assert kind.alert in ALERTS, f"{kind.name}: {kind.alert} is no shipped alert"
    assert ALERTS[kind.alert] == kind.severity, f"{kind.name}: {kind.severity}, its alert pages {ALERTS[kind.alert]}"
    runbook = RUNBOOKS / f"{kind.alert}.md"
    assert runbook.is_file(), f"{kind.name}: no runbook {runbook.name}"
    assert f"`{kind.name}`" in runbook.read_text(encoding="utf-8"), \
        f"{kind.name}: its runbook {runbook.name} does not name it (as `{kind.name}`)"


def test_every_kind_a_signature_gives_is_an_error_kind_of_the_table():
    given = {kind for signature in signatures.SIGNATURES for kind in signature.kinds}
    assert given <= set(kinds.ERROR_KINDS), given - set(kinds.ERROR_KINDS)


def test_the_state_creates_every_anomaly_and_error_kind_at_zero():
    state = TrainingState()
    rank = state.register(("run", "node", "0"), {}, None)
    assert rank is not None
    assert tuple(rank.anomalies) == kinds.ANOMALY_KINDS and tuple(rank.errors) == kinds.ERROR_KINDS


def test_a_kind_unknown_to_the_table_counts_as_other():
    assert kinds.error_kind("made_up") == "other" and kinds.error_kind("oom") == "oom"
    assert kinds.error_kind("loss_spike") == "other"  # an anomaly is no error


def test_the_rules_tests_see_the_table_of_kinds_as_the_exporter_exposes_it():
    """tests/rules feed promtool trainlog_kind_info: the very rows of the table, so the join the rules make
    is tested on what an exporter serves."""
    expected = {(kind.name, kind.family, kind.severity, kind.alert or "") for kind in kinds.KINDS.values()}
    for path in sorted((ROOT / "tests" / "rules").glob("*.yml")):
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            rows = {KIND_INFO.search(series["series"]).groups()
                    for series in test["input_series"] if series["series"].startswith("trainlog_kind_info")}
            if rows:
                assert rows == expected, f"{path.name} {test['name']}: {rows ^ expected}"
