"""Checks for the Prometheus rules in deploy/prometheus/rules/.

- promtool (Debian package `prometheus`) validates the rule files and runs the
  unit tests in tests/rules/*.yml; skipped only when promtool is not on PATH.
- Pure-Python checks on the YAML: every alert of DESIGN 3.4 exists with a
  severity, a summary and description naming run/node/rank, a runbook_url
  whose file exists; every alert has promtool cases where it fires and where
  it stays quiet; the THRESHOLDS table at the top of each rule file agrees
  with the rules.
- Mutation checks: weakening a rule in a copy of the file must make the
  promtool unit tests fail, so the tests are known to be able to fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.thresholds import RULE_KEYS
from tests.support.prometheus import require_binary

ROOT = Path(__file__).resolve().parent.parent
RULES_DIR = ROOT / "deploy" / "prometheus" / "rules"
RULE_FILES = sorted(RULES_DIR.glob("*.yml"))
MAIN_RULES = RULES_DIR / "trainlog-alerts.yml"
TEST_DIR = ROOT / "tests" / "rules"
TEST_FILES = sorted(TEST_DIR.glob("*.yml"))
RUNBOOKS = ROOT / "docs" / "runbooks"
ALERTS_DOC = ROOT / "docs" / "alerts.md"
RUNBOOK_PREFIX = "https://github.com/trainlog-exporter/trainlog-exporter/blob/main/docs/runbooks/"

# DESIGN section 3.4: the alert names are a contract.
DESIGN_ALERTS = {
    "TrainingLossNonFinite",
    "TrainingLossSpike",
    "TrainingLossPlateau",
    "TrainingStalled",
    "TrainingFirstStalledRank",
    "TrainingStraggler",
    "TrainingThroughputDrop",
    "TrainingOutOfMemory",
    "TrainingCommunicationError",
    "TrainingProcessCrashed",
    "TrainingNodeTimedOut",
    "TrainingMetricsMissing",
    "TrainingExporterDown",
    "TrainingRankDivergence",
    "TrainingSlowdown",
    "TrainingRestartLoop",
    "TrainingGoodputLow",
}
# Alerts about a whole run (or the exporter) rather than one rank: their text
# names the run and the node, not a rank.
RUN_LEVEL_ALERTS = {
    "TrainingStalled",
    "TrainingMetricsMissing",
    "TrainingNodeTimedOut",
    "TrainingProcessExited",  # training_process_up is per pod: run and node, no rank
    "TrainingExporterDown",
    "TrainingStalledAcceleratorsIdle",
    "TrainingStalledAcceleratorsBusy",
    # Synchronous training slows down and restarts as a whole: judged per node of the run.
    "TrainingSlowdown",
    "TrainingRestartLoop",
    "TrainingGoodputLow",
}
SEVERITIES = {"critical", "warning", "info"}



def _load(path: Path) -> dict:
    with path.open(encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _rules(path: Path) -> list[dict]:
    return [rule for group in _load(path)["groups"] for rule in group["rules"]]


def _all_alerts() -> dict[str, dict]:
    alerts: dict[str, dict] = {}
    for path in RULE_FILES:
        for rule in _rules(path):
            if "alert" in rule:
                assert rule["alert"] not in alerts, f"duplicate alert {rule['alert']}"
                alerts[rule["alert"]] = rule
    return alerts


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [require_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )


# --------------------------------------------------------------------------
# promtool
# --------------------------------------------------------------------------


def test_rule_and_test_files_exist():
    assert MAIN_RULES in RULE_FILES
    assert len(TEST_FILES) >= 5, TEST_FILES


def test_promtool_check_rules():
    proc = _run("check", "rules", *map(str, RULE_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_test_rules():
    proc = _run("test", "rules", *map(str, TEST_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAILED" not in proc.stdout + proc.stderr


# The stall alert's condition with its finished-run guard, as trainlog-alerts.yml writes it.
STALL_GUARDED = ("and on (run) trainlog:run:stalled_seconds\n"
                 "          unless on (run) trainlog:run:finished\n        labels:\n          severity: critical")

# Each mutation weakens or breaks one idea of the rules; the unit tests must
# notice. (old, new) are exact substrings of trainlog-alerts.yml.
MUTATIONS = {
    "stall threshold ignores the rank's own": (
        'clamp_min(training_stall_threshold_seconds{rank!=""}, 120)',
        'clamp_min(training_stall_threshold_seconds{rank!=""} * 0 + 600, 120)',
    ),
    "stall floor": ('clamp_min(training_stall_threshold_seconds{rank!=""}, 120)',
                    'clamp_min(training_stall_threshold_seconds{rank!=""}, 60)'),
    "stall when one rank is silent": ("min by (run) (trainlog:rank:silence_over_threshold_seconds) > 0",
                                      "max by (run) (trainlog:rank:silence_over_threshold_seconds) > 0"),
    "the hung rank's stall carries no root cause": ("group_left (rank, root_cause)", "group_left (rank)"),
    "errors never carry the root cause": (
        '* on (run, node, rank, kind) group_left (root_cause) trainlog:incident:root_cause\n'
        '          or on (run, node, rank, kind)\n          trainlog:rank:errors:counted10m',
        '* on (run, node, rank, kind) group_left () trainlog:incident:root_cause\n'
        '          or on (run, node, rank, kind)\n          trainlog:rank:errors:counted10m'),
    "stall per node instead of per run": (
        STALL_GUARDED,
        "unless on (run) trainlog:run:finished\n        labels:\n          severity: critical",
    ),
    "scheduler hides the hang": (
        'max by (run, node) (training_last_log_timestamp_seconds{rank!=""})\n          or\n',
        "",
    ),
    "PP-silent ranks become stall candidates": (
        "(training_last_log_timestamp_seconds{rank!=\"\"} and on (run, node, rank) training_step)",
        "(training_last_log_timestamp_seconds{rank!=\"\"})",
    ),
    "no finished-run guard on the stall": (
        STALL_GUARDED,
        "and on (run) trainlog:run:stalled_seconds\n        labels:\n          severity: critical",
    ),
    "straggler factor": ("ratio_to_run_median > 1.5", "ratio_to_run_median > 2.5"),
    "straggler needs no quorum": (
        "ranks_with_step_duration:count >= 3", "ranks_with_step_duration:count >= 1"
    ),
    "throughput ratio": ("ratio_to_avg1h < 0.7", "ratio_to_avg1h < 0.3"),
    "metrics missing judged per node": (
        "unless on (run) (trainlog:run:steps:increase10m > 0)",
        "unless on (run, node) (sum by (run, node) (increase(training_steps_total[10m])) > 0)",
    ),
    "counter compared to a level, not increased": (
        'increase(training_errors_total[10m]) > 0\n          or\n',
        'training_errors_total > 1\n          or\n',
    ),
    "a failure before the first scrape never pages": (
        "(training_errors_total > 0 unless training_errors_total offset 10m)",
        "(training_errors_total > 0 unless training_errors_total)",
    ),
    "crashes joined on another alert's kinds": (
        'trainlog_kind_info{alert="TrainingProcessCrashed"}',
        'trainlog_kind_info{alert="TrainingOutOfMemory"}',
    ),
    "wrong OOM severity": (
        "severity: critical\n        annotations:\n          summary: \"Out of memory",
        "severity: warning\n        annotations:\n          summary: \"Out of memory",
    ),
    "exporter job regex": ('up{job=~".*trainlog.*"} == 0', 'up{job="trainlog"} == 0'),
    "divergence without the other ranks": (
        "(trainlog:run:ranks_departed:count < 0.5 * trainlog:run:ranks_with_rank_values:count)",
        "(trainlog:run:ranks_departed:count > 0)",
    ),
    "divergence without the settle": ('[10m] offset 1m) > 0', '[10m]) > 0'),
    "divergence with a majority": ("ranks_departed:count < 0.5 *", "ranks_departed:count <= 0.5 *"),
}


INCIDENT_RULES = RULES_DIR / "trainlog-incidents.yml"
INCIDENT_MUTATIONS = {
    "slowdown judged per rank": ("count by (run, node) (increase(training_anomalies_total{kind=\"slowdown\"}",
                                 "count by (run, node, rank) (increase(training_anomalies_total{kind=\"slowdown\"}"),
    "restart loop count": ("    ) >= 3\n", "    ) >= 2\n"),
    "restart loop extrapolates": ("training_restarts_total{rank!=\"\"}\n              - min_over_time(",
                                  "0 * training_restarts_total{rank!=\"\"}\n              + increase("),
    "restart loop ignores progress": ("(training_step <= max_over_time(training_step[1h] offset 2m))",
                                      "(training_step >= 0)"),
    "goodput ratio": ("goodput:ratio < 0.5", "goodput:ratio < 0.3"),
    "goodput judged before an hour is accounted": ("accounted_seconds_per_rank >= 3600)",
                                                   "accounted_seconds_per_rank >= 0)"),
}
MUTANTS = {**{name: (MAIN_RULES, change) for name, change in MUTATIONS.items()},
           **{name: (INCIDENT_RULES, change) for name, change in INCIDENT_MUTATIONS.items()}}


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_unit_tests_catch_mutation(name: str, tmp_path: Path):
    rules, (old, new) = MUTANTS[name]
    text = rules.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"mutation {name!r} no longer matches the rules"
    rules_copy = tmp_path / "deploy" / "prometheus" / "rules"
    rules_copy.mkdir(parents=True)
    for path in RULE_FILES:
        shutil.copy(path, rules_copy / path.name)
    (rules_copy / rules.name).write_text(text.replace(old, new), encoding="utf-8")
    tests_copy = tmp_path / "tests" / "rules"
    shutil.copytree(TEST_DIR, tests_copy)

    check = _run("check", "rules", str(rules_copy / rules.name))
    assert check.returncode == 0, f"mutant is not valid PromQL: {check.stdout}{check.stderr}"
    # A test file at a time, up to the first that fails: what one run of them all tells, in a fraction of its time.
    noticed = next((path.name for path in sorted(tests_copy.glob("*.yml"))
                    if _run("test", "rules", str(path), cwd=tmp_path).returncode != 0), None)
    assert noticed is not None, f"unit tests did not notice mutation {name!r}"


# --------------------------------------------------------------------------
# YAML content
# --------------------------------------------------------------------------


def test_every_design_alert_is_defined():
    missing = DESIGN_ALERTS - set(_all_alerts())
    assert not missing, f"alerts of DESIGN 3.4 missing from the rules: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(_all_alerts()))
def test_alert_labels_and_annotations(name: str):
    rule = _all_alerts()[name]
    assert rule.get("labels", {}).get("severity") in SEVERITIES, name
    ann = rule.get("annotations", {})
    summary, description = ann.get("summary", ""), ann.get("description", "")
    assert summary and description, f"{name}: summary and description are required"
    text = summary + " " + description
    if name == "TrainingExporterDown":
        # up{} carries no run/node: they are looked up from the target's series
        assert ".Labels.run" in description and ".Labels.node" in description, name
        assert "$labels.instance" in text, name
    else:
        assert "$labels.run" in description, f"{name}: description must name the run"
        assert "$labels.node" in description, f"{name}: description must name the node"
        assert "$labels.run" in summary, f"{name}: summary must name the run"
    if name not in RUN_LEVEL_ALERTS:
        assert "$labels.rank" in summary, f"{name}: summary must name the rank"
        assert "$labels.rank" in description, f"{name}: description must name the rank"
    assert ann.get("runbook_url") == f"{RUNBOOK_PREFIX}{name}.md", name
    runbook = RUNBOOKS / f"{name}.md"
    assert runbook.is_file(), f"missing runbook {runbook.relative_to(ROOT)}"
    body = runbook.read_text(encoding="utf-8")
    assert name in body, f"{runbook.name} does not name its alert"


def test_alerts_doc_lists_every_alert():
    doc = ALERTS_DOC.read_text(encoding="utf-8")
    for name in _all_alerts():
        assert f"`{name}`" in doc, f"docs/alerts.md does not list {name}"


def test_every_runbook_belongs_to_an_alert():
    alerts = set(_all_alerts())
    orphans = {p.stem for p in RUNBOOKS.glob("*.md") if p.name != "README.md"} - alerts
    assert not orphans, f"runbooks without an alert: {sorted(orphans)}"


def test_every_alert_is_tested_firing_and_quiet():
    """kubernetes-mixin style: each alert has a case where it must fire and
    one where it must not."""
    fires: set[str] = set()
    quiet: set[str] = set()
    exact: set[str] = set()
    for path in TEST_FILES:
        for case in _load(path).get("tests", []):
            for check in case.get("alert_rule_test", []):
                name = check["alertname"]
                expected = check.get("exp_alerts") or []
                (fires if expected else quiet).add(name)
                if any(e.get("exp_annotations") for e in expected):
                    exact.add(name)
    alerts = set(_all_alerts())
    assert alerts - fires == set(), f"never tested firing: {sorted(alerts - fires)}"
    assert alerts - quiet == set(), f"never tested quiet: {sorted(alerts - quiet)}"
    assert alerts - exact == set(), f"no exact annotations tested: {sorted(alerts - exact)}"


def test_test_files_use_relative_rule_paths():
    for path in TEST_FILES:
        for rule_file in _load(path)["rule_files"]:
            assert not Path(rule_file).is_absolute(), path
            assert (path.parent / rule_file).resolve().is_file(), f"{path.name}: {rule_file}"


# --------------------------------------------------------------------------
# The THRESHOLDS table is the one place where numbers are chosen: every value
# listed there must appear, as a whole token, in each rule it names.
# --------------------------------------------------------------------------

ROW = re.compile(r"^#\s*\|\s*([a-z_]+)\s*\|\s*(\S+)\s*\|\s*(.+?)\s*\|\s*$")


def _thresholds(path: Path) -> list[tuple[str, str, list[str]]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    start = lines.index("# BEGIN THRESHOLDS")
    end = lines.index("# END THRESHOLDS")
    rows = []
    for line in lines[start + 1 : end]:
        match = ROW.match(line)
        assert match, f"{path.name}: malformed threshold row {line!r}"
        key, value, used = match.groups()
        if key == "key":
            continue
        rows.append((key, value, used.split()))
    return rows


@pytest.mark.parametrize("path", RULE_FILES, ids=lambda p: p.name)
def test_threshold_table_matches_rules(path: Path):
    rows = _thresholds(path)
    assert rows, f"{path.name}: empty THRESHOLDS table"
    by_name = {r.get("alert") or r.get("record"): r for r in _rules(path)}
    for key, value, used in rows:
        token = re.compile(r"(?<![\w.])" + re.escape(value) + r"(?![\w.])")
        for name in used:
            assert name in by_name, f"{path.name}: {key} names unknown rule {name}"
            rule = by_name[name]
            haystack = rule["expr"] + " " + str(rule.get("for", ""))
            assert token.search(haystack), f"{path.name}: {key}={value} not found in {name}"


def test_package_thresholds_are_the_rules():
    """exporter/thresholds.py (analyze, the status page, the dashboards) says what the rules' table says."""
    table = {key: value for path in RULE_FILES for key, value, _ in _thresholds(path)}
    for key, value in RULE_KEYS.items():
        assert key in table, f"{key} is in no rules' THRESHOLDS table"
        assert float(table[key]) == value, f"{key}: {value} in exporter/thresholds.py, {table[key]} in the rules"
