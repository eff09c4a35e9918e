"""Carriage-return consoles a block at a time: a progress bar's redraws and the records written between them.

A console with a tqdm bar (a Hugging Face Trainer's) is long lines of carriage-return segments: the bar
drawn again and again, and after each logging step a record segment (the Trainer's dict) that takes its
step from the bar drawn before it. Read segment by segment (LineParser._parse_segments), every redraw
costs a parser's call. Here one pass of a kernel (native.segment_records) finds the *record lines* of a
block: a record of the shape the file prints (``SegmentShape``: the literal pieces around its values),
right after a carriage return and ending its line, and the ``step/total`` fraction the non-blank segment
before it ends with; their steps, totals and values come out as columns. A line that begins with rank
prefixes is counted for its rank by its prefixes, gathered once per block. The line parser reads, segment
by segment, every other line holding an anchor (the scan over the segments finds them), and reads none of
the block this way when a line may take its rank from elsewhere (a prefix off a line's start, a rank
after a carriage return, a record line beginning with a rank). That reader is the definition: the
records, line counts, state and offsets are the same (tests/test_carriage.py).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol, cast

from exporter import native
from exporter.native.scan import LINE_PREFIX
from exporter.parse.formats import SegmentShape
from exporter.parse.numbers import MAX_INTEGER
from exporter.parse.patterns import lazy
from exporter.parse.ranks import PREFIX_ANCHORS, strip_rank_prefixes

# Rank prefixes at the start of a line (torchrun's stacked ``[default1]:[rank5]: ``, any role's): native.line_prefixes.
_PREFIXES = lazy(LINE_PREFIX)
# The first bytes of a line that may name its rank: a prefix's ``[``, ``srun --label``'s padding or digits.
_NO_RANK_BYTES = frozenset(b"[ 0123456789")
_LABEL_BYTES = frozenset(b" 0123456789")  # those of a task number


class Kernels(Protocol):
    """Where the block passes below run: ``native`` itself, or a parser's BlockPasses (parse/ahead.py)."""

    def segment_records(self, data: bytes, pieces: tuple[bytes, ...], close: bytes, digits: int = 0) -> Any: ...

    def line_prefixes(self, data: bytes, literals: tuple[bytes, ...]) -> Any: ...


class RecordLines(NamedTuple):
    """A block's newlines, the lines ending in ``\\r``, and its record lines: where each record starts, where
    its line starts, its step, total and values (a column per value of the shape). The steps are None and the
    totals none where the records are whole lines, no bar drawn before them (a Trainer without tqdm)."""

    newlines: int
    continued: list[int]
    record_starts: list[int]
    line_starts: list[int]
    steps: Sequence[int | None]
    totals: list[int]
    values: list[list[float]]


def record_lines(data: bytes, shape: SegmentShape, kernels: Kernels = native) -> RecordLines | None:
    """The record lines of ``data`` (a block of whole lines) by ``shape`` (``kernels.segment_records``), their steps
    the shape's own where it has one; None when some follow a bar and some do not, or a step of their own is one the
    line parser takes otherwise (the segment reader reads such a block)."""
    found = RecordLines(*kernels.segment_records(data, shape.pieces, shape.close, shape.digits))
    steps: Sequence[int | None] | None = found.steps
    if shape.guessed:  # its steps are counts (SegmentShape.digits: the kernel's ints), its values finite
        found = _as_guessed(found, shape.step)
        steps = found.steps if shape.step < 0 else cast("list[int]", found.values[shape.step])
    elif shape.step >= 0:
        steps = _own_steps(found.values[shape.step])
    if steps is None:
        return None
    if -1 not in found.totals:  # every record after a bar (or none)
        return found._replace(steps=steps)
    if found.totals.count(-1) != len(found.totals):
        return None
    return found._replace(steps=steps if shape.step >= 0 else [None] * len(steps), totals=[])


def merged(found: RecordLines, more: RecordLines) -> RecordLines:
    """The records of ``found`` and ``more`` (of the same block, the same values, totals in both or in neither), in the
    order of the block."""
    both = found._replace(record_starts=found.record_starts + more.record_starts,
                          line_starts=found.line_starts + more.line_starts, steps=[*found.steps, *more.steps],
                          totals=found.totals + more.totals,
                          values=[mine + theirs for mine, theirs in zip(found.values, more.values, strict=True)])
    return _records_at(both, sorted(range(len(both.record_starts)), key=both.record_starts.__getitem__))


