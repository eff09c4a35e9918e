"""The exporter as a real subprocess on a free loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tests.support.net import eventually, free_port, http_get

REPO = Path(__file__).resolve().parents[2]


class ExporterProcess:
    """By default the repository's package; ``program`` runs another entry point (an installed console script)."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, program: Sequence[str] | None = None,
                 cwd: Path = REPO) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        program = list(program or [sys.executable, "-m", "exporter"])
        command = [*program, *args, "--web.listen-address", f"127.0.0.1:{self.port}"]
        environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        # A file, not a pipe: nobody reads a pipe while the test runs, and a full one would
        # block the exporter's logging.
        self._output = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=self._output,
                                        stderr=subprocess.STDOUT, text=True)
        eventually(self._healthy, timeout=15, what="exporter /-/healthy")

    def output(self) -> str:
        self._output.seek(0)
        return self._output.read()

    def _healthy(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(f"exporter exited with {self.process.returncode}: {self.output()}")
        return http_get(self.url + "/-/healthy", timeout=1)[0] == 200

    def stop(self) -> str:
        """Terminate (SIGTERM, then SIGKILL after 10 s); returns everything the exporter printed."""
        if self._output.closed:
            return self._printed
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._printed = self.output()
        self._output.close()
        return self._printed

    def __enter__(self) -> ExporterProcess:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
