"""Which followed files grew: inotify IN_MODIFY on their directories, read in batches.

watchdog turns every inotify event into Python objects handed through three threads:
with 8 ranks writing 800 lines a second that alone cost about 5 % of a core
(docs/benchmarks.md). Here one thread waits for the first event, lets the kernel gather
the following ones for ``coalesce`` seconds, takes them all with one read, and reports
each grown file once. watchdog still reports creations, moves and deletions.

Linux only: ``AppendWatcher.create`` returns None elsewhere (or when inotify instances
run out), and the follower keeps watchdog's modification events instead. The inotify
calls are inotify_simple's; the events are decoded here (``grown_names``), because
inotify_simple's decoding makes a named tuple and a str of every event: 6 us an event,
a third of the exporter's steady-state CPU (docs/benchmarks.md).
"""

from __future__ import annotations

import logging
import os
import select
import struct
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

_EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
_Q_OVERFLOW, _IGNORED = 0x4000, 0x8000  # IN_Q_OVERFLOW, IN_IGNORED (linux/inotify.h)
_READ_SIZE = 1 << 16


def grown_names(data: bytes) -> tuple[set[tuple[int, bytes]], set[int], bool]:
    """From raw inotify events: the distinct (watch descriptor, name) pairs, names still NUL-padded;
    the watch descriptors the kernel dropped (IN_IGNORED); whether the queue overflowed."""
    names: set[tuple[int, bytes]] = set()
    ignored: set[int] = set()
    overflowed = False
    unpack = _EVENT_HEADER.unpack_from
    header, position, end = _EVENT_HEADER.size, 0, len(data)
    while position < end:
        wd, mask, _, size = unpack(data, position)
        name_start = position + header
        position = name_start + size
        if mask & _Q_OVERFLOW:
            overflowed = True
        elif mask & _IGNORED:
            ignored.add(wd)
        elif size:
            names.add((wd, data[name_start:position]))
    return names, ignored, overflowed


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
        with self._lock:
            names, ignored, overflowed = grown_names(self._read_pending())
            for wd in ignored:
                self._directories.pop(wd, None)  # the directory is gone
            directories = self._directories
            grown = {os.path.join(directories[wd], os.fsdecode(name.rstrip(b"\0")))
                     for wd, name in names if wd in directories}
        return None if overflowed else grown

    def _read_pending(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self._inotify.fileno(), _READ_SIZE)
            except BlockingIOError:  # nothing more queued (the descriptor is non-blocking)
                break
            chunks.append(chunk)
            if len(chunk) < _READ_SIZE // 2:  # far from a full read: the queue is empty
                break
        return b"".join(chunks)
