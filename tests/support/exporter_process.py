"""The exporter as a real subprocess on a free loopback port: the one way tests and benchmarks start it."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.net import Samples, eventually, free_port, http_get, scrape

REPO = Path(__file__).resolve().parents[2]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PORT_ATTEMPTS = 3  # another process may take the probed port before the exporter binds it
EXIT_WITHIN = 30.0  # seconds: a pod's default grace period, after which the kubelet kills


def exporter_command(*args: str) -> list[str]:
    """``python -m exporter ARGS`` with this interpreter."""
    return [sys.executable, "-m", "exporter", *args]


def exporter_environment(**overrides: str) -> dict[str, str]:
    """This environment with the checkout's package first on the path, whichever directory the process starts in."""
    return {**os.environ, "PYTHONPATH": str(REPO), **overrides}


class ExporterProcess:
    """``python -m exporter ARGS --web.listen-address 127.0.0.1:<free port>``, everything it prints kept in a file.

    ``start()`` (or ``with``) starts it and waits until ``wait_for`` answers 200; ``kill()`` then ``start()``
    restarts it on a new port with the same output file; ``stop()`` ends it for good. ``program`` runs
    another entry point (an installed console script, or ``exporter_command()`` behind a wrapper).
    """

    def __init__(self, *args: str, program: Sequence[str] | None = None, env: dict[str, str] | None = None,
                 cwd: Path = REPO, wait_for: str = "/-/healthy", ready_within: float = 15.0,
                 tls: ssl.SSLContext | None = None, headers: dict[str, str] | None = None, **popen: Any) -> None:
        self._command = [*(program or exporter_command()), *args]
        self._environment = exporter_environment(**(env or {}))
        self._cwd = cwd
        self._wait_for = wait_for
        self._ready_within = ready_within
        self._popen = popen
        self.tls = tls  # with --web.config.file: the client's context (the test CA) and credentials
        self.headers = headers or {}
        # A file, not a pipe: nobody reads a pipe while the exporter runs, and a full one would block its
        # logging. Every start writes on at the file's shared offset; output() reads with pread, which
        # leaves that offset alone.
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - closed in stop()
        self._printed = ""
        self._process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self._running().pid

    def start(self) -> ExporterProcess:
        for _attempt in range(PORT_ATTEMPTS):
            self.port = free_port()
            self._process = subprocess.Popen(
                [*self._command, "--web.listen-address", f"127.0.0.1:{self.port}"], cwd=self._cwd,
                env=self._environment, stdout=self._output, stderr=subprocess.STDOUT, **self._popen)
            try:
                answer = eventually(self._answers_or_exited, self._ready_within, what=self._not_ready)
            except AssertionError:
                self.stop()
                raise
            if answer == "answers":
                return self
        raise AssertionError(f"the exporter exited {PORT_ATTEMPTS} times before answering:\n{self.output()}")

    def _answers_or_exited(self) -> str | None:
        if self._running().poll() is not None:
            return "exited"
        answered = http_get(self.url + self._wait_for, timeout=1, headers=self.headers, context=self.tls)[0]
        return "answers" if answered == 200 else None

    def _not_ready(self) -> str:
        return f"the exporter's {self._wait_for}:\n{self.output()}"

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None:
            raise RuntimeError("the exporter was not started")
        return self._process

    def output(self) -> str:
        """Everything the exporter printed so far, over all its starts."""
        if self._output.closed:
            return self._printed
        size = os.fstat(self._output.fileno()).st_size
        return os.pread(self._output.fileno(), size, 0).decode(errors="replace")

    def metrics(self) -> str:
        status, body = http_get(self.url + "/metrics", headers=self.headers, context=self.tls)
        if status != 200:
            raise AssertionError(f"/metrics answered {status}: {body}")
        return body

    def samples(self) -> Samples:
        return scrape(self.url)

    def total(self, name: str, **labels: str) -> float:
        """Sum of the samples of ``name`` whose labels include ``labels``."""
        wanted = labels.items()
        return sum(value for (sample, sample_labels), value in scrape(self.url, (name,)).items()
                   if sample == name and wanted <= dict(sample_labels).items())

    def cpu_seconds(self) -> float:
        """utime + stime of the whole process, all threads, from /proc/PID/stat."""
        with open(f"/proc/{self.pid}/stat") as handle:
            # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kb(self, field: str = "VmRSS") -> int:
        """A field of /proc/PID/status in kB: VmRSS now, VmHWM the peak."""
        with open(f"/proc/{self.pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def kill(self, signum: int = signal.SIGKILL, timeout: float = EXIT_WITHIN) -> int:
        """Send ``signum`` and wait for the exit; its status (negative: the signal that ended it).

        Not gone within ``timeout``: an AssertionError saying when it went, if it did, and what it printed.
        """
        process = self._running()
        process.send_signal(signum)
        sent = time.monotonic()
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        try:  # how late: a slow stop's warning in the output names the slow part
            process.wait(timeout)
            how = f"exited {time.monotonic() - sent:.1f} s after it"
        except subprocess.TimeoutExpired:
            how = f"still ran {time.monotonic() - sent:.1f} s after it"
        raise AssertionError(f"the exporter did not exit within {timeout:.0f} s of signal {signum}; it {how}; "
                             f"it printed:\n{self.output()[-4000:]}")

    def stop(self) -> str:
        """Terminate (SIGTERM, then SIGKILL after 10 s); returns everything the exporter printed."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if not self._output.closed:
            self._printed = self.output()
            self._output.close()
        return self._printed

    def __enter__(self) -> ExporterProcess:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
