"""deploy/alertmanager/alertmanager.yml: valid for amtool, and its inhibit rules leave the cause of a cascade.

A real Alertmanager runs the shipped file unchanged; each case posts the alerts a failed
run raises (as Prometheus would send them, every case its own run) and reads back which
are active and which are inhibited. The fire drill through Prometheus is in
tests/test_e2e_alerts.py (test_alertmanager_shows_only_the_cause).
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.support.alertmanager import SHIPPED_CONFIG, AlertmanagerServer, require_alertmanager
from tests.support.net import eventually


def alert(name: str, rank: str = "", **labels: str) -> dict[str, str]:
    return {"alertname": name, "node": "node-0", **({"rank": rank} if rank else {}), **labels}


STALLED = alert("TrainingStalled", severity="critical")
# case -> (alerts the run raises, the (alertname, rank, kind) of those that must stay active)
CASCADES = {
    "oom-then-timeouts": (
        [alert("TrainingOutOfMemory", "2"), alert("TrainingProcessCrashed", "2", kind="traceback"),
         *(alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "013"),
         STALLED, alert("TrainingFirstStalledRank", "0"), alert("TrainingStalledAcceleratorsIdle")],
        {("TrainingOutOfMemory", "2", "")},
    ),
    "crash-then-timeouts": (
        [alert("TrainingProcessCrashed", "1", kind="segfault"),
         *(alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "023"),
         STALLED, alert("TrainingFirstStalledRank", "3"), alert("TrainingMetricsMissing")],
        {("TrainingProcessCrashed", "1", "segfault")},
    ),
    # The NCCL error says why its rank crashed: its crash is held back, another rank's is not.
    "nccl-error-then-timeouts": (
        [alert("TrainingCommunicationError", "1", kind="nccl"), alert("TrainingProcessCrashed", "1", kind="traceback"),
         *(alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "023"), STALLED,
         alert("TrainingProcessCrashed", "4", kind="segfault")],
        {("TrainingCommunicationError", "1", "nccl"), ("TrainingProcessCrashed", "4", "segfault")},
    ),
    # A GPU fallen off the bus: its rank's crash, the NCCL error and timeouts of the others follow.
    "hardware-then-timeouts": (
        [alert("TrainingHardwareError", "6"), alert("TrainingProcessCrashed", "6", kind="traceback"),
         alert("TrainingCommunicationError", "7", kind="nccl"),
         *(alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "012"), STALLED],
        {("TrainingHardwareError", "6", "")},
    ),
    "node-lost": (
        [alert("TrainingNodeTimedOut"), STALLED, alert("TrainingFirstStalledRank", "5"),
         alert("TrainingCommunicationError", "0", kind="nccl_timeout")],
        {("TrainingNodeTimedOut", "", "")},
    ),
    # A hang: the stall stays (the critical page), the first stalled rank names the lead.
    "hang-then-timeouts": (
        [STALLED, alert("TrainingFirstStalledRank", "1"),
         *(alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "023")],
        {("TrainingStalled", "", ""), ("TrainingFirstStalledRank", "1", "")},
    ),
    # Nothing to blame: timeouts without a cause among the alerts are all shown.
    "timeouts-alone": (
        [alert("TrainingCommunicationError", rank, kind="nccl_timeout") for rank in "01"],
        {("TrainingCommunicationError", "0", "nccl_timeout"), ("TrainingCommunicationError", "1", "nccl_timeout")},
    ),
    # The exporters' cause model named the cause (root_cause="true", joined by the rules): one page, on any node.
    # Rank 9 on node-1 ran out of memory; node-0's ranks time out, their crash, the stall of both nodes follow.
    "named-cause-across-nodes": (
        [alert("TrainingOutOfMemory", "9", node="node-1", root_cause="true"),
         alert("TrainingProcessCrashed", "9", kind="traceback", node="node-1"),
         *(alert("TrainingCommunicationError", rank, kind="collective_timeout") for rank in "012"),
         *(alert("TrainingProcessCrashed", rank, kind="traceback") for rank in "012"),
         STALLED, alert("TrainingStalled", node="node-1", severity="critical"), alert("TrainingFirstStalledRank", "9")],
        {("TrainingOutOfMemory", "9", "")},
    ),
    # A hang named: the stall of the hung rank's node carries it; the first stalled rank, the other node's stall,
    # the others' timeouts and the crashes they raised are held back (without the name, a crash would hold the
    # stall back and the run would page for a follower).
    "named-hang": (
        [alert("TrainingStalled", "1", severity="critical", root_cause="true"),
         alert("TrainingStalled", node="node-1", severity="critical"), alert("TrainingFirstStalledRank", "1"),
         *(alert("TrainingCommunicationError", rank, kind="collective_timeout") for rank in "023"),
         *(alert("TrainingProcessCrashed", rank, kind="traceback") for rank in "023")],
        {("TrainingStalled", "1", "")},
    ),
    # A NaN on every rank after the all-reduce: the origin's alert pages, the others' are held back.
    "named-nan-origin": (
        [*(alert("TrainingLossNonFinite", rank) for rank in "013"),
         alert("TrainingLossNonFinite", "2", root_cause="true")],
        {("TrainingLossNonFinite", "2", "")},
    ),
    # Each rank's OOM is its own cause: none hides another.
    "two-ooms": (
        [alert("TrainingOutOfMemory", "2"), alert("TrainingOutOfMemory", "6")],
        {("TrainingOutOfMemory", "2", ""), ("TrainingOutOfMemory", "6", "")},
    ),
}


def test_amtool_accepts_the_shipped_config():
    result = subprocess.run([require_alertmanager("amtool"), "check-config", str(SHIPPED_CONFIG)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    rules = len(yaml.safe_load(SHIPPED_CONFIG.read_text())["inhibit_rules"])
    assert "SUCCESS" in result.stdout and f"{rules} inhibit rules" in result.stdout, result.stdout


@pytest.fixture(scope="module")
def alertmanager(tmp_path_factory):
    with AlertmanagerServer(tmp_path_factory.mktemp("alertmanager")) as server:
        for run, (alerts, _) in CASCADES.items():
            server.post([{**labels, "run": run} for labels in alerts])
        yield server


def _identity(alert: dict) -> tuple[str, str, str]:
    labels = alert["labels"]
    return labels["alertname"], labels.get("rank", ""), labels.get("kind", "")


@pytest.mark.parametrize("run", sorted(CASCADES))
def test_only_the_cause_stays_active(alertmanager, run):
    posted, cause = CASCADES[run]
    alerts = eventually(lambda: (found := alertmanager.alerts(run=run)) and len(found) == len(posted) and found,
                        10, interval=0.1, what=f"the {len(posted)} alerts of run {run}")
    active = {_identity(found) for found in alerts if found["status"]["state"] == "active"}
    assert active == cause
    for found in alerts:
        inhibited = found["status"]["state"] == "suppressed"
        assert inhibited == bool(found["status"]["inhibitedBy"]), found  # suppressed only by inhibition here
        assert inhibited != (_identity(found) in cause), found


def test_another_runs_cause_inhibits_nothing(alertmanager):
    """``equal: [run]``: an OOM in one run leaves another run's timeouts alone."""
    alertmanager.post([alert("TrainingCommunicationError", "0", kind="nccl_timeout", run="bystander")])
    (found,) = eventually(lambda: alertmanager.alerts(run="bystander"), 10, interval=0.1, what="the bystander alert")
    assert found["status"]["state"] == "active" and not found["status"]["inhibitedBy"]
