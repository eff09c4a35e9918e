"""Which file is which: its inode, and a fingerprint of its first bytes.

An inode tells a renamed file apart from the new file at its old path; a fingerprint tells
a truncated-and-rewritten file, or a copy made by ``copytruncate``, apart from the content
it replaced. Together they are what a checkpoint keeps to find a file again after a restart.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

# As much as the OpenTelemetry filelog receiver uses: enough to contain a timestamp, so two
# generations of one log practically never share it.
FINGERPRINT_BYTES = 1024


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """Digest of a file's first ``length`` bytes."""

    length: int
    digest: str

    def matches(self, fd: int) -> bool:
        """True when the open file starts with the bytes this fingerprint was taken from."""
        return fingerprint_of(fd, self.length) == self


@dataclass(frozen=True, slots=True)
class FilePosition:
    """Where reading of one followed path stopped: the unit a checkpoint saves.

    ``offset`` is the end of the last line handed out (a pending partial line is not
    included: it is read again after a restart). ``skipping`` means the head of an
    over-long line was handed out and the rest up to the next newline is to be dropped.
    """

    device: int
    inode: int
    offset: int
    fingerprint: Fingerprint | None = None
    skipping: bool = False


# No file is larger: a larger offset in a checkpoint was not written by a reader of a real file.
MAX_OFFSET = 2**63 - 1
_DIGEST_CHARACTERS = 32  # blake2b, 16 bytes, as hex


def implausible(position: FilePosition) -> str | None:
    """What makes a position read back from a checkpoint impossible (None: nothing).

    Only what no real file could give: an offset beyond the end of the file it names is
    a truncation while the exporter was down, which the tailer recovers from.
    """
    if not 0 <= position.offset <= MAX_OFFSET:
        return f"offset {position.offset}"
    if not (0 <= position.device <= MAX_OFFSET and 0 <= position.inode <= MAX_OFFSET):
        return "device or inode number out of range"
    fingerprint = position.fingerprint
    if fingerprint is not None and not (0 < fingerprint.length <= FINGERPRINT_BYTES
                                        and len(fingerprint.digest) == _DIGEST_CHARACTERS):
        return f"fingerprint of {fingerprint.length} bytes"
    return None


def fingerprint_of(fd: int, length: int = FINGERPRINT_BYTES) -> Fingerprint | None:
    """Fingerprint of the first ``length`` bytes of an open file (fewer if it is shorter)."""
    head = os.pread(fd, length, 0)
    if not head:
        return None
    return Fingerprint(len(head), hashlib.blake2b(head, digest_size=16).hexdigest())


def is_same_file(fd: int, position: FilePosition) -> bool:
    """True when the open file is the one ``position`` was taken in.

    The inode must match; the device may not (it can change when a volume is mounted
    again), and the fingerprint guards against an inode number reused by a new file.
    """
    if os.fstat(fd).st_ino != position.inode:
        return False
    return position.fingerprint is None or position.fingerprint.matches(fd)
