"""Kernel: runs of step lines read by a field table. This twin defines step_fields.c.

A field table is a step record's grammar as plain data, built by the format module that
owns the grammar (parse/ turns its declaration into this tuple; nothing here knows a
framework or a field):

    (opener, closer, pair_separator, name_separator, step_name, line_tag, fields[, required[, grammar]])

- ``opener``, ``closer``, ``pair_separator``, ``name_separator``: one byte each
  (``b"{"``, ``b"}"``, ``b","``, ``b":"``);
- ``step_name``: the record's first pair, whose value is the integer fraction
  ``[step/total]`` (``b"step"``);
- ``line_tag``: ``(open, close)``; a line beginning with ``open``, name bytes, ``close``
  belongs to another stream (torchrun's ``[default3]:``) and is declined;
- ``fields``: ``((name, kind, series, absent, default_unit[, column]), ...)``: a name as
  printed, its conversion ``Kind``, whether every value is kept (1) or only the latest (0),
  a printed value meaning "not obtained" that leaves the field as it was (``b""``: none),
  for a DURATION the unit of a bare number (``b""``: seconds), and the column (the gauge) it
  sets: several names may set one column (``lr`` and ``learning_rate``); without it, each
  entry is its own column, in order. Entries of one column agree on kind, series, absent
  and unit;
- ``required``: a column a record must print (``-1`` or absent: none);
- ``grammar``, told by its length: ``(dropped, counted, step_segment, lead, lead_name, step_close, percent)``, the
  segments grammar; ``(step_brackets, name_bytes, renamed, value_brackets, marks[, outer, outer_names, seconds,
  words, every_value[, escapes, item_brackets, not_after[, lead, lead_name, lead_close[, step_count,
  count_steps]]]])``, the pairs grammar's options (five, ten, thirteen, sixteen or eighteen items);
  ``(total_names, dropped, declines[, (renamed, marks)])``, the JSON grammar (each below).

Record grammar (an ``opener``): a record is
``opener \\s* step_name name_separator \\s* [\\s* digits \\s* / \\s* digits \\s*]
\\s* pair_separator body closer``, the first such in its line, where ``body`` holds neither
opener nor closer. Its pairs are ``name \\s* name_separator \\s* value``, found anywhere in
the body (``name``: ``[A-Za-z_][A-Za-z0-9_]*``; ``value``: up to the next pair separator,
stripped; a comma followed by exactly three digits and then a non-digit is a thousands
separator, part of the value: ``loss: 1,234.5`` is 1234.5, not 1). A pair of a table
field sets the field: a later pair of the same name replaces it, a value that does not
convert unsets it (a NUMBER_WITH_UNIT keeps what it had). Any other name with a float
value is a named value: the line's named values in the order first printed, each with its
latest value.

Pairs grammar (``opener`` and ``closer`` both ``b""``): the record is the whole line, its pairs
``name name_separator value`` (a ``name_separator`` of two bytes, the second a space: ``b": "``, the first byte and
any spaces after it) wherever the name is not preceded by a name byte or ``.``
(``name``: as above; ``value``: one byte at least, up to a space or one of the
``pair_separator`` bytes (none: a space only), a thousands comma as above being part of it). ``step_name`` is a
tuple of names, the first printed in that order giving the step, ``digits[/digits]``: the
total is None when not printed. The pairs are read as a dict (a later pair of a name
replaces the earlier, at the earlier's place); a field's value that does not convert unsets
its column; the line holds a record only with its step and its required column printed
(``key=value`` training loops: ``step=12/30 loss=2.5 lr=0.01``). The run declines, besides
what it declines of any grammar, a line printing a name twice, two names of one column or
two step names (their dict reading is the per-line reader's), or more than MAX_PAIRS pairs.

The pairs grammar's options (a ninth item of five or ten; MMEngine's ``Iter(train) [ 10/270]  lr: 1.0e-02  memory: 0``,
DeepSpeed's ``step=10, skipped=6, lr=[9.6e-06, 9.6e-06]`` and ``global_step=10, MemAllocated=3.96GB``): with
``step_brackets`` (two bytes of punctuation, ``b"[]"``; b"": none) the step is no pair but the first
``step_name \\s* open \\s* digits / \\s* digits shut`` of the line (``step_name`` any of the tuple's, as printed, not
after a name byte: the earliest, the tuple's first at one place), its total printed, and the pairs are those after
it (a name at its start not after anything); ``name_bytes``: further bytes a name may hold after its first
(``b"./-"``: ``decode.loss_ce``); ``renamed``: ``((printed, name, unit), ...)``, a named value printed under
``printed`` kept under ``name`` (b"": not read), its value without ``unit`` at its end where it prints it (b"":
none); ``value_brackets`` (two bytes of punctuation; b"": none): a value (but the step's) beginning with the first
is a list, running to the first second byte after it (spaces and separators in it) where the line prints one, else
as any value, its items cut at each ``/`` and each comma but a thousands comma, and stripped: the value is its first
item; with a name separator of two bytes (``b": "``) a name followed by spaces (or none) and a whole list is a pair
too (``global_norm [1.5]``); ``marks``: names of which a record prints one (empty: none needed). The five further
options (MindFormers' static-graph records, ``{ Epoch:[  1/  2], step:[    3/   19], loss:[9.673/9.802], ...,
overflow cond: False``): ``outer`` (b"": none), a name printed before the step with a fraction in the step's
brackets that the step counts within, which a record then prints (the first such, not after a name byte): the step
is ``max(outer - 1, 0) * total + step`` and the total ``outer_total * total``, and ``outer_names``, four names or b""
(not kept), are the named values of the outer count, its total, the step and the total as printed, first of the
line's; ``seconds``: ``((printed, name), ...)``, a list
value of ``printed`` whose second item is the named value ``name`` (a normalised name, no field's; read as a named
value printed under it: renamed where ``renamed`` says), after it; ``words``: ``((word, number), ...)``, a named
value printed as ``word`` is ``number``
(``False`` 0); ``every_value``: parts of names (at most MAX_MARKS), a named value whose name (renamed or normalised)
holds one of them keeps every line's value, where a run keeps the latest of the others (a rank's own values, which
the caller needs every one of). Every other named value is kept under its name normalised (``decode.loss_ce``:
``decode_loss_ce``); a field is known by its name as printed. The last three (torchtitan's ``ESC[31mstep: 10
ESC[32mloss: 9.0  ESC[36mmemory: 171.79GiB(96.32%)``): ``escapes`` (1 or 0), the line is read as if each ANSI SGR
escape, ``ESC [ digits-or-semicolons m``, were not there; ``item_brackets`` (two bytes of punctuation, not the value
brackets' first; b"": none), a value (not a list) holding the first after its first byte and ending with the second
is a list of two items, the bytes before the first and those between, stripped (``seconds`` names its second);
``not_after``: words (names, at most MAX_MARKS), a line printing a step's name right after one of them and one space
(the word not after a name byte or ``.``) holds no record (``validate step: 10``). The lead (fairseq's ``| epoch 001:
   550 / 1891 loss=11.186, ...``): ``lead``, a name (b"": none; not with ``step_brackets``), printed before the pairs
and followed by spaces and digits, and with a ``lead_close`` (one byte of punctuation, b"": none) by it and a count of
a total, ``\\s* digits \\s* / \\s* digits`` (not kept), the first such not after a name byte, which a record then
prints; its digits are the line's first named value, ``lead_name`` (a normalised name), and the pairs those after it.
The counted step (MMEngine's epoch-based ``Epoch(train) [1][ 10/270]``): ``step_count`` (a normalised name, b"":
none; with ``step_brackets``, not with ``outer``) and ``count_steps``, names of the step printed with the step's
brackets holding a count, ``\\s*``, then its fraction: the count is the line's first named value ``step_count``, the
step ``max(count - 1, 0) * total + step`` and the record has no total (the fraction's counts the count's steps); the
step is the first of either kind printed.
The run declines, besides the above, a line printing a name longer than MAX_NAME, a lead whose numbers have more than
MAX_DIGITS digits, or whose step or total with an outer count (or its counted step) is more than 2**63 - 1.

JSON grammar (a ninth item of three or four; ``opener`` and ``closer`` both ``b""``, ``pair_separator`` ``b","`` and
``name_separator`` ``b":"``; custom loops' and LLaMA-Factory's ``{"current_steps": 10, "total_steps": 30, "loss":
2.5}``): the record is the flat JSON object from the line's first ``{`` to its end (JSON's spaces and tabs around its
tokens), each member ``"key": value``, the key without ``dropped`` at its start (``b"train/"``) and normalised
(``normalised_name``): table names, step names (a tuple, as the pairs grammar's), ``total_names`` and ``declines``
are normalised ones. A value is a string (its bytes, read by ``parse_float``), a JSON number, ``null``, ``true``,
``false``, ``NaN``, ``Infinity`` or ``-Infinity`` (each read by ``parse_float``: the last three are numbers; an
integer ``-0`` is 0, as json.loads reads an int); the step's (one step name) and the total's (one total name; a
literal: none) are digits, printed as an integer or a string. Pairs apply as in the pairs grammar; a record prints its
step and its required column. The run declines, besides what it declines of any grammar: a string holding an escape
or a control byte or beginning or ending with a space, an object or an array as a value, anything JSON does not read
(then json.loads does not either), a carriage return, a key longer than MAX_NAME, more than MAX_PAIRS members, two
keys of one normalised name, two names of one column, two step or total names, a name of ``declines`` (lines the
per-line reader reads its own way: a unitless ``throughput``), a step or total not digits (at most MAX_DIGITS), an
integer of more than MAX_JSON_INTEGER digits (float() of its int fails). A fourth item, ``(renamed, marks)``:
``((printed, name, b""), ...)`` (at most MAX_RENAMED, normalised names), a key normalised to ``printed`` read as
``name`` (MMEngine's ``memory``: ``memory_mb``), and names (normalised, at most MAX_MARKS; none: any record) of which a
record prints one (MMEngine's ``data_time``).

Segments grammar (a ninth item; ``opener`` and ``closer`` both ``b""``): the record begins at the first
``step_name \\s+ digits / \\s* digits \\s* pair_separator`` of the line, ``step_name`` not after a name byte, or
with a ``lead``, at the first ``lead \\s+ digits , \\s* step_name ...`` (``lead`` not after a name byte), whose
digits are the line's first named value, ``lead_name`` (NeMo's ``Training epoch 0, iteration 5/90 |``);
the rest of the line is cut at each ``pair_separator`` into segments, each ``name name_separator value`` (at its
first name separator) or, without one, the segment stripped and its value the last word (after its last space).
The name is stripped (a segment whose name is empty holds no pair), ``dropped`` is removed from its start, and it
is normalised (``normalised_name``: ``elapsed time per iteration (ms)`` is ``elapsed_time_per_iteration``): the
table's names are normalised ones. A DURATION field's bare value is in the duration unit the printed name holds
in its first parentheses (``(ms)``), else in the field's. Pairs apply as in the record grammar. A segment
named ``step_segment`` (b"": none) whose value is digits gives the step (the last such; the fraction after
``step_name`` then counts something else, and the record has no total), and is no named value. ``counted`` names
a named value counting something the per-line reader must see (b"": none): the run declines, besides what it
declines of any grammar, a line printing it other than 0, a step segment whose value is not digits, a name
longer than MAX_NAME bytes or more than MAX_PAIRS segments. With a ``step_close`` (one byte, b"": none), the
record begins at ``step_name \\s+ digits \\s* step_close`` instead, and has no total (nanoGPT's ``iter 10:``). With a
``percent`` (b"": none), a segment whose name is no field's and whose value ends in ``%`` is the named value of the
name and ``percent`` after it (``mfu 16.68%``: ``mfu_percent``), the number before the ``%``; none when below 0
(nanoGPT's -100% before its first estimate).

``StepReader(table).read(data, starts, index, limit)`` reads the lines of ``data`` starting
at ``starts[index]``, ``starts[index + 1]``, ... (at most ``limit``) until the first that
holds no record or is declined: a line that is not ASCII, carries a line tag, whose step
or total has more than 18 digits (those go to the per-line parser, ``read_record``, which
reads any text), or whose step is below the step of the line read before it since the last
``take()`` (a restart, which ends a batch); it returns how many lines it read. Runs read one after the other are
taken as one, by ``take()``:

    (steps, total, fields, named)

- ``steps``: each line's step, a ``range`` when they go up by one difference (the usual run: no
  int object a line), else a list; a series' steps are that range itself when every line printed
  its value;
- ``total``: the latest total (None when nothing was read);
- ``fields``: per table field ``(latest, unit, series_steps, series_values)``: the latest
  value any line set (None: none did), the unit of the latest line whose value had one
  (NUMBER_WITH_UNIT, else None), and for a series field every value with its line's step
  (else None);
- ``named``: ``[(name, latest, lines, first_line, position, every), ...]`` in the order first
  printed: the latest value, how many lines printed it, the first of them (counted from 0,
  the first line read since the last take), the name's place among that line's named
  values, and for a name holding an ``every_value`` part ``(steps, values)``, each line's value
  with its step (values an array('d'); else None).
"""

