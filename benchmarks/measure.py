"""Measuring processes: wall time, CPU seconds and peak RSS; the exporter as the benchmarks run it."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.exporter_process import ExporterProcess, exporter_environment

GNU_TIME = shutil.which("time")  # Debian package "time"; without it peak RSS is not measured


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


def warm(path: Path) -> None:
    """Read ``path`` into the page cache right before a contender reads it. A machine that pages out what was not
    read for a minute (DAMON's proactive reclaim: seen on these machines) would otherwise give the later rounds,
    after the slow contenders, a cold file and the first a warm one."""
    buffer = bytearray(1 << 20)
    with open(path, "rb", buffering=0) as file:
        while file.readinto(buffer):
            pass


def following(log_dir: Path) -> ExporterProcess:
    """The exporter following ``log_dir``, quiet (warnings only); ``with`` starts it and waits until it is ready."""
    # Its checkpoint beside the logs, not in the user's state home: every run would leave one there.
    return ExporterProcess("--log-dir", str(log_dir), "--log-level", "warning", wait_for="/-/ready",
                           ready_within=60, env={"XDG_STATE_HOME": str(log_dir.parent / "state")})
