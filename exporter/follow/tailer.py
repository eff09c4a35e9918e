"""Follow one path: read appended bytes in large chunks and cut them into lines.

Semantics after google/mtail's filestream, made lossless where the file system allows:

- A partial line is buffered until its newline arrives (or, if asked, an idle timeout); its
  carriage-return segments (a progress bar's redraws) are handed out as they complete.
- Rename rotation (logrotate ``create``, RotatingFileHandler) and delete/re-create: the
  path names another inode. The old file stays open and is read until the writer has
  moved on (the new file has bytes, or two rescans passed), then drained to its end;
  siblings rotated in between are read, then the new file from its start.
- ``copytruncate``, and a file written again from its start (msrun's ``>`` at a restart):
  the size fell below the read offset, or the first bytes changed (looked at when the file
  grew, or changed without growing). The bytes not yet read are taken from the copy (the
  sibling with the same fingerprint), if there is one; then the file is read from its start.
- A saved :class:`FilePosition` resumes reading after a restart, wherever the file went.

Memory is bounded: a line longer than ``max_line_bytes`` is cut, its head handed out and
the rest dropped up to the next newline.
"""

from __future__ import annotations

import errno
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from stat import S_ISREG

from exporter.follow.identity import FINGERPRINT_BYTES, FilePosition, Fingerprint, fingerprint_of
from exporter.follow.rotated import Sibling, locate

log = logging.getLogger(__name__)

CHUNK_BYTES = 1 << 20
# The kernel's copy into a buffer that has left the core's cache costs four times more than
# into one that stays there (docs/benchmarks.md): a chunk is read in pieces this large
# through one small buffer, each copied on into the chunk by the C library.
READ_PIECE_BYTES = 1 << 17
# Batches read before one is handed out: each block's passes start two blocks' parsing before they are asked for,
# so that passes that take about as long as the parsing (a progress-bar console's) keep ahead of it.
READ_AHEAD = 2
# A partial line's progress-bar redraws held while the rest of the file is read next, up to this many bytes (a
# bar that has not ended its line for longer is handed out as it grows, as at the file's end).
REDRAWS_HELD_BYTES = 1 << 16
READ_SLACK = 4096  # room in a read buffer for what is appended after the size was looked up
# The last bytes read, kept to tell a file written again from its start (_was_rewritten): a
# timestamp's worth of a line, at least, whatever the lines before it.
TAIL_BYTES = 64
# Rescans that must see the path missing, or naming a still-empty new file, before the old
# file is given up: a rotation in progress (rename, then create, then the writer reopens)
# must not be cut short.
SETTLE_RESCANS = 2


@dataclass(slots=True)
class ReadBatch:
    """Complete lines read in one chunk, and what happened on the way.

    ``data`` holds the lines as one block, each ending with its newline: the parse side
    scans the block for the few lines worth parsing in one pass, instead of walking a list
    of millions of framework-noise lines in Python (docs/benchmarks.md).
    ``position`` is where reading stands once these lines are counted: a checkpoint saves it
    together with the state the lines produced.
    """

    data: bytes = b""
    position: FilePosition | None = None
    bytes_read: int = 0
    lines_truncated: int = 0
    rotated: bool = False
    truncated: bool = False
    bytes_lost: int = 0
    mtime: float | None = None

    @property
    def lines(self) -> list[bytes]:
        """The lines without their newlines (a split: the hot path scans ``data`` instead)."""
        return self.data.split(b"\n")[:-1]


@dataclass(slots=True)
class _OpenFile:
    """A file being read: its descriptor, identity, read offset and fingerprint."""

    fd: int
    device: int
    inode: int
    offset: int = 0
    fingerprint: Fingerprint | None = None
    # The modification time the file had when it was last read to its end (None: not yet), and
    # the last bytes read before ``offset``: a file that changed where it was read already was
    # written again from its start (see _was_rewritten).
    drained_mtime_ns: int | None = None
    tail: bytes = b""

    @classmethod
    def open(cls, path: str, offset: int = 0, fingerprint: Fingerprint | None = None) -> _OpenFile:
        # O_NONBLOCK: opening a FIFO named like a log must not wait for a writer forever.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        stat = os.fstat(fd)
        if not S_ISREG(stat.st_mode):
            os.close(fd)
            raise OSError(errno.EINVAL, "not a regular file")
        return cls(fd, stat.st_dev, stat.st_ino, offset, fingerprint)

    @classmethod
    def of(cls, sibling: Sibling, offset: int = 0, fingerprint: Fingerprint | None = None) -> _OpenFile:
        """A rotated sibling opened by ``locate`` (the descriptor stays the Located's to close)."""
        stat = os.fstat(sibling.fd)
        return cls(sibling.fd, stat.st_dev, stat.st_ino, offset, fingerprint)

    def is_at(self, stat: os.stat_result) -> bool:
        return (stat.st_dev, stat.st_ino) == (self.device, self.inode)

    def close(self) -> None:
        os.close(self.fd)


