"""Per-file dispatch from a file's bytes to records: ``LineParser.parse_block``.

A file's records come from every format whose parser reads one of its lines, not from the
first one detected: one MindFormers worker log carries LossCallback records and
TrainingStateMonitor values, one console a Trainer's dicts and a launcher's lines. A line
goes to the most specific format (detection order) whose byte test it passes and whose
parser reads it; only the lines holding a format's or a failure signature's byte literal
are looked at (parse/scan.py): the framework noise that makes up most of a worker log
costs nothing. The first format with a field table whose line was read (the file's main
format) has its runs of step lines read by the step-field kernel; the other formats' lines,
few beside them, go one at a time. Every candidate is looked for during the file's first
DISCOVERY_STEP_LINES step lines, then only the formats found (the scan's cost grows with
its anchors). A format forced by the configuration or by the file's
role is the only one that runs. Step lines leave as
StepBatch (step_batch.py), one per rank and block unless a line ends one. The only state
kept between lines is what spans lines: open tracebacks (one per rank stream of a tee'd
file), the exception a C++ ``terminate`` announced, failures already counted that print
again (a watchdog timeout, a child's exit; ``signatures.failure_key``), and the
scheduler's node table.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import operator
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

from exporter import native
from exporter.parse import carriage, redraws, signatures
from exporter.parse.ahead import BlockPasses
from exporter.parse.formats import BUILTIN_FORMATS, Banner, Format, SegmentShape
from exporter.parse.formats.msrun_scheduler import SchedulerLog
from exporter.parse.numbers import MAX_INTEGER, NumberOutOfRange, check_integer
from exporter.parse.patterns import lazy
from exporter.parse.phases import phase_of
from exporter.parse.ranks import (
    LINE_TAG,
    PREFIX_ANCHORS,
    RANK_PREFIX,
    RANK_PREFIX_STARTS,
    ROLE_PREFIX,
    CutLines,
    TagRanks,
    global_rank,
    has_srun_label,
    split_glued,
    strip_host_prefix,
    strip_rank_prefixes,
)
from exporter.parse.records import ErrorEvent, PhaseStart, Record, SchedulerEvent, StepBatch, StepLine
from exporter.parse.scan import anchors_for, scanner_besides, scanner_for, scanner_of
from exporter.parse.step_batch import SERIES_FIELDS, StepBatchBuilder
from exporter.parse.tracebacks import Block

_THROWN = lazy(rb"terminate called after throwing an instance of '([^']+)'")
# Failures remembered for de-duplication; a run never has this many distinct ones.
_MAX_FAILURE_KEYS = 4096
_LOOSE_PREFIX_STARTS = b"".join(sorted(RANK_PREFIX_STARTS))
# Open failure blocks and announced exceptions, each kept per rank prefix of a tee'd file: a log
# with more distinct prefixes than this (a million ``[rankN]:``) holds no more state than that.
MAX_OPEN_PER_PREFIX = 1024
# Why a line was rejected (trainlog_lines_rejected_total{reason}): an integer beyond the state's
# range, or any other failure of a parser on the line's text.
REJECTED_OUT_OF_RANGE, REJECTED_PARSE_ERROR = "number_out_of_range", "parse_error"
REJECTED_REASONS = (REJECTED_OUT_OF_RANGE, REJECTED_PARSE_ERROR)
# Formats that print beside a file's own do so from its first steps on (MindFormers'
# TrainingStateMonitor every step by default, DeepSpeed's engine every steps_per_print): after
# this many step lines only the formats found so far are looked for. Each anchor costs the scan
# kernel time over a worker log's noise: every candidate's ~50 % more than one format's, even
# MindFormers' other anchor (``Epoch:[``) ~15 % (the catch-up benchmark's log).
DISCOVERY_STEP_LINES = 1000
# While formats are discovered a block is parsed this much at a time (LineParser.pieces): a console's blocks go line
# by line until a format's lines are known, and discovery, once over, leaves the rest of a large block to the block
# path (the first 1 MiB of a real torchrun console line by line cost 0.4 s). Once step lines were read, a piece is
# about what holds the step lines discovery still needs, at least DISCOVERY_PIECE_MIN_BYTES: a console of step lines
# ends discovery within some 1,000 lines, not the 1,500 of whole 64 KiB pieces (90 us a line there, docs/benchmarks.md).
DISCOVERY_PIECE_BYTES = 64 << 10
DISCOVERY_PIECE_MIN_BYTES = 4 << 10
# An interleaved console's block is cut around at most this many lines holding an anchor besides its step lines' (a
# launcher's warning, a fault code a step number spells): they go line by line, the lines between them stream by
# stream (LineParser.pieces). A block holding more goes line by line whole: past that, the pieces cost more.
MAX_LINES_CUT_AROUND = 64
# The lines holding a segment format's byte test a block's records' shape is looked for in (_record_shape): a
# generic reader's anchor (``oss``) is on lines of other shapes too (an evaluation's ``val loss``).
SHAPE_LINES = 8
# A block of a guessed shape holding this many anchored lines besides its records looks for a second shape of the same
# values (LineParser._with_next_shape).
SHAPE_CHANGE_LINES = 16


@dataclass(slots=True)
class ParsedBlock:
    """What a block of one file's lines held."""

    records: list[Record] = field(default_factory=list)
    lines_by_rank: dict[int | None, int] = field(default_factory=dict)  # None: lines without a rank prefix
    unparsed: int = 0  # lines that matched no format, no signature and no open failure block
    lines_by_format: dict[str, int] = field(default_factory=dict)  # lines a format's parser read a record from
    rejected: dict[str, int] = field(default_factory=dict)  # lines skipped because reading them failed, by reason
    # With LineParser(line_offsets=True): for each record, where in the block the line it was
    # read from (or that ended it) starts, for readers that look at the line again (analyze's timestamps).
    offsets: list[int] | None = None


