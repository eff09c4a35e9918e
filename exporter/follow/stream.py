"""Sources that are read once from start to end: finished files, ``.gz`` generations, standard input.

They hand on the same blocks of whole lines (``ReadBatch``) as a followed file, cut by the
same ``_LineCutter`` (partial lines, the line cap), so ``serve --log-file -`` and ``analyze``
parse exactly what the follower would. Memory is one chunk whatever the source's size:
a ``.gz`` is decompressed as it is read.
"""

from __future__ import annotations

import gzip
import io
import logging
import os
import sys
import threading
import zlib
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO, cast

from exporter.follow.discover import LogFileRole
from exporter.follow.follower import FollowedFile, Sink
from exporter.follow.tailer import CHUNK_BYTES, ReadBatch, _LineCutter, chunk_buffers, fill_chunk

log = logging.getLogger(__name__)

STDIN = "-"
GZIP_MAGIC = b"\x1f\x8b"
# Bytes looked at to tell a log from binary junk: a NUL byte there means it is no text log.
SNIFF_BYTES = 1 << 16


class SourceError(Exception):
    """A source that cannot be read as a log: the message names it and says why, in one line."""


def read_blocks(stream: BinaryIO, max_line_bytes: int = 1 << 20, *, partial_reads: bool = False,
                chunk_bytes: int = CHUNK_BYTES, last_line: Callable[[], bool] = lambda: True) -> Iterator[ReadBatch]:
    """Blocks of whole lines from ``stream`` to its end; a last line without newline is handed out too,
    unless ``last_line()`` says no (a compressed file cut in the middle of it).

    ``partial_reads``: hand on whatever a read returns at once (a pipe: ``kubectl logs -f``),
    instead of waiting for full chunks.
    """
    cutter = _LineCutter(max_line_bytes)
    for chunk in _partial_reads(stream, chunk_bytes) if partial_reads else _full_reads(stream, chunk_bytes):
        batch = cutter.cut(chunk, more=not partial_reads and len(chunk) == chunk_bytes)
        if batch.data:
            yield batch
    rest = cutter.take_partial()
    if rest and last_line():
        yield ReadBatch(rest + b"\n", bytes_read=0)


class _UpToTheCut(io.RawIOBase):
    """A ``.gz`` read up to where it breaks: a generation cut short (a copy interrupted, a full disk
    while rotating) ends there, with every line before the cut, instead of losing the chunk being
    filled. ``error`` says what broke."""

    def __init__(self, stream: gzip.GzipFile) -> None:
        super().__init__()
        self._stream = stream
        self.error: Exception | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, view: Any) -> int:
        if self.error is not None:
            return 0
        try:
            # read1: what is decompressed so far, so the error comes on a read that has nothing left.
            data = self._stream.read1(len(view))
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:
            self.error = error
            return 0
        view[:len(data)] = data
        return len(data)


def _full_reads(stream: BinaryIO, chunk_bytes: int) -> Iterator[bytearray]:
    """Chunks of ``chunk_bytes`` (the last one shorter), each valid until the next is asked for."""
    buffer, piece = chunk_buffers(chunk_bytes)
    readinto = cast(io.BufferedIOBase, stream).readinto  # what open() and gzip.open() return have it
    while count := fill_chunk(buffer, lambda view, _at: readinto(view), piece):
        yield buffer if count == len(buffer) else buffer[:count]


def _partial_reads(stream: BinaryIO, chunk_bytes: int) -> Iterator[bytes]:
    """Whatever each read returns at once (a pipe), up to ``chunk_bytes``."""
    read = stream.read1 if hasattr(stream, "read1") else stream.read
    while chunk := read(chunk_bytes):
        yield chunk


