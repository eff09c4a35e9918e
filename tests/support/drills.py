"""Fire drills end to end: `simulate` writes live runs, the exporter follows them, a real Prometheus alerts.

One exporter and one Prometheus serve every drill at once: each drill is its own run
(the run label is the drill's directory name), so a whole table of drills costs one
start-up and the length of the longest simulated run. Prometheus evaluates the test's
copy of the shipped rules (tests/support/drill_rules.py), and a poller records every
alert /api/v1/alerts shows while the drills run, so an alert that fires and resolves
between two tests is still seen.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from tests.support.alertmanager import AlertmanagerServer
from tests.support.drill_rules import write_shortened_rules
from tests.support.exporter_process import REPO, ExporterProcess, exporter_command
from tests.support.net import eventually
from tests.support.prometheus import PrometheusServer, require_binary

SHIPPED_RULES = REPO / "deploy" / "prometheus" / "rules" / "trainlog-alerts.yml"
INCIDENT_RULES = REPO / "deploy" / "prometheus" / "rules" / "trainlog-incidents.yml"


@dataclass(frozen=True)
class Drill:
    """An injected incident and the alerts Prometheus must then fire, by alert name -> rank labels."""

    run: str                                  # the run label, also the drill's directory name
    inject: tuple[str, ...]                   # --inject specs
    alerts: Mapping[str, frozenset[str]]      # must fire, on exactly these ranks ("": an alert without rank)
    co_alerts: Mapping[str, frozenset[str]] = field(default_factory=dict)  # may also fire, on these ranks at most
    steps: int = 60
    options: tuple[str, ...] = ()             # further simulate options, e.g. --pp-stages 2
    # Alerts a quiet drill may have pending, never firing (their `for` outlasts what one step shows).
    may_pend: frozenset[str] = frozenset()

    @property
    def stays_alive(self) -> bool:
        """After a hang the simulator stays alive and silent, like the stuck job (docs/simulate.md)."""
        return any(spec.startswith("hang") for spec in self.inject)


class SeenAlert(NamedTuple):
    run: str
    name: str
    state: str
    rank: str  # "" for an alert without a rank label (Prometheus drops empty labels)


def seen_alert(alert: Mapping) -> SeenAlert:
    labels = alert["labels"]
    return SeenAlert(labels.get("run", ""), labels["alertname"], alert["state"], labels.get("rank", ""))


@dataclass
class AlertPoller:
    """Records every alert of /api/v1/alerts, polled in a thread faster than Prometheus evaluates."""

    prometheus: PrometheusServer
    interval: float = 0.25
    _seen: set[SeenAlert] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._poll, name="alert-poller", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                alerts = self.prometheus.api("alerts")["alerts"]
            except (OSError, ValueError, AssertionError):
                continue  # a slow answer on a loaded machine: the next poll sees the same alerts
            with self._lock:
                self._seen.update(seen_alert(alert) for alert in alerts)

    def seen(self, run: str) -> set[SeenAlert]:
        with self._lock:
            return {alert for alert in self._seen if alert.run == run}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class FireDrills:
    """Exporter, Prometheus with the test's copy of the rules and the shipped Alertmanager configuration,
    one live `simulate` per drill."""

    def __init__(self, workdir: Path, drills: Sequence[Drill], test_values: Mapping[Path, Mapping[str, str]],
                 exporter_options: Sequence[str] = (), ranks: int = 4, step_interval: float = 0.25) -> None:
        """``test_values``: per shipped rule file, a test value for each key of its THRESHOLDS table."""
        self.rules = [write_shortened_rules(path, workdir / "rules" / path.name, values)
                      for path, values in test_values.items()]
        check = subprocess.run([require_binary("promtool"), "check", "rules", *map(str, self.rules)],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, f"the test's copy of the rules is invalid: {check.stdout}{check.stderr}"
        self._drills = list(drills)
        self._simulators: dict[str, subprocess.Popen] = {}
        self._settled_at: float | None = None
        log_dirs = [workdir / drill.run / "msrun_log" for drill in drills]
        for log_dir in log_dirs:
            log_dir.mkdir(parents=True)
        arguments = [argument for log_dir in log_dirs for argument in ("--log-dir", str(log_dir))]
        # Whatever started is stopped in reverse order: by stop(), or here if a later part fails to start.
        self._running = ExitStack()
        try:
            self.exporter = self._running.enter_context(ExporterProcess(
                *arguments, "--node", "drill-node", "--rescan-interval", "0.5",
                "--state-file", str(workdir / "exporter-state.json"), *exporter_options))
            self.alertmanager = self._running.enter_context(AlertmanagerServer(workdir / "alertmanager"))
            self.prometheus = self._running.enter_context(PrometheusServer(
                workdir / "prometheus", [f"127.0.0.1:{self.exporter.port}"], rule_files=self.rules,
                alertmanagers=[self.alertmanager.address]))
            # Counters must be scraped at 0 before the incidents, or increase() sees nothing.
            eventually(lambda: self.prometheus.query('up{job="trainlog-exporter"} == 1'), 30, interval=0.2,
                       what="a first scrape")
            self.poller = AlertPoller(self.prometheus)
            self._running.callback(self.poller.stop)
            self.started = time.monotonic()
            self._running.callback(self._stop_simulators)
            for drill, log_dir in zip(drills, log_dirs, strict=True):
                self._simulators[drill.run] = self._simulate(log_dir, drill, ranks, step_interval)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _simulate(log_dir: Path, drill: Drill, ranks: int, step_interval: float) -> subprocess.Popen:
        inject = ["--inject", *drill.inject] if drill.inject else []
        with open(log_dir.parent / "simulate.txt", "w") as output:
            return subprocess.Popen(
                exporter_command("simulate", "--out", str(log_dir), "--ranks", str(ranks), "--steps", str(drill.steps),
                                 "--step-interval", str(step_interval), *drill.options, *inject),
                cwd=REPO, stdout=output, stderr=subprocess.STDOUT)

    def seconds_left(self, budget: float) -> float:
        """What remains of ``budget`` seconds counted from the start of the simulators."""
        return max(1.0, self.started + budget - time.monotonic())

    def wait_for_alerts(self, run: str, done: Callable[[set[SeenAlert]], bool], budget: float,
                        what: str) -> set[SeenAlert]:
        """Alerts seen for the run once ``done`` holds for them; fails listing them after ``budget``."""
        def probe() -> set[SeenAlert] | None:
            seen = self.poller.seen(run)
            return seen if done(seen) else None

        try:
            return eventually(probe, self.seconds_left(budget), interval=0.25, what=what)
        except AssertionError as error:
            raise AssertionError(f"{error}; alerts seen for run {run}: {sorted(self.poller.seen(run))}") from None

    def wait_until_settled(self, settle: float, budget: float) -> None:
        """Every run that ends has ended (a hung one never does), then ``settle`` more seconds.

        Waits once per module: later callers return at once.
        """
        if self._settled_at is None:
            for drill in self._drills:
                if not drill.stays_alive:
                    try:
                        self._simulators[drill.run].wait(self.seconds_left(budget))
                    except subprocess.TimeoutExpired:
                        raise AssertionError(f"simulate for run {drill.run} still running after {budget}s") from None
            self._settled_at = time.monotonic() + settle
        time.sleep(max(0.0, self._settled_at - time.monotonic()))

    def alerts_ever(self, run: str) -> list[dict[str, str]]:
        """Label sets of every alert Prometheus ever recorded for the run: series ALERTS, written at each
        evaluation, so even an alert pending for a single evaluation between two polls is there.
        (This Prometheus's storage is the drills' own: an hour reaches back to its start.)"""
        return [item["metric"] for item in self.prometheus.query(f'last_over_time(ALERTS{{run="{run}"}}[1h])')]

    def _stop_simulators(self) -> None:
        for simulator in self._simulators.values():
            simulator.terminate()  # a hung run's simulator stays alive on purpose
        for simulator in self._simulators.values():
            simulator.wait(10)

    def stop(self) -> None:
        self._running.close()

    def __enter__(self) -> FireDrills:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
