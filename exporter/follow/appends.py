"""Which followed files grew: inotify IN_MODIFY on their directories, read in batches.

watchdog turns every inotify event into Python objects handed through three threads:
with 8 ranks writing 800 lines a second that alone cost about 5 % of a core
(docs/benchmarks.md). Here one thread waits for the first event, lets the kernel gather
the following ones for ``coalesce`` seconds, takes them all with one read, and reports
each grown file once. watchdog still reports creations, moves and deletions.

Linux only: ``AppendWatcher.create`` returns None elsewhere (or when inotify instances
run out), and the follower keeps watchdog's modification events instead. The inotify
calls and event decoding are inotify_simple's.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections.abc import Callable

try:
    from inotify_simple import INotify, flags
except ImportError:  # not Linux: the follower keeps watchdog's modification events
    INotify = flags = None

log = logging.getLogger(__name__)

# Called with the paths that grew, or None when the kernel dropped events (queue overflow):
# then anything may have grown.
GrownCallback = Callable[[set[str] | None], None]


class AppendWatcher:
    """A thread reporting grown files of the watched directories, at most every ``coalesce`` seconds."""

    def __init__(self, inotify: INotify, on_grown: GrownCallback, coalesce: float) -> None:
        self._inotify = inotify
        self._on_grown = on_grown
        self._coalesce = coalesce
        self._directories: dict[int, str] = {}  # watch descriptor -> directory
        self._lock = threading.Lock()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="appends", daemon=True)

    @classmethod
    def create(cls, on_grown: GrownCallback, coalesce: float = 0.1) -> AppendWatcher | None:
        """An AppendWatcher, or None where inotify is not available."""
        if INotify is None:
            return None
        try:
            inotify = INotify(nonblocking=True)
        except OSError as error:
            log.warning("inotify unavailable (%s): following appends with watchdog", error.strerror or error)
            return None
        return cls(inotify, on_grown, coalesce)

    def watch(self, directory: str) -> None:
        """Report appends to files directly in ``directory`` (idempotent)."""
        with self._lock:
            try:
                wd = self._inotify.add_watch(directory, flags.MODIFY)
            except OSError as error:
                # Over the inotify watch limit: the follower's periodic rescan still reads it.
                log.warning("cannot watch %s for appends: %s", directory, error.strerror or error)
                return
            self._directories[wd] = directory

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        os.write(self._stop_write, b"x")
        if self._thread.is_alive():
            self._thread.join()
        self._inotify.close()
        for fd in (self._stop_read, self._stop_write):
            os.close(fd)

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self._inotify.fileno(), self._stop_read], [], [])
            if self._stop_read in ready:
                return
            time.sleep(self._coalesce)  # let the writers' next lines join this batch
            self._on_grown(self._drain())

    def _drain(self) -> set[str] | None:
        """The paths named by every pending event; None if the kernel dropped events."""
        grown: set[str] = set()
        overflowed = False
        with self._lock:
            for event in self._inotify.read(timeout=0):
                if event.mask & flags.Q_OVERFLOW:
                    overflowed = True
                elif event.mask & flags.IGNORED:
                    self._directories.pop(event.wd, None)  # the directory is gone
                elif event.wd in self._directories and event.name:
                    grown.add(os.path.join(self._directories[event.wd], event.name))
        return None if overflowed else grown
