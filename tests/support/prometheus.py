"""A real Prometheus server (Debian's `prometheus`) on a free loopback port."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml

from tests.support.net import eventually, free_port, http_get


def require_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package 'prometheus'; .ci/run installs it)")
    return path


class PrometheusServer:
    def __init__(self, workdir: Path, targets: list[str], rule_files: list[Path] = (), scrape_interval: str = "1s",
                 evaluation_interval: str = "1s") -> None:
        binary = require_binary("prometheus")
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
            "rule_files": [str(path) for path in rule_files],
            "scrape_configs": [{"job_name": "trainlog-exporter", "static_configs": [{"targets": targets}]}],
        }
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(workdir / "prometheus.log", "w")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [binary, f"--config.file={config_file}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--web.enable-lifecycle"],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        self.log_file = workdir / "prometheus.log"
        eventually(self._ready, timeout=30, interval=0.2, what="prometheus /-/ready")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"prometheus exited: {self.log_file.read_text()[-2000:]}")
        return http_get(self.url + "/-/ready", timeout=1)[0] == 200

    def api(self, path: str, **params: str) -> dict:
        status, body = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        payload = json.loads(body)
        assert status == 200 and payload["status"] == "success", body
        return payload["data"]

    def query(self, expression: str) -> list[dict]:
        return self.api("query", query=expression)["result"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._log.close()

    def __enter__(self) -> PrometheusServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