from __future__ import annotations

import enum
import os
import re
from array import array
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import NamedTuple

from exporter.native.numbers import DURATION_UNITS as _DURATION_UNITS
from exporter.native.numbers import parse_duration_seconds, parse_float, parse_number_with_unit

MAX_DIGITS = 18  # a step or total with more goes to the per-line parser: 64-bit integers suffice
MAX_PAIRS = 64  # the pairs grammar: a line printing more pairs goes to the per-line parser
MAX_STEP_NAMES = 8
MAX_NAME = 128  # the segments grammar: a longer name goes to the per-line parser
MAX_PERCENT = 32  # the segments grammar: the longest suffix of a percent's name
MAX_RENAMED = 16  # the pairs grammar's options: names read under another name
MAX_MARKS = 8  # the pairs grammar's options: names of which a record prints one
MAX_JSON_INTEGER = 300  # the JSON grammar: a line printing a longer integer goes to the per-line parser
_SPACES = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # str.isspace() of ASCII: what \s sees
_NAME_BYTE = re.compile(rb"[A-Za-z0-9_]")


class Kind(enum.IntEnum):
    """How a field's printed value converts (the numbers step_fields.c knows them by)."""

    FLOAT = 1  # parse_float: 'nan', '1,234.5', '1e-05'
    DURATION = 2  # parse_duration_seconds, a bare number in the field's default unit
    NUMBER_WITH_UNIT = 3  # parse_number_with_unit: '12.1T'
    RECIPROCAL = 4  # 1 / parse_float: a rate's period (PaddleNLP's steps per second); 0 is no value


