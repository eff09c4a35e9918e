"""When a line was written, from its own timestamp: the clock analyze orders ranks and errors by.

Recognized near the start of a line (after a launcher's ``[rank3]:`` prefix or a logger's
level): ``2026-06-09 10:20:30``, with ``,123`` or ``.123456`` fractions, MindSpore's
``2026-06-09-10:20:30.123.456``, ISO 8601 with ``T`` and a zone, and glog's
``E1129 10:42:07.271503`` (no year: the reference year given, the file's). A timestamp
without a zone is local time, as the trainer's logger wrote it.
"""

from __future__ import annotations

import calendar
import re
import time
from array import array
from collections.abc import Sequence

from exporter import native

# Only this many bytes of a line are searched: the timestamp is in its prefix.
PREFIX_BYTES = 120
_DATE_TIME = re.compile(
    rb"(\d{4})-(\d\d)-(\d\d)[ T-](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)?(?![\d:])")
_GLOG = re.compile(rb"(?:^|[\[\]: ])[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})\b")
# Both forms print hh:mm:ss: a line without ":dd:" has neither (a progress bar's "00:01<00:30" elapsed times).
_CLOCK_TIME = re.compile(rb":\d\d:")
_DIGIT = re.compile(rb"\d")
_CLOCK_SHAPE = b":##:"  # _CLOCK_TIME for native.shape_in_lines
_MAX_CACHED = 1 << 14


class LineClock:
    """Timestamps of lines; ``reference_year`` fills in glog's missing year."""

    def __init__(self, reference_year: int | None = None) -> None:
        self._year = reference_year or time.localtime().tm_year
        self._minutes: dict[bytes, float] = {}  # a local "date hh:mm" as printed -> its epoch seconds

    def at(self, data: bytes, start: int) -> float | None:
        """The timestamp of the line starting at ``start`` in ``data``; None when it has none."""
        return self._at(data, start)[0]

    def _at(self, data: bytes, start: int) -> tuple[float | None, bytes, re.Match[bytes] | None]:
        """at(), with the line's prefix looked in and its date-time's match there (None: none, or glog's time)."""
        prefix = data[start : start + PREFIX_BYTES]
        end = prefix.find(b"\n")
        if end >= 0:  # a short line: its prefix stops at its end, never the next line's time
            prefix = prefix[:end]
        if prefix.count(b":") < 2 or _CLOCK_TIME.search(prefix) is None:  # the cheap test first (a step row)
            return None, prefix, None
        match = _DATE_TIME.search(prefix)
        if match is not None:
            return self._date_time(match), prefix, match
        match = _GLOG.search(prefix)
        return (self._glog(match) if match is not None else None), prefix, None

    def times(self, data: bytes, starts: array[int] | list[int]) -> list[float | None]:
        """The timestamps of the lines starting at ``starts``. Only the lines whose prefix holds a ``:dd:`` are read
        (step lines seldom print a time; a launcher's lines between them may): found at C speed, no prefix sliced."""
        found: list[float | None] = [None] * len(starts)
        timed = native.shape_in_lines(data, starts, _CLOCK_SHAPE, PREFIX_BYTES)
        if timed:
            for line, when in zip(timed, self._each_line_at(data, [starts[line] for line in timed]), strict=True):
                found[line] = when
        return found

    def _each_line_at(self, data: bytes, starts: Sequence[int]) -> list[float | None]:
        """at() of each line. A logger begins its lines alike: where the bytes before a line's date-time (no digit
        among them: no date-time can start in them) begin the next line too, its date-time is looked for right after
        them first."""
        found: list[float | None] = []
        lead: bytes | None = None
        for start in starts:
            if lead is not None and data.startswith(lead, start):
                # No part of a date-time is a line break: unlike at(), no need to stop at the line's end.
                match = _DATE_TIME.match(data, start + len(lead), start + PREFIX_BYTES)
                if match is not None:
                    found.append(self._date_time(match))
                    continue
            when, prefix, match = self._at(data, start)
            found.append(when)
            lead = _lead(prefix, match) if when is not None else None
        return found

    def last_in(self, data: bytes, lines: int = 64) -> float | None:
        """The timestamp of the last of the block's last ``lines`` lines that has one."""
        starts: list[int] = []
        end = len(data)
        while end > 0 and len(starts) < lines:
            end = data.rfind(b"\n", 0, end - 1) + 1
            starts.append(end)
        starts.reverse()
        return self._first_timed(data, starts, reverse=True)

    def first_in(self, data: bytes, lines: int = 64) -> float | None:
        """The timestamp of the first of the block's first ``lines`` lines that has one."""
        starts: list[int] = []
        start = 0
        while start < len(data) and len(starts) < lines:
            starts.append(start)
            start = data.find(b"\n", start) + 1 or len(data)
        return self._first_timed(data, starts)

    def _first_timed(self, data: bytes, starts: list[int], reverse: bool = False) -> float | None:
        """The timestamp of the first line of ``starts`` (ascending; ``reverse``: the last) that has one; only the
        lines whose prefix holds a ``:dd:`` are read (a block of step lines: none)."""
        timed = native.shape_in_lines(data, starts, _CLOCK_SHAPE, PREFIX_BYTES)
        for line in reversed(timed) if reverse else timed:
            found = self.at(data, starts[line])
            if found is not None:
                return found
        return None

    def _date_time(self, match: re.Match[bytes]) -> float | None:
        zone = match.group(8)
        if zone is None:
            # A local time's minute (``YYYY-MM-DD HH:MM``) read once: a log's lines share theirs (mktime costs a
            # line 4 us), and no clock change falls inside a minute.
            text = match.group(0)
            minute = self._minutes.get(text[:16])
            if minute is not None:
                second = int(text[17:19])
                return minute + second + _fraction(match.group(7)) if second < 61 else None
        year, month, day, hour, minute_of_hour, second = (int(part) for part in match.groups()[:6])
        seconds = _epoch(year, month, day, hour, minute_of_hour, second, zone)
        if seconds is None:
            return None
        if zone is None:
            if len(self._minutes) >= _MAX_CACHED:
                self._minutes.clear()
            self._minutes[match.group(0)[:16]] = seconds - second
        return seconds + _fraction(match.group(7))

    def _glog(self, match: re.Match[bytes]) -> float | None:
        month, day, hour, minute, second = (int(part) for part in match.groups()[:5])
        seconds = _epoch(self._year, month, day, hour, minute, second, None)
        return None if seconds is None else seconds + _fraction(match.group(6))


def _lead(prefix: bytes, match: re.Match[bytes] | None) -> bytes | None:
    """The bytes of a line's ``prefix`` before its date-time (``match`` there), when they hold no digit."""
    if match is None or _DIGIT.search(prefix, 0, match.start()):
        return None
    return prefix[: match.start()]


def _epoch(year: int, month: int, day: int, hour: int, minute: int, second: int, zone: bytes | None) -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    fields = (year, month, day, hour, minute, second, 0, 0, -1)
    if zone is None:
        return time.mktime(fields)
    offset = 0
    if zone != b"Z":
        digits = zone[1:].replace(b":", b"")
        offset = (int(digits[:2]) * 60 + int(digits[2:])) * 60 * (-1 if zone[:1] == b"-" else 1)
    return float(calendar.timegm(fields) - offset)


def _fraction(digits: bytes | None) -> float:
    return int(digits) / 10 ** len(digits) if digits else 0.0
