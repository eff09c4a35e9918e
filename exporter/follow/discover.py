"""Which files under a log directory are followed, and whose run and rank each one holds."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# metrics.csv: PyTorch Lightning's CSVLogger (a table under its header: parse/csv_rows.py).
DEFAULT_INCLUDE = ("*.log", "*.out", "*.jsonl", "*.txt", "metrics.csv")
# Rotated and compressed siblings are history of a followed file, never a new rank.
_ROTATED = re.compile(r"(\.\d+|\.gz|\.bz2|\.xz|\.zst|[-.]\d{8,10})$")

_WORKER = re.compile(r"(?:^|/)worker_(\d+)\.log$", re.ASCII)
_RANK_IN_NAME = re.compile(r"(?:^|[/_.-])rank[_-]?(\d+)(?=[^/\d]*$)", re.IGNORECASE | re.ASCII)
_NUMBERS = re.compile(r"(\d+)")
_SCHEDULER = re.compile(r"(?:^|/)scheduler\.log$")
# msrun's own console kept beside its logs (``msrun ... > LOG_DIR/msrun.log 2>&1``): any ``msrun*.log``. It is the
# only place that names a worker msrun saw die (``Worker process PID exit with exception. Error code: -9.``); the
# rest of it is msrun tailing every worker log (``--join True``), copies of lines read in the workers' own files.
_LAUNCHER = re.compile(r"(?:^|/)msrun[^/]*\.log$")
# torchrun --log-dir: <log_dir>/<run_id>/attempt_<restart>/<local_rank>/{stdout,stderr}.log
_TORCHRUN_LOG_DIR = re.compile(r"(?:^|/)attempt_(\d+)/(\d+)/(?:stdout|stderr)\.log$", re.ASCII)
# CANN's device-side process logs ($ASCEND_PROCESS_LOG_PATH/.../device-<id>/device-<pid>_<time>.log):
# the logical device id, the node-local rank where each rank drives the device of its local rank
# (msrun's and torchrun's default), so a device fault counts on that rank (docs/ascend-faults.md).
_CANN_DEVICE_LOG = re.compile(r"(?:^|/)device-(\d+)/device-\d+_\d+\.log$", re.ASCII)
# CANN's host-side process logs (.../plog/plog-<pid>_<time>.log): one per process, named by its pid.
_CANN_PLOG = re.compile(r"(?:^|/)plog-(\d+)_\d+\.log$", re.ASCII)
# The pid of the process that printed a MindSpore or CANN log record: ``[WARNING] DEVICE(3937,7f5a...,python)``,
# ``[ERROR] HCCL(10972,python)``: the level, the module, then the pid.
_RECORD_PID = re.compile(rb"^\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|EXCEPTION|EVENT|TRACE)\] [A-Z][A-Z0-9_]*\((\d+),",
                         re.MULTILINE)


@dataclass(frozen=True, slots=True)
class LogFileRole:
    """What a followed file is: a rank's worker log, the scheduler's log or a launcher's console."""

    # The global rank (local rank when local_rank is set); empty for a worker log whose name holds no rank.
    rank: str
    role: str  # "worker", "scheduler" or "launcher" (msrun's console: only its own lines count, on the run's series)
    # True when ``rank`` is the node-local rank (torchrun's layout): the node's rank offset makes it global.
    local_rank: bool = False
    # True when the name holds no rank (``train.log``, a ``--tee`` console, ``metrics.csv``): ``rank`` is empty.
    rankless: bool = False
    # The launcher's attempt the file belongs to (torchrun's ``attempt_<K>/``): a later one is a restart, also when
    # its files hold no step (a restart that failed in rendezvous or before its first step).
    attempt: int | None = None


@dataclass(frozen=True, slots=True)
class DirectoryRules:
    """Which files of one log directory are followed.

    A pattern (shell-style, ``fnmatch``) matches a file or directory by its name or by its
    path relative to the log directory (``debug-*``, ``old/*``; a trailing ``/`` is ignored).
    A file is followed when an include pattern matches it and no exclude pattern matches it
    or a directory above it; an excluded directory is not walked at all.
    """

    include: tuple[str, ...] = DEFAULT_INCLUDE
    exclude: tuple[str, ...] = ()
    follow_symlinks_outside: bool = False  # follow symbolic links that lead out of the log directory

    def follows(self, relative_path: str) -> bool:
        """True for a log file to follow: included, not excluded, and not a rotated copy."""
        name = relative_path.rsplit("/", 1)[-1]
        if _ROTATED.search(name) or not _any_matches(self.include, relative_path):
            return False
        parts = relative_path.split("/")
        return not any(self.excluding("/".join(parts[:depth])) for depth in range(1, len(parts) + 1))

    def excluding(self, relative_path: str) -> str | None:
        """The exclude pattern that matches a file or directory, None when none does."""
        return next((pattern for pattern in self.exclude if _any_matches((pattern,), relative_path)), None)


DEFAULT_RULES = DirectoryRules()


def _any_matches(patterns: tuple[str, ...], relative_path: str) -> bool:
    name = relative_path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, pattern.rstrip("/")) or fnmatch.fnmatchcase(relative_path, pattern.rstrip("/"))
               for pattern in patterns)


def is_followed(relative_path: str, include: tuple[str, ...] = DEFAULT_INCLUDE) -> bool:
    """True for a log file to follow: matches an include pattern and is not a rotated copy."""
    return DirectoryRules(include).follows(relative_path)