class Record(NamedTuple):
    """One line's record: the fraction, each table field's (value, unit), the named values."""

    step: int
    total: int | None  # None: not printed (the pairs grammar's ``step=N``)
    values: list[tuple[float | None, str | None]]
    named: dict[str, float]


# A field's (latest, unit, steps, values); a series' values an array('d'): the kernel copies them out at once.
Steps = list[int] | range
Fields = tuple[tuple[float | None, str | None, Steps | None, "array[float] | None"], ...]
NamedValue = tuple[str, float, int, int, int, "tuple[Steps, array[float]] | None"]
Run = tuple[Steps, int | None, Fields, list[NamedValue]]


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

    def read(self, data: bytes, starts: list[int] | array[int], index: int, limit: int, ahead: object = None) -> int:
        """Read the run of step lines at ``starts[index:]`` (at most ``limit``); how many lines were read.
        ``ahead`` (the kernel's StepsAhead: runs read on a thread of their own) is the kernel's: the twin reads."""
        if type(starts) is not list and not (type(starts) is array and starts.typecode in "ql"
                                             and starts.itemsize == 8):
            raise TypeError("starts are a list of ints or an array of int64")
        if index < 0 or limit < 0:
            raise ValueError("index and limit must not be negative")
        grammar = self._grammar
        taken = 0
        for start in starts[index:index + limit]:
            if not 0 <= start <= len(data):
                break
            end = data.find(b"\n", start)
            line = data[start:end if end >= 0 else len(data)]
            if not line.isascii() or grammar.tagged.match(line):
                break
            record = _run_record(self._table, grammar, line.decode("ascii"))
            if record is None:
                break
            if self._steps and record.step < self._steps[-1]:
                break  # a step going back (a restart) starts a new batch: the caller reads that line itself
            self._commit(record)
            taken += 1
        return taken

    def take(self) -> Run:
        """``(steps, total, fields, named)`` of the lines read since the last take; the reader starts over."""
        steps = _steps_of(self._steps)
        fields = tuple((self._latest[column], self._units[column],
                        *((_series_steps(steps, kept[0]), array("d", kept[1])) if kept is not None else (None, None)))
                       for column, kept in enumerate(self._series))
        named = [(name, value, lines, first, position,
                  (_series_steps(steps, every[0]), array("d", every[1])) if every is not None else None)
                 for name, (value, lines, first, position, every) in self._named.items()]
        run = (steps, self._total, fields, named)
        self._clear()
        return run

    def _commit(self, record: Record) -> None:
        line = len(self._steps)
        self._steps.append(record.step)
        if record.total is not None:
            self._total = record.total
        for column, (value, unit) in enumerate(record.values):
            if value is None:
                continue
            self._latest[column] = value
            if unit:
                self._units[column] = unit
            kept = self._series[column]
            if kept is not None:
                kept[0].append(record.step)
                kept[1].append(value)
        for position, (name, value) in enumerate(record.named.items()):
            entry = self._named.get(name)
            if entry is None:
                every: tuple[list[int], list[float]] | None = (
                    ([], []) if any(part in name for part in self._grammar.every_value) else None)
                entry = self._named[name] = [value, 0, line, position, every]
            entry[0], entry[1] = value, entry[1] + 1
            if entry[4] is not None:
                entry[4][0].append(record.step)
                entry[4][1].append(value)

    def _clear(self) -> None:
        fields, columns = self._table[6], self._grammar.columns
        self._steps = []
        self._total = None
        self._latest = [None] * len(columns)
        self._units = [None] * len(columns)
        self._series = [([], []) if fields[first][2] else None for first in columns]
        self._named: dict[str, list] = {}  # name -> [latest, lines, first line, position in it, every value or None]


def _steps_of(steps: list[int]) -> Steps:
    """A run's steps: a range when they go up by one difference (no int object a line), else the list."""
    difference = steps[1] - steps[0] if len(steps) > 1 else 1
    ranged = range(steps[0], steps[-1] + difference, difference) if steps and difference > 0 else None
    if ranged is None or len(ranged) != len(steps) or steps[-1] + difference >= 2**63 or steps != list(ranged):
        return steps
    return ranged


def _series_steps(steps: Steps, kept: list[int]) -> Steps:
    """A series' steps: the run's range when every line printed it (a range is shared, never changed), else its own."""
    return steps if type(steps) is range and len(kept) == len(steps) else kept


def _run_record(table: tuple, grammar: _Grammar, text: str) -> Record | None:
    """The record of an ASCII line as a run reads it; None when it holds none or the run declines it."""
    if grammar.json:
        return _json_record(table, grammar, text)
    if grammar.segments is not None:
        match = grammar.record.search(text) if grammar.record is not None else None
        if match is None or any(len(digits or "") > MAX_DIGITS for digits in match.groups()):
            return None
        segments = _segments(grammar, text[match.end():])
        if len(segments) > MAX_PAIRS or any(len(printed) > MAX_NAME for printed, _ in segments):
            return None
        dropped, counted, step_segment, *_ = grammar.segments
        steps = [raw for printed, raw in segments
                 if step_segment and normalised_name(printed.removeprefix(dropped)) == step_segment]
        if any(not _DIGITS.fullmatch(raw) or len(raw) > MAX_DIGITS for raw in steps):
            return None
        record = _segments_record(table, match, segments)
        return None if counted and record.named.get(counted, 0.0) != 0.0 else record
    if grammar.pairs:
        text = _unescaped(grammar, text)
        bracketed, lead, begin = _before_pairs(grammar, text)
        pairs_text = text[begin:]
        if _ambiguous_pairs(grammar, pairs_text):
            return None
        if lead is not None and any(len(digits) > MAX_DIGITS for digits in lead.groups()):
            return None
        step = bracketed or _pairs_step(grammar, dict(grammar.pair.findall(pairs_text)))
        if step is None or any(len(digits or "") > MAX_DIGITS for digits in step.groups()):
            return None
        outer = grammar.outer.search(text, 0, step.start()) if grammar.outer is not None else None
        if outer is not None and any(len(digits) > MAX_DIGITS for digits in outer.groups()):
            return None
        pairs_record = _pairs_record(table, text)
        if pairs_record is not None and (outer is not None or grammar.step_count) and max(
                pairs_record.step, pairs_record.total or 0) >= 2**63:
            return None  # beyond an int64: the per-line reader's
        return pairs_record
    assert grammar.record is not None  # the record grammar's
    match = grammar.record.search(text)
    if match is None or len(match.group(1)) > MAX_DIGITS or len(match.group(2)) > MAX_DIGITS:
        return None
    return _record(table, match)


def read_record(table: tuple, text: str) -> Record | None:
    """The first record of one line of any text; None when it holds none."""
    grammar = _grammar(table)
    if grammar.json:
        return _json_record(table, grammar, text)
    if grammar.record is None:
        return _pairs_record(table, _unescaped(grammar, text))
    match = grammar.record.search(text)
    if match is None:
        return None
    if grammar.segments is not None:
        return _segments_record(table, match, _segments(grammar, text[match.end():]))
    return _record(table, match)


