"""A file's block passes, started over the block to come while the one before is parsed.

A catch-up reads a file a block at a time, and its parser spends much of each block in kernel
passes over the whole block (the scan, the rank streams' grouping, a progress bar's records,
the rank prefixes: native.ahead) that depend on the block's bytes and on what the file's blocks
before told the parser (its scanners, its record shape). The reader hands the parser the next
block before the current one (``start``): the passes the last whole block took are started over
it on a thread of their own, the second core, and a pass asked for later with the same arguments
on that same block takes their result. Any other call runs as it always did. Each pass's result
is what its function returns (tests/test_native.py), so the records are the same either way.
"""

from __future__ import annotations

from typing import Any

from exporter import native

# The blocks started at most: the one being parsed and the ones read ahead of it (tailer.READ_AHEAD).
STARTED = 3


class BlockPasses:
    """The kernel passes one file's parser calls on its blocks (the names of ``native``'s functions)."""

    def __init__(self) -> None:
        self._block: bytes | None = None  # the block whose passes are being noted
        self._taken: list[tuple] = []
        self._template: tuple[tuple, ...] = ()  # the passes the last noted block took
        # Each block started: its data, the passes native.ahead runs, their Ahead, its StepsAhead and the grouping
        # that gives.
        self._started: list[tuple[bytes, tuple[tuple, ...], native.Ahead | None, Any, tuple | None]] = []

    def block(self, data: bytes) -> None:
        """``data`` is the next whole block read: the passes taken over it are noted from now on."""
        self._block, self._taken = data, []

    def done(self, data: bytes) -> None:
        """The block ``data`` is parsed: what it took is the template of the blocks to come, and nothing of it is
        kept (its memory is then the next read's)."""
        if self._taken:
            self._template = tuple(dict.fromkeys(self._taken))  # each once, in order
        self._block, self._taken = None, []
        self._started = [started for started in self._started if started[0] is not data]

    def start(self, data: bytes, reader: native.StepReader | None = None, plain: tuple | None = None) -> None:
        """``data`` is the block to come after the current one: the passes the last whole block took, started. With
        ``reader`` (of the file's step table), a grouping of rank streams is done by native.steps_ahead, which
        also reads each stream's run of step lines by the reader's table (``steps``); ``plain``: such a grouping
        (a ``group_lines`` call) of a file whose blocks take none, its one stream's run read ahead so (a file of
        step lines: the kernel's reading on the second core)."""
        if not self._template or any(started[0] is data for started in self._started):
            return
        passes, steps = self._template, None
        grouping = next((call for call in passes if call[0] == "group_lines"), None)
        if grouping is not None and reader is not None:
            steps = native.steps_ahead(data, reader, *grouping[1:])
            if steps is not None:
                passes = tuple(call for call in passes if call is not grouping)
        elif plain is not None and reader is not None:
            steps, grouping = native.steps_ahead(data, reader, *plain[1:]), plain
        self._started = [*self._started[1 - STARTED:],
                         (data, passes, native.ahead(data, passes) if passes else None, steps, grouping)]

    def steps(self, data: bytes) -> Any:
        """The StepsAhead started over ``data`` (StepReader.read takes its streams' runs), None without."""
        return next((started[3] for started in self._started if started[0] is data), None)

    def scan(self, scanner: native.Scanner, data: bytes) -> tuple[int, list[int], list[int]]:
        return self._run(data, ("scan", scanner))

    def scan_segments(self, scanner: native.Scanner, data: bytes) -> tuple[int, list[int], list[int]]:
        return self._run(data, ("scan_segments", scanner))

    def group_lines(self, data: bytes, *arguments: bytes) -> Any:
        return self._run(data, ("group_lines", *arguments))

    def segment_records(self, data: bytes, pieces: tuple[bytes, ...], close: bytes, digits: int = 0) -> Any:
        return self._run(data, ("segment_records", pieces, close, digits))

    def bar_records(self, data: bytes, lead: bytes, pieces: tuple[bytes, ...], digits: int = 0) -> Any:
        return self._run(data, ("bar_records", lead, pieces, digits))

    def line_prefixes(self, data: bytes, literals: tuple[bytes, ...]) -> Any:
        return self._run(data, ("line_prefixes", literals))

    def _run(self, data: bytes, call: tuple) -> Any:
        if data is self._block:
            self._taken.append(call)
        for started, passes, ahead, steps, grouping in self._started:
            if started is not data:
                continue
            if steps is not None and call == grouping:
                return steps.groups()
            if ahead is not None and call in passes:
                return ahead.result(passes.index(call))
        return native.run_pass(data, call)
