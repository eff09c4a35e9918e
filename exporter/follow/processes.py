"""Is the training process alive? Command lines from /proc, matched against a pattern.

For a sidecar that shares the pod's process namespace: a silent log with a live trainer
is a hang, a silent log without one is a crash. Linux only (reads /proc).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Iterator

log = logging.getLogger(__name__)


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


class ProcessWatcher:
    """Checks every ``interval`` seconds on a thread and hands each result to ``report``.

    The exporter's own process is never counted: its command line holds the pattern.
    """

    def __init__(self, pattern: str, report: Callable[[bool], None], interval: float = 5.0,
                 proc_root: str = "/proc") -> None:
        self._pattern = re.compile(pattern)
        self._report = report
        self._interval = interval
        self._proc_root = proc_root
        self._exclude = frozenset({os.getpid()})
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="processes", daemon=True)
        self._failing = False

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def check(self) -> None:
        """One check; a failure to read /proc is logged once and reports nothing."""
        try:
            up = is_running(self._pattern, self._exclude, self._proc_root)
        except OSError as error:
            if not self._failing:
                log.warning("cannot list processes in %s (%s): training_process_up is not exported", self._proc_root, error)
            self._failing = True
            return
        self._failing = False
        self._report(up)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check()
            self._stop.wait(self._interval)
