"""Which followed files grew: inotify IN_MODIFY on their directories, read in batches.

watchdog turns every inotify event into Python objects handed through three threads:
with 8 ranks writing 800 lines a second that alone cost about 5 % of a core
(docs/benchmarks.md). Here the follow thread itself waits for the first event, lets the
kernel gather the following ones for ``coalesce`` seconds, takes them all with one read,
and learns each grown file once: no thread of its own, no hand-over per batch. watchdog
still reports creations, moves and deletions, from its thread, and wakes the wait; so
does a scrape that wants every line written so far (``Follower.catch_up``), which ends
the coalescing window at once.

Linux only: ``AppendWatcher.create`` returns None elsewhere (or when inotify instances
run out), and the follower keeps watchdog's modification events instead. The inotify
calls are inotify_simple's; the events are decoded here (``grown_names``), because
inotify_simple's decoding makes a named tuple and a str of every event: 6 us an event,
a quarter of the exporter's steady-state CPU (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import struct
from collections.abc import Iterable, Iterator

try:
    from inotify_simple import INotify, flags
except ImportError:  # not Linux: the follower keeps watchdog's modification events
    INotify = flags = None

log = logging.getLogger(__name__)

_EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name
_Q_OVERFLOW, _IGNORED = 0x4000, 0x8000  # IN_Q_OVERFLOW, IN_IGNORED (linux/inotify.h)
_READ_SIZE = 1 << 16


def grown_names(data: bytes) -> tuple[set[tuple[int, bytes]], set[int], bool]:
    """From raw inotify events: the distinct (watch descriptor, name) pairs, names still NUL-padded;
    the watch descriptors the kernel dropped (IN_IGNORED); whether the queue overflowed."""
    names: set[tuple[int, bytes]] = set()
    ignored: set[int] = set()
    overflowed = False
    for wd, mask, _, size, name in _distinct_events(data):
        if mask & _Q_OVERFLOW:
            overflowed = True
        elif mask & _IGNORED:
            ignored.add(wd)
        elif size:
            names.add((wd, name))
    return names, ignored, overflowed


def _distinct_events(data: bytes) -> Iterable[tuple[int, int, int, int, bytes]]:
    """The distinct events (wd, mask, cookie, len, name) of a read, in no particular order.

    Appends by a few writers give hundreds of events a batch, all with names of one padded
    length, most of them repeats: then struct cuts them into equal records in C and only the
    distinct ones are taken apart, 5 times faster than a walk in Python. The records are the
    events when every header, read at that stride, gives that length: the first event has
    it, so the second starts one stride on, and so on by induction.
    """
    end = len(data)
    if end >= _EVENT_HEADER.size:
        name_size = _EVENT_HEADER.unpack_from(data)[3]
        stride = _EVENT_HEADER.size + name_size
        if end % stride == 0:
            records = {record for (record,) in struct.iter_unpack(f"{stride}s", data)}
            events = [(*_EVENT_HEADER.unpack_from(record), record[_EVENT_HEADER.size :]) for record in records]
            if all(event[3] == name_size for event in events):
                return events
    return _walk_events(data)


def _walk_events(data: bytes) -> Iterator[tuple[int, int, int, int, bytes]]:
    """Every event of a read, one after the other (names of any length)."""
    unpack = _EVENT_HEADER.unpack_from
    header, position, end = _EVENT_HEADER.size, 0, len(data)
    while position < end:
        wd, mask, cookie, size = unpack(data, position)
        name_start = position + header
        position = name_start + size
        yield wd, mask, cookie, size, data[name_start:position]


class AppendWatcher:
    """Waits for appends to files of the watched directories, batched over ``coalesce`` seconds.

    Used by one thread (the follow thread), but for ``wake`` and ``pending``."""

    def __init__(self, inotify: INotify, coalesce: float) -> None:
        self._inotify = inotify
        self._coalesce = coalesce
        self._directories: dict[int, str] = {}  # watch descriptor -> directory
        self._wake_read, self._wake_write = os.pipe()
        for end in (self._wake_read, self._wake_write):
            os.set_blocking(end, False)

    @classmethod
    def create(cls, coalesce: float) -> AppendWatcher | None:
        """An AppendWatcher, or None where inotify is not available."""
        if INotify is None:
            return None
        try:
            inotify = INotify(nonblocking=True)
        except OSError as error:
            log.warning("inotify unavailable (%s): following appends with watchdog", error.strerror or error)
            return None
        return cls(inotify, coalesce)

    def watch(self, directory: str) -> None:
        """Report appends to files directly in ``directory`` (idempotent)."""
        try:
            wd = self._inotify.add_watch(directory, flags.MODIFY)
        except OSError as error:
            # Over the inotify watch limit: the follower's periodic rescan still reads it.
            log.warning("cannot watch %s for appends: %s", directory, error.strerror or error)
            return
        self._directories[wd] = directory

    def wait(self, timeout: float) -> None:
        """Until files grew and ``coalesce`` seconds passed since, a ``wake``, or ``timeout`` seconds passed.

        A wake during the coalescing window ends it: ``grown`` then takes what is queued so far."""
        ready = _readable((self._inotify.fileno(), self._wake_read), timeout)
        if ready and self._wake_read not in ready:
            # An append: let the writers' next lines join this batch, unless someone wants them now.
            ready = _readable((self._wake_read,), self._coalesce)
        if ready:
            _read_all(self._wake_read)  # woken: take the wake-up

    def grown(self) -> set[str] | None:
        """The paths that grew since the last call (without waiting); None when the kernel dropped
        events: anything may have grown."""
        names, ignored, overflowed = grown_names(_read_all(self._inotify.fileno()))
        for wd in ignored:
            self._directories.pop(wd, None)  # the directory is gone
        directories = self._directories
        grown = {os.path.join(directories[wd], os.fsdecode(name.rstrip(b"\0")))
                 for wd, name in names if wd in directories}
        return None if overflowed else grown

    def pending(self) -> bool:
        """Whether appends are queued that ``grown`` has not taken yet (from any thread)."""
        return bool(_readable((self._inotify.fileno(),), 0))

    def wake(self) -> None:
        """End a ``wait`` now (from any thread)."""
        with contextlib.suppress(BlockingIOError):  # the pipe is full: a wake-up is pending anyway
            os.write(self._wake_write, b"x")

    def close(self) -> None:
        self._inotify.close()
        for end in (self._wake_read, self._wake_write):
            os.close(end)


def _readable(descriptors: tuple[int, ...], timeout: float) -> set[int]:
    """Those of ``descriptors`` ready to read within ``timeout`` seconds.

    poll, not select: select refuses descriptor numbers of 1024 and more, which a process
    following a thousand files reaches when the watcher is made after the files are opened.
    A poll object of its own each call: one object may not poll in two threads at once.
    """
    poller = select.poll()
    for descriptor in descriptors:
        poller.register(descriptor, select.POLLIN)
    return {descriptor for descriptor, _ in poller.poll(max(0, math.ceil(timeout * 1000)))}


def _read_all(fd: int) -> bytes:
    """Everything queued on a non-blocking descriptor."""
    chunks = []
    while True:
        try:
            chunk = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            break
        chunks.append(chunk)
        if len(chunk) < _READ_SIZE // 2:  # far from a full read: nothing more was queued
            break
    return b"".join(chunks)
