"""Rotated siblings of a followed file: where its older generations went.

logrotate (and Python's RotatingFileHandler) move ``worker_3.log`` to ``worker_3.log.1``
(shifting ``.1`` to ``.2`` ...) or, with ``dateext``, to ``worker_3.log-20240101``. When
the follower finds that the path names new content, the lines it has not read yet are in
one of these siblings: the file it was reading (found by inode after a rename, by
fingerprint after a copy), followed by any newer sibling from a rotation it did not see.
The follower never reads compressed siblings (``.gz``): by the time logrotate compresses a
generation (``delaycompress``), it was read through its uncompressed name. A finished log
read from its start (``analyze``) takes every generation, compressed or not: ``generations``.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from dataclasses import dataclass, field

from exporter.follow.identity import FilePosition, is_same_file

# Date first: ".20240101" must not be taken for generation number 20240101.
_ROTATED_SUFFIX = re.compile(r"^(?:[-.](?P<date>\d{8,10})|\.(?P<number>\d{1,6}))$")
_COMPRESSED_SUFFIX = re.compile(r"^(?:[-.](?P<date>\d{8,10})|\.(?P<number>\d{1,6}))(?:\.gz)?$")


log = logging.getLogger(__name__)

# Listing, opening and checking the names again can race a rotation in progress; this many
# tries, each a few system calls, outlast any logrotate run.
_SNAPSHOT_TRIES = 20


@dataclass(slots=True)
class Sibling:
    """A rotated generation, opened: renames after the snapshot do not change which file it is."""

    path: str
    fd: int


@dataclass(slots=True)
class Located:
    """A saved file found among the opened siblings, and the newer siblings not read yet.

    Holds every sibling's descriptor until ``close``: use it as a context manager.
    """

    found: Sibling | None = None
    newer: list[Sibling] = field(default_factory=list)
    opened: list[Sibling] = field(default_factory=list)

    def __enter__(self) -> Located:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        for sibling in self.opened:
            os.close(sibling.fd)
        self.opened = []


def rotated_siblings(path: str, *, compressed: bool = False) -> list[str]:
    """Rotated generations of ``path``, oldest first: the uncompressed ones, with ``compressed`` the ``.gz`` too."""
    suffix = _COMPRESSED_SUFFIX if compressed else _ROTATED_SUFFIX
    directory, base = os.path.split(path)
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = []
    for name in names:
        match = suffix.match(name[len(base) :]) if name.startswith(base) else None
        if match is not None:
            found.append((_age_order(match), os.path.join(directory, name)))
    return [sibling for _, sibling in sorted(found)]


def generations(path: str) -> list[str]:
    """Every generation of a log, oldest first: ``.2.gz``, ``.1``, then ``path`` itself."""
    return [*rotated_siblings(path, compressed=True), path]


def rotated_base(path: str, *, compressed: bool = False) -> str | None:
    """``worker_3.log`` for ``worker_3.log.1`` (and, with ``compressed``, ``worker_3.log.2.gz``);
    None when ``path`` is not a rotated name."""
    suffix = _COMPRESSED_SUFFIX if compressed else _ROTATED_SUFFIX
    directory, name = os.path.split(path)
    for match in re.finditer(r"[-.]", name):
        if suffix.match(name[match.start() :]):
            return os.path.join(directory, name[: match.start()])
    return None


def locate(path: str, position: FilePosition, *, copies: bool = False) -> Located:
    """Find the file ``position`` was taken in among the siblings of ``path``, opened.

    By inode (a rename keeps it); with ``copies``, also by fingerprint alone (a
    ``copytruncate`` copy has a new inode but the same first bytes). The newest match wins.
    The siblings are opened first and identified by their descriptors: a rotation while
    they are looked at (``.1`` renamed to ``.2``) cannot make one generation be read for another.
    """
    opened = open_siblings(path)
    located = Located(opened=opened)
    for matches in (_same_inode, _same_content) if copies else (_same_inode,):
        for index in range(len(opened) - 1, -1, -1):
            if matches(opened[index].fd, position):
                located.found, located.newer = opened[index], opened[index + 1 :]
                return located
    return located


def open_siblings(path: str) -> list[Sibling]:
    """The rotated siblings of ``path`` opened, oldest first, as one consistent snapshot.

    Once all are open, each is checked to still be named as when it was opened, and the
    names are listed again: a rotation that renamed or removed one, or added a generation
    older than the newest listed (``.1`` moved to ``.2``), starts the snapshot over. Names
    added after all the others are generations rotated since the listing began: newer than
    any file a caller looks for (it opened the path's file first), so they change nothing,
    and rotations faster than a listing (dated names every 100 ms) cannot starve the snapshot.
    """
    for _ in range(_SNAPSHOT_TRIES):
        names = rotated_siblings(path)
        opened = [Sibling(name, fd) for name in names if (fd := _open(name)) is not None]
        if all(_still_named(sibling) for sibling in opened) and rotated_siblings(path)[:len(names)] == names:
            return opened
        for sibling in opened:
            os.close(sibling.fd)
    log.warning("%s: its rotated generations changed at every one of %d listings; lines rotated into them "
                "since the last read may be missed", path, _SNAPSHOT_TRIES)
    return []


def _age_order(match: re.Match[str]) -> tuple[int, str]:
    # .1 is newer than .2; -20240102 is newer than -20240101.
    if match.group("date"):
        return 0, match.group("date")
    return -int(match.group("number")), ""


def _same_inode(fd: int, position: FilePosition) -> bool:
    return is_same_file(fd, position)


def _same_content(fd: int, position: FilePosition) -> bool:
    fingerprint = position.fingerprint
    return fingerprint is not None and fingerprint.matches(fd)


def _open(path: str) -> int | None:
    try:
        # O_NONBLOCK: a FIFO named like a rotated log must not block.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    if stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    os.close(fd)
    return None


def _still_named(sibling: Sibling) -> bool:
    try:
        named = os.stat(sibling.path)
    except OSError:
        return False
    opened = os.fstat(sibling.fd)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)
