"""Checkpoints: where each followed file was read to, and the state those lines produced.

Both halves are taken together under the state lock (Pipeline.checkpoint), so the saved
offsets are exactly the lines the saved counters include: a restart resumes there and
counts nothing twice. The file is JSON with a version, written atomically (temporary file,
fsync, rename, fsync of the directory), every few seconds when something changed and once
more at shutdown. A missing file is a first start; a truncated, corrupt or foreign one is
set aside with a warning and the exporter starts fresh: never a crash loop.

This module sits beside pipeline.py rather than in follow/ or state/: a checkpoint spans
both, and neither should know the other's internals.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from exporter.follow.identity import FilePosition
from exporter.state import TrainingState
from exporter.state.snapshot import restore_state, validation_reason

if TYPE_CHECKING:
    from pydantic import TypeAdapter

log = logging.getLogger(__name__)

VERSION = 1


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Per followed path its read position, and the state dump that goes with them."""

    positions: dict[str, FilePosition]
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class _CheckpointFile:
    """The file's layout, validated when read back (keys it does not name are ignored)."""

    version: int
    written_at: float
    positions: dict[str, FilePosition]
    state: dict[str, Any]


@functools.cache
def _checkpoint_file() -> TypeAdapter[_CheckpointFile]:
    """The validator of checkpoint files (pydantic is imported for that only)."""
    from pydantic import TypeAdapter

    return TypeAdapter(_CheckpointFile)


class CheckpointSource(Protocol):
    """What the checkpointer saves (the pipeline): a change counter and consistent snapshots."""

    @property
    def generation(self) -> int: ...

    def checkpoint(self) -> tuple[int, Checkpoint]: ...


def default_state_file(log_dirs: Sequence[Path], state_home: Path) -> Path | None:
    """Where checkpoints go without --state-file: a file named after the log directories in
    ``state_home``/trainlog-exporter (``state_home``: $XDG_STATE_HOME, else ~/.local/state).

    One file per set of log directories, so two exporters on one host never share one.
    None when that file would fall inside a log directory.
    """
    directories = "\n".join(sorted(str(directory.resolve()) for directory in log_dirs))
    digest = hashlib.sha256(directories.encode()).hexdigest()[:12]
    path = state_home / "trainlog-exporter" / f"state-{digest}.json"
    return None if containing_log_dir(path, log_dirs) else path


def containing_log_dir(path: Path, log_dirs: Sequence[Path]) -> Path | None:
    """The log directory ``path`` lies in, if any: a log directory belongs to the trainer, is
    often shared by every node's exporter, and gets cleaned up: no place for a checkpoint."""
    resolved = path.resolve()
    return next((directory for directory in log_dirs if resolved.is_relative_to(directory.resolve())), None)


class StateFileError(Exception):
    """A state file that cannot be one (a device, a FIFO, a directory), worded for the user (exit 2)."""


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "a special file"


def usable_state_file(path: Path | None) -> Path | None:
    """``path`` if checkpoints can be written there; else None, with a warning."""
    if path is None:
        return None
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = None  # not there yet (it is written later) or not reachable (below)
    if mode is not None and not stat.S_ISREG(mode):
        # /dev/zero would be read without end, a FIFO would block the start: refused by name.
        raise StateFileError(f"state file {path}: is {_kind(mode)}, not a regular file: give a file path "
                             "(--state-file, TRAINLOG_STATE_FILE)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise PermissionError(f"{path.parent} is not writable")
    except OSError as error:
        log.warning("cannot keep checkpoints in %s (%s): running without them; a restart reads every "
                    "log again from its start", path, getattr(error, "strerror", None) or error)
        return None
    return path


def resume(path: Path, state: TrainingState) -> dict[str, FilePosition]:
    """Restore ``state`` from the checkpoint at ``path``; the saved positions to resume at.

    Anything wrong with the file gives a warning, the file is set aside as ``*.corrupt``
    and the exporter starts fresh (empty state, every file from its start).
    """
    for leftover in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        leftover.unlink(missing_ok=True)  # from a process killed while writing
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        log.info("no checkpoint in %s yet: reading every log from its start", path)
        return {}
    except OSError as error:
        log.warning("cannot read checkpoint %s (%s): starting fresh", path, error.strerror)
        return {}
    try:
        # The json module, not pydantic's parser: it reads back the lone surrogates a file name
        # that is not UTF-8 is written with (os.fsdecode), so every name round-trips.
        saved = _checkpoint_file().validate_python(json.loads(raw))
        if saved.version != VERSION:
            raise ValueError(f"version {saved.version}, this exporter reads version {VERSION}")
        repairs = restore_state(state, saved.state)
    except (ValueError, RecursionError) as error:  # pydantic's ValidationError is a ValueError
        _set_aside(path, error)
        return {}
    if repairs:
        log.warning("checkpoint %s held %d values that make no sense, repaired (%s%s)", path, len(repairs),
                    "; ".join(repairs[:3]), "; ..." if len(repairs) > 3 else "")
    log.info("resuming from checkpoint %s written at %s (%d files)", path,
             time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(saved.written_at)), len(saved.positions))
    return saved.positions


def save(path: Path, checkpoint: Checkpoint) -> None:
    """Write atomically: a reader (or a crash) sees the old file or the new one, never a mix."""
    document = {
        "version": VERSION,
        "written_at": time.time(),
        "positions": {name: dataclasses.asdict(position) for name, position in checkpoint.positions.items()},
        "state": checkpoint.state,
    }
    data = json.dumps(document, separators=(",", ":")).encode()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    # The rename itself must reach the disk, or a power loss could bring back the old file.
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class Checkpointer:
    """Saves the source's checkpoint every ``interval`` seconds if it changed, and at stop."""

    def __init__(self, path: Path, source: CheckpointSource, interval: float) -> None:
        self._path = path
        self._source = source
        self._interval = interval
        self._saved_generation: int | None = None
        self._last_error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="checkpoint", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop the periodic writes and write a last checkpoint (call after the follower stopped)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        self.save_if_changed()

    def save_if_changed(self) -> None:
        if self._source.generation == self._saved_generation:
            return
        generation, checkpoint = self._source.checkpoint()
        try:
            save(self._path, checkpoint)
        except (OSError, TypeError, ValueError) as error:  # a full disk, or a value JSON cannot hold
            message = f"cannot write checkpoint {self._path}: {getattr(error, 'strerror', None) or error}"
            if message != self._last_error:  # once per kind of failure, not every few seconds
                log.warning("%s", message)
            self._last_error = message
            return
        self._saved_generation, self._last_error = generation, None

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.save_if_changed()


def _set_aside(path: Path, error: Exception) -> None:
    reason = validation_reason(error) or str(error).splitlines()[0]
    aside = path.with_name(path.name + ".corrupt")
    try:
        os.replace(path, aside)
        kept = f"kept as {aside}"
    except OSError:
        kept = "left in place"
    log.warning("checkpoint %s is unusable (%s), %s: starting fresh, every log is read from its start",
                path, reason, kept)

