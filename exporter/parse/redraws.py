"""A progress bar's redraws a block at a time: which redraws are records, and where each is taken.

A bar that redraws each step (Lightning's TQDMProgressBar: a step's count first with the postfix of
the step before, then with its own; Format.redraws) writes one long line of carriage-return segments.
Read segment by segment (LineParser._parse_segments, _route), each redraw of a bar is held, and the
held one is taken (its step's record) when the bar draws another step, when any other non-blank
segment comes, or when a line ends without a carriage return; a redraw of the step taken last is no
record; a count of 0 (an epoch's start) is none and takes nothing. Here the kernel's bars
(native.bar_records) give the same decisions from their offsets alone, with no parser's call per
redraw, and native.bar_taking takes them with no Python operation per bar: the line parser then
hands the taken redraws to the file's batch as columns.
"""

from __future__ import annotations

import bisect
from array import array
from typing import NamedTuple

from exporter import native


class Bars(NamedTuple):
    """native.bar_records' result: the block's newlines, its lines ending in ``\\r``, and per bar where its segment
    starts and ends, where its line starts, its lead's count (an epoch), its count and total, and its values."""

    newlines: int
    continued: list[int]
    starts: array[int]  # arrays of int64 (native.bar_records)
    ends: array[int]
    lines: array[int]
    leads: array[int]
    counts: array[int]
    totals: array[int]
    values: list[array[float]]


class Redraws(NamedTuple):
    """What a block of redraws gives: the bars taken (indexes, in order) and the line start at which each was taken
    (the offset the segment reader gives its record); where the redraw held before the block was taken (None: it was
    not, or none was); the bar held at the block's end (-1: the one held before it, None: none); whether the block's
    last line ends in ``\\r`` (the next block continues it)."""

    taken: list[int]
    taken_at: list[int]
    before_taken_at: int | None
    held: int | None
    continued: bool


def read(data: bytes, begin: int, end: int, bars: Bars, first: int, last: int, steps: list[int | None],
         continued: bool, held_step: int | None, taken_step: int | None, literal: bytes) -> Redraws | None:
    """The redraws of ``data[begin:end]`` (whole lines; ``bars[first:last]`` its bars) as the segment reader takes
    them. ``steps``: each bar's step (None: a count of 0, no record); ``continued``: the first line continues one;
    ``held_step``: the step of the redraw held before (None: none); ``taken_step``: the step taken last. Every
    segment there holding an anchor is one of the bars or holds ``literal`` (the format's byte test: its bar drawn
    without values, which takes no held redraw). None where a bar is on a line the segment reader does not read by
    its segments (no ``\\r`` in it, not continued: its redraw is taken at the next line, not at its own)."""
    found = _triggers(data, begin, end, bars, first, last, continued, literal)
    if found is None:
        return None
    triggers, continued = found
    taken, taken_at, before_taken_at, held = native.bar_taking(steps, bars.lines, first, last, triggers, held_step,
                                                                taken_step)
    return Redraws(taken, taken_at, before_taken_at, held, continued)


def _triggers(data: bytes, begin: int, stop: int, bars: Bars, first: int, final: int, continued: bool,
              literal: bytes) -> tuple[list[tuple[int, int]], bool] | None:
    """Where a held redraw is taken in ``data[begin:stop]`` other than by another step's bar, ascending: ``(bar,
    line)``, before the bar at that index (``final``: after the last), at the line starting at ``line``; and whether
    the last line ends in ``\\r``. None: see ``read``."""
    starts, ends = bars.starts, bars.ends
    # Two bars of one line apart by more than their ``\r`` (rare: a validation bar's redraws between them).
    apart = iter(native.bars_apart(starts, ends, first, final))
    next_apart = next(apart, final)
    triggers: list[tuple[int, int]] = []
    index, position = first, begin
    while position < stop:
        end = data.find(b"\n", position)
        last = bisect.bisect_left(starts, end, index, final)  # the line's bars: index to last - 1
        if not continued and data.find(b"\r", position, end) < 0:
            if last > index:
                return None
            triggers.append((index, position))  # the whole-line reader takes a held redraw before the line
        elif last == index:
            if _takes(data, position, end, literal):
                triggers.append((index, position))
        else:
            if _takes(data, position, starts[index], literal):
                triggers.append((index, position))
            while next_apart < last:
                if next_apart > index and _takes(data, ends[next_apart - 1] + 1, starts[next_apart], literal):
                    triggers.append((next_apart, position))
                next_apart = next(apart, final)
            if ends[last - 1] < end and _takes(data, ends[last - 1] + 1, end, literal):
                triggers.append((last, position))
        if continued or data.find(b"\r", position, end) >= 0:
            continued = end == position or data[end - 1] == 0x0D  # the line's last segment empty
            if not continued:  # a line of segments ending without ``\r``: a held redraw is taken at its end
                triggers.append((last, position))
        index, position = last, end + 1
    return triggers, continued


def _takes(data: bytes, begin: int, end: int, literal: bytes) -> bool:
    """True when ``data[begin:end]`` (carriage-return segments) holds a segment that takes a held redraw: one that is
    not blank and does not hold ``literal``."""
    if not data[begin:end].replace(b"\r", b"").strip():
        return False
    return any(segment.strip() and literal not in segment for segment in data[begin:end].split(b"\r"))