def classify(relative_path: str) -> LogFileRole:
    """Rank and role from a path relative to the log directory."""
    if _SCHEDULER.search(relative_path):
        return LogFileRole("", "scheduler")
    if _LAUNCHER.search(relative_path):
        return LogFileRole("", "launcher")
    torchrun = _TORCHRUN_LOG_DIR.search(relative_path)
    if torchrun:
        return LogFileRole(torchrun.group(2), "worker", local_rank=True, attempt=int(torchrun.group(1)))
    device = _CANN_DEVICE_LOG.search(relative_path)
    if device:
        return LogFileRole(device.group(1), "worker", local_rank=True)
    match = _WORKER.search(relative_path) or _RANK_IN_NAME.search(relative_path)
    return LogFileRole(match.group(1), "worker") if match else LogFileRole("", "worker", rankless=True)


class RanklessFiles:
    """The run label of each worker log whose name holds no rank: one series per file, each on the empty rank.

    Their rank is empty (DESIGN 3.2). The first such file of a (run, node) (found first: serve and analyze take
    a directory's files nearest its top first, then in name order) has the run's own label: ``cmd > train.log``,
    a ``--tee`` console (whose ``[rankN]:`` lines still go to their ranks). Each further one is a series of its
    own, never merged into the first (two copies of one rank's values, MMEngine's work-dir log beside its
    console, Lightning's ``metrics.csv`` beside the bar, would read as restarts): its run label is the run's
    followed by its path in the log directory (``job/csv/lightning_logs/version_0/metrics.csv``), or by its
    full path when that is taken too (``--log-file``s of one name in several directories).
    """

    def __init__(self) -> None:
        self._holder: dict[tuple[str, str], str] = {}  # (run label, node) -> the path whose series it is

    def run_label(self, run: str, node: str, path: str, relative_path: str) -> str:
        """The run label of the rank-less file ``path`` (``relative_path`` in its log directory)."""
        for label in (run, f"{run}/{relative_path}", f"{run}/{path.lstrip('/')}"):
            if self._holder.setdefault((label, node), path) == path:
                return label
        return label  # the full path is the file's own


def discovery_order(relative_path: str) -> tuple[bool, int, list[int | str]]:
    """The order a directory's files are taken in: nearest the top first, then by name with numbers as numbers
    (``attempt_2/`` before ``attempt_10/``: a later attempt is a restart); a launcher's console last (its report
    of a worker's exit comes after the worker's last step, in a finished run read at once too)."""
    return _LAUNCHER.search(relative_path) is not None, relative_path.count("/"), natural_key(relative_path)


def natural_key(text: str) -> list[int | str]:
    """A name's sort key with its numbers as numbers: ``attempt_2`` before ``attempt_10``."""
    return [int(part) if part.isdigit() else part for part in _NUMBERS.split(text)]


def run_label(directory: str, run: str | None = None) -> str:
    """The run label of a log directory's series: ``run`` (--run) when given, else the name
    of the directory's parent (``/jobs/llama-70b/output/msrun_log`` -> ``output``); ``stdin`` for
    standard input (``-``)."""
    if run:
        return run
    if directory == "-":
        return "stdin"
    return Path(directory).resolve().parent.name or "default"


def plog_pid(relative_path: str) -> int | None:
    """The pid a CANN host-side process log is named by (``plog-<pid>_<time>.log``), else None."""
    match = _CANN_PLOG.search(relative_path)
    return int(match.group(1)) if match else None


def record_pids(block: bytes) -> set[int]:
    """The pids of the processes whose MindSpore or CANN log records a block of a worker log holds."""
    return {int(pid) for pid in _RECORD_PID.findall(block)}


def unnamed_pid(pid: int, console: str) -> str:
    """What is said when msrun's console reports a worker's exit by a pid no followed worker log names."""
    return (f"{console}: msrun reports worker process {pid} exiting, and no worker log names that pid: counted for "
            "the run, on the console's own series (rank \"\")")


class PidRanks:
    """The worker log whose records carry a pid: the rank of a CANN process log (``plog-<pid>_*.log``) and of a
    launcher's report of a worker's exit (msrun's ``Worker process 29960 exit with exception``).

    A worker's console holds MindSpore's and CANN's records, each naming the process that printed it
    (``[WARNING] DEVICE(3937,...)``); the process's own plog is named by the same pid. Worker logs are
    read from their start, a chunk per lookup that misses, up to ``limit`` bytes each (a process prints
    such records from its first seconds on): reading is the follower's, off the parse path.
    """

    CHUNK = 1 << 20

    def __init__(self, limit: int = 16 << 20) -> None:
        self._limit = limit
        self._paths: dict[int, str] = {}  # pid -> the worker log whose records name it
        self._read: dict[str, int] = {}  # worker log -> bytes looked at

    def role_of(self, pid: int, workers: Iterable[tuple[str, LogFileRole]]) -> LogFileRole | None:
        """The role of the worker whose log names ``pid``; None while no worker log read so far does."""
        roles = dict(workers)
        path = self.path_of(pid, roles)
        return None if path is None else roles.get(path)

    def path_of(self, pid: int, workers: Iterable[str]) -> str | None:
        """The worker log (of ``workers``, paths) whose records name ``pid``; None while none read so far does."""
        for path in workers:
            if pid in self._paths:
                break
            self._learn(path)
        return self._paths.get(pid)

    def _learn(self, path: str) -> None:
        start = self._read.get(path, 0)
        if start >= self._limit:
            return
        try:
            with open(path, "rb") as handle:
                if handle.seek(0, 2) < start:
                    start = 0  # written again from its start (msrun opens worker logs with "w"): new pids
                handle.seek(start)
                block = handle.read(min(self.CHUNK, self._limit - start))
        except OSError:
            return
        end = block.rfind(b"\n") + 1  # whole lines only: the rest is read again with the next chunk
        self._read[path] = start + end
        for pid in record_pids(block[:end]):
            self._paths.setdefault(pid, path)
