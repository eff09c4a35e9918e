"""Kernel: runs of step lines read by a field table. This twin defines step_fields.c.

A field table is a step record's grammar as plain data, built by the format module that
owns the grammar (parse/ turns its declaration into this tuple; nothing here knows a
framework or a field):

    (opener, closer, pair_separator, name_separator, step_name, line_tag, fields)

- ``opener``, ``closer``, ``pair_separator``, ``name_separator``: one byte each
  (``b"{"``, ``b"}"``, ``b","``, ``b":"``);
- ``step_name``: the record's first pair, whose value is the integer fraction
  ``[step/total]`` (``b"step"``);
- ``line_tag``: ``(open, close)``; a line beginning with ``open``, name bytes, ``close``
  belongs to another stream (torchrun's ``[default3]:``) and is declined;
- ``fields``: ``((name, kind, series, absent, default_unit), ...)``: a name as printed, its
  conversion ``Kind``, whether every value is kept (1) or only the latest (0), a printed
  value meaning "not obtained" that leaves the field as it was (``b""``: none), and for a
  DURATION the unit of a bare number (``b""``: seconds).

A record is ``opener \\s* step_name name_separator \\s* [\\s* digits \\s* / \\s* digits \\s*]
\\s* pair_separator body closer``, the first such in its line, where ``body`` holds neither
opener nor closer. Its pairs are ``name \\s* name_separator \\s* value``, found anywhere in
the body (``name``: ``[A-Za-z_][A-Za-z0-9_]*``; ``value``: up to the next pair separator,
stripped; a comma followed by exactly three digits and then a non-digit is a thousands
separator, part of the value: ``loss: 1,234.5`` is 1234.5, not 1). A pair of a table
field sets the field: a later pair of the same name replaces it, a value that does not
convert unsets it (a NUMBER_WITH_UNIT keeps what it had). Any other name with a float
value is a named value: the line's named values in the order first printed, each with its
latest value.

``StepReader(table).read(data, starts, index, limit)`` reads the lines of ``data`` starting
at ``starts[index]``, ``starts[index + 1]``, ... (at most ``limit``) until the first that
holds no record or is declined: a line that is not ASCII, carries a line tag, whose step
or total has more than 18 digits (those go to the per-line parser, ``read_record``, which
reads any text), or whose step is below the step of the line read before it since the last
``take()`` (a restart, which ends a batch); it returns how many lines it read. Runs read one after the other are
taken as one, by ``take()``:

    (steps, total, fields, named)

- ``steps``: each line's step;
- ``total``: the latest total (None when nothing was read);
- ``fields``: per table field ``(latest, unit, series_steps, series_values)``: the latest
  value any line set (None: none did), the unit of the latest line whose value had one
  (NUMBER_WITH_UNIT, else None), and for a series field every value with its line's step
  (else None);
- ``named``: ``[(name, latest, lines, first_line, position), ...]`` in the order first
  printed: the latest value, how many lines printed it, the first of them (counted from 0,
  the first line read since the last take) and the name's place among that line's named
  values.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from functools import lru_cache
from typing import NamedTuple

from exporter.native.numbers import DURATION_UNITS as _DURATION_UNITS
from exporter.native.numbers import parse_duration_seconds, parse_float, parse_number_with_unit

MAX_DIGITS = 18  # a step or total with more goes to the per-line parser: 64-bit integers suffice
_SPACES = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # str.isspace() of ASCII: what \s sees
_NAME_BYTE = re.compile(rb"[A-Za-z0-9_]")


class Kind(enum.IntEnum):
    """How a field's printed value converts (the numbers step_fields.c knows them by)."""

    FLOAT = 1  # parse_float: 'nan', '1,234.5', '1e-05'
    DURATION = 2  # parse_duration_seconds, a bare number in the field's default unit
    NUMBER_WITH_UNIT = 3  # parse_number_with_unit: '12.1T'


class Record(NamedTuple):
    """One line's record: the fraction, each table field's (value, unit), the named values."""

    step: int
    total: int
    values: list[tuple[float | None, str | None]]
    named: dict[str, float]


Fields = tuple[tuple[float | None, str | None, list[int] | None, list[float] | None], ...]
NamedValue = tuple[str, float, int, int, int]
Run = tuple[list[int], int | None, Fields, list[NamedValue]]