@dataclass(slots=True)
class _LineCutter:
    """Cuts chunks into lines across reads: the partial-line buffer and the line cap."""

    max_line_bytes: int
    partial: bytearray = field(default_factory=bytearray)
    skipping: bool = False  # dropping the rest of an over-long line whose head was handed out

    def cut(self, chunk: bytes | bytearray, more: bool = False) -> ReadBatch:
        """The complete lines of ``chunk`` (which may be reused once this returns) after the pending ones. ``more``:
        the source holds more right now, read next (a catch-up's full read)."""
        batch = ReadBatch(bytes_read=len(chunk))
        if self.skipping:
            newline = chunk.find(b"\n")
            if newline < 0:
                return batch
            chunk = chunk[newline + 1 :]
            self.skipping = False
        end = chunk.rfind(b"\n") + 1
        parts: list[bytes | bytearray | memoryview] = []
        if end:
            parts += (self.partial, memoryview(chunk)[:end])
            self.partial = bytearray(memoryview(chunk)[end:])
        else:
            self.partial += chunk
        # Not a ``\r`` that ends the buffer: it may be a CRLF line's, its ``\n`` still to come.
        redrawn = self.partial.rfind(b"\r", 0, len(self.partial) - 1) + 1
        if redrawn and not (more and len(self.partial) < REDRAWS_HELD_BYTES):
            # A progress bar redraws itself after carriage returns and ends its line only when it closes
            # (tqdm: at the end of an epoch or of the run): its redraws so far are lines now, handed out
            # ending in ``\r\n`` (the parser reads each carriage-return segment as a line, and a line
            # ending in ``\r`` as one the next continues). Not while the rest of a short line is read next:
            # a line handed out in two is counted twice, and each half is read alone.
            parts += (self.partial[:redrawn], b"\n")
            del self.partial[:redrawn]
        # One copy of the megabyte, not two: every fresh allocation is pages faulted in.
        block = b"".join(parts)
        cap = self.max_line_bytes
        if len(block) > cap:  # only then can a complete line be over the cap
            block, batch.lines_truncated = _cap_lines(block, cap)
        if len(self.partial) > cap:
            # Hand out the head now and drop the rest up to the next newline.
            block += bytes(self.partial[:cap]) + b"\n"
            batch.lines_truncated += 1
            self.partial.clear()
            self.skipping = True
        batch.data = block
        return batch

    def take_partial(self) -> bytes:
        """The pending partial line, now complete (its file ended); the buffer is emptied."""
        pending = bytes(self.partial)
        self.partial.clear()
        self.skipping = False
        return pending


