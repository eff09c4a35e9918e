"""Measuring processes: wall time, CPU seconds and peak RSS; the exporter as a subprocess."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GNU_TIME = shutil.which("time")  # Debian package "time"; without it peak RSS is not measured
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class Measured:
    """One run of a command: what it cost and what it printed."""

    wall_seconds: float
    cpu_seconds: float  # user + system, the command and every child it waited for
    max_rss_kb: int | None  # the largest resident set of the command or its children (GNU time)
    stdout: str


def run_measured(command: list[str], timeout: float = 900.0) -> Measured:
    """Run ``command`` to its end; wait4 gives the CPU time of exactly this process tree.

    Peak RSS comes from GNU time instead: a child forked from this (large) Python process
    inherits its high-water mark, and wait4's ru_maxrss would report that for ``wc``.
    """
    with open(os.devnull, "rb") as stdin, tempfile.TemporaryFile() as stdout, \
            tempfile.NamedTemporaryFile("r") as rss_file:
        started = time.perf_counter()
        prefix = [GNU_TIME, "-f", "%M", "-o", rss_file.name] if GNU_TIME else []
        process = subprocess.Popen([*prefix, *command], stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL,
                                   env=exporter_environment())
        watchdog = threading.Timer(timeout, process.kill)  # a hung contender must not hang the run
        watchdog.start()
        _, status, usage = os.wait4(process.pid, 0)  # blocking: wall time to the exact exit
        wall = time.perf_counter() - started
        watchdog.cancel()
        process.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        output = stdout.read().decode("utf-8", "replace")
        max_rss_kb = int(rss_file.read().split()[-1]) if GNU_TIME and process.returncode == 0 else None
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}: {output[-500:]}")
    return Measured(wall, usage.ru_utime + usage.ru_stime, max_rss_kb, output)


def exporter_environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def eventually(probe: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Poll until ``probe`` returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = probe()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


class ExporterProcess:
    """``python -m exporter`` on a free loopback port, with its CPU and memory readable from /proc."""

    def __init__(self, log_dir: Path, *extra: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [sys.executable, "-m", "exporter", "--log-dir", str(log_dir),
                   "--web.listen-address", f"127.0.0.1:{self.port}", "--log-level", "warning", *extra]
        self._stderr = tempfile.TemporaryFile()  # a file, not a pipe: a full pipe would stall it
        self.process = subprocess.Popen(command, cwd=REPO, env=exporter_environment(),
                                        stdout=subprocess.DEVNULL, stderr=self._stderr)
        eventually(self._ready, timeout=60, what="the exporter to be ready")

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            self._stderr.seek(0)
            raise RuntimeError(f"exporter exited with {self.process.returncode}: {self._stderr.read().decode()[-2000:]}")
        return "Ready" in http_get(self.url + "/-/ready", timeout=1)

    def metrics(self) -> str:
        return http_get(self.url + "/metrics")

    def cpu_seconds(self) -> float:
        """utime + stime of the whole process, all threads, from /proc/PID/stat."""
        with open(f"/proc/{self.process.pid}/stat") as handle:
            # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def memory_kb(self, field: str = "VmRSS") -> int:
        """A field of /proc/PID/status in kB: VmRSS now, VmHWM the peak."""
        with open(f"/proc/{self.process.pid}/status") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(field)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def __enter__(self) -> ExporterProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