class StepReader:
    """Runs of step lines read by one field table, taken as one; see the module's docstring."""

    _steps: list[int]
    _total: int | None
    _latest: list[float | None]
    _units: list[str | None]
    _series: list[tuple[list[int], list[float]] | None]

    def __init__(self, table: tuple) -> None:
        self._grammar = _grammar(table)  # ValueError for a table the kernel cannot read
        self._table = table
        self._clear()

    def __len__(self) -> int:
        return len(self._steps)

    def read(self, data: bytes, starts: Sequence[int], index: int, limit: int) -> int:
        """Read the run of step lines at ``starts[index:]`` (at most ``limit``); how many lines were read."""
        if index < 0 or limit < 0:
            raise ValueError("index and limit must not be negative")
        taken = 0
        for start in starts[index:index + limit]:
            if not 0 <= start <= len(data):
                break
            end = data.find(b"\n", start)
            line = data[start:end if end >= 0 else len(data)]
            if not line.isascii() or self._grammar.tagged.match(line):
                break
            match = self._grammar.record.search(line.decode("ascii"))
            if match is None or len(match.group(1)) > MAX_DIGITS or len(match.group(2)) > MAX_DIGITS:
                break
            if self._steps and int(match.group(1)) < self._steps[-1]:
                break  # a step going back (a restart) starts a new batch: the caller reads that line itself
            self._commit(_record(self._table, match))
            taken += 1
        return taken

    def take(self) -> Run:
        """``(steps, total, fields, named)`` of the lines read since the last take; the reader starts over."""
        fields = tuple((self._latest[field], self._units[field], *(kept if kept is not None else (None, None)))
                       for field, kept in enumerate(self._series))
        named = [(name, value, lines, first, position) for name, (value, lines, first, position) in self._named.items()]
        run = (self._steps, self._total, fields, named)
        self._clear()
        return run

    def _commit(self, record: Record) -> None:
        line = len(self._steps)
        self._steps.append(record.step)
        self._total = record.total
        for field, (value, unit) in enumerate(record.values):
            if value is None:
                continue
            self._latest[field] = value
            if unit:
                self._units[field] = unit
            kept = self._series[field]
            if kept is not None:
                kept[0].append(record.step)
                kept[1].append(value)
        for position, (name, value) in enumerate(record.named.items()):
            entry = self._named.get(name)
            if entry is None:
                self._named[name] = [value, 1, line, position]
            else:
                entry[0], entry[1] = value, entry[1] + 1

    def _clear(self) -> None:
        fields = self._table[6]
        self._steps = []
        self._total = None
        self._latest = [None] * len(fields)
        self._units = [None] * len(fields)
        self._series = [([], []) if kept else None
                                                                     for _, _, kept, _, _ in fields]
        self._named: dict[str, list] = {}  # name -> [latest, lines, first line, position in it]


def read_record(table: tuple, text: str) -> Record | None:
    """The first record of one line of any text; None when it holds none."""
    match = _grammar(table).record.search(text)
    return None if match is None else _record(table, match)


def _record(table: tuple, match: re.Match[str]) -> Record:
    grammar = _grammar(table)
    fields = table[6]
    values: list[tuple[float | None, str | None]] = [(None, None)] * len(fields)
    named: dict[str, float] = {}
    for name, raw in grammar.pair.findall(match.group("body")):
        raw = raw.strip()
        field = grammar.field_index.get(name)
        if field is None:
            value = parse_float(raw)
            if value is not None:
                named[name] = value
            continue
        _, kind, _, absent, default_unit = fields[field]
        if absent and raw == absent.decode("ascii"):
            continue
        if kind == Kind.FLOAT:
            values[field] = (parse_float(raw), None)
        elif kind == Kind.DURATION:
            values[field] = (parse_duration_seconds(raw, default_unit.decode("ascii") or "s"), None)
        else:
            parsed = parse_number_with_unit(raw)
            if parsed is not None:
                values[field] = (parsed[0], parsed[1] or None)
    return Record(int(match.group(1)), int(match.group(2)), values, named)


class _Grammar(NamedTuple):
    record: re.Pattern[str]
    pair: re.Pattern[str]
    tagged: re.Pattern[bytes]
    field_index: dict[str, int]


@lru_cache(maxsize=16)
def _grammar(table: tuple) -> _Grammar:
    """The table's record, pair and line-tag patterns (the grammar the module docstring states)."""
    opener, closer, pair_separator, name_separator, step_name, (tag_open, tag_close), fields = table
    for punctuation in (opener, closer, pair_separator, name_separator):
        if len(punctuation) != 1 or punctuation[0] >= 0x80 or punctuation in _SPACES or _NAME_BYTE.match(punctuation):
            raise ValueError("a field table's punctuation is one ASCII byte each, neither a space nor a name byte")
    if len({name for name, *_ in fields}) != len(fields):
        raise ValueError("a field table names each field once")
    for _, kind, _, _, default_unit in fields:
        Kind(kind)  # ValueError for a kind the kernel does not know
        if kind == Kind.DURATION and default_unit.decode("ascii").lower() not in ("", *_DURATION_UNITS):
            raise ValueError(f"unknown duration unit {default_unit!r}")
    o, c, p, n, step = (re.escape(part.decode("ascii")) for part in (opener, closer, pair_separator, name_separator,
                                                                     step_name))
    record = re.compile(rf"{o}\s*{step}{n}\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]\s*{p}(?P<body>[^{o}{c}]*){c}")
    # A comma before exactly three digits cannot start a pair (a name starts with a letter): a thousands separator.
    thousands = r"|,(?=[0-9]{3}(?![0-9]))" if p == "," else ""
    pair = re.compile(rf"([A-Za-z_][A-Za-z0-9_]*)\s*{n}\s*((?:[^{p}{c}]{thousands})+)")
    tagged = re.compile(re.escape(tag_open) + rb"[A-Za-z0-9_]+" + re.escape(tag_close))
    return _Grammar(record, pair, tagged, {name.decode("ascii"): index for index, (name, *_) in enumerate(fields)})