class Tailer:
    """Reads one path; ``poll`` yields what was appended since the last poll."""

    def __init__(
        self,
        path: str,
        max_line_bytes: int = 1 << 20,
        *,
        resume: FilePosition | None = None,
        idle_flush_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.last_error: str | None = None
        self.finished = False  # the path is gone and its last file was read to the end
        self._cutter = _LineCutter(max_line_bytes)
        self._current: _OpenFile | None = None
        self._resume = resume
        self._idle_flush_seconds = idle_flush_seconds
        self._clock = clock
        self._last_growth = clock()
        self._unsettled_rescans = 0

    @property
    def position(self) -> FilePosition | None:
        """Where reading stands (None before the file was opened)."""
        return self._position_in(self._current) if self._current else None

    def lag_bytes(self) -> int:
        """Bytes the path's file holds beyond what was read; all of it when the path names a file not
        opened yet (a rotation not followed yet, or not opened at all). Safe from any thread: one stat,
        no descriptor of the follow thread's."""
        current = self._current
        try:
            stat = os.stat(self.path)
        except OSError:
            return 0
        if current is None or not current.is_at(stat):
            return stat.st_size
        return max(0, stat.st_size - current.offset)

    def poll(self, rescan: bool = False) -> Iterator[ReadBatch]:
        """Yield batches of complete lines up to the end of the file, following rotations.

        ``rescan`` marks the periodic full scan: the clock by which a missing path or a
        still-empty replacement is given up waiting for.
        """
        if self._current is None:
            yield from self._start()
            if self._current is None:
                return
        current = self._current
        # Look at the path before draining: if the new file already has bytes, the writer
        # has left the old one, so the drain below reads all the old one will ever hold.
        at_path = self._look_at_path(current)
        yield from self._drain(current)
        if at_path is not None and current.is_at(at_path):
            self._unsettled_rescans = 0
            yield from self._idle_flush(current)
            return
        if rescan:
            self._unsettled_rescans += 1
        settled = self._unsettled_rescans >= SETTLE_RESCANS
        if at_path is None:
            if settled:
                yield from self._finish(current)
        elif at_path.st_size > 0 or settled:
            yield from self._switch(current)

    def close(self) -> None:
        if self._current is not None:
            self._current.close()
            self._current = None

    def _start(self) -> Iterator[ReadBatch]:
        """Open the path; with a saved position, the file it names (maybe a rotated sibling)."""
        try:
            opened = _OpenFile.open(self.path)
        except FileNotFoundError:
            # Gone between discovery and the first read. With a saved position, maybe renamed by a
            # rotation its writer has not followed yet: read on in the generation it names, and
            # the path's next file once there is one, as after a live rotation.
            if not self._resume_in_sibling():
                self.finished = True
            return
        except OSError as error:
            self.last_error = f"cannot open {self.path}: {error.strerror}"
            return
        self.last_error = None
        resume, self._resume = self._resume, None
        if resume is None or opened.inode == resume.inode:
            # Same inode: continue; _drain sees a truncation by the size or the fingerprint.
            self._current = opened
            if resume is not None:
                self._restore(opened, resume)
            return
        # The path was rotated while the exporter was down: read the old file on from the
        # saved offset first; poll then switches to the new one as after a live rotation.
        with locate(self.path, resume) as located:
            if located.found is not None:
                opened.close()
                self._current = old = _OpenFile.of(Sibling(located.found.path, os.dup(located.found.fd)))
                self._restore(old, resume)
                log.info("%s was rotated while stopped: reading %s on from offset %d", self.path,
                         located.found.path, resume.offset)
                return
        log.warning("%s was replaced while stopped and the old file was not found next to it: "
                    "lines written to it after the last checkpoint are lost", self.path)
        self._current = opened
        yield ReadBatch(b"", self._position_in(opened), rotated=True)

    def _resume_in_sibling(self) -> bool:
        """Continue from the saved position in the rotated sibling that holds it; False without either."""
        resume, self._resume = self._resume, None
        if resume is None:
            return False
        with locate(self.path, resume) as located:
            if located.found is None:
                log.warning("%s is gone and the file of its last checkpoint was not found next to it: lines "
                            "written to it after that checkpoint are lost", self.path)
                return False
            found = located.found.path
            self._current = old = _OpenFile.of(Sibling(found, os.dup(located.found.fd)))
        self._restore(old, resume)
        log.info("%s was rotated while stopped and not created again yet: reading %s on from offset %d",
                 self.path, found, resume.offset)
        return True

    def _restore(self, opened: _OpenFile, resume: FilePosition) -> None:
        opened.offset, opened.fingerprint = resume.offset, resume.fingerprint
        self._cutter.skipping = resume.skipping

    def _drain(self, current: _OpenFile) -> Iterator[ReadBatch]:
        stat = os.fstat(current.fd)
        if _was_truncated(current, stat.st_size) or _was_rewritten(current, stat):
            yield from self._recover_truncation(current, stat.st_size)
        yield from self._read_to_end(current, stat.st_mtime, stat.st_size)
        # The time before the read: a write during it changes the time again, and costs the next
        # drain one look at the first bytes, never a missed rewrite.
        current.drained_mtime_ns = stat.st_mtime_ns

    def _read_to_end(self, opened: _OpenFile, mtime: float | None = None,
                     size: int | None = None) -> Iterator[ReadBatch]:
        # Memory faulted in anew costs more than reading (docs/benchmarks.md): one buffer for
        # the whole drain, no larger than what there is to read (a follower mostly reads a
        # few kilobytes), and no batch kept here once handed out, so the consumer's release
        # of the last block frees the memory the next one takes.
        if size is None:
            size = os.fstat(opened.fd).st_size
        buffer, piece = chunk_buffers(max(READ_SLACK, min(CHUNK_BYTES, size - opened.offset + READ_SLACK)))
        fd = opened.fd
        while count := fill_chunk(buffer, lambda view, at: os.preadv(fd, [view], opened.offset + at), piece):
            opened.offset += count
            opened.tail = _tail(opened.tail, buffer, count)
            if opened.fingerprint is None or opened.fingerprint.length < min(opened.offset, FINGERPRINT_BYTES):
                opened.fingerprint = fingerprint_of(opened.fd, min(opened.offset, FINGERPRINT_BYTES))
            self._last_growth = self._clock()
            yield self._cut(buffer if count == len(buffer) else buffer[:count], opened, mtime, opened.offset < size)

    def _cut(self, chunk: bytes | bytearray, opened: _OpenFile, mtime: float | None, more: bool) -> ReadBatch:
        batch = self._cutter.cut(chunk, more)
        batch.position, batch.mtime = self._position_in(opened), mtime
        return batch

    def _shrink(self, current: _OpenFile, size: int) -> ReadBatch:
        """The file lost its end but kept its first bytes: read on from its new end, not from its start.

        The lines before the new end were read already; a pending partial line lost its end.
        """
        bytes_lost = len(self._cutter.take_partial())
        current.offset, current.tail = size, b""
        return ReadBatch(b"", self._position_in(current), truncated=True, bytes_lost=bytes_lost)

    def _recover_truncation(self, current: _OpenFile, size: int) -> Iterator[ReadBatch]:
        """copytruncate: read what was not read yet from the copy, then restart at 0.

        Without a copy, a file that kept its first bytes only lost its end: a shrink.
        """
        position = self._position_in(current)
        bytes_lost = 0
        with locate(self.path, position, copies=True) as located:
            if located.found is None and _was_shrunk(current, size):
                yield self._shrink(current, size)
                return
            if located.found is not None:
                position = yield from self._read_sibling(located.found, current.offset, current.fingerprint,
                                                         cut_tail=True)
                for newer in located.newer:
                    position = yield from self._read_sibling(newer, 0, None, cut_tail=True)
            else:
                # Unread bytes of the old content are gone; the pending partial line is all we know of.
                bytes_lost = len(self._cutter.take_partial())
        current.offset, current.fingerprint, current.tail = 0, None, b""
        if located.found is None:
            position = self._position_in(current)
        # With a copy, the position saved stays the end of the last copy read until the file has
        # bytes of its own: offset 0 without a fingerprint would let a restart after another
        # copytruncate read the file from its start and never look at the copy holding the lines
        # written in between. From the copy's end, a restart reads the copies made since, then the file.
        yield ReadBatch(b"", position, truncated=True, bytes_lost=bytes_lost)

    def _read_sibling(self, sibling: Sibling, offset: int, fingerprint: Fingerprint | None,
                      *, cut_tail: bool) -> Generator[ReadBatch, None, FilePosition]:
        """Read a rotated sibling from ``offset`` to its end; its last partial line ends there.

        Returns the position at its end.
        """
        opened = _OpenFile.of(sibling, offset, fingerprint)
        yield from self._read_to_end(opened, os.fstat(opened.fd).st_mtime)
        yield from self._end_of_file(opened, cut_tail=cut_tail)
        return self._position_in(opened)

    def _end_of_file(self, opened: _OpenFile, *, cut_tail: bool) -> Iterator[ReadBatch]:
        """The file will not grow any more: its unterminated last line is final.

        A renamed or deleted file's last line is as complete as its writer left it. A
        copy's unterminated tail was cut by the copy: the rest fell into logrotate's
        copy-to-truncate window, so it is counted as lost rather than parsed.
        """
        last = self._cutter.take_partial()
        if cut_tail:
            yield ReadBatch(b"", self._position_in(opened), bytes_lost=len(last))
        else:
            yield ReadBatch(last + b"\n" if last else b"", self._position_in(opened))

    def _switch(self, old: _OpenFile) -> Iterator[ReadBatch]:
        """The path names a new file: finish the old one and siblings rotated since, then start.

        The new file is opened before the siblings are listed: a generation renamed away
        while this runs is then among the siblings, however fast rotations come, never
        between the listing and the new file. A sibling that is the new file (rotated away
        already) ends the siblings: it is read as the current file, and the next poll
        switches on from it.
        """
        yield from self._read_to_end(old)
        yield from self._end_of_file(old, cut_tail=False)
        old_position = self._position_in(old)
        old.close()
        self._current = None
        self._unsettled_rescans = 0
        try:
            new: _OpenFile | None = _OpenFile.open(self.path)
        except OSError as error:
            # Gone again: the next poll opens whatever the path names then, from its start.
            self.last_error = f"cannot open {self.path}: {error.strerror}"
            new = None
        with locate(self.path, old_position) as located:
            for sibling in located.newer:
                if new is not None and new.is_at(os.fstat(sibling.fd)):
                    break
                yield from self._read_sibling(sibling, 0, None, cut_tail=False)
        if new is None:
            return
        self._current = new
        yield ReadBatch(b"", self._position_in(new), rotated=True)
        yield from self._drain(new)

    def _finish(self, current: _OpenFile) -> Iterator[ReadBatch]:
        """The path stayed missing: its file is complete, and so are the generations rotated after it
        (renamed away, the last one not replaced yet); read them, give the path up (and the descriptor)."""
        yield from self._end_of_file(current, cut_tail=False)
        position = self._position_in(current)
        self.close()
        with locate(self.path, position) as located:
            for sibling in located.newer:
                yield from self._read_sibling(sibling, 0, None, cut_tail=False)
        self.finished = True

    def _idle_flush(self, current: _OpenFile) -> Iterator[ReadBatch]:
        """Hand out a partial line the writer left unterminated for ``idle_flush_seconds``."""
        if not (self._idle_flush_seconds and self._cutter.partial):
            return
        if self._clock() - self._last_growth < self._idle_flush_seconds:
            return
        last = self._cutter.take_partial()
        # Whatever completes this line later belongs to the line already handed out.
        self._cutter.skipping = True
        yield ReadBatch(last + b"\n", self._position_in(current))

    def _look_at_path(self, current: _OpenFile) -> os.stat_result | None:
        """What the path names now; None when it names nothing."""
        try:
            return os.stat(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            # Cannot tell (permissions, a network file system's hiccup): assume no change.
            return os.fstat(current.fd)

    def _position_in(self, opened: _OpenFile) -> FilePosition:
        consumed = opened.offset - len(self._cutter.partial)
        return FilePosition(opened.device, opened.inode, consumed, opened.fingerprint, self._cutter.skipping)


def read_ahead(batches: Iterator[ReadBatch], ahead: int = READ_AHEAD) -> Iterator[tuple[ReadBatch,
                                                                                   tuple[ReadBatch, ...]]]:
    """Each batch, handed out once ``ahead`` more are read (fewer at the end), with the batches read since the one
    before it (the parse side starts their passes while it parses this one: parse/ahead.py). When a read fails,
    the batches read before it are handed out first, then it is raised."""
    waiting: deque[ReadBatch] = deque()
    fresh: list[ReadBatch] = []  # read since the last batch was handed out
    failed: BaseException | None = None
    ended = False
    while True:
        while not ended and len(waiting) <= ahead:
            try:
                batch = next(batches, None)
            except BaseException as error:  # raised once the batches read before it are handed out
                failed, ended = error, True
                break
            if batch is None:
                ended = True
            else:
                waiting.append(batch)
                fresh.append(batch)
        if not waiting:
            if failed is not None:
                raise failed
            return
        batch = waiting.popleft()
        coming = tuple(later for later in fresh if later is not batch)
        fresh = []
        yield batch, coming


def fill_chunk(buffer: bytearray, read: Callable[[memoryview, int], int | None], piece: bytearray | None) -> int:
    """How many bytes were read into ``buffer``: until it is full or the source has no more.

    ``read(view, at)`` reads into ``view`` what follows the first ``at`` bytes of the chunk
    and says how many it read. With ``piece``, every read lands in it and is copied on into
    ``buffer``: the same bytes, fewer cache misses (READ_PIECE_BYTES).
    """
    if piece is None:
        return read(memoryview(buffer), 0) or 0
    filled, size = 0, len(buffer)
    into, staged = memoryview(buffer), memoryview(piece)
    while filled < size:
        count = read(staged[: size - filled], filled)
        if not count:
            break
        into[filled : filled + count] = staged[:count]
        filled += count
    return filled


def chunk_buffers(size: int) -> tuple[bytearray, bytearray | None]:
    """A chunk buffer of ``size`` bytes and, when it is larger than a piece, the piece it is read through."""
    return bytearray(size), bytearray(READ_PIECE_BYTES) if size > READ_PIECE_BYTES else None


def _cap_lines(block: bytes, cap: int) -> tuple[bytes, int]:
    """Cut lines longer than ``cap`` bytes down to ``cap``: the new block and how many were cut. A line of progress
    bar redraws is not cut short but cut in lines after a carriage return (each ending in ``\\r\\n``, as the reader
    hands a line of redraws out while it grows): nothing of it is lost.

    Jumps from newline to newline up to ``cap + 1`` bytes ahead (memrchr), so a block
    without an over-long line costs a few searches, not one step per line.
    """
    pieces: list[bytes] = []
    copied_up_to = start = cut = 0
    split = False
    while start < len(block):
        newline = block.rfind(b"\n", start, start + cap + 1)
        if newline >= 0:
            start = newline + 1
            continue
        carriage = block.rfind(b"\r", start, start + cap)
        if carriage >= 0:  # before the line's end: the line is longer than the cap
            pieces += (block[copied_up_to : carriage + 1], b"\n")
            copied_up_to = start = carriage + 1
            split = True
            continue
        end = block.find(b"\n", start)  # the block ends with a newline
        pieces.append(block[copied_up_to : start + cap])
        copied_up_to, start, cut = end, end + 1, cut + 1
    if not cut and not split:
        return block, 0
    pieces.append(block[copied_up_to:])
    return b"".join(pieces), cut


def _was_shrunk(opened: _OpenFile, size: int) -> bool:
    """Size below the offset, but the first bytes are the same: the file lost its end, it is not new content."""
    return size < opened.offset and opened.fingerprint is not None and opened.fingerprint.matches(opened.fd)


def _tail(before: bytes, chunk: bytes | bytearray, count: int) -> bytes:
    """The last TAIL_BYTES of ``before`` and the chunk's first ``count`` bytes (copied: the buffer is reused)."""
    if count >= TAIL_BYTES:
        return bytes(chunk[count - TAIL_BYTES:count])
    return (before + bytes(chunk[:count]))[-TAIL_BYTES:]


def _was_rewritten(opened: _OpenFile, stat: os.stat_result) -> bool:
    """Written again from its start, to the size read so far or beyond: the file changed where it was read.

    msrun opens ``worker_{i}.log`` with "w" at each restart (a shell's ``>``). A restart that
    prints the same lines with other timestamps often ends at the very size of the attempt
    before (which neither the size nor a growth past the offset shows), and a log that starts
    with more than FINGERPRINT_BYTES of text without a timestamp (Python warnings at import)
    keeps its first bytes. The last bytes read are looked at again, and at the very size the
    first bytes too, only when the modification time moved since the last read.
    """
    if stat.st_size < opened.offset or stat.st_mtime_ns == opened.drained_mtime_ns:
        return False
    tail = opened.tail
    if tail and os.pread(opened.fd, len(tail), opened.offset - len(tail)) != tail:
        return True
    return (stat.st_size == opened.offset > 0 and opened.fingerprint is not None
            and not opened.fingerprint.matches(opened.fd))


def _was_truncated(opened: _OpenFile, size: int) -> bool:
    """Size below the offset, or new first bytes in a file that grew past it (copytruncate)."""
    if size < opened.offset:
        return True
    return size > opened.offset and opened.fingerprint is not None and not opened.fingerprint.matches(opened.fd)
