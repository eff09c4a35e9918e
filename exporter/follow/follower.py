"""Discover and follow every log file under the configured directories.

watchdog's native observer (inotify) marks files dirty when they appear, move or go; the
follow thread waits on the AppendWatcher for the files that grew, in batches (every
``append_batch_seconds`` at most while files grow), reads every dirty file and hands line
batches to a sink. A reader that wants every line written so far (a scrape) asks for it
with ``catch_up``: the batch then ends at once, so /metrics is as fresh as the scrape
while the follow thread wakes only a few times a second (docs/benchmarks.md). A periodic
rescan (every ``rescan_interval`` seconds) reads every file anyway: it catches what events
miss (directories created later, overflowed event queues, writes from other hosts on NFS or
Lustre, which inotify never sees). Polling mode (``poll_interval``, or when inotify cannot
be set up) is that rescan alone, at that interval: no observer, no inotify descriptor.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)

from exporter.follow.discover import (
    DEFAULT_RULES,
    DirectoryRules,
    LogFileRole,
    PidRanks,
    classify,
    discovery_order,
    plog_pid,
)
from exporter.follow.identity import FilePosition
from exporter.follow.rotated import rotated_base
from exporter.follow.tailer import ReadBatch, Tailer, read_ahead

if TYPE_CHECKING:
    from watchdog.observers.api import BaseObserver

    from exporter.follow.appends import AppendWatcher

log = logging.getLogger(__name__)

# How long the follow thread lets appends gather before it reads them, when no reader asks for
# them sooner (catch_up). Every wake-up reads every grown file, in Python: at 8 ranks writing
# 808 lines a second, 0.1 s cost 1.4 % of a core and 0.5 s 0.6 % (docs/benchmarks.md). Besides
# a scrape, which catches up, only the OTLP push and the checkpoint see lines this much later.
APPEND_BATCH_SECONDS = 0.5

# What watchdog reports while the AppendWatcher reports growth: the directory tree changing.
_STRUCTURE_EVENTS = [FileCreatedEvent, FileMovedEvent, FileDeletedEvent,
                     DirCreatedEvent, DirMovedEvent, DirDeletedEvent]


@dataclass(frozen=True, slots=True)
class FollowedFile:
    """A file being followed, and where it was found."""

    path: str
    directory: str
    relative_path: str
    role: LogFileRole


class Sink(Protocol):
    """Where followed files and their lines go (the parse and state side)."""

    def file_discovered(self, file: FollowedFile, mtime: float | None) -> FilePosition | None:
        """Where to resume reading the file (the sink keeps read positions); None: at its start."""

    def lines_read(self, file: FollowedFile, batch: ReadBatch, coming: Sequence[ReadBatch] = ()) -> None:
        """``batch``'s lines; ``coming``: batches that follow it, read since the batch before it (their passes may
        start now)."""

    def file_closed(self, file: FollowedFile) -> None: ...

    def files_followed(self, count: int) -> None: ...


def _leaves(path: str, directory: str) -> bool:
    """True when ``path`` resolves (through symbolic links) to a file outside ``directory``."""
    return not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(directory))


class _DirtyPaths(FileSystemEventHandler):
    def __init__(self, mark: Callable[[str], None]) -> None:
        self._mark = mark

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory and event.event_type != "created":
            return
        for path in (event.src_path, getattr(event, "dest_path", "")):
            if path:
                self._mark(os.fsdecode(path))


class Follower:
    """Owns the tailers and the follow thread."""

    def __init__(
        self,
        directories: Sequence[str],
        sink: Sink,
        *,
        files: Sequence[str] = (),
        max_line_bytes: int = 1 << 20,
        poll_interval: float | None = None,
        rescan_interval: float = 2.0,
        idle_flush_seconds: float | None = None,
        rules: DirectoryRules | Mapping[str, DirectoryRules] = DEFAULT_RULES,
        append_batch_seconds: float = APPEND_BATCH_SECONDS,
        max_open_files: int | None = None,
        open_file_limit: int | None = None,
        plog_ranks: bool = False,
    ) -> None:
        """``rules``: which files to follow, for every directory or per directory (as given in ``directories``).

        ``max_open_files``: files followed at most (each holds a descriptor): the open-file limit
        ``open_file_limit`` less a reserve for the listener, the probes and the checkpoint. Files
        beyond are left unfollowed (``unfollowed``), said once, until others go away.

        ``plog_ranks``: a CANN process log ``plog-<pid>_*.log`` counts on the rank whose worker log names that
        pid (discover.PidRanks), and waits, unread, until one does; without it, it is a series of its own.
        """
        self._directories = [os.path.abspath(d) for d in directories]
        # Single files (--log-file): followed whatever their name, waited for like a directory.
        # In analyze's order (directory, discover.discovery_order): the same rank-less file has the run's series.
        self._single_files = sorted((os.path.abspath(f) for f in files),
                                    key=lambda path: (os.path.dirname(path), discovery_order(os.path.basename(path))))
        self._rules = {os.path.abspath(d): rules if isinstance(rules, DirectoryRules) else rules.get(d, DEFAULT_RULES)
                       for d in directories}
        self._sink = sink
        self._max_line_bytes = max_line_bytes
        self._idle_flush_seconds = idle_flush_seconds
        self._rescan_interval = poll_interval or rescan_interval
        self._said: set[str] = set()  # warnings about skipped directories and files, each said once
        self._files: dict[str, FollowedFile] = {}
        self._tailers: dict[str, Tailer] = {}
        self._pid_ranks = PidRanks() if plog_ranks else None
        self._watched: set[str] = set()
        self._reported_errors: dict[str, str | None] = {}
        self._waiting: set[str] = set()  # directories reported missing, to say so once
        self._dirty: set[str] = set()
        self._dirty_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._observer = None if poll_interval else self._native_observer()
        self._appends: AppendWatcher | None = None  # created by start(): only a running follower needs it
        self._append_batch_seconds = append_batch_seconds
        self._max_open_files = max_open_files
        self._open_file_limit = open_file_limit
        self._unfollowed: set[str] = set()  # files left out for the open-file limit
        # catch_up's hand-over: requests asked, the last one whose appends were read, and whether the
        # follow thread is reading appends it took from the kernel (they are no longer queued there).
        self._passes = threading.Condition()
        self._passes_asked = self._passes_done = 0
        self._reading_appends = False
        self._thread = threading.Thread(target=self._run, name="follow", daemon=True)

    @property
    def ready(self) -> bool:
        """True once every directory exists and was scanned once."""
        return self._ready.is_set()

    def lag_bytes(self) -> dict[str, int]:
        """Per followed path, the bytes its file holds beyond what was read. From any thread (a scrape's)."""
        return {path: tailer.lag_bytes() for path, tailer in list(self._tailers.items())}

    def unfollowed(self) -> int:
        """Log files found but not followed for the open-file limit (trainlog_files_unfollowed). From any thread."""
        return len(self._unfollowed)

    def start(self) -> None:
        if self._observer is not None:
            # Growth comes from batched inotify reads instead of one watchdog event per write. Imported here: a
            # catch-up (run_once) reads without it, and the import (ctypes' library lookup) costs 7 ms.
            from exporter.follow.appends import AppendWatcher

            self._appends = AppendWatcher.create(self._append_batch_seconds)
            if self._appends is not None:
                for path in self._tailers:
                    self._appends.watch(os.path.dirname(path))
            self._observer.start()
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following: wait up to ``timeout`` for the batch in progress, close every file."""
        self._stop.set()
        self._wake_up()
        if self._thread.ident is not None:
            self._thread.join(timeout)
        if self._observer is not None:
            self._observer.stop()  # releases the inotify descriptor even if never started
            if self._observer.is_alive():
                self._observer.join(timeout)
        for tailer in self._tailers.values():
            tailer.close()
        with self._passes:
            if self._appends is not None:
                self._appends.close()
                self._appends = None
            self._passes.notify_all()  # a catch_up waiting now waits no longer

    def catch_up(self, timeout: float) -> bool:
        """Wait until the follow thread has read every line appended to the followed files before this call.

        Waits at most ``timeout`` seconds (the follow thread may be busy reading a long backlog).
        False when it timed out, or without inotify (polling), where nothing tells what grew.
        """
        with self._passes:
            appends = self._appends
            if appends is None:
                return False
            if not self._reading_appends and not appends.pending():
                return True  # nothing queued, nothing taken and not read yet: everything is read
            self._passes_asked += 1
            ticket = self._passes_asked
            appends.wake()  # under the lock: stop() closes the descriptors under it
            self._passes.wait_for(lambda: self._passes_done >= ticket or self._appends is None, timeout)
            return self._passes_done >= ticket

    def run_once(self) -> None:
        """One full scan and read of everything (used at start and by the periodic rescan)."""
        all_present = True
        for directory in self._directories:
            if not os.path.isdir(directory):
                all_present = False
                if directory not in self._waiting:
                    # The sidecar often starts before the trainer creates its log directory.
                    log.info("waiting for the log directory %s to appear (not ready until then)", directory)
                    self._waiting.add(directory)
                continue
            if directory in self._waiting:
                log.info("log directory %s appeared", directory)
                self._waiting.discard(directory)
            self._watch(directory)
            self._scan(directory)
        for path in self._single_files:
            if path in self._tailers:
                continue
            if not os.path.isfile(path):
                all_present = False
                if path not in self._waiting:
                    log.info("waiting for the log file %s to appear (not ready until then)", path)
                    self._waiting.add(path)
                continue
            self._waiting.discard(path)
            self._watch(os.path.dirname(path), recursive=False)
            self._discover(os.path.dirname(path), path, explicit=True)
        for path in sorted(self._tailers, key=self._read_order):
            self._guarded(self._read, path, True)  # one unreadable file must not hold up the others
        # Files left out that went away are no longer waiting; the others are tried again by the next scans.
        self._unfollowed = {path for path in self._unfollowed if path not in self._tailers and os.path.exists(path)}
        self._sink.files_followed(len(self._tailers))
        if all_present:
            self._ready.set()

    def _run(self) -> None:
        next_rescan = 0.0
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_rescan:
                self._guarded(self.run_once)
                next_rescan = now + self._rescan_interval
            served = self._wait(max(0.0, next_rescan - time.monotonic()))
            with self._dirty_lock:
                dirty, self._dirty = self._dirty, set()
            for path in sorted(dirty, key=self._read_order):  # a set has no order
                self._guarded(self._on_dirty, path)
            with self._passes:
                self._reading_appends = False
                self._passes_done = served
                self._passes.notify_all()

    def _read_order(self, path: str) -> int:
        """Of files read in one pass: a rank's ``stderr*`` after its other files (torchrun's ``--redirects``: a
        traceback on stderr comes after the step lines the rank printed before it, which name its step), a
        launcher's console last (its report of a worker's exit goes after the worker's own last lines)."""
        followed = self._files.get(path)
        if followed is not None and followed.role.role == "launcher":
            return 2
        return 1 if os.path.basename(path).startswith("stderr") else 0

    def _guarded(self, action: Callable[..., None], *args: object) -> None:
        # One bad file or a filesystem hiccup must never stop the follow loop.
        try:
            action(*args)
        except Exception:  # noqa: BLE001
            log.exception("follow loop: %s failed", getattr(action, "__name__", action))

    def _wait(self, timeout: float) -> int:
        """Until a file is dirty or ``timeout`` seconds passed; the last catch_up request the reads
        that follow serve (they read every append queued when it was asked)."""
        appends = self._appends
        if appends is None:
            self._wake.wait(timeout)
            self._wake.clear()
            return self._passes_done
        appends.wait(timeout)
        with self._passes:
            served = self._passes_asked
            self._reading_appends = True
        grown = appends.grown()
        with self._dirty_lock:
            # None: the kernel dropped events, any followed file may have grown.
            self._dirty.update(list(self._tailers) if grown is None else grown)
        return served

    def _mark_dirty(self, path: str) -> None:
        """From watchdog's thread: a file appeared, moved or went."""
        with self._dirty_lock:
            self._dirty.add(path)
        self._wake_up()

    def _wake_up(self) -> None:
        self._wake.set()
        if self._appends is not None:
            self._appends.wake()

    def _native_observer(self) -> BaseObserver | None:
        # Imported here, not with the module: analyze and simulate import this module but follow
        # nothing, and the inotify observer's import (ctypes, libc's bindings) is a fifth of
        # theirs (docs/benchmarks.md).
        from watchdog.observers import Observer

        try:
            return Observer()
        except OSError as error:
            # inotify_init fails when the per-user instance limit is reached (EMFILE).
            self._log_polling_fallback("cannot watch for changes", error)
            return None

    def _watch(self, directory: str, recursive: bool = True) -> None:
        if self._observer is None or directory in self._watched:
            return
        try:
            self._observer.schedule(_DirtyPaths(self._mark_dirty), directory, recursive=recursive,
                                    event_filter=_STRUCTURE_EVENTS if self._appends is not None else None)
        except OSError as error:
            # The per-user inotify watch limit (ENOSPC): watch nothing, poll everything.
            self._log_polling_fallback(f"cannot watch {directory}", error)
            self._observer.stop()
            self._observer = None
            return
        self._watched.add(directory)

    def _log_polling_fallback(self, what: str, error: OSError) -> None:
        log.warning("%s (%s): falling back to polling every %.1fs", what, error.strerror or error,
                    self._rescan_interval)

    def _scan(self, directory: str) -> None:
        rules = self._rules[directory]
        found = []
        for root, subdirectories, names in os.walk(directory, onerror=self._say_skipped):
            subdirectories[:] = [name for name in subdirectories
                                 if self._walks_into(directory, rules, os.path.join(root, name))]
            found += [path for path in (os.path.join(root, name) for name in names) if path not in self._tailers]
        # The files found together in analyze's order (discover.discovery_order): a later torchrun attempt after
        # the earlier, and the same first rank-less file of the run.
        for path in sorted(found, key=lambda path: discovery_order(Path(path).relative_to(directory).as_posix())):
            self._discover(directory, path)

    def _walks_into(self, directory: str, rules: DirectoryRules, path: str) -> bool:
        """Whether the scan goes into a subdirectory; a skipped one is said once."""
        relative = Path(path).relative_to(directory).as_posix()
        pattern = rules.excluding(relative)
        if pattern is not None:
            self._say_once(f"not following the logs under {path}: excluded by the pattern {pattern!r}", logging.INFO)
            return False
        if os.path.islink(path):  # os.walk does not go into linked directories: say so, louder when it leads out
            self._say_once(f"not following the logs under {path}: a symbolic link to a directory",
                           logging.WARNING if _leaves(path, directory) else logging.INFO)
            return False
        return True

    def _say_skipped(self, error: OSError) -> None:
        """A subdirectory os.walk cannot list: its files are not followed; said once per directory."""
        self._say_once(f"cannot read directory {error.filename} ({error.strerror}): its logs are not followed")

    def _say_once(self, message: str, level: int = logging.WARNING) -> None:
        if message not in self._said:
            self._said.add(message)
            log.log(level, "%s", message)

    def _on_dirty(self, path: str) -> None:
        if path in self._tailers:
            self._read(path)
            return
        base = rotated_base(path)
        if base in self._tailers:
            # A write to a file just rotated away (its writer has not reopened yet).
            self._read(base)
            return
        if path in self._single_files and os.path.isfile(path):
            self._discover(os.path.dirname(path), path, explicit=True)
            self._read(path)
            self._sink.files_followed(len(self._tailers))
            return
        directory = self._directory_of(path)
        if directory is not None and os.path.isfile(path):
            self._discover(directory, path)
            if path in self._tailers:
                self._read(path)
                self._sink.files_followed(len(self._tailers))

    def _directory_of(self, path: str) -> str | None:
        for directory in self._directories:
            if path.startswith(directory + os.sep):
                return directory
        return None

    def _discover(self, directory: str, path: str, explicit: bool = False) -> None:
        """Start following ``path``; ``explicit``: named by --log-file, followed whatever its name."""
        relative = Path(path).relative_to(directory).as_posix()
        rules = self._rules.get(directory, DEFAULT_RULES)
        if not explicit and not rules.follows(relative):
            return
        if not rules.follow_symlinks_outside and _leaves(path, directory):
            self._say_once(f"not following {path}: a symbolic link out of the log directory {directory} "
                           "(--follow-symlinks-outside, or follow_symlinks_outside for the directory, allows it)")
            return
        if self._max_open_files is not None and len(self._tailers) >= self._max_open_files:
            self._leave_out(path)
            return
        role = classify(relative)
        if self._pid_ranks is not None and (pid := plog_pid(relative)) is not None:
            mapped = self._plog_role(pid)
            if mapped is None:
                self._say_once(f"not following {path} yet: no worker log names its process {pid} so far "
                               "(--plog-ranks); it is read from its start once one does", logging.INFO)
                return
            role = mapped
        self._unfollowed.discard(path)
        followed = FollowedFile(path, directory, relative, role)
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = None
        resume = self._sink.file_discovered(followed, mtime)
        self._files[path] = followed
        self._tailers[path] = Tailer(path, self._max_line_bytes, resume=resume,
                                     idle_flush_seconds=self._idle_flush_seconds)
        if self._appends is not None:
            self._appends.watch(os.path.dirname(path))
        log.info("following %s (rank %r, %s)", path, followed.role.rank, followed.role.role)

    def _plog_role(self, pid: int) -> LogFileRole | None:
        """The role of the worker whose log names process ``pid`` (a worker log with a rank, not a plog)."""
        assert self._pid_ranks is not None
        workers = [(path, followed.role) for path, followed in self._files.items()
                   if followed.role.role == "worker" and not followed.role.rankless
                   and plog_pid(followed.relative_path) is None]
        return self._pid_ranks.role_of(pid, workers)

    def _leave_out(self, path: str) -> None:
        """A file beyond the open-file budget: counted, and said once for all of them (Filebeat's harvester_limit)."""
        self._unfollowed.add(path)
        self._say_once(f"following at most {self._max_open_files} log files: the open-file limit (RLIMIT_NOFILE, "
                       f"ulimit -n) is {self._open_file_limit} and a reserve is kept for the listener and the "
                       "probes; the others are left unfollowed (trainlog_files_unfollowed) until followed files "
                       "go away or the limit is raised")

    def _read(self, path: str, rescan: bool = False) -> None:
        tailer = self._tailers[path]
        followed = self._files[path]
        for batch, coming in read_ahead(tailer.poll(rescan)):
            self._sink.lines_read(followed, batch, coming)
            del batch, coming  # before the next read: the block's memory is then reused, not faulted in anew
        if tailer.last_error != self._reported_errors.get(path):
            # Say it once per change, not on every rescan.
            if tailer.last_error is not None:
                log.warning("%s", tailer.last_error)
            self._reported_errors[path] = tailer.last_error
        if tailer.finished:
            log.info("%s is gone: stopped following it", path)
            del self._tailers[path], self._files[path]
            self._reported_errors.pop(path, None)
            self._sink.file_closed(followed)
            self._sink.files_followed(len(self._tailers))