def open_log(path: str) -> BinaryIO:
    """A finished log, or one of its ``.gz`` generations decompressed as read; SourceError when it is none.

    Looks at the first bytes: a ``.gz`` must start like one, and NUL bytes in plain text
    mark binary junk (a core dump, a checkpoint shard named ``*.log``). Not one stray NUL: a
    DataLoader worker's bus-error message, written from its signal handler, ends with one
    (torch 2.13.0); a log holding it is still text.
    """
    try:
        raw = open(path, "rb")  # noqa: SIM115 - handed to the caller, who closes it
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory where a log file was expected") from None
    except OSError as error:
        raise SourceError(f"{path}: cannot read it: {error.strerror or error}") from None
    try:
        head = raw.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        if path.endswith(".gz"):
            if not head.startswith(GZIP_MAGIC):
                raise SourceError(f"{path}: not gzip data although named .gz")
            raw.close()
            return gzip.open(path, "rb")  # type: ignore[return-value]
        if head.count(b"\0") * 100 > len(head):  # more than 1 % of the bytes
            raise SourceError(f"{path}: binary data (NUL bytes), not a text log")
        return raw
    except SourceError:
        raw.close()
        raise
    except OSError as error:
        raw.close()
        raise SourceError(f"{path}: cannot read it: {error.strerror or error}") from None


def read_log(path: str, max_line_bytes: int = 1 << 20) -> Iterator[ReadBatch]:
    """The blocks of a finished log file (``.gz`` included); SourceError, naming the path, when it breaks."""
    with open_log(path) as stream:
        cut = _UpToTheCut(stream) if isinstance(stream, gzip.GzipFile) else None
        try:
            yield from read_blocks(cast(BinaryIO, cut) if cut is not None else stream, max_line_bytes,
                                   last_line=lambda: cut is None or cut.error is None)
        except (EOFError, zlib.error, gzip.BadGzipFile) as error:
            raise SourceError(f"{path}: corrupt compressed data ({error}): the rest of it was skipped") from None
        except OSError as error:
            raise SourceError(f"{path}: read failed: {error.strerror or error}") from None
        if cut is not None and cut.error is not None:
            raise SourceError(f"{path}: corrupt compressed data, or cut short ({cut.error}): every whole line "
                              "before that point was read, the rest is lost")


STDIN_CLOSED = ("-: standard input is closed, so there is nothing to read; pipe a log into it "
                "(kubectl logs -f POD | trainlog-exporter ... -) or name files instead")


def standard_input() -> BinaryIO:
    """The process's standard input as bytes; SourceError when it is closed (``<&-``, a daemon without one)."""
    stream = sys.stdin
    try:
        if stream is None:  # Python sets it to None when descriptor 0 was closed at start
            raise ValueError
        os.fstat(stream.fileno())
    except (OSError, ValueError):
        raise SourceError(STDIN_CLOSED) from None
    return stream.buffer


def stdin_file(rank: str = "") -> FollowedFile:
    """Standard input as a followed file: rank from the line prefixes, else ``rank``."""
    return FollowedFile(STDIN, STDIN, STDIN, LogFileRole(rank, "worker"))


class StreamFollower:
    """``serve --log-file -``: standard input read on its own thread into the sink, until it ends."""

    def __init__(self, sink: Sink, stream: BinaryIO | None = None, max_line_bytes: int = 1 << 20,
                 on_end: Callable[[], None] | None = None) -> None:
        self._sink = sink
        self._stream = stream if stream is not None else standard_input()  # SourceError when closed
        self._max_line_bytes = max_line_bytes
        self._on_end = on_end
        self._thread = threading.Thread(target=self._run, name="stdin", daemon=True)
        self.file = stdin_file()

    def start(self) -> None:
        self._sink.file_discovered(self.file, None)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            for batch in read_blocks(self._stream, self._max_line_bytes, partial_reads=True):
                self._sink.lines_read(self.file, batch)
        except (OSError, ValueError) as error:  # ValueError: the stream was closed under us
            log.warning("standard input: read failed: %s", error)
        log.info("standard input ended: its series keep their last values")
        if self._on_end is not None:
            self._on_end()


def file_mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