def normalised_name(printed: str) -> str:
    """``tokens per gpu per second (tgs)`` -> ``tokens_per_gpu_per_second``; ``train/mfu`` -> ``train_mfu``."""
    return _NOT_NAME.sub("_", _PARENTHESES.sub("", printed).lower()).strip("_")


_PARENTHESES = re.compile(r"\s*\([^)]*\)")
_NOT_NAME = re.compile(r"[^0-9a-z]+")
_FIRST_PARENTHESES = re.compile(r"\(([^)]*)\)")
_DIGITS = re.compile(r"[0-9]+")


def write_rows(fd: int, jobs: list) -> None:
    """Each job written to the file descriptor ``fd``, in order: a str as its UTF-8, or ``(columns, rows, lead)`` as
    the first ``rows`` rows of ``columns`` (sequences of at least ``rows`` items) as CSV lines: ``lead``, then the
    cells, each repr() of an int or a float, empty for None; cells joined by ``,``, each row ended by ``\r\n`` (the
    csv module's). No columns: no rows. Every job is read before anything is written."""
    texts = [job if isinstance(job, str) else _rows_text(job) for job in list(jobs)]
    data = memoryview("".join(texts).encode())
    while data:
        data = data[os.write(fd, data):]


def _rows_text(job: object) -> str:
    if not isinstance(job, tuple) or len(job) != 3 or not isinstance(job[0], tuple) or not isinstance(job[2], str):
        raise TypeError("write_rows: a job is a str or (columns: tuple, rows, lead: str)")
    given, rows, lead = job
    columns = tuple(column if isinstance(column, (list, tuple)) else list(column) for column in given)
    if not all(len(column) >= rows for column in columns):
        raise ValueError("write_rows: each column a list of rows items at least")
    cells = []
    for row in zip(*(column[:max(rows, 0)] for column in columns), strict=True):
        for value in row:
            if value is not None and type(value) not in (int, float):
                raise TypeError(f"write_rows: a cell is an int, a float or None, not {type(value).__name__}")
        cells.append(lead + ",".join("" if value is None else repr(value) for value in row) + "\r\n")
    return "".join(cells)


def _convert(entry: tuple, raw: str, bare_unit: str = "") -> tuple[float | None, str | None] | None:
    """A field's printed value converted: (value, unit); (None, None) unsets the column; None leaves it as it was.
    ``bare_unit``: the unit of a bare DURATION value the line names (the segments grammar), else the field's."""
    _, kind, _, absent, default_unit, *_ = entry
    if absent and raw == absent.decode("ascii"):
        return None
    if kind == Kind.FLOAT:
        return parse_float(raw), None
    if kind == Kind.DURATION:
        return parse_duration_seconds(raw, bare_unit or default_unit.decode("ascii") or "s"), None
    if kind == Kind.RECIPROCAL:
        rate = parse_float(raw)
        return (1 / rate if rate else None), None
    parsed = parse_number_with_unit(raw)
    return None if parsed is None else (parsed[0], parsed[1] or None)


def _record(table: tuple, match: re.Match[str]) -> Record:
    grammar = _grammar(table)
    pairs = ((name, raw.strip()) for name, raw in grammar.pair.findall(match.group("body")))
    values, named = _values(grammar, table[6], pairs)
    return Record(int(match.group(1)), int(match.group(2)), values, named)


def _values(grammar: _Grammar, fields: tuple, pairs: Iterable[tuple[str, str]], bare_units: Sequence[str] = (),
            percent: str = "") -> tuple[list[tuple[float | None, str | None]], dict[str, float]]:
    """A line's (name, raw value) pairs as the table's columns and the named values no column takes; ``bare_units``:
    each pair's unit of a bare duration ("": the field's); ``percent``: the segments grammar's (module docstring)."""
    values: list[tuple[float | None, str | None]] = [(None, None)] * len(grammar.columns)
    named: dict[str, float] = {}
    for number, (name, raw) in enumerate(pairs):
        field = grammar.field_index.get(name)
        if field is None:
            if grammar.renamed is not None:  # the pairs grammar's options
                kept = _kept_as(grammar, name, raw)
                if kept is None:
                    continue  # not read
                name, raw = kept
            if percent and raw.endswith("%"):
                name, value = name + percent, parse_float(raw[:-1])
                if value is not None and value < 0:
                    continue  # a sentinel: not estimated yet
            else:
                value = grammar.words[raw] if grammar.words and raw in grammar.words else parse_float(raw)
            if value is not None:
                named[name] = value
            continue
        converted = _convert(fields[field], raw, bare_units[number] if bare_units else "")
        if converted is not None:
            values[grammar.column_of[field]] = converted
    return values, named


def _kept_as(grammar: _Grammar, name: str, raw: str) -> tuple[str, str] | None:
    """The pairs grammar's options: the (name, raw value) a named value is kept as, None when it is not read."""
    assert grammar.renamed is not None
    new_name, unit = grammar.renamed.get(name, (normalised_name(name), ""))
    if not new_name and name in grammar.renamed:
        return None
    return new_name, raw.removesuffix(unit) if unit else raw


def _segments(grammar: _Grammar, rest: str) -> list[tuple[str, str]]:
    """The segments grammar: the (stripped printed name, stripped raw value) of each segment after the record's
    start that holds a name (module docstring)."""
    pairs = []
    for segment in rest.split(grammar.pair_separator):
        printed, separator, raw = segment.partition(grammar.name_separator)
        if not separator:
            printed, _, raw = segment.strip().rpartition(" ")
        printed = printed.strip()
        if printed:
            pairs.append((printed, raw.strip()))
    return pairs


def _segments_record(table: tuple, match: re.Match[str], segments: list[tuple[str, str]]) -> Record:
    grammar = _grammar(table)
    assert grammar.segments is not None
    dropped, _, step_segment, _, lead_name, _, percent = grammar.segments
    step = int(match.group("step"))
    # With a step segment the fraction counts something else (NeMo's batches of the epoch): no total.
    total = None if step_segment or not match.group("total") else int(match.group("total"))
    pairs, bare_units = [], []
    for printed, raw in segments:
        name = normalised_name(printed.removeprefix(dropped))
        if step_segment and name == step_segment:
            if _DIGITS.fullmatch(raw):
                step = int(raw)
            continue
        unit = _FIRST_PARENTHESES.search(printed)
        bare_units.append(unit.group(1) if unit and unit.group(1).lower() in _DURATION_UNITS else "")
        pairs.append((name, raw))
    values, named = _values(grammar, table[6], pairs, bare_units, percent)
    if match.group("lead"):
        named = {lead_name: float(match.group("lead")), **named}  # first, with a segment's value of that name
    return Record(step, total, values, named)