class LineParser:
    """Turns one file's bytes into records."""

    def __init__(self, candidates: Iterable[Format] = BUILTIN_FORMATS, *, forced: Format | None = None,
                 rank_offset: int = 0, rows_per_batch: int | None = None, line_offsets: bool = False,
                 series_fields: tuple[str, ...] = SERIES_FIELDS, step_rows: bool = False) -> None:
        """``rows_per_batch``: at most that many step lines per StepBatch (1: a batch per line, as tests read
        them); ``line_offsets``: fill ``ParsedBlock.offsets`` and ``StepBatch.line_starts`` (analyze looks at
        the lines again for their timestamps); ``series_fields``: the gauges whose every value a StepBatch
        keeps (the detectors need loss and grad_norm; analyze keeps them all); ``step_rows``: each StepBatch
        keeps each line's own values (``rows``: analyze's CSV)."""
        self._candidates = tuple(candidates)
        # Every line not taken by the kernel is offered to these, in order (most specific first).
        self._routing = self._candidates
        self._found: set[str] = set()  # the names of the formats whose parser read a line of the file
        self._step_lines = 0  # step lines read while other formats are still looked for (DISCOVERY_STEP_LINES)
        self._discovery_bytes = 0  # the bytes they were read in
        self._discovering = forced is None
        self._format: Format | None = None  # the file's format (training_info): see _settle
        self._format_has_loss = False  # a line of ``_format`` printed a loss: it is final
        self._provisional: Format | None = None  # found, but its lines carry no loss (DeepSpeed's engine)
        self._kernel_format: Format | None = None  # the format whose runs of step lines the kernel reads
        self._kernel_table: tuple | None = None  # its field table as the kernel takes it
        # While a block of one rank stream's lines is read with their common prefix cut off (_parse_one_stream):
        # that prefix and the rank it names.
        self._stream: tuple[bytes, int | None] | None = None
        # The scanner of such blocks (the routing's anchors but the prefixes'), for the routing it was made for.
        self._stream_scanner: tuple[tuple[Format, ...], native.Scanner | None] = ((), None)
        # The scanner of the lines an interleaved block's streams cannot be read apart with (_parse_interleaved).
        self._besides_scanner: tuple[tuple[tuple[Format, ...], bytes], native.Scanner | None] = (((), b""), None)
        # The scanner of the lines a line-by-line read must look at (_anchored_starts), for the routing it was made for.
        self._lines_scanner: tuple[tuple[Format, ...], native.Scanner | None] = ((), None)
        self._tag_ranks = TagRanks(rank_offset)
        # The piece pieces() last handed out after looking for such lines, and whether it holds any: not scanned again.
        self._scanned_piece: tuple[bytes, bool] | None = None
        self._probe: tuple[tuple | None, native.StepReader | None] = (None, None)  # its kernel table, a reader of it
        self._passes = BlockPasses()  # the kernel passes over whole blocks, the next block's started ahead
        # The last plain block was mostly step lines, one run of the kernel's: the next block's is read ahead.
        self._runs_whole = False
        self._first_run = 0  # the lines the block's run at its first anchored line took
        self._forced = forced is not None
        self._rank_offset = rank_offset
        self._rows_per_batch = rows_per_batch
        self._line_offsets = line_offsets
        self._series_fields = series_fields
        self._step_rows = step_rows
        self._line_start = 0  # where the line being parsed starts in its block (kept for ParsedBlock.offsets)
        self._blocks: dict[int | None, Block] = {}
        self._thrown: dict[int | None, str] = {}
        self._failures_seen: set[tuple[object, ...]] = set()
        # A child's exit reported on one line (torchrun's agent: ``failed (exitcode: -9)``), held
        # until the block ends: the ChildFailedError summary that usually follows reports the
        # same exit with more detail (root-cause rank, host) and replaces it.
        self._held_exits: dict[tuple[object, ...], tuple[ErrorEvent, int | None]] = {}
        self._scheduler_log = SchedulerLog()
        # How a guessing format (Format.describe: the generic reader) read the file's first line it read.
        self.reading: str | None = None
        self._batches: dict[int | None, StepBatchBuilder] = {}
        # Carriage-return segments (_parse_segments): a line the tailer handed out at its last ``\r`` is
        # continued by the next one, in the same rank stream, after the same last segment.
        self._continued = False
        self._cut = CutLines()  # torchrun --tee's lines cut by another rank's, until their rest comes
        # A carriage return was seen in the file: every block is looked at for them. Until then only the blocks
        # read while formats are discovered are (one pass over the block: 0.7 % of the catch-up), and after it
        # only the lines the scan picked (a log of a kernel format costs nothing more).
        self._carriage_returns = False
        self._stream_rank: int | None = None  # the rank the continued line's prefix named
        self._segment_shape: SegmentShape | None = None  # the records' shape a block of segments was read by
        self._segment_before = b""  # the last non-blank segment before the one parsed (a tqdm bar)
        # A redraw of a progress bar (Format.redraws), held until the bar draws another step: the
        # last redraw of a step is the one whose values are that step's.
        self._redrawn: tuple[Format, StepLine, int | None] | None = None
        # The step of the redraw taken last: the bar drawn again at that step (tqdm's close draws its final
        # frame once more, on a line of its own) is no new record.
        self._redraw_taken: tuple[str, int | None, int | None] | None = None
        self._banners = tuple({fmt.banner: None for fmt in self._candidates if fmt.banner is not None})
        self._scanner = scanner_for(self._candidates)
        if forced is not None:
            # Chosen, not detected: no other format reads this file (scheduler.log holds worker-like lines).
            self._routing, self._scanner = (forced,), scanner_for((forced,))
            self._banners = (forced.banner,) if forced.banner is not None else ()
            self._settle(forced)

    @property
    def format(self) -> Format | None:
        """The file's format, once known."""
        return self._format or self._provisional

    @property
    def _stream_format(self) -> Format | None:
        """The format whose literal picks a rank stream's lines to read (_parse_interleaved): the kernel's, else the
        file's (its step lines then read one at a time), unless it redraws (a held redraw is taken at the next line,
        whichever rank's: the order of the lines, not of a stream's) or sits on carriage-return segments."""
        if self._kernel_format is not None:
            return self._kernel_format
        fmt = self._format
        # A format of carriage-return segments reads a console's blocks its own way (parse/carriage.py).
        return fmt if fmt is not None and not (fmt.redraws or fmt.segment_context) else None

    def prepare(self, data: bytes) -> None:
        """``data`` is a block to come after the one about to be cut into pieces: the kernel passes the last
        blocks took are started over it on the second core, an interleaved console's rank streams read there by
        the step kernel too (parse/ahead.py)."""
        reader = self._probe_reader() if self._kernel_table is not None else None
        plain = None
        if reader is not None and self._runs_whole and self._kernel_format is not None:
            plain = ("group_lines", *_grouping(self._kernel_format.prefilter))
        self._passes.start(data, reader, plain)

    def pieces(self, data: bytes) -> Iterator[bytes]:
        """``data`` (whole lines) in the pieces parse_block is to be given, each parsed before the next is asked
        for: while formats are discovered, DISCOVERY_PIECE_BYTES of lines at a time, then the rest at once. A
        piece is what a read of a growing file could have handed out: parsed alone, it gives the same records.
        An interleaved console's rest is cut around its few lines holding another anchor (MAX_LINES_CUT_AROUND)."""
        self._passes.block(data)
        try:
            yield from self._pieces(data)
        finally:  # nothing of the block kept: its memory is the next read's
            self._passes.done(data)
            self._scanned_piece = None

    def _pieces(self, data: bytes) -> Iterator[bytes]:
        start = 0
        while self._discovering and len(data) - start > 2 * (size := self._discovery_piece()):
            cut = data.find(b"\n", start + size) + 1
            if cut == 0:
                break
            # A line of a bar's redraws longer than two pieces (one epoch's, one 1 MiB read) is cut after a
            # carriage return, as the tailer hands out a growing one: its redraws past discovery go to the block path.
            carriage = data.find(b"\r", start + size, cut - 2) + 1 if cut - start > 2 * size else 0
            if carriage:
                yield data[start:carriage] + b"\n"
                start = carriage
                continue
            yield data[start:cut]
            start = cut
        rest = data[start:] if start else data
        # One rank stream's block is read as one (_parse_one_stream), whatever it holds: no such lines looked for.
        interleaved = self._reads_streams(rest) and self._stream_prefix(rest) is None
        others = self._lines_besides(rest) if interleaved else None
        if others is None:
            yield rest
            return
        if len(others) > MAX_LINES_CUT_AROUND:
            yield self._scanned(rest, True)
            return
        position = 0
        for line in others:
            if line > position:
                yield self._scanned(rest[position:line], False)
            position = rest.find(b"\n", line) + 1
            yield self._scanned(rest[line:position], True)
        if position < len(rest):
            yield self._scanned(rest[position:] if position else rest, False)

    def _discovery_piece(self) -> int:
        """The size of the next piece while formats are discovered (DISCOVERY_PIECE_BYTES): by the density of the
        step lines read so far, what holds the rest discovery needs and an eighth more."""
        if not self._step_lines:
            return DISCOVERY_PIECE_BYTES
        needed = (DISCOVERY_STEP_LINES - self._step_lines) * self._discovery_bytes // self._step_lines
        return min(DISCOVERY_PIECE_BYTES, max(DISCOVERY_PIECE_MIN_BYTES, needed + needed // 8))

    def _scanned(self, piece: bytes, holds_others: bool) -> bytes:
        """``piece``, remembered with whether it holds a line with another anchor (_parse_interleaved)."""
        self._scanned_piece = (piece, holds_others)
        return piece

    def _reads_streams(self, data: bytes) -> bool:
        """True when ``data`` may be an interleaved console's block read stream by stream (_parse_interleaved)."""
        return (self._stream_format is not None and not self._discovering and not self._blocks
                and self._redrawn is None and data[-1:] == b"\n"
                and _prefixed_at_an_end(data))

    def _lines_besides(self, data: bytes) -> list[int] | None:
        """Where the lines holding an anchor besides the stream format's literal start (None: any line may)."""
        stream_format = self._stream_format
        assert stream_format is not None
        key = (self._routing, stream_format.prefilter)
        if self._besides_scanner[0] != key:
            self._besides_scanner = (key, scanner_besides(*key))
        besides = self._besides_scanner[1]
        return None if besides is None else self._passes.scan(besides, data)[1]

    def parse_block(self, data: bytes) -> ParsedBlock:
        """The records of a block of newline-terminated lines, looking only at the lines that matter.

        A line holding none of the anchors gives no record and changes no state: it is
        counted as unparsed without being looked at. Inside an open failure block every
        line is parsed. A block with torchrun rank prefixes needs each line's prefix for the
        per-rank line counts, and a format without a literal prefilter needs every line:
        those go line by line. torchrun's own prefixes are anchors; another role name shows
        on the block's first line of a tee'd file (nearly every line has one), the step
        kernel declines a line that has one, and a parsed line's prefix is counted for its
        rank anyway. The block's end ends its step batches and its open failure blocks: a
        crash is often the last thing a rank writes, and nothing may come to close it.
        """
        parsed = ParsedBlock(offsets=[] if self._line_offsets else None)
        scanner = self._scanner
        if self._cut:  # a line cut by another rank's waits for its rest: every line is looked at
            self._parse_lines(data, parsed)
        elif scanner is None or self._continued or ((self._carriage_returns or self._discovering) and b"\r" in data):
            # Carriage returns (a progress bar's redraws, a rank's line written right after one): each
            # segment is a line, read one at a time; the scan and the step kernel know newlines only.
            self._carriage_returns = self._carriage_returns or b"\r" in data
            if scanner is None or not (self._parse_redraws(data, parsed) or self._parse_carriage(data, parsed)):
                self._parse_lines(data, parsed)
        elif self._segment_records_found() and self._parse_carriage(data, parsed, bare=True):
            pass  # the records on lines of their own, no bar drawn (a Trainer without tqdm)
        elif (not self._parse_one_stream(data, parsed) and not self._parse_interleaved(data, parsed)
              and not self._count_streams(data, parsed)):
            lines, starts, prefixed = self._passes.scan(scanner, data)
            if _has_rank_prefix(data, prefixed):
                self._parse_lines(data, parsed)
            else:
                self._first_run = 0
                parsed.unparsed = lines - self._parse_anchored(data, starts, parsed)
                self._note_runs_whole(len(starts), lines)
                unprefixed = lines - sum(parsed.lines_by_rank.values())
                if unprefixed:
                    parsed.lines_by_rank[None] = unprefixed
        # What the block's end closes belongs to its last line.
        self._line_start = data.rfind(b"\n", 0, len(data) - 1) + 1
        if self._cut:
            for line in self._cut.waited(data.count(b"\n")):
                self._parse_whole_line(line, parsed)
        for builder in self._batches.values():
            self._end_batch(builder, parsed)
        if len(self._batches) > 1:
            # A tee'd file's per-prefix builders are empty now: keep none, however many prefixes a log holds.
            self._batches = {None: self._batches[None]} if None in self._batches else {}
        for rank, block in list(self._blocks.items()):
            for event in block.flush():
                self._emit(event, rank, parsed)
        held, self._held_exits = self._held_exits, {}
        for event, rank in held.values():
            self._emit(event, rank, parsed)
        if self._discovering and self._found:
            self._step_lines += sum(parsed.lines_by_format.values())
            self._discovery_bytes += len(data)
            if self._step_lines >= DISCOVERY_STEP_LINES:
                self._end_discovery()
        return parsed

    def finish(self) -> tuple[bytes, ParsedBlock] | None:
        """The file ended: its cut lines still waiting for their rest (CutLines), as a block of lines and what
        they hold, read as they are; None without any."""
        held = self._cut.take()
        if not held:
            return None
        data = b"\n".join(held) + b"\n"
        return data, self.parse_block(data)

    def _end_discovery(self) -> None:
        """From the next block on, only the formats found are looked for (their anchors, in the scanner)."""
        self._discovering = False
        routing = tuple(fmt for fmt in self._routing if fmt.name in self._found)
        if len(routing) < len(self._routing):
            self._routing, self._scanner = routing, scanner_for(routing)

    def _parse_lines(self, data: bytes, parsed: ParsedBlock, begin: int = 0, end: int | None = None) -> None:
        """Every line (of ``data[begin:end]``, whole lines), one at a time. A line holding no anchor besides its
        prefixes is only counted for the rank they name, which is all _parse_line does with it (parse/scan.py's
        contract), unless that rank's failure block is open."""
        if end is not None and not (self._continued or self._cut or self._redrawn is not None) and (
                data.find(b"\n", begin) + 1 == end and data[begin:begin + 1] != b"["):
            # One line (a block path's line holding another anchor): read as it is, not scanned for its anchors first.
            whole = data[begin:end - 1]
            if b"\r" not in whole:
                self._line_start = begin
                self._parse_whole_line(whole, parsed)
                self._line_start = end
                return
        lines_by_rank = parsed.lines_by_rank
        cut = self._cut
        self._line_start = begin
        block = data if begin == 0 and end is None else data[begin:end]
        starts = self._anchored_starts(block)
        anchored = None if starts is None else set(starts)
        for whole in block.split(b"\n")[:-1]:
            start = self._line_start
            if self._continued or b"\r" in whole:
                rank, recognized = self._parse_segments(whole, parsed)
                lines_by_rank[rank] = lines_by_rank.get(rank, 0) + 1
                parsed.unparsed += not recognized
                self._line_start = start + len(whole) + 1
                continue
            if self._redrawn is not None:
                self._take_redrawn(parsed)
            pieces = split_glued(whole) if whole[:1] == b"[" else (whole,)  # two ranks' lines glued by --tee
            if len(pieces) > 1 or cut:
                self._parse_pieces(pieces, parsed)
            elif anchored is None or start - begin in anchored:
                self._parse_whole_line(whole, parsed)
            else:
                rank = self._tag_ranks.rank(whole) if whole[:1] == b"[" else self._rank_of(whole)[1]
                if rank in self._blocks:
                    self._parse_whole_line(whole, parsed)
                else:
                    lines_by_rank[rank] = lines_by_rank.get(rank, 0) + 1
                    parsed.unparsed += 1
            self._line_start = start + len(whole) + 1

    def _anchored_starts(self, block: bytes) -> list[int] | None:
        """Where the lines of ``block`` holding an anchor besides the rank prefixes (or a banner's) start, in order;
        None when any line may give a record (a format without a literal)."""
        if self._scanner is None:
            return None
        if self._lines_scanner[0] != self._routing:
            anchors = anchors_for(self._routing, prefixes=False)
            self._lines_scanner = (self._routing, None if anchors is None else scanner_of(
                anchors | {banner.prefilter for banner in self._banners}))
        scanner = self._lines_scanner[1]
        return None if scanner is None else self._passes.scan(scanner, block)[1]

    def _parse_pieces(self, pieces: Sequence[bytes], parsed: ParsedBlock) -> None:
        """The pieces of a line torchrun's tail threads glued (split_glued), or any line while a cut one waits."""
        cut = self._cut
        for index, piece in enumerate(pieces):
            line = cut.joined(piece) if cut else piece
            # A piece another one follows was cut: held until its rank's next piece, its rest.
            if index == len(pieces) - 1 or not cut.hold(line):
                self._parse_whole_line(line, parsed)
            self._line_start += len(piece)

    def _parse_whole_line(self, line: bytes, parsed: ParsedBlock) -> None:
        """One line, counted for its rank (and as unparsed when nothing read it)."""
        rank, recognized = self._parse_line_isolated(line, parsed)
        parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + 1
        if not recognized:
            parsed.unparsed += 1

    def _parse_segments(self, line: bytes, parsed: ParsedBlock) -> tuple[int | None, bool]:
        """A line of carriage-return segments, each read as a line: a tqdm bar's redraws, and whatever
        another process wrote right after one without a newline (``[rank1]: Traceback ...``).

        A segment without a rank prefix belongs to the rank stream the line's own prefix names (torchrun's
        ``--tee`` prefixes the physical line only). A line ending in ``\r`` (the tailer hands out a bar's
        redraws as they come) is continued by the next line. Returns the line's rank and whether any
        segment was recognized; the line counts once.
        """
        segments = line.split(b"\r")
        stream = self._stream_rank if self._continued else None
        first = not self._continued
        recognized = False
        scanner = self._scanner
        for whole in segments:
            # A segment holding no anchor gives no record and changes no state (parse/scan.py): a bar's redraw is
            # only the context of the segment after it. The first one is read for the rank its prefix names.
            quiet = not first and scanner is not None and not self._blocks and not scanner.scan(whole)[1]
            for segment in (whole,) if quiet else _unglued((whole,)):
                if not segment.strip():
                    continue
                if self._redrawn is not None and self._redrawn[0].prefilter not in segment:
                    self._take_redrawn(parsed)
                if not first and stream is not None and strip_rank_prefixes(segment, 0)[0] is None:
                    # The line's rank stream, named as a global rank: the per-line path stays as it was (its cost).
                    segment = b"[rank%d]: %s" % (stream, segment)
                if not quiet:
                    rank, found = self._parse_line_isolated(segment, parsed)
                    if first:
                        stream, first = rank, False
                    recognized = recognized or found
                self._segment_before = segment
        self._continued = not segments[-1]
        if self._continued:
            self._stream_rank = stream
        else:
            self._segment_before = b""
            if self._redrawn is not None:
                self._take_redrawn(parsed)
        return stream, recognized

    def _segment_records_found(self) -> bool:
        """True when a format whose records sit on segments was found in the file (it may print them alone)."""
        return any(fmt.segment_shape is not None and fmt.name in self._found for fmt in self._routing)

    def _parse_carriage(self, data: bytes, parsed: ParsedBlock, bare: bool = False) -> bool:
        """A block of carriage-return segments read a block at a time (parse/carriage.py); False (nothing done)
        when the file has no format whose records sit on segments, or the block holds what only the
        segment-by-segment reader reads right: another format's byte test on a record line, a rank prefix off a
        line's start, a rank after a carriage return, an ``srun --label`` first line, mostly lines ending in ``\\r``,
        records after a bar and records without one. ``bare``: a block without carriage returns, read here only
        when it holds records (lines of their own: no step, as the line parser reads them).

        The record lines (a bar, then a record of the shape the file prints, no other segment holding an
        anchor) go to the file's batch as columns; a line beginning with rank prefixes and holding no other
        anchor is counted for its rank; every other line holding an anchor, a line ending in ``\\r`` and the
        lines read while one continues or a failure block is open are read by ``_parse_lines``, in order.
        """
        fmt = next((found for found in self._routing if found.segment_shape is not None and found.name in self._found),
                   None)
        if fmt is None or self._redrawn is not None or any(other.redraws and other.name in self._found
                                                           for other in self._routing):
            return False
        # Another format's lines are read by the segment reader (the lines holding its anchors, below), but not on a
        # record line: the format routed before this one would read such a line first.
        earlier = [other.prefilter for other in self._routing[:self._routing.index(fmt)] if other.prefilter in data]
        if has_srun_label(data):
            return False
        shape = self._record_shape(fmt, data)
        if shape is None:
            return False
        prefixed, after_return = carriage.prefixed_lines(data, self._passes)
        if prefixed is None or after_return:
            return False
        found = carriage.record_lines(data, shape, self._passes)
        if found is None or (bare and not found.steps):
            return False
        scanner = self._scanner_without_prefixes()
        assert scanner is not None
        _, anchored, _ = self._passes.scan_segments(scanner, data)
        if shape.guessed and len(anchored) - len(found.steps) >= SHAPE_CHANGE_LINES:
            found = self._with_next_shape(fmt, data, found, anchored)
        lines = found.newlines
        if (4 * len(found.continued) > lines or carriage.ranked_record_line(data, found, self._continued)
                or carriage.on_record_line(data, found, earlier)):
            return False
        specials: list[int] = found.continued
        if len(anchored) != len(found.steps) or self._continued or self._blocks:
            # Lines the segment reader must read: an anchor off a record line's record, a line ending in \r. A record
            # without a bar (no totals) is its line's one segment: an anchor in a logger's prefix before it is its.
            records = found.line_starts if found.steps and not found.totals else found.record_starts
            specials = sorted({*(data.rfind(b"\n", 0, at) + 1 for at in native.sorted_difference(anchored, records)),
                               *found.continued, *((0,) if self._continued or self._blocks else ())})
        stepped = bool(found.steps) and found.steps[0] is not None
        values: dict[str, list] = {"total_steps": found.totals} if found.totals else {}
        named: dict[str, list[float]] = {}
        for index, ((gauge, name), column) in enumerate(zip(shape.targets, found.values, strict=True)):
            if index == shape.total:
                values[name] = column  # the kernel's ints (SegmentShape.digits)
            elif index != shape.step and name:
                scale = shape.scales[index] if shape.scales else 1.0
                (values if gauge else named)[name] = column if scale == 1.0 else [value * scale for value in column]
        filtered = set(shape.filtered(values))
        ends = {line + 1 for line in filtered}
        # Where a step goes back (a restart): a batch ends before it, found at C speed. A block's records all print a
        # step, or none does (carriage.record_lines).
        steps = cast("list[int]", found.steps) if stepped else []
        if steps != sorted(steps):  # sorted() of steps in order is one walk, no pair made
            ends.update(itertools.compress(range(1, len(steps)), map(operator.lt, steps[1:], steps)))
        run = _RecordRun(found, values, named, dict(shape.units), sorted(ends), filtered)
        recognized = alone = 0  # record lines taken here, lines read by _parse_lines
        counted: Counter[bytes] = Counter()  # lines beginning with prefixes read by _parse_lines
        position = 0
        for special in specials:
            if special < position:
                continue
            recognized += self._take_record_lines(run, special, parsed)
            position = special
            while True:
                end = data.find(b"\n", position) + 1
                prefixes = carriage.prefixes_at(data, position)
                if prefixes is not None:
                    counted[prefixes] += 1
                self._parse_lines(data, parsed, position, end)
                alone += 1
                position = end
                if position >= len(data) or not (self._continued or self._blocks or self._redrawn is not None):
                    break
            run.skip_until(position)
        recognized += self._take_record_lines(run, len(data) + 1, parsed)
        lines_by_rank = parsed.lines_by_rank
        unprefixed = lines - alone
        for prefixes, count in (prefixed - counted).items():
            rank = strip_rank_prefixes(prefixes, self._rank_offset)[0]
            lines_by_rank[rank] = lines_by_rank.get(rank, 0) + count
            unprefixed -= count
        if unprefixed:
            lines_by_rank[None] = lines_by_rank.get(None, 0) + unprefixed
        parsed.unparsed += lines - alone - recognized
        if recognized:
            parsed.lines_by_format[fmt.name] = parsed.lines_by_format.get(fmt.name, 0) + recognized
            if not self._format_has_loss and "loss" in values:
                self._format, self._format_has_loss = fmt, True
        return True

    def _record_shape(self, fmt: Format, data: bytes) -> SegmentShape | None:
        """The shape of the block's records: the file's last one where one of the block's first segments holding the
        format's byte test prints it, else the first such segment's that has one (the file's records changed
        shape)."""
        assert fmt.segment_shape is not None
        shape = self._segment_shape
        at = data.find(fmt.prefilter)
        for _ in range(SHAPE_LINES):
            if at < 0:
                break
            end = data.find(b"\n", at)
            # The segment holding it (a console's line of redraws is long): the line, where it holds no \r.
            begin = max(data.rfind(b"\n", 0, at), data.rfind(b"\r", 0, at)) + 1
            cut = data.find(b"\r", at, end)
            segment = data[begin:cut if cut >= 0 else end]
            if shape is not None and all(piece in segment for piece in shape.pieces):
                return shape
            learned = fmt.segment_shape(segment)
            if learned is not None:
                self._segment_shape = learned
                return learned
            at = data.find(fmt.prefilter, end)
        return None

    def _bar_shape(self, fmt: Format, data: bytes) -> SegmentShape | None:
        """The shape of the block's redraws: the file's last one where the block's first segment holding the format's
        byte test prints it, else that of the first of SHAPE_LINES such segments that has one."""
        assert fmt.bar_shape is not None
        shape = self._segment_shape if self._segment_shape is not None and self._segment_shape.lead else None
        at = data.find(fmt.prefilter)
        for _ in range(SHAPE_LINES):
            if at < 0:
                break
            segment = _segment_at(data, at)
            cut = at + len(segment)
            if shape is not None and all(piece in segment for piece in shape.pieces):
                return shape
            learned = fmt.bar_shape(segment)
            if learned is not None:
                self._segment_shape = learned
                return learned
            at = data.find(fmt.prefilter, cut)
        return None

    def _with_next_shape(self, fmt: Format, data: bytes, found: carriage.RecordLines,
                         anchored: list[int]) -> carriage.RecordLines:
        """``found`` and the records of the shape the first anchored line besides them prints, when its values are
        the same (a step padded to a width, one digit more: llm.c's ``step %4d`` past 9999); that shape is the
        file's next."""
        assert fmt.segment_shape is not None and self._segment_shape is not None
        records = set(found.record_starts)
        line = next((at for at in anchored if at not in records), None)
        shape = None if line is None else fmt.segment_shape(data[line:data.find(b"\n", line)])
        if shape is None or dataclasses.replace(shape, pieces=self._segment_shape.pieces) != self._segment_shape:
            return found
        more = carriage.record_lines(data, shape, self._passes)
        if more is None or not more.steps or bool(more.totals) != bool(found.totals):
            return found
        self._segment_shape = shape
        return carriage.merged(found, more)

    def _take_record_lines(self, run: _RecordRun, stop: int, parsed: ParsedBlock, rank: int | None = None) -> int:
        """The run's record lines before ``stop`` (a line's start) into the rank's batch, as ``_take`` would take
        each (a step going back, a line's unprinted non-finite loss and the batch size end a batch); how many."""
        found, builder, size = run.found, self._builder(rank), self._rows_per_batch
        starts = found.line_starts
        limit = bisect.bisect_left(found.record_starts, stop, run.next)
        line, taken = run.next, limit - run.next
        while line < limit:
            self._line_start = starts[line]
            if builder.goes_back(found.steps[line]):
                self._end_batch(builder, parsed)
            at = bisect.bisect_right(run.ends, line)
            end = min(limit, run.ends[at]) if at < len(run.ends) else limit
            if size:
                end = min(end, line + max(1, size - len(builder)))
            filtered = end - 1 in run.filtered
            builder.add_lines(found.steps[line:end], {name: column[line:end] for name, column in run.values.items()},
                              {name: column[line:end] for name, column in run.named.items()},
                              starts[line:end] if starts is not None else None, int(filtered), run.units)
            if filtered or (size and len(builder) >= size):
                if starts is not None:
                    self._line_start = starts[end - 1]
                self._end_batch(builder, parsed)
            line = end
        run.next = limit
        return taken

    def _parse_redraws(self, data: bytes, parsed: ParsedBlock) -> bool:
        """A block of a progress bar's redraws (a found format's Format.bar_shape: Lightning's) read a block at a
        time (parse/redraws.py); False (nothing done) when the block holds what only the segment reader reads right
        throughout: another format's or a banner's byte test, a rank prefix (one continued line's rank stream
        aside), formats still discovered, no redraw of the file's shape, more than MAX_LINES_CUT_AROUND lines holding
        an anchor that is no such redraw (those are read by the segment reader, the lines between them here).

        The redraws taken go to the rank's batch as columns, each at the line where the segment reader takes it; the
        one held at the block's end is held as that reader holds it (``_redrawn``), its record read by the format.
        """
        fmt = next((found for found in self._routing if found.bar_shape is not None and found.name in self._found),
                   None)
        if (fmt is None or self._discovering
                or any(other is not fmt and other.prefilter in data for other in self._routing)
                or any(banner.prefilter in data for banner in self._banners) or has_srun_label(data)):
            return False
        prefixed, after_return = carriage.prefixed_lines(data, self._passes)
        shape = None if prefixed is None or prefixed or after_return else self._bar_shape(fmt, data)
        if shape is None:
            return False
        bars = redraws.Bars(*self._passes.bar_records(data, shape.lead, shape.pieces, shape.digits))
        steps = native.bar_steps(bars.leads, bars.counts, bars.totals, MAX_INTEGER)
        if not steps:
            return False
        scanner = self._scanner_without_prefixes()
        assert scanner is not None
        odd = self._odd_lines(fmt, data, self._passes.scan_segments(scanner, data)[1], bars)
        if odd is None:
            return False
        position = 0
        for line in [*odd, len(data)]:
            if line > position:
                self._read_redraws(data, position, line, fmt, shape, bars, steps, parsed)
            if line < len(data):
                position = data.find(b"\n", line) + 1
                self._parse_lines(data, parsed, line, position)
        return True

    def _odd_lines(self, fmt: Format, data: bytes, anchored: list[int], bars: redraws.Bars) -> list[int] | None:
        """Where the lines start that hold a segment the segment reader must read: one holding an anchor besides the
        format's byte test (but a redraw the format reads: it reads it first), or the format's but not drawn as
        ``bars`` are, unless its ``parse`` reads no record there (the bar drawn without values); ascending, None past
        MAX_LINES_CUT_AROUND."""
        key = (self._routing, fmt.prefilter)
        if self._besides_scanner[0] != key:
            self._besides_scanner = (key, scanner_besides(*key))
        scanner = self._besides_scanner[1]
        if scanner is None:
            return None
        besides = set(self._passes.scan_segments(scanner, data)[1])
        if besides:  # a redraw holding another anchor (a value named ``error``) is the format's record all the same
            besides.difference_update(itertools.compress(bars.starts, bars.counts))
        if len(besides) > MAX_LINES_CUT_AROUND:
            return None
        if len(anchored) != len(bars.starts):
            others = set(native.sorted_difference(anchored, bars.starts)).difference(besides)
            if len(others) > 4 * MAX_LINES_CUT_AROUND:
                return None
            for start in others:
                segment = _segment_at(data, start)
                # No ``=``: no value, no record (the bar's first redraws); else the format's parser says.
                if fmt.prefilter not in segment or (b"=" in segment and fmt.parse(segment.decode("utf-8", "replace"))):
                    besides.add(start)
        odd = sorted({data.rfind(b"\n", 0, start) + 1 for start in besides})
        return odd if len(odd) <= MAX_LINES_CUT_AROUND else None

    def _read_redraws(self, data: bytes, begin: int, end: int, fmt: Format, shape: SegmentShape, bars: redraws.Bars,
                      steps: list[int | None], parsed: ParsedBlock) -> None:
        """The lines of ``data[begin:end]`` (whole ones), their redraws read here, unless the segment reader must read
        them: the rank's failure block open, a redraw held of another rank or format, a line beginning a rank's own
        (another rank's open failure block takes none of these lines)."""
        rank = self._stream_rank if self._continued else None
        held = self._redrawn
        first, last = bisect.bisect_left(bars.starts, begin), bisect.bisect_left(bars.starts, end)
        newlines = bars.newlines if begin == 0 and end == len(data) else data.count(b"\n", begin, end)
        continued = (bisect.bisect_left(bars.continued, end) - bisect.bisect_left(bars.continued, begin))
        found = None
        if (rank not in self._blocks and (held is None or (held[0] is fmt and held[2] == rank))
                and (rank is None or continued == newlines)):  # a line that is no continued one names its own rank
            taken = self._redraw_taken
            found = redraws.read(data, begin, end, bars, first, last, steps, self._continued,
                                 None if held is None else held[1].step,
                                 taken[1] if taken is not None and taken[0] == fmt.name and taken[2] == rank else None,
                                 fmt.prefilter)
        if found is None:
            self._parse_lines(data, parsed, begin, end)
            return
        self._take_redraws(data, fmt, shape, bars, steps, found, rank, parsed)
        self._continued = found.continued
        self._stream_rank = rank if found.continued else None
        self._segment_before = _last_segment(data, end, self._segment_before) if found.continued else b""
        if rank is not None and self._segment_before:
            self._segment_before = b"[rank%d]: %s" % (rank, self._segment_before)
        recognized = len(set(itertools.compress(bars.lines[first:last], steps[first:last])))
        parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + newlines
        parsed.unparsed += newlines - recognized

    def _take_redraws(self, data: bytes, fmt: Format, shape: SegmentShape, bars: redraws.Bars,
                      steps: list[int | None], found: redraws.Redraws, rank: int | None, parsed: ParsedBlock) -> None:
        """The redraws a block of them gives (_parse_redraws) into the rank's batch, and the one held at its end."""
        if self._redrawn is not None and found.before_taken_at is not None:
            self._line_start = found.before_taken_at
            self._take_redrawn(parsed)
        taken = found.taken
        if taken:
            pick = _picker(taken)
            values: dict[str, list] = {}
            named: dict[str, list[float]] = {"epoch": list(map(float, pick(bars.leads)))}
            for (gauge, name), column in zip(shape.targets, bars.values, strict=True):
                if name:
                    (values if gauge else named)[name] = pick(column)
            taken_steps = cast("list[int]", pick(steps))
            filtered = set(shape.filtered(values))
            ends = {line + 1 for line in filtered}
            if taken_steps != sorted(taken_steps):  # a step going back (a restart): a batch ends before it
                ends.update(itertools.compress(range(1, len(taken)), map(operator.lt, taken_steps[1:], taken_steps)))
            records = carriage.RecordLines(bars.newlines, [], found.taken_at, found.taken_at, taken_steps, [], [])
            run = _RecordRun(records, values, named, dict(shape.units), sorted(ends), filtered)
            self._take_record_lines(run, found.taken_at[-1] + 1, parsed, rank)
            self._redraw_taken = (fmt.name, taken_steps[-1], rank)
            parsed.lines_by_format[fmt.name] = parsed.lines_by_format.get(fmt.name, 0) + len(taken)
        if found.held is None:
            self._redrawn = None
        elif found.held >= 0:
            text = data[bars.starts[found.held]:bars.ends[found.held]].decode("utf-8", "replace")
            record = fmt.parse(text)  # the kernel's bar is the parser's record (tests/test_redraws.py)
            self._redrawn = (fmt, record, rank) if type(record) is StepLine else None

    def _take_redrawn(self, parsed: ParsedBlock) -> None:
        """The held redraw of a progress bar: the bar moved on, or something else was written."""
        assert self._redrawn is not None
        fmt, record, rank = self._redrawn
        self._redrawn = None
        self._redraw_taken = (fmt.name, record.step, rank)
        self._take(fmt, record, rank, parsed)

    def _stream_prefix(self, data: bytes) -> tuple[bytes, int] | None:
        """The rank prefix the first line begins with, and its rank, when the middle line and the last one begin
        with it too: a block of one rank stream's lines, unless its bytes say otherwise (an interleaved console's
        block is told so before they are counted)."""
        if data[:1] not in RANK_PREFIX_STARTS:
            return None
        first = data[:data.find(b"\n")]
        rank, body = strip_rank_prefixes(first, self._rank_offset)
        if rank is None:
            return None
        prefix = first[:len(first) - len(body)]
        middle = data.find(b"\n", len(data) // 2) + 1
        if not data.startswith(prefix, _last_line(data)) or middle < len(data) and not data.startswith(prefix, middle):
            return None
        return prefix, rank

    def _parse_one_stream(self, data: bytes, parsed: ParsedBlock) -> bool:
        """A block of one rank stream's lines read like an unprefixed one; False (nothing done) when the block is
        none: no prefix on its first line, lines of several ranks or without one, a line glued to another rank's.

        One rank's prefix on every line: a rank's own log (``[rank3]: ``, ``srun --label``'s ``3: ``) or a stretch
        of one rank's lines in a console. Told by byte counts (native.count_starts), no Python operation per
        line: as many lines beginning with the first line's prefixes as the block has, and their role
        (``[default``) nowhere else, where a line of another rank would be glued (split_glued). The scan,
        without the prefixes' anchors, finds the lines that matter; each is read from after the prefix, the
        runs of step lines by the kernel into the rank's batch. A line the kernel declines is read with its
        prefix, as the line-by-line path reads it: the records are the same (tests/test_block_parse.py).
        """
        stream = self._stream_prefix(data)
        if stream is None:
            return False
        prefix, rank = stream
        role = ROLE_PREFIX.match(prefix)
        starting, tags, lines = native.count_starts(data, prefix, prefix if role is None else b"[" + role.group(1))
        if starting != lines or (role is not None and tags != lines):
            return False
        scanner = self._scanner_without_prefixes()
        assert scanner is not None
        _, starts, _ = self._passes.scan(scanner, data)
        width = len(prefix)
        first_record = len(parsed.records)
        self._stream = (prefix, rank)
        self._first_run = 0
        try:
            recognized = self._parse_anchored(data, [start + width for start in starts], parsed)
            self._note_runs_whole(len(starts), lines)
            # The block's batches end here, while their lines' offsets are still where their prefix ends.
            self._line_start = data.rfind(b"\n", 0, len(data) - 1) + 1 + width
            for builder in self._batches.values():
                self._end_batch(builder, parsed)
        finally:
            self._stream = None
        parsed.unparsed = lines - recognized
        parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + lines - sum(parsed.lines_by_rank.values())
        if parsed.offsets is not None:
            _line_starts_before(width, parsed, first_record)
        return True

    def _note_runs_whole(self, anchored: int, lines: int) -> None:
        """Whether the blocks to come have their run read ahead (prepare): reading ahead costs a pass over the block
        on the second core, worth it where the block's first run took its every anchored line and they are most of
        its lines (an unprefixed block, a rank's own prefixed one)."""
        self._runs_whole = self._first_run == anchored and 2 * anchored >= lines

    def _parse_interleaved(self, data: bytes, parsed: ParsedBlock) -> bool:
        """A block of several rank streams' lines interleaved (torchrun's ``--tee`` console) read stream by stream;
        False (nothing done) when it cannot be.

        The lines, grouped by their prefix without a Python operation per line (native.group_lines), are each
        rank's stream; each stream's lines holding the kernel format's literal are read from after the prefix,
        runs by the kernel into the rank's batch, as _parse_one_stream reads one stream. Only a block whose every
        anchored line holds that literal and no other anchor is read so: every other line gives nothing, and a
        step line only changes its own rank's batch, so reading the streams one after the other gives what
        reading the lines in order gives (records, line counts, state: tests/test_block_parse.py). Declined:
        formats still being discovered, an open failure block, a line that holds another anchor (a failure, a
        phase, a banner, another format), a carriage return, two prefixes of one rank with step lines, a rank tag
        inside a line (glued lines), an unprefixed line that may begin with another prefix (``srun --label``'s, a
        PID). Without a kernel format, the file's format's lines are read one at a time, stream by stream.
        """
        scanned, self._scanned_piece = self._scanned_piece, None
        if not self._reads_streams(data) or b"\r" in data:  # carriage-return segments: a line each
            return False
        if scanned[1] if scanned is not None and scanned[0] is data else self._lines_besides(data) != []:
            return False  # pieces() looked for such lines already, or they are looked for here
        stream_format = self._stream_format
        assert stream_format is not None
        grouped = self._passes.group_lines(data, *_grouping(stream_format.prefilter))
        ranks = self._stream_ranks(grouped)
        if grouped is None or ranks is None:
            return False
        prefixes, lines, starts, _, _ = grouped
        # The records are put in the order of the lines that made them (by their offsets, kept for that): at the
        # block's end the ranks' batches end in the order their first step line came, the rank-less one first.
        streams = sorted((group for group in zip(prefixes, ranks, starts, strict=True) if group[2]),
                         key=lambda group: -1 if group[1][0] is None and None in self._batches else group[2][0])
        if len({rank for _, (rank, _), _ in streams}) < len(streams):
            return False  # two prefixes of one rank (``[rank0]:``, ``[rank0]: ``) with step lines: one order of them
        offsets, parsed.offsets = parsed.offsets, []
        recognized = 0
        for prefix, (rank, _), stream_starts in streams:
            first_record = len(parsed.records)
            recognized += self._read_stream(data, prefix, rank, stream_starts, parsed)
            _line_starts_before(len(prefix), parsed, first_record)
        order = sorted(range(len(parsed.records)), key=parsed.offsets.__getitem__)
        parsed.records[:] = [parsed.records[index] for index in order]
        if offsets is not None:
            offsets += [parsed.offsets[index] for index in order]
        parsed.offsets = offsets
        parsed.unparsed = sum(lines) - recognized
        for (rank, _), count in zip(ranks, lines, strict=True):
            parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + count
        return True

    def _stream_ranks(self, grouped: tuple[list[bytes], list[int], list[array[int]], int, int] | None
                      ) -> list[tuple[int | None, bytes]] | None:
        """Each group's rank (and what its prefix leaves, empty), when a block's lines grouped by native.group_lines
        are several rank streams, one a rank, as the line-by-line path would count them: None when they may not be
        (more prefixes than it keeps, a line without a prefix that may begin with another, a rank tag inside a
        line, a prefix naming no rank). Two prefixes may name one rank (torch's ``[rank0]:`` before a line that
        begins with a space): each counts its lines for it."""
        if grouped is None or grouped[3] or grouped[4]:
            return None
        prefixes = grouped[0]
        ranks = [strip_rank_prefixes(prefix, self._rank_offset) for prefix in prefixes]
        if (len(prefixes) < 2
                or any(body or (rank is None) != (not prefix)
                       for prefix, (rank, body) in zip(prefixes, ranks, strict=True))):
            return None
        return ranks

    def _scanner_without_prefixes(self) -> native.Scanner | None:
        """The scanner of the routing's anchors but the rank prefixes' (a rank stream's lines read after them)."""
        if self._stream_scanner[0] != self._routing:
            self._stream_scanner = (self._routing, scanner_for(self._routing, prefixes=False))
        return self._stream_scanner[1]

    def _count_streams(self, data: bytes, parsed: ParsedBlock) -> bool:
        """A block of rank streams' lines that are not read stream by stream (a console's chatter, lines of several
        formats, formats still being discovered): every line counted for the rank its prefix names without a
        Python operation per line, the few holding an anchor read in order, one at a time; False (nothing done)
        when it cannot be. A line holding no anchor gives no record and changes no state (parse/scan.py's
        contract): the line-by-line path only counts it for that rank, unless the rank's failure block is open.
        Declined: an open failure block, a line holding a failure literal (it may open one), a redrawn bar held, a
        carriage return, and what _stream_ranks declines."""
        if (self._blocks or self._redrawn is not None or data[-1:] != b"\n" or b"\r" in data
                or not _prefixed_at_an_end(data)):
            return False
        anchored = self._anchored_starts(data)
        if anchored is None:
            return False
        lines = [data[start:data.find(b"\n", start)] for start in anchored]
        if any(signatures.has_failure_literal(line) for line in lines):
            return False
        grouped = self._passes.group_lines(data, *_grouping(b""))
        ranks = self._stream_ranks(grouped)
        if grouped is None or ranks is None:
            return False
        recognized = 0
        for start, line in zip(anchored, lines, strict=True):
            self._take_redrawn_before(data, start, parsed)
            self._line_start = start
            recognized += (self._read_prefixed_line(data, start, line, parsed)
                           or self._parse_line_isolated(line, parsed)[1])
        self._take_redrawn_before(data, len(data) - 1, parsed)  # a line after the held one in the block
        counts = grouped[1]
        for (rank, _), count in zip(ranks, counts, strict=True):
            parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + count
        parsed.unparsed = sum(counts) - recognized
        return True

    def _read_prefixed_line(self, data: bytes, start: int, line: bytes, parsed: ParsedBlock) -> bool:
        """A rank's line of the kernel format (``line``, at ``start``) read by the kernel after its prefix into the
        rank's batch, as _read_stream reads a stream's run; False (nothing done) where the kernel declines it. Not
        where the lines' offsets are kept: the kernel notes where a prefix ends, the line parser where a line
        starts (_line_starts_before mends a whole stream's)."""
        if self._kernel_format is None or self._line_offsets or line[:1] not in RANK_PREFIX_STARTS:
            return False
        rank, body = strip_rank_prefixes(line, self._rank_offset)
        if rank is None:
            return False
        width = len(line) - len(body)
        self._stream = (line[:width], rank)
        try:
            return self._read_step_run(data, [start + width], 0, parsed, alone=True) == 1
        finally:
            self._stream = None

    def _take_redrawn_before(self, data: bytes, position: int, parsed: ParsedBlock) -> None:
        """A redraw held, taken where the line-by-line path takes it: at the line after its own, when that line
        starts at ``position`` (the next line read) or before."""
        if self._redrawn is None:
            return
        after = data.find(b"\n", self._line_start) + 1
        if after <= position:
            self._line_start = after
            self._take_redrawn(parsed)

    def _read_stream(self, data: bytes, prefix: bytes, rank: int | None, starts: native.Starts,
                     parsed: ParsedBlock) -> int:
        """One rank stream's lines at ``starts`` (after its ``prefix``), the kernel's runs into the rank's batch, a
        line it declines read with its prefix by the line parser; ends the rank's batch. How many were recognized."""
        self._stream = (prefix, rank)
        recognized = index = 0
        try:
            while index < len(starts):
                self._line_start = starts[index]
                taken = self._read_step_run(data, starts, index, parsed)
                if taken:
                    index += taken
                    recognized += taken
                    continue
                builder = self._batches.get(rank)
                if (builder is not None and len(builder) and self._kernel_table is not None
                        and self._reads_alone(data, starts, index)):
                    # A step going back, which the kernel reads into no run: a restart ends the batch (as _take would).
                    self._end_batch(builder, parsed)
                    continue
                end = data.find(b"\n", starts[index])
                recognized += self._parse_line_isolated(prefix + data[starts[index]:end], parsed)[1]
                index += 1
            builder = self._batches.get(rank)
            if builder is not None:  # while its lines' offsets are still where their prefix ends
                self._line_start = data.rfind(b"\n", 0, len(data) - 1) + 1 + len(prefix)
                self._end_batch(builder, parsed)
        finally:
            self._stream = None
        return recognized

    def _reads_alone(self, data: bytes, starts: native.Starts, index: int) -> bool:
        """True when the kernel reads the line at ``starts[index]`` into an empty run."""
        probe = self._probe_reader()
        taken = probe.read(data, starts, index, 1)
        if taken:
            probe.take()
        return bool(taken)

    def _probe_reader(self) -> native.StepReader:
        """A reader of the kernel format's table that no batch reads by (a line probed alone, the table the rank
        streams of the block to come are read by)."""
        if self._probe[0] is not self._kernel_table:
            assert self._kernel_table is not None
            self._probe = (self._kernel_table, native.step_reader(self._kernel_table))
        probe = self._probe[1]
        assert probe is not None
        return probe

    def _parse_anchored(self, data: bytes, starts: list[int], parsed: ParsedBlock) -> int:
        """The lines at ``starts`` (the other lines give nothing), every line inside an open failure block.

        Returns how many lines were recognized; counts only the prefixed lines in
        ``parsed.lines_by_rank`` (parse_block adds the others).
        """
        recognized = 0
        size, count = len(data), len(starts)
        index = 0  # the next anchored line not handed out yet
        position = 0  # where the first line not handed out yet starts
        while True:
            if self._blocks:
                # An open failure block takes every line, in order: a traceback's frames hold no anchor.
                if position >= size:
                    break
                start = position if self._stream is None else position + len(self._stream[0])
            else:
                while index < count and starts[index] < position:
                    index += 1
                if index == count:
                    break
                self._line_start = starts[index]
                taken = self._read_step_run(data, starts, index, parsed)
                if taken:  # a run of step lines, without a Python operation per line
                    index += taken
                    recognized += taken
                    position = data.find(b"\n", starts[index - 1]) + 1 or size
                    if index == count:
                        break
                    if self._rows_per_batch:
                        continue  # the run may have ended at the batch size, not at a line the kernel declines
                # The kernel declined this line: the line parser reads it.
                start = starts[index]
            end = data.find(b"\n", start)
            end = size if end < 0 else end
            position = end + 1
            self._line_start = start
            line = data[start:end] if self._stream is None else self._stream[0] + data[start:end]
            if b"\r" in line:  # a picked line of carriage-return segments, in a file that had none before
                self._carriage_returns = True
                rank, found = self._parse_segments(line, parsed)
            else:
                rank, found = self._parse_line_isolated(line, parsed)
            recognized += found
            if rank is not None:
                parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + 1
        return recognized

    def _read_step_run(self, data: bytes, starts: native.Starts, index: int, parsed: ParsedBlock,
                       alone: bool = False) -> int:
        """The step-field kernel's run of lines at ``starts[index]``, into the file's batch; how many it took.
        ``alone``: a line read by itself, neither a stream's run read ahead nor the block's first run."""
        kernel_format = self._kernel_format
        if kernel_format is None:
            return 0
        builder = self._batches.get(None)
        if self._stream is not None:  # a rank stream's lines, their prefix cut off: into the rank's batch
            builder = self._builder(self._stream[1])
            if not builder.reads_runs:
                self._read_by_kernel(builder)
        if builder is None:
            return 0
        limit = self._rows_per_batch - len(builder) if self._rows_per_batch else len(starts)
        first = index == 0 and not alone
        taken, ended = builder.read_run(data, starts, index, limit, self._passes.steps(data) if first else None)
        if first:  # the block's first run (a rank stream's, when read stream by stream)
            self._first_run = taken
        if ended is not None:  # the run's first step went back below a line read one by one: a restart
            self._append(ended, parsed)
        if taken:
            name = kernel_format.name
            parsed.lines_by_format[name] = parsed.lines_by_format.get(name, 0) + taken
            if self._rows_per_batch and len(builder) >= self._rows_per_batch:
                self._end_batch(builder, parsed)
        return taken

    def _parse_line_isolated(self, line: bytes, parsed: ParsedBlock) -> tuple[int | None, bool]:
        """``_parse_line``, but a line whose reading fails is counted as rejected and skipped, not the whole block.

        A ``try`` costs nothing until something raises (Python 3.11), and the step kernel's
        runs never come here: the fast path pays nothing for the isolation.
        """
        try:
            return self._parse_line(line, parsed)
        except Exception as error:  # noqa: BLE001 - any parser's failure on any text is this one line's
            reason = REJECTED_OUT_OF_RANGE if isinstance(error, NumberOutOfRange) else REJECTED_PARSE_ERROR
            parsed.rejected[reason] = parsed.rejected.get(reason, 0) + 1
            return None, True  # counted as rejected, so neither unparsed nor lost

    def _rank_of(self, line: bytes) -> tuple[str | None, int | None, bytes]:
        """The host and the global rank a line's prefixes name (None: none), and the line without them."""
        host, line = strip_host_prefix(line) if line[:1].isalpha() else (None, line)
        rank, body = strip_rank_prefixes(line, self._rank_offset) if line[:1] in RANK_PREFIX_STARTS else (None, line)
        return host, rank, body

    def _parse_line(self, line: bytes, parsed: ParsedBlock) -> tuple[int | None, bool]:
        host, rank, body = self._rank_of(line)
        if self._blocks:
            block = self._blocks.get(rank)
            if block is not None and self._feed_block(block, rank, body, parsed, host):
                return rank, True
        if self._route(body, rank, parsed):
            return rank, True
        for banner in self._banners:
            if banner.prefilter in body and self._banner(banner, body, rank, parsed):
                return rank, True
        phase = phase_of(body)
        if phase is not None:
            self._phase(phase, rank, parsed)
            return rank, True
        return rank, self._failure(body, rank, parsed, host)

    def _phase(self, phase: str, rank: int | None, parsed: ParsedBlock) -> None:
        """A long phase announced: after the steps above it (their batch ends here), before the steps after it."""
        builder = self._batches.get(rank)
        if builder is not None:
            self._end_batch(builder, parsed)
        self._emit(PhaseStart(phase, rank), rank, parsed)

    def _take(self, fmt: Format, record: StepLine | SchedulerEvent, rank: int | None, parsed: ParsedBlock) -> None:
        """A record a format's parser read from a line."""
        if not isinstance(record, StepLine):
            parsed.lines_by_format[fmt.name] = parsed.lines_by_format.get(fmt.name, 0) + 1
            self._emit(record, rank, parsed)
            return
        _check_step_line(record)
        parsed.lines_by_format[fmt.name] = parsed.lines_by_format.get(fmt.name, 0) + 1
        builder = self._builder(rank)
        if builder.goes_back(record.step):
            self._end_batch(builder, parsed)
        full = builder.add_line(record, self._line_start)
        if full or (self._rows_per_batch and len(builder) >= self._rows_per_batch):
            self._end_batch(builder, parsed)

    def _builder(self, rank: int | None) -> StepBatchBuilder:
        builder = self._batches.get(rank)
        if builder is None:
            builder = self._batches[rank] = StepBatchBuilder(rank, self._series_fields, self._line_offsets,
                                                             self._step_rows)
        return builder

    def _end_batch(self, builder: StepBatchBuilder, parsed: ParsedBlock) -> None:
        batch = builder.take()
        if batch is not None:
            self._append(batch, parsed)

    def _append(self, record: Record, parsed: ParsedBlock) -> None:
        parsed.records.append(record)
        if parsed.offsets is not None:
            parsed.offsets.append(self._line_start)

    def _banner(self, banner: Banner, body: bytes, rank: int | None, parsed: ParsedBlock) -> bool:
        info = banner.parse(body.decode("utf-8", "replace"))
        if info is None:
            return False
        # A banner after steps is a restart: the steps before it must reach the state before it does.
        builder = self._batches.get(rank)
        if builder is not None:
            self._end_batch(builder, parsed)
        self._emit(info, rank, parsed)
        return True

    def _feed_block(self, block: Block, rank: int | None, body: bytes, parsed: ParsedBlock,
                    host: str | None) -> bool:
        starts_record = _starts_record(body, self._routing, self._found)
        found, consumed = block.feed(body, starts_record)
        if block.finished:
            del self._blocks[rank]
        for event in found:
            self._emit(_on_host(event, host), rank, parsed)
        return consumed

    def _route(self, body: bytes, rank: int | None, parsed: ParsedBlock) -> bool:
        """The line's record from the first format (most specific first) whose byte test it passes and whose
        parser reads it; True when one did."""
        text = None
        for fmt in self._routing:
            if fmt.prefilter in body:
                if text is None:
                    text = body.decode("utf-8", "replace")
                if fmt.segment_context and self._segment_before:
                    # The bar drawn before the segment names its step (a Trainer's dict holds none).
                    record = fmt.parse(f"{self._segment_before.decode('utf-8', 'replace')}\r{text}")
                else:
                    record = fmt.parse(text)
                if record is not None:
                    if fmt.name not in self._found:
                        self._settle(fmt)
                        if fmt.describe is not None and self.reading is None:
                            self.reading = f"read as {fmt.name}: {fmt.describe(text)}"
                    if not self._format_has_loss and type(record) is StepLine and "loss" in record.values:
                        # TrainingStateMonitor's values may come before the step's LossCallback record.
                        self._format, self._format_has_loss = fmt, True
                    if fmt.redraws and type(record) is StepLine:
                        if self._redraw_taken == (fmt.name, record.step, rank):
                            return True
                        held = self._redrawn
                        if held is not None and (held[0] is not fmt or held[1].step != record.step or held[2] != rank):
                            self._take_redrawn(parsed)
                        self._redrawn = (fmt, record, rank)
                    else:
                        self._take(fmt, record, rank, parsed)
                    return True
        return False

    def _settle(self, fmt: Format) -> None:
        """A format read a line of the file: it joins the file's formats (its lines keep coming to it).

        The first one whose line printed a loss is the file's format (training_info's label;
        until one did, the first one found that is not provisional); the first one with a field
        table has its runs of step lines read by the kernel (a provisional one's until one that is not
        has a table: Megatron-DeepSpeed's iteration lines, not DeepSpeed's). Once a format is found, a candidate
        without a byte literal (a user's pattern without ``contains``) is left out: it would send
        every line of the file through Python.
        """
        first = not self._found
        self._found.add(fmt.name)
        if fmt.provisional:
            self._provisional = self._provisional or fmt
        elif self._format is None:
            self._format = fmt
        if first and not self._forced:
            routing = tuple(other for other in self._candidates if other.prefilter or other is fmt)
            if len(routing) < len(self._routing):
                self._routing, self._scanner = routing, scanner_for(routing)
        kernel = self._kernel_format
        if fmt.step_table is not None and (kernel is None or (kernel.provisional and not fmt.provisional)):
            self._kernel_format = fmt
            table = fmt.step_table
            kernel_table = (table.kernel_table if self._series_fields == SERIES_FIELDS
                            else table.kernel_table_keeping(self._series_fields))
            self._kernel_table = kernel_table
            self._read_by_kernel(self._builder(None))
            for builder in self._batches.values():  # rank streams' runs read by the table before
                if builder.reads_runs:
                    self._read_by_kernel(builder)

    def _read_by_kernel(self, builder: StepBatchBuilder) -> None:
        """The builder's runs of step lines come through the kernel, by the table of the file's kernel format."""
        assert self._kernel_table is not None and self._kernel_format is not None
        assert self._kernel_format.step_table is not None
        table = self._kernel_table
        builder.read_by(native.step_reader(table), self._kernel_format.step_table.columns,
                        table if self._step_rows else None)

    def _failure(self, body: bytes, rank: int | None, parsed: ParsedBlock, host: str | None) -> bool:
        """Failure signatures and the start of multi-line failures; True when the line was one."""
        if not signatures.has_failure_literal(body):
            return False
        if body.startswith(signatures.TRACEBACK_START):
            self._open_block(rank, Block(), parsed)
            return True
        found = signatures.match(body)
        if found is not None:
            signature, event = found
            text = body.decode("utf-8", "replace")
            exception = self._thrown.pop(rank, None) if signatures.WHAT in body else None
            exception = exception or signatures.standalone_exception_type(text)
            if exception:
                event.detail = {"exception": exception, **event.detail}
            if exception or signature.continued:
                self._open_block(rank, Block.continuation(), parsed)  # its detail lines are not failures of their own
            named_rank = rank if rank is not None else _rank_in_message(body)
            if named_rank is None:
                named_rank = self._rank_named_by_launcher(event)
            key = signatures.failure_key(event, named_rank)
            if key is not None and signature.superseded:
                self._held_exits[key] = (_on_host(event, host), named_rank)
            else:
                self._emit(_on_host(event, host), named_rank, parsed)
            return True
        if signatures.CHILD_FAILED in body:
            self._open_block(rank, Block(elastic=True), parsed)
            return True
        if signatures.ROOT_CAUSE in body:
            self._open_block(rank, Block.root_cause(), parsed)
            return True
        if signatures.TERMINATE in body:
            thrown = _THROWN.search(body)
            if thrown is not None:
                if len(self._thrown) >= MAX_OPEN_PER_PREFIX and rank not in self._thrown:
                    del self._thrown[next(iter(self._thrown))]  # the oldest announcement: its what() never came
                self._thrown[rank] = thrown.group(1).decode("utf-8", "replace")
                return True
        return False

    def _rank_named_by_launcher(self, event: ErrorEvent) -> int | None:
        """The global rank a launcher's report of a child names (torchrun's agent line: its local rank)."""
        local_rank = event.detail.get("local_rank")
        return global_rank(local_rank, True, self._rank_offset) if type(local_rank) is int else None

    def _open_block(self, rank: int | None, block: Block, parsed: ParsedBlock) -> None:
        """Start a rank stream's failure block; past MAX_OPEN_PER_PREFIX open ones, the oldest is given up."""
        if len(self._blocks) >= MAX_OPEN_PER_PREFIX and rank not in self._blocks:
            oldest = next(iter(self._blocks))
            for event in self._blocks.pop(oldest).flush():
                self._emit(event, oldest, parsed)
        self._blocks[rank] = block

    def _emit(self, record: Record, rank: int | None, parsed: ParsedBlock) -> None:
        if type(record) is ErrorEvent or type(record) is SchedulerEvent:
            _drop_out_of_range(record.detail)
        if rank is None and type(record) is ErrorEvent:
            # A ChildFailedError summary read from a launcher's own output names the rank that failed.
            named = record.detail.get("root_cause_rank")
            rank = named if type(named) is int and named >= 0 else None
        if rank is not None:
            record.rank = rank
        if type(record) is ErrorEvent:
            key = signatures.failure_key(record, rank)
            if key is not None:
                self._held_exits.pop(key, None)  # this report of the same exit replaces the held one
                if key in self._failures_seen:
                    return
                if len(self._failures_seen) >= _MAX_FAILURE_KEYS:
                    self._failures_seen.clear()
                self._failures_seen.add(key)
            # The steps above the failure reach the state first: its step is the one the rank failed after.
            # Every stream's (a line may name a rank other than its stream's: a c10 message's [Rank 7]).
            for builder in self._batches.values():
                self._end_batch(builder, parsed)
        elif type(record) is SchedulerEvent:
            observed = self._scheduler_log.observe(record)
            if observed is None:
                return
            record = observed
        self._append(record, parsed)


def _segment_at(data: bytes, start: int) -> bytes:
    """The carriage-return segment of ``data`` (whole lines) beginning at ``start``, up to its ``\\r`` or ``\\n``."""
    ends = [end for end in (data.find(b"\r", start), data.find(b"\n", start)) if end >= 0]
    return data[start:min(ends)]


def _picker(indexes: list[int]) -> Callable[[Sequence], list]:
    """What takes the items at ``indexes`` of a list, as a list (operator.itemgetter: at C speed)."""
    getter = operator.itemgetter(*indexes)
    return (lambda items: [getter(items)]) if len(indexes) == 1 else (lambda items: list(getter(items)))


def _last_segment(data: bytes, end: int, before: bytes) -> bytes:
    """The last segment of ``data[:end]`` (whole lines, its last ending in ``\\r``) that is not blank, as the segment
    reader keeps it for the next; ``before``: the one it kept before, where every line of it is blank."""
    end -= 1
    while True:
        cut = max(data.rfind(b"\r", 0, end), data.rfind(b"\n", 0, end))
        segment = data[cut + 1:end]
        if segment.strip():
            return segment
        if cut < 0:
            return before
        if data[cut] == 0x0A and (cut == 0 or data[cut - 1] != 0x0D):
            return b""  # a line that ended: the reader kept nothing after it
        end = cut - 1 if data[cut] == 0x0A else cut


def _unglued(segments: Iterable[bytes]) -> Iterable[bytes]:
    """Carriage-return segments, each cut where another process's prefixed line begins without a newline:
    a rank's ``[rank1]: Traceback ...`` written right after the main process's bar redraw (tqdm puts its
    ``\r`` before a redraw, none after it)."""
    for segment in segments:
        cuts = [cut for anchor in PREFIX_ANCHORS for cut in _found(segment, anchor)
                if RANK_PREFIX.match(segment, cut) and not _prefixes_only(segment[:cut])]
        begin = 0
        for cut in sorted(cuts):
            yield segment[begin:cut]
            begin = cut
        yield segment[begin:]


def _prefixes_only(text: bytes) -> bool:
    """True for stacked prefixes (``[default3]:`` before ``[rank11]: ``): one line's, not a glued one."""
    end = 0
    while (match := RANK_PREFIX.match(text, end)) is not None:
        end = match.end()
    return end == len(text)


def _found(text: bytes, literal: bytes) -> Iterable[int]:
    """Where ``literal`` occurs in ``text`` after its first byte."""
    at = text.find(literal, 1)
    while at > 0:
        yield at
        at = text.find(literal, at + 1)


def _check_step_line(line: StepLine) -> None:
    """NumberOutOfRange unless every integer the line printed is one the state, a checkpoint and /metrics hold."""
    if line.step is not None:
        check_integer(line.step)
    check_integer(line.unprinted_nonfinite_losses)
    for values in (line.values, line.named):
        for value in values.values():
            if type(value) is int:  # floats are finite, nan or inf: all of them print
                check_integer(value)


def _drop_out_of_range(detail: dict[str, str | float]) -> None:
    """Leave out a failure's facts (exit code, pid, bytes) printed with more digits than the state holds."""
    for name, value in list(detail.items()):
        if type(value) is int and not -MAX_INTEGER <= value <= MAX_INTEGER:
            del detail[name]


def _starts_record(body: bytes, formats: tuple[Format, ...], found: set[str]) -> bool:
    """True when the line passes the byte test of a format found in the file: a record, which ends a
    failure block (a traceback's frames never hold one)."""
    return any(fmt.prefilter and fmt.prefilter in body for fmt in formats if fmt.name in found)


def _grouping(literal: bytes) -> tuple[bytes, ...]:
    """native.group_lines' arguments after the block, grouping by rank prefix the lines holding ``literal`` (b"": the
    counts only); one tuple for a call and the same call read ahead (parse/ahead.py matches them by equality)."""
    return (literal, *LINE_TAG, _LOOSE_PREFIX_STARTS)


def _prefixed_at_an_end(data: bytes) -> bool:
    """The first or the last line carries a rank prefix: a block worth grouping by prefix (a plain log costs nothing
    more)."""
    return bool(RANK_PREFIX.match(data) or RANK_PREFIX.match(data, _last_line(data)))


def _line_starts_before(width: int, parsed: ParsedBlock, first_record: int) -> None:
    """The offsets of the records from ``first_record`` on, read where their lines' prefix of ``width`` bytes
    ends, made their lines' starts."""
    offsets = parsed.offsets
    assert offsets is not None
    offsets[first_record:] = [offset - width for offset in offsets[first_record:]]
    for record in parsed.records[first_record:]:
        if type(record) is StepBatch and record.line_starts:
            native.shift_offsets(record.line_starts, -width)


def _last_line(data: bytes) -> int:
    """Where the last line of a newline-terminated block starts."""
    return data.rfind(b"\n", 0, len(data) - 1) + 1


def _has_rank_prefix(data: bytes, prefixed: list[int]) -> bool:
    """True when the block's first line, or a line beginning with a prefix anchor, starts with a prefix."""
    return (RANK_PREFIX.match(data) is not None or has_srun_label(data)
            or any(RANK_PREFIX.match(data, start) for start in prefixed))


# torch < 2.2 names the rank inside a c10 message instead of a line prefix:
# ``[E ProcessGroupNCCL.cpp:916] [Rank 7] NCCL watchdog thread terminated with exception``.
_RANK_IN_MESSAGE = lazy(rb"\] \[Rank (\d+)\] ")


def _rank_in_message(body: bytes) -> int | None:
    """The rank a c10 log message names after its header, for a line without a rank prefix."""
    match = _RANK_IN_MESSAGE.search(body)
    return None if match is None else int(match.group(1))


def _on_host(event: ErrorEvent, host: str | None) -> ErrorEvent:
    """The event, with the host a pdsh prefix named (the launcher's log mixes the nodes' lines)."""
    if host is not None:
        event.detail = {**event.detail, "host": host}
    return event


class _RecordRun:
    """A block's record lines (parse/carriage.py) and how far they were handed to the file's batch."""

    def __init__(self, found: carriage.RecordLines, values: dict[str, list], named: dict[str, list[float]],
                 units: dict[str, str], ends: list[int], filtered: set[int]) -> None:
        self.found, self.values, self.named, self.units = found, values, named, units
        self.ends = ends  # the lines before which a batch may end: a step going back, after a filtered loss
        self.filtered = filtered  # lines with a non-finite loss they do not show
        self.next = 0  # the first record line not handed out

    def skip_until(self, position: int) -> None:
        """The record lines before ``position`` (a line's start) were read line by line."""
        self.next = max(self.next, bisect.bisect_left(self.found.record_starts, position, self.next))
