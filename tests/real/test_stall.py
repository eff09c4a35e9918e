"""Hangs known in minutes, through a real Prometheus: a real torchrun DDP job of 1 s steps, followed live.

The exporter learns each rank's stall threshold from its pace (training_stall_threshold_seconds,
exporter/state/detectors/stall.py); Prometheus evaluates the shipped rules with the drills'
shortened windows (tests/test_e2e_alerts.py: the stall floor 5 s for 120 s, --stall-floor-seconds
likewise), so a 1 s-per-step run learns a threshold of 10 s where it would learn the floor in
production. A rank that hangs pages TrainingStalled naming it; a run whose rank 0 announces a
checkpoint save and is silent for longer than the threshold while it saves pages nothing.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.real.harness import BIN, PROGRAMS, require
from tests.support.alertmanager import AlertmanagerServer
from tests.support.drill_rules import write_shortened_rules
from tests.support.exporter_process import ExporterProcess, exporter_environment
from tests.support.net import eventually, sample, scrape
from tests.support.prometheus import PrometheusServer
from tests.test_e2e_alerts import EXPORTER_OPTIONS, RULE_TEST_VALUES, TEST_VALUES

pytestmark = pytest.mark.real

HANG_AT, CULPRIT = 8, 1
PAGE_WITHIN = 180.0  # seconds from the hang to TrainingStalled naming the rank (the 3 minutes)


@pytest.fixture(scope="module", autouse=True)
def _torch():
    require("torch")


class Watched:
    """A torchrun job followed by an exporter scraped by Prometheus with the shortened rules."""

    def __init__(self, root: Path, *args: str) -> None:
        self.root, self.log_dir = root, root / "logs"
        self.rules = [write_shortened_rules(path, root / "rules" / path.name, values)
                      for path, values in RULE_TEST_VALUES.items()]
        self.exporter = ExporterProcess("--log-dir", str(self.log_dir), "--run", "job", "--rescan-interval", "0.5",
                                        *EXPORTER_OPTIONS)
        self.command = ["nice", "-n", "19", str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "4",
                        "--log-dir", str(self.log_dir / "torchrun"), "--redirects", "3",
                        str(PROGRAMS / "ddp_train.py"), "--truth", str(root / "truth"), "--step-seconds", "1", *args]
        self.job: subprocess.Popen | None = None
        self.alerts: list[tuple[float, dict]] = []  # (when seen, labels) of every firing training alert

    def __enter__(self) -> Watched:
        self.exporter.start()
        self.alertmanager = AlertmanagerServer(self.root / "alertmanager")  # the shipped configuration
        self.alertmanager.start()
        self.prometheus = PrometheusServer(self.root / "prometheus", [f"127.0.0.1:{self.exporter.port}"],
                                           rule_files=self.rules, alertmanagers=[self.alertmanager.address])
        self.prometheus.start()
        self.log_dir.mkdir(parents=True)
        self.console = open(self.log_dir / "console.log", "wb")  # noqa: SIM115
        self.started = time.monotonic()
        self.job = subprocess.Popen(self.command, stdout=self.console, stderr=subprocess.STDOUT,
                                    env={**exporter_environment(), "PYTHONUNBUFFERED": "1"}, cwd=self.root)
        return self

    def __exit__(self, *exc_info) -> None:
        if self.job is not None and self.job.poll() is None:
            self.job.kill()
            self.job.wait(30)
        self.console.close()
        self.prometheus.stop()
        self.alertmanager.stop()
        self.exporter.stop()

    def poll(self) -> list[dict]:
        """The training alerts firing now, also kept in ``alerts`` with when they were seen."""
        firing = [alert["labels"] for alert in self.prometheus.api("alerts")["alerts"]
                  if alert["state"] == "firing" and alert["labels"]["alertname"].startswith("Training")]
        self.alerts += [(time.monotonic(), labels) for labels in firing]
        return firing

    def step_times(self, rank: int) -> list[float]:
        """The step times a rank printed, from its ground truth file."""
        path = self.root / "truth" / f"rank_{rank}.jsonl"
        return [record["step_time_seconds"] for record in map(json.loads, path.read_text().splitlines())
                if "step_time_seconds" in record]

    def hung_at(self) -> float:
        """When the culprit's last step line was written (the hang began right after it), monotonic."""
        log = self.log_dir / "torchrun"
        line = f"step={HANG_AT - 1}/".encode()
        eventually(lambda: any(line in path.read_bytes() for path in log.rglob("stdout.log")), 120, interval=0.25,
                   what="the culprit's last step line")
        return time.monotonic()


