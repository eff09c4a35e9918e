"""Per-file dispatch from a raw line to records.

The only state kept between lines is what a format needs across lines (an open
traceback). Cheap byte searches decide which parser may match before any decoding or
regular expression runs: most lines of a worker log are framework noise.
"""

from __future__ import annotations

from exporter.parse import events, keyvalue, mindformers
from exporter.parse.records import ErrorEvent, Record

_TRACEBACK_PREFILTER = b"Traceback (most recent call last)"
# Frames and source lines of a traceback are indented; anything longer than this many
# lines without an exception line is not a traceback we understand.
_MAX_TRACEBACK_LINES = 500


class LineParser:
    """Turns one file's lines into records."""

    def __init__(self) -> None:
        self._traceback_lines = 0  # >0 while inside a traceback

    def parse(self, line: bytes) -> list[Record]:
        """Records in one line (without its newline); an empty list when nothing matched."""
        records: list[Record] = []
        if self._traceback_lines:
            self._continue_traceback(line, records)
        if mindformers.PREFILTER in line:
            step = mindformers.parse_pynative(line.decode("utf-8", "replace"))
            if step is not None:
                records.append(step)
                return records
        if keyvalue.PREFILTER in line:
            step = keyvalue.parse_keyvalue(line.decode("utf-8", "replace"))
            if step is not None:
                records.append(step)
                return records
        if mindformers.BANNER_PREFILTER in line:
            info = mindformers.parse_banner(line.decode("utf-8", "replace"))
            if info is not None:
                records.append(info)
                return records
        if _TRACEBACK_PREFILTER in line:
            self._traceback_lines = 1
            return records
        event = events.match_signature(line)
        if event is not None:
            records.append(event)
        return records

    def _continue_traceback(self, line: bytes, records: list[Record]) -> None:
        self._traceback_lines += 1
        exception = events.exception_type(line.decode("utf-8", "replace"))
        if exception is not None:
            self._traceback_lines = 0
            records.append(ErrorEvent("traceback", {"exception": exception}))
        elif self._traceback_lines > _MAX_TRACEBACK_LINES:
            self._traceback_lines = 0
