"""A real Prometheus server for tests (Debian's `prometheus`): free port, private storage, bounded waits.

Nothing here sleeps unbounded: every wait has a deadline and fails with what it last saw.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.support.net import eventually, free_port
from tests.support.tools import require_tool, stop_tool


def require_binary(name: str) -> str:
    """``prometheus`` or ``promtool``, from Debian's package."""
    return require_tool(name, "Debian package 'prometheus'; scripts/install-system-deps.sh installs it")


class PrometheusServer:
    """``with PrometheusServer(tmp, targets) as prometheus: prometheus.query("up")``; skips without the binary."""

    def __init__(
        self,
        directory: Path,
        targets: Sequence[str],
        *,
        job: str = "trainlog-exporter",
        scrape_interval: str = "1s",
        rule_files: Sequence[Path] = (),
        alertmanagers: Sequence[str] = (),
        start_timeout: float = 30.0,
        scrape_settings: dict[str, Any] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.job = job
        self._targets = list(targets)
        self._scrape_interval = scrape_interval
        self._rule_files = [str(path) for path in rule_files]
        self._alertmanagers = list(alertmanagers)  # host:port of each Alertmanager that receives the alerts
        self._start_timeout = start_timeout
        self._scrape_settings = scrape_settings or {}  # more of the job's scrape_config: scheme, tls_config, ...
        self._process: subprocess.Popen | None = None
        self._binary = require_binary("prometheus")
        self.url = ""

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, attempts: int = 3) -> None:
        """Start on a free port; retry on another one if the port was taken meanwhile."""
        self.directory.mkdir(parents=True, exist_ok=True)
        config = self.directory / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config()), encoding="utf-8")
        for _ in range(attempts):
            port = free_port()
            with open(self.directory / "prometheus.log", "wb") as log:
                self._process = subprocess.Popen(
                    [self._binary, f"--config.file={config}", f"--storage.tsdb.path={self.directory / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT,
                )
            self.url = f"http://127.0.0.1:{port}"
            try:
                eventually(self._ready, self._start_timeout, interval=0.2, what="Prometheus to be ready")
                return
            except RuntimeError:
                continue  # exited early: most likely the port was taken; try another
            except AssertionError:
                self.stop()
                raise
        raise RuntimeError(f"Prometheus did not start; log:\n{self.log()}")

    def stop(self) -> None:
        stop_tool(self._process)
        self._process = None

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets with their health and last error."""
        return self.api("targets")["activeTargets"]

    def log(self) -> str:
        path = self.directory / "prometheus.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "global": {"scrape_interval": self._scrape_interval, "evaluation_interval": self._scrape_interval},
            "rule_files": self._rule_files,
            "scrape_configs": [{"job_name": self.job, "static_configs": [{"targets": self._targets}],
                                **self._scrape_settings}],
        }
        if self._alertmanagers:
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": self._alertmanagers}]}]}
        return config

    def _ready(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError("Prometheus exited")
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return response.status == 200

    # ------------------------------------------------------------ HTTP API

    def answer(self, expr: str) -> dict[str, Any]:
        """An instant query at the current time, as answered: {"status": "success", "data": ...} or an error."""
        return self._get("query", [("query", expr)])

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The result of an instant query that must succeed."""
        answer = self.answer(expr)
        if answer.get("status") != "success":
            raise AssertionError(f"query failed: {expr}: {answer.get('error')}")
        return answer["data"]["result"]

    def api(self, path: str, **params: str) -> Any:
        """The data of GET /api/v1/<path>, which must succeed (e.g. ``api("alerts")``)."""
        answer = self._get(path, list(params.items()))
        if answer.get("status") != "success":
            raise AssertionError(f"/api/v1/{path} failed: {answer.get('error')}")
        return answer["data"]

    def _get(self, path: str, params: Sequence[tuple[str, str]]) -> dict[str, Any]:
        """GET /api/v1/<path>; the decoded body, also for 4xx answers (status "error")."""
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(list(params))}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            if error.code in (400, 422):
                return json.load(error)
            raise

    def label_values(self, label: str, match: str) -> list[str]:
        """Values of a label among the series matching a selector (Grafana's label_values())."""
        answer = self._get(f"label/{label}/values", [("match[]", match)])
        if answer.get("status") != "success":
            raise AssertionError(f"label values of {label} for {match} failed: {answer.get('error')}")
        return answer["data"]

    def wait_for_result(self, expr: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until an instant query returns at least one sample."""
        return eventually(lambda: self.query(expr), timeout, interval=0.2, what=f"data for {expr!r}")
