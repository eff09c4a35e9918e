"""Fire drills end to end: `simulate` writes live runs, the exporter follows them, a real Prometheus scrapes.

One exporter and one Prometheus serve every drill at once: each drill is its own run
(the run label is the drill's directory name), so a whole table of drills costs one
start-up and the length of one simulated run.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.exporter_process import REPO, ExporterProcess
from tests.support.net import eventually
from tests.support.prometheus import PrometheusServer

RULES_DIR = REPO / "deploy" / "prometheus" / "rules"


@dataclass(frozen=True)
class Drill:
    """An injected incident and what Prometheus must then show."""

    run: str                  # the run label, also the drill's directory name
    inject: tuple[str, ...]   # --inject specs
    query: str                # PromQL; "{run}" is replaced by the run label
    ranks: frozenset[str]     # rank labels the query must return; empty: it must stay empty
    alert: str | None = None  # the DESIGN 3.4 alert expected once rules exist in deploy/prometheus/rules
    alert_ranks: frozenset[str] | None = None  # ranks the alert may name; default: ``ranks``

    @property
    def expected_alert_ranks(self) -> frozenset[str]:
        return self.ranks if self.alert_ranks is None else self.alert_ranks

    @property
    def expression(self) -> str:
        return self.query.replace("{run}", self.run)


def rule_files() -> list[Path]:
    """The shipped alert rules; none until deploy/prometheus/rules exists."""
    return sorted([*RULES_DIR.glob("*.yml"), *RULES_DIR.glob("*.yaml")])


class FireDrills:
    """Exporter, Prometheus (with the shipped rules, if any) and one live `simulate` per drill."""

    def __init__(self, workdir: Path, drills: Sequence[Drill], ranks: int = 4, steps: int = 60,
                 step_interval: float = 0.25) -> None:
        self._simulators: list[subprocess.Popen] = []
        log_dirs = [workdir / drill.run / "msrun_log" for drill in drills]
        for log_dir in log_dirs:
            log_dir.mkdir(parents=True)
        arguments = [argument for log_dir in log_dirs for argument in ("--log-dir", str(log_dir))]
        self.exporter = ExporterProcess(*arguments, "--node", "drill-node", "--rescan-interval", "0.5")
        try:
            self.prometheus = PrometheusServer(workdir / "prometheus", [f"127.0.0.1:{self.exporter.port}"],
                                               rule_files=rule_files())
        except BaseException:
            self.exporter.stop()
            raise
        try:
            # Counters must be scraped at 0 before the incidents, or increase() sees nothing.
            eventually(lambda: self.prometheus.query('up{job="trainlog-exporter"} == 1'), 30, interval=0.2,
                       what="a first scrape")
            for drill, log_dir in zip(drills, log_dirs, strict=True):
                self._simulators.append(self._simulate(log_dir, drill, ranks, steps, step_interval))
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _simulate(log_dir: Path, drill: Drill, ranks: int, steps: int, step_interval: float) -> subprocess.Popen:
        inject = ["--inject", *drill.inject] if drill.inject else []
        with open(log_dir.parent / "simulate.txt", "w") as output:
            return subprocess.Popen(
                [sys.executable, "-m", "exporter", "simulate", "--out", str(log_dir), "--ranks", str(ranks),
                 "--steps", str(steps), "--step-interval", str(step_interval), *inject],
                cwd=REPO, stdout=output, stderr=subprocess.STDOUT)

    def ranks_matching(self, drill: Drill) -> set[str]:
        """Rank labels of the series the drill's query returns now."""
        return {item["metric"].get("rank", "") for item in self.prometheus.query(drill.expression)}

    def alerts(self, name: str, run: str, states: tuple[str, ...] = ("pending", "firing")) -> list[dict]:
        """Alerts of that name for the run, in one of the states."""
        return [alert for alert in self.prometheus.api("alerts")["alerts"]
                if alert["labels"].get("alertname") == name and alert["labels"].get("run") == run
                and alert["state"] in states]

    def stop(self) -> None:
        for simulator in self._simulators:
            simulator.terminate()  # a hung run's simulator stays alive on purpose
        for simulator in self._simulators:
            simulator.wait(10)
        self.prometheus.stop()
        self.exporter.stop()

    def __enter__(self) -> FireDrills:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
