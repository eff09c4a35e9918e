"""Carriage-return consoles a block at a time: a progress bar's redraws and the records written between them.

A console with a tqdm bar (a Hugging Face Trainer's) is long lines of carriage-return segments: the bar
drawn again and again, and after each logging step a record segment (the Trainer's dict) that takes
its step from the bar drawn before it. Read segment by segment (LineParser._parse_segments) every redraw
costs a parser's call. Here the segments are found by regular expressions over the whole block, in C:
a line whose only segment holding an anchor is a record of the shape the file prints (``SegmentShape``),
after a bar whose last ``N/T [`` names its step, is a *record line*; its step, total and values come out
as columns, without a Python operation per segment. Lines that begin with rank prefixes and hold no
other anchor are counted for their rank by their prefixes, gathered once per block. Every other line
holding an anchor goes to the segment-by-segment reader, which is the definition: the records, line
counts, state and offsets are the same (tests/test_carriage.py).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import NamedTuple

from exporter.parse.formats import SegmentShape
from exporter.parse.ranks import PREFIX_ANCHORS

# A segment the line's rank could be read from does not start a record line's segments: a rank prefix
# (``[rank1]:``, another role's) or ``srun --label``'s task number. Those lines go segment by segment.
_NO_RANK = rb"(?!\[| *\d{1,6}: )"
# The last ``N/T [`` of a bar: digits not glued to a digit or to a byte of a non-ASCII character (a
# digit of another script, which the segment reader's ``\d`` would take), and after it no ``/`` that
# such a byte precedes, so no later ``N/T [`` either.
_BAR = (rb"[^\r\n]*?(?<![0-9\x80-\xff])(\d{1,18})/(\d{1,18}) \[(?:[^\r\n/]|(?<![0-9\x80-\xff])/)*")
# Rank prefixes at the start of a line (torchrun's stacked ``[default1]:[rank5]: ``, any role's).
_PREFIXES = re.compile(rb"\n((?:\[[A-Za-z_]+\d+\]: ?)+)")
_ROLE = re.compile(rb"\[([A-Za-z_]+)\d+\]")


class RecordLines(NamedTuple):
    """The record lines of a block: where each starts (None: not asked for) and its columns."""

    starts: list[int] | None
    record_starts: list[int] | None  # where each record segment starts
    steps: list[int]
    totals: list[int]
    values: list[list[float]]  # one column per group of the shape's record


@lru_cache(maxsize=16)
def record_line(record: bytes) -> re.Pattern[bytes]:
    """A whole record line, from the newline before it: ``\\r``, segments, the bar, blank segments, the record."""
    segment = _NO_RANK + rb"[^\r\n]*\r"
    return re.compile(rb"\n\r(?:" + segment + rb")*" + _NO_RANK + _BAR + rb"\r(?:[ \t\x0b\x0c]*\r)*("
                      + record + rb")(?=\n)")


def record_lines(text: bytes, shape: SegmentShape, with_starts: bool) -> RecordLines | None:
    """The record lines of ``text`` (a newline, then a block of whole lines) by ``shape``, offsets counted in
    the block; None when a value is no number."""
    pattern = record_line(shape.record)
    if with_starts:
        matches = list(pattern.finditer(text))
        rows = [match.groups() for match in matches]
        starts: list[int] | None = [match.start() for match in matches]
        record_starts: list[int] | None = [match.start(3) - 1 for match in matches]
    else:
        rows = pattern.findall(text)
        starts = record_starts = None
    if not rows:
        return RecordLines(starts, record_starts, [], [], [])
    columns = list(zip(*rows, strict=True))
    try:
        values = [list(map(float, column)) for column in columns[3:]]
    except ValueError:
        return None
    return RecordLines(starts, record_starts, list(map(int, columns[0])), list(map(int, columns[1])), values)


def record_starts(text: bytes, shape: SegmentShape) -> set[int]:
    """Where the record segments of the record lines of ``text`` (a newline, then a block) start in the block."""
    return {match.start(3) - 1 for match in record_line(shape.record).finditer(text)}


def prefixed_lines(text: bytes) -> Counter[bytes] | None:
    """The rank prefixes the lines of ``text`` (a newline, then a block of whole lines) begin with, and how many
    lines begin with each; None when a prefix role (``[rank``, ``[default``, a role found at a line's start)
    occurs elsewhere too: a line glued to another rank's, a prefix after a carriage return or after a
    bracketed PID (those blocks go line by line)."""
    found = Counter(_PREFIXES.findall(text))
    literals = set(PREFIX_ANCHORS)
    for prefixes in found:
        literals.update(b"[" + role for role in _ROLE.findall(prefixes))
    for literal in literals:
        if text.count(literal) != sum(prefixes.count(literal) * lines for prefixes, lines in found.items()):
            return None
    return found


def prefixes_at(text: bytes, start: int) -> bytes | None:
    """The rank prefixes the line after the newline at ``text[start]`` begins with, None without."""
    match = _PREFIXES.match(text, start)
    return match.group(1) if match else None
