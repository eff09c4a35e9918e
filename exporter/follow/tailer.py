"""Follow one file: read appended bytes in large chunks and cut them into lines.

Semantics after google/mtail's filestream: keep a partial-line buffer across reads, treat
a size below the read offset as truncation (copytruncate), and a different (device,
inode) behind the path as rotation: drain the old file to its end, then start the new
one from its beginning.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

CHUNK_BYTES = 1 << 20


@dataclass(slots=True)
class ReadBatch:
    """Complete lines read in one chunk, without their newlines, and what happened on the way."""

    lines: list[bytes]
    bytes_read: int = 0
    lines_truncated: int = 0
    rotated: bool = False
    truncated: bool = False
    bytes_lost: int = 0
    mtime: float | None = None


@dataclass(slots=True)
class FileIdentity:
    device: int
    inode: int


class Tailer:
    """Reads one path from ``offset`` on; ``poll`` yields what was appended since."""

    __slots__ = ("path", "max_line_bytes", "offset", "identity", "last_error", "_file", "_partial", "_skipping")

    def __init__(self, path: str, max_line_bytes: int = 1 << 20, offset: int = 0,
                 identity: FileIdentity | None = None) -> None:
        self.path = path
        self.max_line_bytes = max_line_bytes
        self.offset = offset
        self.identity = identity
        self.last_error: str | None = None
        self._file: BinaryIO | None = None
        self._partial = bytearray()
        self._skipping = False  # discarding the rest of an over-long line

    def poll(self) -> Iterator[ReadBatch]:
        """Yield batches of complete lines up to the end of the file, following a rotation."""
        if self._file is None and not self._open():
            return
        yield from self._drain()
        if not self._replaced():
            return
        # The old file is drained; a last line without a newline is complete now.
        last = self._take_partial()
        self.close()
        self.identity, self.offset = None, 0
        yield ReadBatch([last] if last else [], rotated=True)
        if self._open():
            yield from self._drain()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _open(self) -> bool:
        try:
            handle = open(self.path, "rb", buffering=0)  # noqa: SIM115 - kept open between polls
        except OSError as error:
            self.last_error = f"cannot open {self.path}: {os.strerror(error.errno or errno.EIO)}"
            return False
        stat = os.fstat(handle.fileno())
        identity = FileIdentity(stat.st_dev, stat.st_ino)
        if (self.identity is not None and identity != self.identity) or self.offset > stat.st_size:
            self.offset = 0  # not the file (or not the content) the offset belongs to
        self.identity = identity
        handle.seek(self.offset)
        self._file = handle
        self.last_error = None
        return True

    def _drain(self) -> Iterator[ReadBatch]:
        handle = self._file
        stat = os.fstat(handle.fileno())
        first = ReadBatch([], mtime=stat.st_mtime)
        if stat.st_size < self.offset:
            # copytruncate: the file was emptied under us and may have grown again.
            first.truncated = True
            first.bytes_lost = len(self._take_partial())
            self.offset = 0
            handle.seek(0)
        while True:
            chunk = handle.read(CHUNK_BYTES)
            if not chunk:
                break
            self.offset += len(chunk)
            batch = self._cut(chunk)
            batch.mtime = stat.st_mtime
            if first is not None:
                batch.truncated, batch.bytes_lost, first = first.truncated, first.bytes_lost, None
            yield batch
        if first is not None and first.truncated:
            yield first

    def _replaced(self) -> bool:
        """True when the path now names another file than the one being read."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False  # deleted (or unreadable): keep the drained handle until a new file appears
        return FileIdentity(stat.st_dev, stat.st_ino) != self.identity

    def _take_partial(self) -> bytes:
        pending = bytes(self._partial[: self.max_line_bytes])
        self._partial.clear()
        self._skipping = False
        return pending

    def _cut(self, chunk: bytes) -> ReadBatch:
        batch = ReadBatch([], bytes_read=len(chunk))
        if self._skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return batch
            chunk = chunk[newline + 1 :]
            self._skipping = False
        if self._partial:
            self._partial += chunk
            chunk = bytes(self._partial)
            self._partial.clear()
        lines = chunk.split(b"\n")
        tail = lines.pop()
        cap = self.max_line_bytes
        if len(chunk) > cap:  # only then can a complete line be over the cap
            for index, line in enumerate(lines):
                if len(line) > cap:
                    lines[index] = line[:cap]
                    batch.lines_truncated += 1
        if len(tail) > cap:
            # Emit the head now and drop the rest up to the next newline: memory stays bounded.
            lines.append(tail[:cap])
            batch.lines_truncated += 1
            self._skipping = True
        else:
            self._partial += tail
        batch.lines = lines
        return batch
