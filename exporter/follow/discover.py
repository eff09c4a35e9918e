"""Which files under a log directory are followed, and whose run and rank each one holds."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_INCLUDE = ("*.log", "*.out", "*.jsonl", "*.txt")
# Rotated and compressed siblings are history of a followed file, never a new rank.
_ROTATED = re.compile(r"(\.\d+|\.gz|\.bz2|\.xz|\.zst|[-.]\d{8,10})$")

_WORKER = re.compile(r"(?:^|/)worker_(\d+)\.log$", re.ASCII)
_RANK_IN_NAME = re.compile(r"(?:^|[/_.-])rank[_-]?(\d+)(?=[^/\d]*$)", re.IGNORECASE | re.ASCII)
_SCHEDULER = re.compile(r"(?:^|/)scheduler\.log$")
# torchrun --log-dir: <log_dir>/<run_id>/attempt_<restart>/<local_rank>/{stdout,stderr}.log
_TORCHRUN_LOG_DIR = re.compile(r"(?:^|/)attempt_\d+/(\d+)/(?:stdout|stderr)\.log$", re.ASCII)


@dataclass(frozen=True, slots=True)
class LogFileRole:
    """What a followed file is: a rank's worker log or the scheduler's log."""

    # The global rank (local rank when local_rank is set); for a worker log whose name holds no
    # rank, the path itself: two rank-less files of a directory are two series, not one.
    rank: str
    role: str  # "worker" or "scheduler"
    # True when ``rank`` is the node-local rank (torchrun's layout): the node's rank offset makes it global.
    local_rank: bool = False


def is_followed(relative_path: str, include: tuple[str, ...] = DEFAULT_INCLUDE) -> bool:
    """True for a log file to follow: matches an include pattern and is not a rotated copy."""
    name = relative_path.rsplit("/", 1)[-1]
    if _ROTATED.search(name):
        return False
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in include)


def classify(relative_path: str) -> LogFileRole:
    """Rank and role from a path relative to the log directory."""
    if _SCHEDULER.search(relative_path):
        return LogFileRole("", "scheduler")
    torchrun = _TORCHRUN_LOG_DIR.search(relative_path)
    if torchrun:
        return LogFileRole(torchrun.group(1), "worker", local_rank=True)
    match = _WORKER.search(relative_path) or _RANK_IN_NAME.search(relative_path)
    return LogFileRole(match.group(1) if match else relative_path, "worker")


def run_label(directory: str, run: str | None = None) -> str:
    """The run label of a log directory's series: ``run`` (--run) when given, else the name
    of the directory's parent (``/jobs/llama-70b/output/msrun_log`` -> ``output``)."""
    if run:
        return run
    return Path(directory).resolve().parent.name or "default"
