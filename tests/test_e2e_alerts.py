"""End to end: `simulate` injects an incident, the exporter follows, a real Prometheus sees it.

Each drill names the PromQL that must find the incident on exactly the expected ranks,
and the alert of DESIGN 3.4 that the shipped rules must raise for it. The alert checks
run once rule files exist in deploy/prometheus/rules; until then they are skipped.
"""

from __future__ import annotations

import pytest

from tests.support.drills import Drill, FireDrills, rule_files
from tests.support.net import eventually
from tests.support.prometheus import require_binary

ERRORS = 'increase(training_errors_total{run="{run}", kind="%s"}[1m]) > 0'
ANOMALIES = 'increase(training_anomalies_total{run="{run}", kind="%s"}[1m]) > 0'
ALL_RANKS = frozenset({"0", "1", "2", "3"})

DRILLS = (
    Drill("healthy", (), 'increase(training_anomalies_total{run="{run}"}[1m]) > 0 '
                         'or increase(training_errors_total{run="{run}"}[1m]) > 0', frozenset()),
    Drill("nan", ("nan@12",), ANOMALIES % "loss_nonfinite", ALL_RANKS, "TrainingLossNonFinite"),
    Drill("spike", ("spike:1@30",), ANOMALIES % "loss_spike", frozenset({"1"}), "TrainingLossSpike"),
    Drill("oom", ("oom:2@12",), ERRORS % "oom", frozenset({"2"}), "TrainingOutOfMemory"),
    # The survivors of an NCCL failure time out in the watchdog: a communication error on every rank.
    Drill("nccl", ("nccl:1@12",), ERRORS % "nccl", frozenset({"1"}), "TrainingCommunicationError", ALL_RANKS),
    Drill("hccl", ("hccl:3@12",), ERRORS % "hccl", frozenset({"3"}), "TrainingCommunicationError"),
    Drill("segfault", ("segfault:0@12",), ERRORS % "segfault", frozenset({"0"}), "TrainingProcessCrashed"),
    Drill("straggler", ("straggler:2",), 'training_step_duration_seconds{run="{run}"} > 1.5', frozenset({"2"}),
          "TrainingStraggler"),
)


@pytest.fixture(scope="module")
def drills(tmp_path_factory):
    require_binary("prometheus")
    with FireDrills(tmp_path_factory.mktemp("drills"), DRILLS) as running:
        yield running


@pytest.mark.parametrize("drill", DRILLS, ids=lambda drill: drill.run)
def test_incident_reaches_prometheus_on_its_ranks(drills, drill):
    if not drill.ranks:
        # A healthy run must stay quiet: check once it has run well past every drill's incident.
        eventually(lambda: drills.prometheus.query(f'training_step{{run="{drill.run}"}} >= 40'), 60, interval=0.5,
                   what=f"{drill.run} to reach step 40")
        assert drills.ranks_matching(drill) == set()
        return
    # Wait for every expected rank (a scrape may land between two ranks' files), then no others.
    found = eventually(lambda: (ranks := drills.ranks_matching(drill)) >= drill.ranks and ranks, 60, interval=0.5,
                       what=f"{drill.expression} on ranks {sorted(drill.ranks)}")
    assert found == drill.ranks


@pytest.mark.parametrize("drill", [drill for drill in DRILLS if drill.alert], ids=lambda drill: drill.run)
def test_shipped_rules_raise_the_alert(drills, drill):
    if not rule_files():
        pytest.skip("no alert rules in deploy/prometheus/rules yet")
    alerts = eventually(lambda: drills.alerts(drill.alert, drill.run), 120, interval=1, what=f"{drill.alert} for {drill.run}")
    ranks = {alert["labels"].get("rank") for alert in alerts}
    expected = drill.expected_alert_ranks
    assert ranks <= expected | {None}, f"{drill.alert} raised for ranks {ranks}, expected {sorted(expected)}"
