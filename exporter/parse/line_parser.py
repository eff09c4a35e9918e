"""Per-file dispatch from raw lines to records.

A file's format is detected from its first step line (or forced by the configuration);
from then on only that format's parser runs, behind a byte test, so the framework noise
that makes up most of a worker log costs a few substring searches per line, and nothing at
all through ``parse_block``, which looks only at lines holding one of those byte literals
(parse/block.py). Failure signatures run on every line that holds one of theirs. The only
state kept between lines is what spans lines: open tracebacks (one per rank stream of a
tee'd file), the exception a C++ ``terminate`` announced, NCCL watchdog timeouts already
counted, and the scheduler's node table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from exporter.parse import events, mindformers
from exporter.parse.block import AnchorScanner, scanner_for
from exporter.parse.blocks import Block
from exporter.parse.formats import BUILTIN_FORMATS, Format
from exporter.parse.prefixes import PREFIX_ANCHORS, RANK_PREFIX
from exporter.parse.records import ErrorEvent, Record, SchedulerEvent, StepRecord
from exporter.parse.scheduler import SchedulerLog

_THROWN = re.compile(rb"terminate called after throwing an instance of '([^']+)'")
# Watchdog timeouts remembered for de-duplication; a run never has this many distinct ones.
_MAX_WATCHDOG_KEYS = 4096


@dataclass(slots=True)
class ParsedBatch:
    """What a batch of one file's lines held."""

    records: list[Record]
    lines_by_rank: dict[int | None, int]  # None: lines without a rank prefix
    unparsed: int  # lines that matched no format, no signature and no open block


