"""A real Alertmanager for tests (Debian's `prometheus-alertmanager`): free port, private storage, bounded waits."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from tests.support.net import eventually, free_port
from tests.support.tools import require_tool, stop_tool

SHIPPED_CONFIG = Path(__file__).resolve().parents[2] / "deploy" / "alertmanager" / "alertmanager.yml"


def require_alertmanager(name: str = "prometheus-alertmanager") -> str:
    """``prometheus-alertmanager`` (Debian's name of the server) or ``amtool``."""
    return require_tool(name, "Debian package 'prometheus-alertmanager'; scripts/install-system-deps.sh installs it")


class AlertmanagerServer:
    """``with AlertmanagerServer(tmp) as alertmanager: alertmanager.alerts()``; skips without the binary."""

    def __init__(self, directory: Path, config: Path = SHIPPED_CONFIG, start_timeout: float = 30.0) -> None:
        self.directory = Path(directory)
        self._config = config
        self._start_timeout = start_timeout
        self._binary = require_alertmanager()
        self._process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> AlertmanagerServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """host:port, as Prometheus' alerting configuration takes it."""
        return self.url.removeprefix("http://")

    def start(self, attempts: int = 3) -> None:
        """Start on a free port (no cluster listener); retry on another if the port was taken meanwhile."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for _ in range(attempts):
            port = free_port()
            with open(self.directory / "alertmanager.log", "wb") as log:
                self._process = subprocess.Popen(
                    [self._binary, f"--config.file={self._config}", f"--storage.path={self.directory / 'data'}",
                     f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address=", "--log.level=warn"],
                    stdout=log, stderr=subprocess.STDOUT)
            self.url = f"http://127.0.0.1:{port}"
            try:
                eventually(self._ready, self._start_timeout, interval=0.2, what="Alertmanager to be ready")
                return
            except RuntimeError:
                continue
            except AssertionError:
                self.stop()
                raise
        raise RuntimeError(f"Alertmanager did not start; log:\n{self.log()}")

    def stop(self) -> None:
        stop_tool(self._process)
        self._process = None

    def log(self) -> str:
        path = self.directory / "alertmanager.log"
        return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""

    def _ready(self) -> bool:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError("Alertmanager exited")
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
            return response.status == 200

    def post(self, alerts: Sequence[Mapping[str, str]], minutes: int = 10) -> None:
        """POST /api/v2/alerts: firing alerts with these label sets, as Prometheus sends them."""
        now = datetime.now(timezone.utc)
        body = [{"labels": dict(labels), "startsAt": now.isoformat(),
                 "endsAt": (now + timedelta(minutes=minutes)).isoformat()} for labels in alerts]
        request = urllib.request.Request(f"{self.url}/api/v2/alerts", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.status

    def alerts(self, **matchers: str) -> list[dict[str, Any]]:
        """GET /api/v2/alerts (active, inhibited and silenced), filtered by label equality."""
        query = urllib.parse.urlencode([("filter", f'{name}="{value}"') for name, value in matchers.items()])
        with urllib.request.urlopen(f"{self.url}/api/v2/alerts?{query}", timeout=10) as response:
            return json.load(response)
