"""The exporter as a real process that tests kill (SIGKILL) and restart, output kept in a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.net import free_port

REPOSITORY = Path(__file__).resolve().parents[2]


class KillableExporter:
    """``python -m exporter ARGS --web.listen-address 127.0.0.1:<free port>``, output to a file."""

    def __init__(self, args: list[str], output: Path, *, env: dict[str, str] | None = None,
                 prefix: list[str] | None = None, **popen) -> None:
        self._args = args
        self._output = output
        self._env = {**os.environ, "PYTHONPATH": str(REPOSITORY), **(env or {})}
        self._prefix = prefix or []
        self._popen = popen
        self.process: subprocess.Popen | None = None
        self.port = 0

    def start(self, ready_within: float = 15.0) -> KillableExporter:
        for _attempt in range(3):  # another test may take the probed port first
            self.port = free_port()
            command = [*self._prefix, sys.executable, "-m", "exporter", *self._args,
                       "--web.listen-address", f"127.0.0.1:{self.port}"]
            with open(self._output, "ab") as output:
                self.process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=self._env,
                                                cwd=REPOSITORY, **self._popen)
            if self._wait_ready(ready_within):
                return self
        raise AssertionError(f"exporter did not become ready:\n{self.output()}")

    def output(self) -> str:
        return self._output.read_text(errors="replace") if self._output.exists() else ""

    def metrics(self) -> dict[tuple[str, frozenset], float]:
        """Every sample of /metrics as {(name, labels): value}."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as response:
            text = response.read().decode()
        return {
            (sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        wanted = set(labels.items())
        return sum(value for (sample, sample_labels), value in self.metrics().items()
                   if sample == name and wanted <= sample_labels)

    def kill(self, signum: int = signal.SIGKILL, timeout: float = 15.0) -> int:
        self.process.send_signal(signum)
        return self.process.wait(timeout)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.kill()

    def _wait_ready(self, within: float) -> bool:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.05)
        self.kill()
        return False
