"""Is the training process alive? Command lines from /proc, matched at scrape time.

For a sidecar that shares the pod's process namespace: a silent log with a live trainer
is a hang, a silent log without one is a crash. Like a node_exporter collector, the check
runs when a scrape (or an OTLP push) asks, not on a thread of its own; one answer serves
the scrapes of the next ``max_age`` seconds, so frequent scrapes do not rescan /proc.
Linux only (reads /proc).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator

log = logging.getLogger(__name__)

RunNode = tuple[str, str]


def command_lines(proc_root: str = "/proc") -> Iterator[tuple[int, str]]:
    """(pid, command line with spaces between arguments) of every readable process."""
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        try:
            with open(os.path.join(entry.path, "cmdline"), "rb") as handle:
                raw = handle.read()
        except OSError:
            continue  # exited meanwhile, or not ours to read
        if raw:  # kernel threads and zombies have an empty command line
            yield int(entry.name), raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")


def is_running(pattern: re.Pattern[str], exclude: frozenset[int] = frozenset(), proc_root: str = "/proc") -> bool:
    """True when a process other than those in ``exclude`` has a command line matching ``pattern``."""
    return any(pattern.search(command) for pid, command in command_lines(proc_root) if pid not in exclude)


class ProcessLiveness:
    """``training_process_up{run,node}``: 1 while a process matching ``pattern`` runs.

    One trainer per pod: its liveness holds for every (run, node) this exporter follows.
    The exporter's own process is never counted: its command line holds the pattern.
    """

    def __init__(self, pattern: str, series: Iterable[RunNode], max_age: float = 5.0, proc_root: str = "/proc",
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pattern = re.compile(pattern)
        self._series = sorted(set(series))
        self._max_age = max_age
        self._proc_root = proc_root
        self._clock = clock
        self._exclude = frozenset({os.getpid()})
        self._lock = threading.Lock()  # scrapes and the OTLP push ask from their own threads
        self._checked_at: float | None = None
        self._up: dict[RunNode, bool] | None = None
        self._failing = False

    def process_up(self) -> dict[RunNode, bool] | None:
        """(run, node) -> alive, checked now unless the last check is younger than ``max_age``;
        None (no family) when /proc cannot be read, logged once per failure."""
        with self._lock:
            now = self._clock()
            if self._checked_at is None or now - self._checked_at >= self._max_age:
                self._up = self._check()
                self._checked_at = now
            return self._up

    def _check(self) -> dict[RunNode, bool] | None:
        try:
            up = is_running(self._pattern, self._exclude, self._proc_root)
        except OSError as error:
            if not self._failing:
                log.warning("cannot list processes in %s (%s): training_process_up is not exported",
                            self._proc_root, error)
            self._failing = True
            return None
        self._failing = False
        return dict.fromkeys(self._series, up)