def _records_at(found: RecordLines, indexes: list[int]) -> RecordLines:
    """The records of ``found`` at ``indexes``, in their order."""

    def at(items: Sequence) -> list:
        return [items[index] for index in indexes]

    return found._replace(record_starts=at(found.record_starts), line_starts=at(found.line_starts),
                          steps=at(found.steps), totals=at(found.totals) if found.totals else [],
                          values=[at(column) for column in found.values])


def _as_guessed(found: RecordLines, step: int) -> RecordLines:
    """The records the generic reader reads: each a whole line, its values finite (``nan`` is a word to it), its step
    (the value at ``step``; -1: none) a count: the kernel took digits only, an int up to MAX_INTEGER wanted. The
    others are no records here: their lines go to the line parser."""
    odd: set[int] = set()
    if found.record_starts != found.line_starts:
        odd.update(index for index, (start, line) in enumerate(zip(found.record_starts, found.line_starts,
                                                                     strict=True)) if start != line)
    for column in found.values:
        if not math.isfinite(sum(column)):
            odd.update(index for index, value in enumerate(column) if not math.isfinite(value))
    steps = found.values[step] if step >= 0 else ()
    if steps and max(steps) > MAX_INTEGER:  # 18 digits rounded up by the double the kernel reads them as
        odd.update(index for index, count in enumerate(steps) if count > MAX_INTEGER)
    if not odd:
        return found
    return _records_at(found, [index for index in range(len(found.record_starts)) if index not in odd])


def _own_steps(column: list[float]) -> list[int] | None:
    """A record's own steps as the line parser takes them (numbers.finite_int); None for one it does not."""
    if not math.isfinite(sum(column)):  # a NaN step is None, not the bar's: the line parser's
        return None
    steps = list(map(int, column))
    return steps if not steps or min(steps) >= -MAX_INTEGER and max(steps) <= MAX_INTEGER else None


def ranked_record_line(data: bytes, found: RecordLines, continued: bool) -> bool:
    """True when a record line begins with a rank (a prefix, ``srun --label``'s task number): its record is that
    rank's, and the segment reader reads the block. ``continued``: the block's first line continues one (the
    segment reader reads it)."""
    starts = found.line_starts
    if continued:  # ascending: the first line's records lead
        starts = starts[bisect.bisect_right(starts, 0):]
    if not starts:
        return False
    first_bytes = native.first_bytes(data, starts)
    # A bracketed prefix names a rank with its ``]:``: without one in the block, only a task number may (a logger's
    # ``[INFO|...] `` before every record costs no look at each line). Counted by the kernel: ``in`` takes 1.2 ms a MB.
    may_rank = (_NO_RANK_BYTES if b"[" in first_bytes and native.count_starts(data, b"\n", b"]:")[1]
                else _LABEL_BYTES)
    if not any(byte in first_bytes for byte in may_rank):
        return False
    return any(strip_rank_prefixes(_first_segment(data, start), 0)[0] is not None
               for start in starts if data[start] in may_rank)


def on_record_line(data: bytes, found: RecordLines, literals: list[bytes]) -> bool:
    """True when one of ``literals`` occurs on a record line."""
    if not literals:
        return False
    lines = set(found.line_starts)
    for literal in literals:
        at = data.find(literal)
        while at >= 0:
            if data.rfind(b"\n", 0, at) + 1 in lines:
                return True
            at = data.find(literal, at + 1)
    return False


def _first_segment(data: bytes, start: int) -> bytes:
    """The line at ``start`` up to its first carriage return."""
    end = data.find(b"\n", start)
    cut = data.find(b"\r", start, end)
    return data[start:cut if cut >= 0 else end]


def prefixed_lines(data: bytes, kernels: Kernels = native) -> tuple[Counter[bytes] | None, bool]:
    """The rank prefixes the lines of ``data`` (a block of whole lines) begin with, and how many lines begin with
    each; None when a prefix role (``[rank``, ``[default``, a role found at a line's start) occurs elsewhere too:
    a line glued to another rank's, a prefix after a carriage return or after a bracketed PID. And whether a line
    may take its rank from a segment after a carriage return. Either way the block goes segment by segment."""
    found, after_return = kernels.line_prefixes(data, PREFIX_ANCHORS)
    return (None if found is None else Counter(found)), after_return


def prefixes_at(data: bytes, start: int) -> bytes | None:
    """The rank prefixes the line at ``data[start]`` begins with, None without."""
    match = _PREFIXES.match(data, start)
    return match.group() if match else None
