"""Which followed files grew: inotify IN_MODIFY on their directories, read in batches.

watchdog turns every inotify event into Python objects handed through three threads:
with 8 ranks writing 800 lines a second that alone cost about 5 % of a core
(docs/benchmarks.md). Here one thread waits for the first event, lets the kernel gather
the following ones for ``coalesce`` seconds, takes them all with one read, and reports
each grown file once. watchdog still reports creations, moves and deletions.

Linux only: ``AppendWatcher.create`` returns None elsewhere (or when inotify instances
run out), and the follower keeps watchdog's modification events instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_BYTES = 1 << 16

# Called with the paths that grew, or None when the kernel dropped events (queue overflow):
# then anything may have grown.
GrownCallback = Callable[[set[str] | None], None]


class AppendWatcher:
    """A thread reporting grown files of the watched directories, at most every ``coalesce`` seconds."""

    def __init__(self, fd: int, add_watch: Callable[[int, bytes, int], int], on_grown: GrownCallback,
                 coalesce: float) -> None:
        self._fd = fd
        self._add_watch = add_watch
        self._on_grown = on_grown
        self._coalesce = coalesce
        self._directories: dict[int, str] = {}  # watch descriptor -> directory
        self._lock = threading.Lock()
        self._stop_read, self._stop_write = os.pipe()
        self._thread = threading.Thread(target=self._run, name="appends", daemon=True)

    @classmethod
    def create(cls, on_grown: GrownCallback, coalesce: float = 0.1) -> AppendWatcher | None:
        """An AppendWatcher, or None where inotify is not available."""
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            init, add_watch = libc.inotify_init1, libc.inotify_add_watch
        except (OSError, AttributeError):
            return None
        add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        fd = init(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            log.warning("inotify unavailable (%s): following appends with watchdog", os.strerror(ctypes.get_errno()))
            return None
        return cls(fd, add_watch, on_grown, coalesce)

    def watch(self, directory: str) -> None:
        """Report appends to files directly in ``directory`` (idempotent)."""
        with self._lock:
            wd = self._add_watch(self._fd, os.fsencode(directory), IN_MODIFY)
            if wd < 0:
                # Over the inotify watch limit: the follower's periodic rescan still reads it.
                log.warning("cannot watch %s for appends: %s", directory, os.strerror(ctypes.get_errno()))
                return
            self._directories[wd] = directory

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        os.write(self._stop_write, b"x")
        if self._thread.is_alive():
            self._thread.join()
        for fd in (self._fd, self._stop_read, self._stop_write):
            os.close(fd)

    def _run(self) -> None:
        while True:
            ready, _, _ = select.select([self._fd, self._stop_read], [], [])
            if self._stop_read in ready:
                return
            time.sleep(self._coalesce)  # let the writers' next lines join this batch
            self._on_grown(self._drain())

    def _drain(self) -> set[str] | None:
        grown: set[str] = set()
        overflowed = False
        while True:
            try:
                buffer = os.read(self._fd, _READ_BYTES)
            except BlockingIOError:
                break
            with self._lock:
                overflowed |= self._collect(buffer, grown)
        return None if overflowed else grown

    def _collect(self, buffer: bytes, grown: set[str]) -> bool:
        """Add the paths named in a buffer of events; True if the kernel dropped events."""
        overflowed = False
        offset = 0
        while offset < len(buffer):
            wd, mask, _cookie, length = _EVENT.unpack_from(buffer, offset)
            name = buffer[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
            offset += _EVENT.size + length
            if mask & IN_Q_OVERFLOW:
                overflowed = True
            elif mask & IN_IGNORED:
                self._directories.pop(wd, None)  # the directory is gone
            elif wd in self._directories and name:
                grown.add(os.path.join(self._directories[wd], os.fsdecode(name)))
        return overflowed