def _pairs_record(table: tuple, text: str) -> Record | None:
    """The pairs grammar's record of a line, its pairs read as a dict (module docstring)."""
    grammar = _grammar(table)
    bracketed, lead, begin = _before_pairs(grammar, text)
    if (grammar.step_brackets is not None and bracketed is None) or (grammar.lead is not None and lead is None):
        return None
    outer = grammar.outer.search(text, 0, bracketed.start()) if grammar.outer is not None and bracketed else None
    if grammar.outer is not None and outer is None:
        return None
    pairs = dict(grammar.pair.findall(text[begin:]))
    step = bracketed or _pairs_step(grammar, pairs)
    if grammar.not_after and _after_word(grammar, text, bracketed, begin):
        return None
    required = grammar.column_names[grammar.required] if grammar.required >= 0 else ()
    if (step is None or (required and not any(name in pairs for name in required))
            or (grammar.marks and not any(name in pairs for name in grammar.marks))):
        return None
    values, named = _values(grammar, table[6], _listed(grammar, ((name, raw) for name, raw in pairs.items()
                                                                 if bracketed is not None
                                                                 or name not in grammar.step_names)))
    if grammar.step_count and step.group(1) is None:  # a step after a count: ``[1][ 10/270]``
        count, number, per_count = (int(digits) for digits in step.group(3, 4, 5))
        return Record(max(count - 1, 0) * per_count + number, None, values, {grammar.step_count: float(count), **named})
    number, total = int(step.group(1)), None if step.group(2) is None else int(step.group(2))
    if lead is not None:
        named = {grammar.lead_name: float(int(lead.group(1))), **named}
    if outer is None:
        return Record(number, total, values, named)
    count, counts = int(outer.group(1)), int(outer.group(2))
    assert total is not None  # a bracketed step prints its total
    counted = dict(zip(grammar.outer_names, (count, counts, number, total), strict=True))
    return Record(max(count - 1, 0) * total + number, counts * total, values,
                  {**{name: float(value) for name, value in counted.items() if name}, **named})


def _listed(grammar: _Grammar, pairs: Iterable[tuple[str, str]]) -> Iterable[tuple[str, str]]:
    """The pairs with each value printed as a list (the pairs grammar's value brackets) or with its second item in
    the item brackets its first item, followed by its second item's pair where the options keep it."""
    for name, raw in pairs:
        if grammar.value_brackets and raw.startswith(grammar.value_brackets[0]):
            items = _LIST_ITEM_BREAK.split(raw[1:].removesuffix(grammar.value_brackets[1]), maxsplit=2)
        elif grammar.item_brackets and len(raw) > 2 and raw.endswith(grammar.item_brackets[1]) and (
                opened := raw.find(grammar.item_brackets[0], 1, len(raw) - 1)) > 0:
            items = [raw[:opened], raw[opened + 1:-1]]
        else:
            yield name, raw
            continue
        yield name, items[0].strip()
        if grammar.seconds and name in grammar.seconds and len(items) > 1:
            yield grammar.seconds[name], items[1].strip()


def _unescaped(grammar: _Grammar, text: str) -> str:
    """The pairs grammar's escapes: the text without its SGR escapes (``ESC[31m``)."""
    return _SGR_ESCAPE.sub("", text) if grammar.escapes and "\x1b" in text else text


def _before_pairs(grammar: _Grammar, text: str) -> tuple[re.Match[str] | None, re.Match[str] | None, int]:
    """The step in brackets and the lead the pairs grammar's options read before a line's pairs (None: the options
    have none or the line does not print it), and where its pairs begin."""
    bracketed = grammar.step_brackets.search(text) if grammar.step_brackets is not None else None
    lead = grammar.lead.search(text) if grammar.lead is not None else None
    before = bracketed or lead
    return bracketed, lead, before.end() if before is not None else 0


def _after_word(grammar: _Grammar, text: str, bracketed: re.Match[str] | None, begin: int) -> bool:
    """A step's name printed right after one of the options' ``not_after`` words and one space (the word not after a
    name byte or ``.``); the pairs begin at ``begin``."""
    assert grammar.not_after is not None
    starts = ([bracketed.start()] if bracketed is not None
              else [begin + found.start() for found in grammar.pair.finditer(text[begin:])
                    if found.group(1) in grammar.step_names])
    return any(grammar.not_after.search(text, 0, start) for start in starts)


_SGR_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


_LIST_ITEM_BREAK = re.compile(r"/|,(?![0-9]{3}(?![0-9]))")


def _pairs_step(grammar: _Grammar, pairs: dict[str, str]) -> re.Match[str] | None:
    """The step of a line's pairs: the first step name's value, ``digits[/digits]``; None when none is."""
    printed = next((pairs[name] for name in grammar.step_names if name in pairs), None)
    return None if printed is None else _STEP_OF_TOTAL.fullmatch(printed)


def _ambiguous_pairs(grammar: _Grammar, text: str) -> bool:
    """A line whose dict reading differs from reading its pairs in order: a name printed twice, two names of one
    column, two step names. The run declines it."""
    names = [name for name, _ in grammar.pair.findall(text)]
    columns = [grammar.column_of[grammar.field_index[name]] for name in names if name in grammar.field_index]
    return (len(names) > MAX_PAIRS or len(set(names)) != len(names) or len(set(columns)) != len(columns)
            or (grammar.step_brackets is None and sum(name in grammar.step_names for name in names) > 1)
            or (grammar.renamed is not None and any(len(name) > MAX_NAME for name in names)))


_STEP_OF_TOTAL = re.compile(r"(\d+)(?:/(\d+))?")
_JSON_SPACE = re.compile(r"[ \t]*")
_JSON_STRING = re.compile(r'"([^"\\\x00-\x1f]*)"')
_JSON_LITERAL = re.compile(r"null|true|false|NaN|Infinity|-Infinity")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")


def _json_members(text: str) -> list[tuple[str, str, str]] | None:
    """The (key, value, kind) of each member of the line's flat JSON object (a string's value its text; kind
    "string", "integer", "number" or "literal"); None when the JSON grammar reads none (module docstring)."""
    at = text.find("{")
    if at < 0:
        return None
    at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]  # it matches anywhere
    members = []
    if text.startswith("}", at):
        at += 1
    else:
        while True:
            key = _JSON_STRING.match(text, at)
            if key is None:
                return None
            at = _JSON_SPACE.match(text, key.end()).end()  # type: ignore[union-attr]
            if not text.startswith(":", at):
                return None
            at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
            value = _JSON_STRING.match(text, at) or _JSON_LITERAL.match(text, at) or _JSON_NUMBER.match(text, at)
            if value is None:
                return None
            kind = ("string" if value.re is _JSON_STRING else "literal" if value.re is _JSON_LITERAL
                    else "number" if any(value.groups()) else "integer")
            raw = value.group(1) if kind == "string" else value.group()
            members.append((key.group(1), "0" if kind == "integer" and raw == "-0" else raw, kind))  # an int: no -0
            at = _JSON_SPACE.match(text, value.end()).end()  # type: ignore[union-attr]
            if text.startswith(",", at):
                at = _JSON_SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
                continue
            if not text.startswith("}", at):
                return None
            at += 1
            break
    return members if _JSON_SPACE.match(text, at).end() == len(text) else None  # type: ignore[union-attr]


