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

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from exporter.follow.identity import FilePosition, is_same_file

# Date first: ".20240101" must not be taken for generation number 20240101.
_ROTATED_SUFFIX = re.compile(r"^(?:[-.](?P<date>\d{8,10})|\.(?P<number>\d{1,6}))$")
_COMPRESSED_SUFFIX = re.compile(r"^(?:[-.](?P<date>\d{8,10})|\.(?P<number>\d{1,6}))(?:\.gz)?$")


@dataclass(frozen=True, slots=True)
class Located:
    """A saved file found among the siblings, and the newer siblings not read yet."""

    path: str | None = None
    newer: list[str] = field(default_factory=list)


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
    """Find the file ``position`` was taken in among the siblings of ``path``.

    By inode (a rename keeps it); with ``copies``, also by fingerprint alone (a
    ``copytruncate`` copy has a new inode but the same first bytes). The newest match wins.
    """
    siblings = rotated_siblings(path)
    for matches in (_same_inode, _same_content) if copies else (_same_inode,):
        for index in range(len(siblings) - 1, -1, -1):
            if matches(siblings[index], position):
                return Located(siblings[index], siblings[index + 1 :])
    return Located()


def _age_order(match: re.Match[str]) -> tuple[int, str]:
    # .1 is newer than .2; -20240102 is newer than -20240101.
    if match.group("date"):
        return 0, match.group("date")
    return -int(match.group("number")), ""


def _same_inode(path: str, position: FilePosition) -> bool:
    return _with_open(path, lambda fd: is_same_file(fd, position))


def _same_content(path: str, position: FilePosition) -> bool:
    fingerprint = position.fingerprint
    return fingerprint is not None and _with_open(path, fingerprint.matches)


def _with_open(path: str, check: Callable[[int], bool]) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return check(fd)
    finally:
        os.close(fd)