def test_a_hang_in_a_one_second_run_pages_within_minutes_naming_the_rank(tmp_path):
    with Watched(tmp_path, "--steps", "40", "--incident", "hang", "--rank", str(CULPRIT), "--at", str(HANG_AT),
                 "--timeout", "12") as watched:
        hung = watched.hung_at()

        def named() -> dict | None:
            return next((labels for labels in watched.poll() if labels["alertname"] == "TrainingStalled"
                         and labels.get("rank") == str(CULPRIT)), None)

        labels = eventually(named, PAGE_WITHIN, interval=1.0,
                            what=f"TrainingStalled naming rank {CULPRIT}; seen: {watched.alerts[-5:]}")
        assert labels["root_cause"] == "true"
        assert time.monotonic() - hung < PAGE_WITHIN
        threshold = float(watched.prometheus.query(
            f'training_stall_threshold_seconds{{rank="{CULPRIT}"}}')[0]["value"][1])
        # 10 x its own pace (not the floor): between its fastest and slowest step, the slowest late by one rescan
        # (a step line read late makes a longer gap; the shorter one after it counts as the printed step time).
        times = watched.step_times(CULPRIT)
        assert 10 * 0.9 * min(times) <= threshold <= 10 * (max(times) + 0.5), (threshold, times)
        (incident,) = watched.prometheus.query("training_incident_info")
        assert (incident["metric"]["kind"], incident["metric"]["rank"]) == ("hang", str(CULPRIT))

        def one_page() -> set[tuple[str, str]] | None:
            alerts = watched.alertmanager.alerts(run="job")
            active = {(alert["labels"]["alertname"], alert["labels"].get("rank", "")) for alert in alerts
                      if alert["status"]["state"] == "active"}
            return active if active == {("TrainingStalled", str(CULPRIT))} else None

        # Alertmanager with the shipped inhibit rules: one active page, the stall naming the hung rank (the others'
        # timeouts, crashes and the first stalled rank held back by it).
        eventually(one_page, 30, interval=0.5, what=f"one active page: {watched.alertmanager.alerts(run='job')}")
    # Before the others' gloo timeout told which rank they waited for, the run was stalled already (every rank
    # silent past its own threshold), without a rank to name: no rank but the culprit was ever named.
    stalled = {labels.get("rank", "") for _, labels in watched.alerts if labels["alertname"] == "TrainingStalled"}
    assert stalled <= {"", str(CULPRIT)}


def test_a_long_announced_checkpoint_save_pages_nothing(tmp_path):
    save_seconds = 25  # 2.5 times the 10 s threshold the ranks learn from their 1 s pace
    with Watched(tmp_path, "--steps", "12", "--save-at", "5", "--save-seconds", str(save_seconds),
                 "--timeout", "120") as watched:
        assert watched.job is not None
        thresholds: set[tuple[float | None, float | None]] = set()  # (rank 0's, rank 1's) as scraped
        while watched.job.poll() is None:
            watched.poll()
            samples = scrape(watched.exporter.url)
            thresholds.add(tuple(sample(samples, "training_stall_threshold_seconds", rank=rank) for rank in "01"))
            time.sleep(1.0)
        assert watched.job.returncode == 0
        for _ in range(3):  # the scrapes and evaluations after the last line
            watched.poll()
            time.sleep(1.0)
    assert watched.alerts == []
    # While rank 0 saved, its threshold was the phase's allowance (1800 s: no save of its length seen before)
    # while rank 1's, waiting in the barrier, stayed at its pace's: the run was never silent past every one.
    assert any(mine == 1800 and theirs is not None and theirs < 30 for mine, theirs in thresholds), thresholds
    assert float(TEST_VALUES["stall_floor_seconds"]) < save_seconds