def _json_record(table: tuple, grammar: _Grammar, text: str) -> Record | None:
    """The JSON grammar's record of a line; None when it holds none or the run declines it (module docstring)."""
    members = _json_members(text) if "\r" not in text else None
    if (members is None or len(members) > MAX_PAIRS or any(len(key) > MAX_NAME for key, _, _ in members)
            or any(kind == "integer" and len(raw) > MAX_JSON_INTEGER for _, raw, kind in members)
            or any(kind == "string" and raw != raw.strip(" ") for _, raw, kind in members)):
        return None
    names = [normalised_name(key.removeprefix(grammar.dropped)) for key, _, _ in members]
    renamed = dict(grammar.json_renamed)
    names = [renamed.get(name, name) for name in names]
    columns = [grammar.column_of[grammar.field_index[name]] for name in names if name in grammar.field_index]
    steps = [number for number, name in enumerate(names) if name in grammar.step_names]
    totals = [number for number, name in enumerate(names) if name in grammar.total_names]
    required = grammar.required < 0 or any(name in grammar.column_names[grammar.required] for name in names)
    if (len(set(names)) != len(names) or len(set(columns)) != len(columns) or len(steps) != 1 or len(totals) > 1
            or not required or any(name in grammar.declines for name in names)
            or (grammar.marks and not any(name in grammar.marks for name in names))):
        return None
    step = _json_count(members[steps[0]])
    total = _json_count(members[totals[0]]) if totals and members[totals[0]][2] != "literal" else None
    if step is None or (totals and members[totals[0]][2] != "literal" and total is None):
        return None
    values, named = _values(grammar, table[6], ((name, raw) for number, (name, (_, raw, _)) in
                                                enumerate(zip(names, members, strict=True))
                                                if number not in steps and number not in totals))
    return Record(step, total, values, named)


def _json_count(member: tuple[str, str, str]) -> int | None:
    """A member's value as a step or a total: digits (at most MAX_DIGITS) printed as an integer or a string."""
    _, raw, kind = member
    return int(raw) if kind in ("integer", "string") and _DIGITS.fullmatch(raw) and len(raw) <= MAX_DIGITS else None


class _Grammar(NamedTuple):
    record: re.Pattern[str] | None
    pair: re.Pattern[str]
    tagged: re.Pattern[bytes]
    field_index: dict[str, int]
    pairs: bool  # the pairs grammar (``step=1 loss=2.5``), else the record grammar (``{ step:[1/2], loss: 2.5 }``)
    step_names: tuple[str, ...]
    column_of: tuple[int, ...]  # each field entry's column
    columns: tuple[int, ...]  # each column's first field entry
    column_names: tuple[frozenset[str], ...]  # each column's names
    required: int  # the column a record must print, -1: none
    # (dropped, counted, step_segment, lead, lead_name, step_close, percent)
    segments: tuple[str, str, str, str, str, str, str] | None = None
    pair_separator: str = ""
    name_separator: str = ""
    # The pairs grammar's options: the step's pattern when bracketed, the named values renamed (None: no options)
    # with the unit their values drop, the value brackets ("": none), names of which a record prints one.
    step_brackets: re.Pattern[str] | None = None
    renamed: dict[str, tuple[str, str]] | None = None
    value_brackets: str = ""
    marks: tuple[str, ...] = ()
    # Its further options: the outer count's pattern and names, second items' names, words' numbers, parts of the
    # names whose every value a run keeps.
    outer: re.Pattern[str] | None = None
    outer_names: tuple[str, ...] = ()
    seconds: dict[str, str] | None = None
    words: dict[str, float] | None = None
    every_value: tuple[str, ...] = ()
    # Its last options: SGR escapes read as absent, a value's second item in brackets after its first ("": none),
    # words before a step's name that make a line no record.
    escapes: bool = False
    item_brackets: str = ""
    not_after: re.Pattern[str] | None = None  # one of the words and a space, ending where a step's name begins
    lead: re.Pattern[str] | None = None  # the lead, its digits (the first group) and a lead close's count of a total
    lead_name: str = ""
    step_count: str = ""  # the named value of the count a step printed after one counts within
    # The JSON grammar (json): the total's names, the prefix a key drops, the names whose lines the run declines.
    json: bool = False
    total_names: tuple[str, ...] = ()
    dropped: str = ""
    declines: tuple[str, ...] = ()
    json_renamed: tuple[tuple[str, str], ...] = ()  # (normalised key, the name it is read as)


def _punctuation(part: bytes) -> bool:
    return len(part) == 1 and part[0] < 0x80 and part not in _SPACES and not _NAME_BYTE.match(part)


def _columns(fields: tuple, required: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[frozenset[str], ...]]:
    """The fields checked: each entry's column, each column's first entry, each column's names."""
    if len({name for name, *_ in fields}) != len(fields):
        raise ValueError("a field table names each field once")
    column_of = tuple(entry[5] if len(entry) == 6 else index for index, entry in enumerate(fields))
    columns: dict[int, int] = {}
    for index, (entry, column) in enumerate(zip(fields, column_of, strict=True)):
        if len(entry) not in (5, 6):
            raise ValueError("a field is five or six items")
        _, kind, _, _, default_unit, *_ = entry
        Kind(kind)  # ValueError for a kind the kernel does not know
        if kind == Kind.DURATION and default_unit.decode("ascii").lower() not in ("", *_DURATION_UNITS):
            raise ValueError(f"unknown duration unit {default_unit!r}")
        first = columns.setdefault(column, index)
        if tuple(fields[first][1:5]) != tuple(entry[1:5]):
            raise ValueError("the fields of one column agree on kind, series, absent and unit")
    if sorted(columns) != list(range(len(columns))) or not -1 <= required < len(columns):
        raise ValueError("a field table's columns are numbered from 0, one after the other")
    column_names = tuple(frozenset(fields[index][0].decode("ascii") for index, column in enumerate(column_of)
                                   if column == number) for number in range(len(columns)))
    return column_of, tuple(columns[number] for number in range(len(columns))), column_names


def _names(names: object, most: int, what: str) -> tuple[str, ...]:
    """A tuple of at most ``most`` non-empty names of bytes, as text."""
    if type(names) is not tuple or not all(type(name) is bytes for name in names):
        raise TypeError(f"names {what} are a tuple of bytes")
    if len(names) > most or not all(names):
        raise ValueError(f"at most {most} names {what}, each a name")
    return tuple(name.decode("ascii") for name in names)


def _json_grammar(table: tuple, json: tuple) -> _Grammar:
    """The JSON grammar's table checked (module docstring)."""
    _, _, pair_separator, name_separator, step_names, (tag_open, tag_close), fields = table[:7]
    required = table[7]
    if len(json) not in (3, 4) or (len(json) == 4 and (type(json[3]) is not tuple or len(json[3]) != 2)):
        raise TypeError("the JSON grammar is three or four items, its fourth (renamed, marks)")
    totals, dropped, declines, (renamed, marks) = json if len(json) == 4 else (*json, ((), ()))
    if type(dropped) is not bytes:
        raise TypeError("a field table holds bytes")
    _renamed(renamed)
    if not all(name and len(name) <= MAX_NAME and normalised_name(name.decode("ascii")) == name.decode("ascii")
               and not unit for *names, unit in renamed for name in names):
        raise ValueError("a JSON key is renamed from a normalised name to another, no unit")
    if (pair_separator, name_separator) != (b",", b":"):
        raise ValueError("the JSON grammar's punctuation is JSON's, b',' and b':'")
    names = _names(step_names, MAX_STEP_NAMES, "give the step")
    if not names:
        raise ValueError("a field table's step names are names")
    column_of, columns, column_names = _columns(fields, required)
    tagged = re.compile(re.escape(tag_open) + rb"[A-Za-z0-9_]+" + re.escape(tag_close))
    field_index = {name.decode("ascii"): index for index, (name, *_) in enumerate(fields)}
    return _Grammar(None, _JSON_NUMBER, tagged, field_index, False, names, column_of, columns, column_names, required,
                    json=True, total_names=_names(totals, MAX_STEP_NAMES, "give the total"),
                    dropped=dropped.decode("ascii"), declines=_names(declines, MAX_MARKS, "decline a line"),
                    json_renamed=tuple((printed.decode("ascii"), name.decode("ascii")) for printed, name, _ in renamed),
                    marks=_names(marks, MAX_MARKS, "mark a record"))