class LineParser:
    """Turns one file's lines into records."""

    def __init__(self, candidates: Iterable[Format] = BUILTIN_FORMATS, *, forced: Format | None = None,
                 rank_offset: int = 0) -> None:
        self._candidates = tuple(candidates)
        self._format = forced  # final: no more detection
        self._provisional: Format | None = None  # detected, but its lines carry no loss
        self._rank_offset = rank_offset
        self._blocks: dict[int | None, Block] = {}
        self._thrown: dict[int | None, str] = {}
        self._watchdog_seen: set[tuple[object, object]] = set()
        self._scheduler_log = SchedulerLog()
        self._scanner = _scanner((forced,) if forced else self._candidates)
        self._columns = forced.columns() if forced is not None and forced.columns else None

    @property
    def format(self) -> Format | None:
        """The file's format, once known."""
        return self._format or self._provisional

    def parse_batch(self, lines: Iterable[bytes]) -> ParsedBatch:
        """Records of a batch of lines (without newlines), ending with failures the batch completed."""
        records: list[Record] = []
        lines_by_rank: dict[int | None, int] = {}
        unparsed = 0
        parse_line = self._parse_line
        for line in lines:
            rank, recognized = parse_line(line, records)
            lines_by_rank[rank] = lines_by_rank.get(rank, 0) + 1
            if not recognized:
                unparsed += 1
        self._flush_blocks(records)
        return ParsedBatch(records, lines_by_rank, unparsed)

    def parse_block(self, data: bytes) -> ParsedBatch:
        """``parse_batch`` of a block of newline-terminated lines, looking only at the lines that matter.

        A line holding none of the anchors (every prefilter below) gives no record and
        changes no state: it is counted as unparsed without being looked at. Inside an
        open failure block every line is parsed. A block with torchrun rank prefixes needs
        each line's prefix for the per-rank line counts, and a format without a literal
        prefilter needs every line: those go line by line. torchrun's own prefixes are
        anchors; another role name shows on the block's first line of a tee'd file (nearly
        every line has one), and a parsed line's prefix is counted for its rank anyway.
        Runs of step lines of a format with columns go to them, one StepBatch per run.
        """
        scanner = self._scanner
        if scanner is None:
            return self.parse_batch(data.split(b"\n")[:-1])
        lines, starts, prefixed = scanner.scan(data)
        if _has_rank_prefix(data, prefixed):
            return self.parse_batch(data.split(b"\n")[:-1])
        records: list[Record] = []
        lines_by_rank: dict[int | None, int] = {}  # the parsed lines with a prefix
        recognized = 0
        size, count = len(data), len(starts)
        index = 0  # the next anchored line not handed out yet
        position = 0  # where the first line not handed out yet starts
        while True:
            if self._blocks:
                # An open failure block takes every line, in order: a traceback's frames hold no anchor.
                if position >= size:
                    break
                start = position
            else:
                while index < count and starts[index] < position:
                    index += 1
                if index == count:
                    break
                columns = self._columns
                taken = columns.add_lines(data, starts, index) if columns is not None else 0
                if taken:  # a run of step lines, without a Python operation per line
                    index += taken
                    recognized += taken
                    position = data.find(b"\n", starts[index - 1]) + 1 or size
                    if index == count:
                        break
                # The columns declined this line: the line parser reads it.
                start = starts[index]
            end = data.find(b"\n", start)
            end = size if end < 0 else end
            position = end + 1
            before = len(records)
            rank, found = self._parse_line(data[start:end], records)
            if self._columns and any(type(record) is StepRecord for record in records[before:]):
                # Steps stay in the order of their lines (other records do not touch what they set).
                records.insert(before, self._columns.take())
            recognized += found
            if rank is not None:
                lines_by_rank[rank] = lines_by_rank.get(rank, 0) + 1
        if self._columns:
            records.append(self._columns.take())
        self._flush_blocks(records)
        unprefixed = lines - sum(lines_by_rank.values())
        if unprefixed:
            lines_by_rank[None] = unprefixed
        return ParsedBatch(records, lines_by_rank, lines - recognized)

    def parse(self, line: bytes) -> list[Record]:
        """Records of one line; a traceback's events come when a later line or parse_batch ends it."""
        records: list[Record] = []
        self._parse_line(line, records)
        return records

    def _parse_line(self, line: bytes, out: list[Record]) -> tuple[int | None, bool]:
        rank = None
        body = line
        if line[:1] == b"[":
            match = RANK_PREFIX.match(line)
            if match is not None:
                rank, body = self._strip_prefixes(line, match)
        if self._blocks:
            block = self._blocks.get(rank)
            if block is not None and self._feed_block(block, rank, body, out):
                return rank, True
        fmt = self._format
        if fmt is not None:
            if fmt.prefilter in body:
                record = fmt.parse(body.decode("utf-8", "replace"))
                if record is not None:
                    self._emit(record, rank, out)
                    return rank, True
        else:
            record = self._detect(body)
            if record is not None:
                self._emit(record, rank, out)
                return rank, True
        if (fmt is None or fmt.framework == "mindformers") and mindformers.BANNER_PREFILTER in body:
            info = mindformers.parse_banner(body.decode("utf-8", "replace"))
            if info is not None:
                self._emit(info, rank, out)
                return rank, True
        return rank, self._failure(body, rank, out)

    def _flush_blocks(self, records: list[Record]) -> None:
        # The end of what was written so far ends a failure block: a crash is often the
        # last thing a rank writes, and nothing may come to close it.
        for rank, block in list(self._blocks.items()):
            for event in block.flush():
                self._emit(event, rank, records)

    def _strip_prefixes(self, line: bytes, match: re.Match[bytes]) -> tuple[int, bytes]:
        global_rank = local_rank = None
        end = 0
        while match is not None:
            if match.group(1) == b"rank":
                global_rank = int(match.group(2))
            else:
                local_rank = int(match.group(2))
            end = match.end()
            match = RANK_PREFIX.match(line, end)
        rank = global_rank if global_rank is not None else local_rank + self._rank_offset
        return rank, line[end:]

    def _feed_block(self, block: Block, rank: int | None, body: bytes, out: list[Record]) -> bool:
        fmt = self._format
        starts_record = fmt is not None and bool(fmt.prefilter) and fmt.prefilter in body
        found, consumed = block.feed(body, starts_record)
        if block.finished:
            del self._blocks[rank]
        for event in found:
            self._emit(event, rank, out)
        return consumed

    def _detect(self, body: bytes) -> Record | None:
        text = None
        for fmt in self._candidates:
            if fmt.prefilter in body:
                if text is None:
                    text = body.decode("utf-8", "replace")
                record = fmt.parse(text)
                if record is not None:
                    if fmt.provisional:
                        self._provisional = fmt
                    else:
                        self._settle(fmt)
                    return record
        return None

    def _settle(self, fmt: Format) -> None:
        """The file's format is known: from now on only its anchors matter, its columns gather steps."""
        self._format = fmt
        self._scanner = _scanner((fmt,))
        self._columns = fmt.columns() if fmt.columns else None

    def _failure(self, body: bytes, rank: int | None, out: list[Record]) -> bool:
        """Failure signatures and the start of multi-line failures; True when the line was one."""
        if events.FAILURE_GATE.search(body) is None:
            return False
        if body.startswith(events.TRACEBACK_START):
            self._blocks[rank] = Block()
            return True
        event = events.classify(body)
        if event is not None:
            exception = self._thrown.pop(rank, None) if events.WHAT in body else None
            exception = exception or events.standalone_exception_type(body.decode("utf-8", "replace"))
            if exception:
                event.detail = {"exception": exception, **event.detail}
            self._emit(event, rank, out)
            return True
        if events.CHILD_FAILED in body:
            self._blocks[rank] = Block(elastic=True)
            return True
        if events.TERMINATE in body:
            thrown = _THROWN.search(body)
            if thrown is not None:
                self._thrown[rank] = thrown.group(1).decode("utf-8", "replace")
                return True
        return False

    def _emit(self, record: Record, rank: int | None, out: list[Record]) -> None:
        if rank is not None:
            record.rank = rank
        if type(record) is ErrorEvent and record.kind == "nccl_timeout":
            # Each timed-out work prints three times or more (log line, watchdog exception, what()).
            key = (record.detail.get("pg_rank", rank), record.detail.get("seq_num"))
            if key in self._watchdog_seen:
                return
            if len(self._watchdog_seen) >= _MAX_WATCHDOG_KEYS:
                self._watchdog_seen.clear()
            self._watchdog_seen.add(key)
        elif type(record) is SchedulerEvent:
            record = self._scheduler_log.observe(record)
            if record is None:
                return
        out.append(record)


def anchors_for(formats: Iterable[Format]) -> frozenset[bytes] | None:
    """Every literal _parse_line tests before acting on a line; None when a format has none."""
    prefilters = {fmt.prefilter for fmt in formats}
    if b"" in prefilters:
        return None  # scheduler.log's format, a user's pattern without "contains": any line may match
    return frozenset({*prefilters, mindformers.BANNER_PREFILTER, *events.FAILURE_LITERALS, *PREFIX_ANCHORS})


def _scanner(formats: Iterable[Format]) -> AnchorScanner | None:
    anchors = anchors_for(formats)
    return scanner_for(anchors, PREFIX_ANCHORS) if anchors else None


def _has_rank_prefix(data: bytes, prefixed: list[int]) -> bool:
    """True when the block's first line, or a line beginning with a prefix anchor, starts with a prefix."""
    return RANK_PREFIX.match(data) is not None or any(RANK_PREFIX.match(data, start) for start in prefixed)