def _options(options: object, separators: list[bytes]) -> tuple:
    """The pairs grammar's options checked: (step_brackets, name_bytes, renamed, value_brackets, marks, outer,
    outer_names, seconds, words, every_value, escapes, item_brackets, not_after, lead, lead_name, lead_close,
    step_count, count_steps), from the marks on as text and dicts."""
    if not (type(options) is tuple and len(options) in (5, 10, 13, 16, 18)
            and all(type(options[i]) is bytes for i in (0, 1, 3)) and type(options[2]) is tuple
            and type(options[4]) is tuple):
        raise TypeError("the pairs grammar's options are (step_brackets, name_bytes, renamed, value_brackets, marks"
                        "[, outer, outer_names, seconds, words, every_value[, escapes, item_brackets, not_after"
                        "[, lead, lead_name, lead_close[, step_count, count_steps]]]])")
    brackets, name_bytes, renamed, value_brackets, marks = options[:5]
    outer, outer_names, seconds, words, every_value = options[5:10] if len(options) >= 10 else (b"", (), (), (), ())
    escapes, item_brackets, not_after = options[10:13] if len(options) >= 13 else (0, b"", ())
    lead, lead_name, lead_close = options[13:16] if len(options) >= 16 else (b"", b"", b"")
    step_count, count_steps = options[16:] if len(options) == 18 else (b"", ())
    if type(step_count) is not bytes:
        raise TypeError("a step count's name is bytes")
    counted_names = _names(count_steps, MAX_STEP_NAMES, "of a step printed after a count")
    if (bool(step_count) != bool(counted_names) or (step_count and (not brackets or outer))
            or len(step_count) > MAX_NAME or normalised_name(step_count.decode("ascii")) != step_count.decode()
            or not all(re.match(r"[A-Za-z_]", name) for name in counted_names)):
        raise ValueError("a step count is a normalised name, of steps printed with the step's brackets after a count "
                         "in them, no outer count's")
    if type(escapes) is not int or type(item_brackets) is not bytes:
        raise TypeError("escapes is an int, item brackets bytes")
    if type(lead) is not bytes or type(lead_name) is not bytes or type(lead_close) is not bytes:
        raise TypeError("a lead, its name and its close are bytes")
    if (bool(lead) != bool(lead_name) or (lead and (brackets or not re.fullmatch(rb"[A-Za-z_][A-Za-z0-9_]*", lead)))
            or len(lead_name) > MAX_NAME or normalised_name(lead_name.decode("ascii")) != lead_name.decode()
            or (lead_close and (not lead or not _punctuation(lead_close) or lead_close in separators))):
        raise ValueError("a lead is a name printed without the step's brackets, with a normalised name and a close of "
                         "punctuation, no separator")
    own = [byte for byte in brackets + name_bytes + value_brackets + item_brackets
           if not _punctuation(bytes([byte])) or bytes([byte]) in separators]
    if len(brackets) not in (0, 2) or len(value_brackets) not in (0, 2) or len(item_brackets) not in (0, 2) or own:
        raise ValueError("brackets and a name's further bytes are punctuation, no separator")
    if escapes not in (0, 1) or (item_brackets and item_brackets[:1] == value_brackets[:1]):
        raise ValueError("escapes is 0 or 1; item brackets are no value brackets")
    words_before = _names(not_after, MAX_MARKS, "before a step's name")
    name = re.compile(rf"[A-Za-z_][A-Za-z0-9_{re.escape(name_bytes.decode('ascii'))}]*")
    if not all(name.fullmatch(word) for word in words_before):
        raise ValueError("a word before a step's name is a name")
    _renamed(renamed)
    return (brackets, name_bytes, renamed, value_brackets, _names(marks, MAX_MARKS, "mark a record"),
            *_outer_options(outer, outer_names, seconds, words, brackets, value_brackets + item_brackets),
            _names(every_value, MAX_MARKS, "keep every value of"), bool(escapes),
            item_brackets.decode("ascii"), words_before, lead.decode("ascii"), lead_name.decode("ascii"),
            lead_close.decode("ascii"), step_count.decode("ascii"), counted_names)


def _renamed(renamed: tuple) -> None:
    """Names renamed, checked: ((printed, name, unit), ...) of bytes (the pairs grammar's options, the JSON grammar's
    fourth item)."""
    if type(renamed) is not tuple or len(renamed) > MAX_RENAMED or not all(
            type(entry) is tuple and len(entry) == 3 and all(type(name) is bytes for name in entry)
            for entry in renamed):
        raise TypeError(f"renamed names are at most {MAX_RENAMED} (printed, name, unit) of bytes")
    if any(not printed or len(name) > MAX_NAME for printed, name, _ in renamed):
        raise ValueError("a renamed name is a name, its new name at most MAX_NAME bytes")


def _outer_options(outer: object, outer_names: object, seconds: object, words: object, brackets: bytes,
                   item_brackets: bytes) -> tuple[str, tuple[str, ...], dict[str, str],
                                                                   dict[str, float]]:
    """The pairs grammar's further options checked (module docstring): all but every_value."""
    if not (type(outer) is bytes and type(outer_names) is tuple and all(type(name) is bytes for name in outer_names)
            and type(seconds) is tuple and all(type(entry) is tuple and len(entry) == 2
                                               and all(type(name) is bytes for name in entry) for entry in seconds)
            and type(words) is tuple and all(type(entry) is tuple and len(entry) == 2 and type(entry[0]) is bytes
                                             and type(entry[1]) is float for entry in words)):
        raise TypeError("outer is bytes, outer_names a tuple of bytes, seconds ((printed, name), ...) of bytes, "
                        "words ((word, float), ...)")
    if (outer and (not brackets or not re.match(rb"[A-Za-z_]", outer))) or len(outer_names) != (4 if outer else 0):
        raise ValueError("an outer count is a name printed with the step's brackets, with four names (b'': not kept)")
    if len(seconds) > MAX_RENAMED or len(words) > MAX_RENAMED:
        raise ValueError(f"at most {MAX_RENAMED} seconds and {MAX_RENAMED} words")
    if (seconds and not item_brackets) or any(
            not printed or not name or len(name) > MAX_NAME or normalised_name(name.decode("ascii")) != name.decode()
            for printed, name in seconds):
        raise ValueError("a second item needs value or item brackets; its name is a normalised name")
    if any(not word for word, _ in words):
        raise ValueError("a word is a word")
    return (outer.decode("ascii"), tuple(name.decode("ascii") for name in outer_names),
            {printed.decode("ascii"): name.decode("ascii") for printed, name in seconds},
            {word.decode("ascii"): number for word, number in words})


@lru_cache(maxsize=16)
def _grammar(table: tuple) -> _Grammar:
    """The table's record, pair and line-tag patterns (the grammar the module docstring states)."""
    if len(table) not in (7, 8, 9):
        raise ValueError("a field table has seven to nine items")
    opener, closer, pair_separator, name_separator, step_name, (tag_open, tag_close), fields = table[:7]
    required = table[7] if len(table) >= 8 else -1
    ninth = table[8] if len(table) == 9 else None
    segments = ninth if type(ninth) is tuple and len(ninth) == 7 else None
    json = ninth if type(ninth) is tuple and len(ninth) in (3, 4) else None
    options = ninth if ninth is not None and segments is None and json is None else None
    if ninth is not None and (opener or closer):
        raise ValueError("a grammar of a ninth item (segments, the pairs grammar's options, JSON) has no opener and "
                         "no closer")
    if json is not None:
        return _json_grammar(table, json)
    pairs = opener == b"" and closer == b"" and segments is None
    spaced = pairs and type(name_separator) is bytes and len(name_separator) == 2 and name_separator[1:] == b" "
    name_separator = name_separator[:1] if spaced else name_separator  # b": ": spaces may follow the colon
    if segments is not None and (opener or closer or not (type(segments) is tuple and len(segments) == 7
                                                          and all(type(part) is bytes for part in segments))):
        raise ValueError("the segments grammar is (dropped, counted, step_segment, lead, lead_name, step_close, "
                         "percent), without opener and closer")
    if segments is not None and (segments[5] and not _punctuation(segments[5]) or len(segments[6]) > MAX_PERCENT):
        raise ValueError("a step close is one ASCII byte, neither a space nor a name byte; a percent suffix at most "
                         f"{MAX_PERCENT} bytes")
    if segments is not None and required != -1:
        raise ValueError("the segments grammar requires no field")
    separators = [pair_separator[i:i + 1] for i in range(len(pair_separator))] if pairs else [pair_separator]
    for punctuation in (*((name_separator,) if pairs or segments else (opener, closer, name_separator)), *separators):
        if not _punctuation(punctuation):
            raise ValueError("a field table's punctuation is one ASCII byte each, neither a space nor a name byte")
    if (pairs or segments) and name_separator in separators:  # the pairs grammar's none: values end at spaces
        raise ValueError("the pairs grammar needs value separators other than its name separator")
    step_names = tuple(step_name) if pairs else (step_name,)
    if (pairs or segments) and (not step_names or len(step_names) > MAX_STEP_NAMES or not all(
            type(name) is bytes and re.match(rb"[A-Za-z_]", name) for name in step_names)):
        raise ValueError("a field table's step names are names")
    column_of, columns, column_names = _columns(fields, required)
    n = re.escape(name_separator.decode("ascii"))
    tagged = re.compile(re.escape(tag_open) + rb"[A-Za-z0-9_]+" + re.escape(tag_close))
    field_index = {name.decode("ascii"): index for index, (name, *_) in enumerate(fields)}
    if pairs:
        (brackets, name_bytes, renamed, value_brackets, marks, outer, outer_names, seconds, words, every_value, escapes,
         item_brackets, not_after, lead, lead_name, lead_close, step_count, count_steps) = (
            _options(options, separators + [name_separator]) if options
            else (b"", b"", (), b"", (), "", (), {}, {}, (), False, "", (), "", "", "", "", ()))
        extra = re.escape(name_bytes.decode("ascii"))
        breaks = re.escape(pair_separator.decode("ascii"))
        thousands = r"|,(?=[0-9]{3}(?![0-9]))" if b"," in separators else ""
        value, separator = rf"(?:[^\s{breaks}]{thousands})+", rf"{n}{' *' if spaced else ''}"
        if value_brackets:  # a whole list first (spaces and separators in it); spaced, a name before one needs no colon
            listed = "{0}[^{1}]*{1}".format(*(re.escape(chr(byte)) for byte in value_brackets))
            value, separator = rf"{listed}|{value}", rf"(?:{separator}|\s*(?={listed}))" if spaced else separator
        pair = re.compile(rf"(?<![\w.{extra}])([A-Za-z_][A-Za-z0-9_{extra}]*){separator}({value})")
        if any(name in field_index for name in seconds.values()):
            raise ValueError("a second item's name is no field's")
        names = tuple(name.decode("ascii") for name in step_names)
        open_, shut = (re.escape(chr(byte)) for byte in brackets) if brackets else ("", "")
        fraction = rf"\s*{open_}\s*(\d+)/\s*(\d+){shut}"
        # A step printed after a count: the groups after the plain step's two (count, step, total).
        counted = (rf"|(?<![A-Za-z0-9_])(?:{'|'.join(map(re.escape, count_steps))})\s*{open_}\s*(\d+){shut}{fraction}"
                   if count_steps else "")
        bracketed = (re.compile(rf"(?<![A-Za-z0-9_])(?:{'|'.join(map(re.escape, names))}){fraction}{counted}")
                     if brackets else None)
        return _Grammar(None, pair, tagged, field_index, True, names,
                        column_of, columns, column_names, required,
                        step_brackets=bracketed,
                        renamed={old.decode("ascii"): (new.decode("ascii"), unit.decode("ascii"))
                                 for old, new, unit in renamed} if options else None,
                        value_brackets=value_brackets.decode("ascii"), marks=marks,
                        outer=re.compile(rf"(?<![A-Za-z0-9_]){re.escape(outer)}{fraction}") if outer else None,
                        outer_names=outer_names, seconds=seconds, words=words, every_value=every_value, escapes=escapes,
                        item_brackets=item_brackets,
                        not_after=re.compile(rf"(?<![\w.{extra}])(?:{'|'.join(map(re.escape, not_after))}) \Z")
                        if not_after else None,
                        lead=re.compile(rf"(?<![A-Za-z0-9_]){re.escape(lead)}\s+(\d+)"
                                        + (rf"{re.escape(lead_close)}\s*(\d+)\s*/\s*(\d+)" if lead_close else ""))
                        if lead else None,
                        lead_name=lead_name, step_count=step_count)
    o, c, p, step = (re.escape(part.decode("ascii")) for part in (opener, closer, pair_separator, step_name))
    if segments is not None:
        lead = re.escape(segments[3].decode("ascii"))
        lead = rf"(?<![A-Za-z0-9_]){lead}\s+(?P<lead>\d+),\s*{step}" if lead else rf"(?<![A-Za-z0-9_]){step}(?P<lead>)"
        close = re.escape(segments[5].decode("ascii"))
        record = re.compile(rf"{lead}\s+(?P<step>\d+)\s*{close}(?P<total>)" if close
                            else rf"{lead}\s+(?P<step>\d+)/\s*(?P<total>\d+)\s*{p}")
        return _Grammar(record, record, tagged, field_index, False, (step_name.decode("ascii"),), column_of,
                        columns, column_names, required,
                        tuple(part.decode("ascii") for part in segments), pair_separator.decode("ascii"),
                        name_separator.decode("ascii"))
    record = re.compile(rf"{o}\s*{step}{n}\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]\s*{p}(?P<body>[^{o}{c}]*){c}")
    # A comma before exactly three digits cannot start a pair (a name starts with a letter): a thousands separator.
    thousands = r"|,(?=[0-9]{3}(?![0-9]))" if p == "," else ""
    pair = re.compile(rf"([A-Za-z_][A-Za-z0-9_]*)\s*{n}\s*((?:[^{p}{c}]{thousands})+)")
    return _Grammar(record, pair, tagged, field_index, False, (step_name.decode("ascii"),), column_of,
                    columns, column_names, required)
