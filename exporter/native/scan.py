"""Kernel: a block's newlines and the lines holding any anchor. This twin defines scan.c.

``Scanner(anchors, line_starts).scan(data)`` returns ``(newlines, starts, prefixed)``: the
number of newline bytes in ``data``, the start offsets of the lines holding any anchor
(ascending, each once; a line ends after its newline, the last one at the end of the data),
and those of them that begin with one of ``line_starts``. The matches come from Aho-Corasick
(``ahocorasick_rs``, where its wheel is installed) or a regular expression: both give every
anchor occurrence that matters, the leftmost first.

The kernel finds candidates by a three-byte fingerprint of each anchor; which three bytes,
and how common each byte is in log text, is decided here (``fingerprint_offset``,
``COMMONNESS``) and handed to it as numbers. They change its speed, never its results.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable

try:
    from ahocorasick_rs import BytesAhoCorasick, MatchKind
except ImportError:  # pragma: no cover - a platform without the wheel; tests force the regex
    BytesAhoCorasick = None  # type: ignore[assignment,misc]


def _commonness(byte: int) -> int:
    """How common a byte is in log text, roughly (1-255)."""
    char = chr(byte)
    if "a" <= char <= "z":
        return 50 if char in "etaoinsrlhcdmup" else 25
    if "0" <= char <= "9":  # times, ids, addresses and counts: few log lines lack them
        return 60
    if char == " ":
        return 50
    if char in ".:/_,()-" and byte:
        return 20
    if char in "[]":
        return 12
    if "A" <= char <= "Z":
        return 10 if char in "EINOTRSAD" else 5
    if char in "=\"'{}<>*+%#\t" and byte:
        return 5
    return 2


COMMONNESS = bytes(_commonness(byte) for byte in range(256))
FINGERPRINT = 3


def fingerprint_offset(anchor: bytes) -> int:
    """Where the anchor's least common three bytes start, by COMMONNESS.

    A space at either end of a fingerprint, beside a letter, makes it the start or end of a
    word, among the commonest pairs of text: " by" and " of" start words in every sentence,
    however rare "b", "y" and "f" are alone. A space in its middle is where two given words
    meet, and counts as no more than its bytes: "f m" of "out of memory" is in few lines of a
    device log, "ory" of "memory" in every other one.
    """
    def score(offset: int) -> int:
        first, middle, last = anchor[offset:offset + FINGERPRINT]
        product = COMMONNESS[first] * COMMONNESS[middle] * COMMONNESS[last]
        if middle == 0x20 and _is_letter(first) and _is_letter(last):
            return product
        return product * 4 ** (_word_boundary(first, middle) + _word_boundary(middle, last))

    return min(range(len(anchor) - FINGERPRINT + 1), key=score)


def _is_letter(byte: int) -> bool:
    return chr(byte).isalpha()


def _word_boundary(left: int, right: int) -> bool:
    return (left == 0x20 and _is_letter(right)) or (right == 0x20 and _is_letter(left))


def has_aho_corasick() -> bool:
    return BytesAhoCorasick is not None


class Scanner:
    """Counts a block's lines and finds those holding any anchor."""

    def __init__(self, anchors: tuple[bytes, ...], line_starts: tuple[bytes, ...] = (), *,
                 matcher: str = "regex") -> None:
        self.anchors, self.line_starts = anchors, line_starts
        self._offsets = _matcher(anchors, matcher)

    def scan(self, data: bytes) -> tuple[int, list[int], list[int]]:
        starts: list[int] = []
        line_end = 0  # end of the last line reported: later matches on it add nothing
        for offset in self._offsets(data):
            if offset >= line_end:
                starts.append(data.rfind(b"\n", 0, offset) + 1)
                line_end = data.find(b"\n", offset) + 1 or len(data)
        prefixed = [start for start in starts if data.startswith(self.line_starts, start)] if self.line_starts else []
        return data.count(b"\n"), starts, prefixed

    def scan_segments(self, data: bytes) -> tuple[int, list[int], list[int]]:
        """As scan, a carriage return ending a line too (a progress bar's redraws); newlines counts ``data``'s."""
        if any(b"\r" in text or b"\n" in text for text in (*self.anchors, *self.line_starts)):
            raise ValueError("scan_segments: an anchor or line start holds a line break")
        _, starts, prefixed = self.scan(data.replace(b"\r", b"\n"))
        return data.count(b"\n"), starts, prefixed


def count_starts(data: bytes, prefix: bytes, literal: bytes) -> tuple[int, int, int]:
    """How many lines of ``data`` begin with ``prefix``, how many times ``literal`` occurs (as bytes.count), and how
    many newlines it holds (one walk over the lines counts all three)."""
    if not prefix or not literal:
        raise ValueError("prefix and literal must not be empty")
    return data.startswith(prefix) + data.count(b"\n" + prefix), data.count(literal), data.count(b"\n")


def shape_in_lines(data: bytes, starts: array[int] | list[int], shape: bytes, width: int) -> list[int]:
    """The indexes of ``starts`` (offsets of ``data``: an array of int64 or a list of ints) whose line's first
    ``width`` bytes (up to its newline) hold ``shape`` (no newline in it), a ``#`` of it after its first byte any ASCII
    digit: the lines whose prefix may hold a time (analyze's ``:##:``), found without a slice of each."""
    if not shape or shape[0] == ord("#") or b"\n" in shape or width < 0:
        raise ValueError("shape_in_lines: a shape beginning with a byte that is no '#', holding no newline; "
                         "a width not negative")
    pattern = re.compile(b"".join(b"[0-9]" if byte == ord("#") else re.escape(bytes((byte,))) for byte in shape))
    found = []
    for index, start in enumerate(starts):
        if not 0 <= start <= len(data):
            raise IndexError("shape_in_lines: a start outside data")
        end = min(start + width, len(data))
        newline = data.find(b"\n", start, end)
        if pattern.search(data, start, end if newline < 0 else newline):
            found.append(index)
    return found


def first_bytes(data: bytes, offsets: list[int]) -> bytes:
    """The distinct bytes of ``data`` at ``offsets``, in ascending order (IndexError for one outside ``data``)."""
    if any(not 0 <= at < len(data) for at in offsets):
        raise IndexError("first_bytes: an offset outside data")
    return bytes(sorted({data[at] for at in offsets}))


def shift_offsets(offsets: array[int], delta: int) -> None:
    """Add ``delta`` to each offset of ``offsets`` (an array('q')), in place; OverflowError, nothing changed, when one
    would leave 64 bits."""
    if not isinstance(offsets, array) or offsets.typecode != "q":
        raise TypeError("shift_offsets: offsets is an array('q')")
    offsets[:] = array("q", [offset + delta for offset in offsets])


# A value of a segment record: a run of these bytes, one to MAX_VALUE_BYTES long, read by float().
VALUE_BYTES = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.+-")
MAX_VALUE_BYTES = 64
MAX_FRACTION_DIGITS = 18
_BLANK = frozenset(b" \t\x0b\x0c")  # with \r and \n, what bytes.strip() strips
_DIGITS = frozenset(b"0123456789")

Records = tuple[int, list[int], list[int], list[int], list[int], list[int], list[list[float]]]


def segment_records(data: bytes, pieces: tuple[bytes, ...], close: bytes, digits: int = 0) -> Records:
    """A block's newlines, its lines ending in ``\\r``, and the records on carriage-return segments, each with
    the fraction the non-blank segment before it ends with.

    A record ends its line (before a ``\\n``, past bytes of ``_BLANK``): ``pieces[0]``, a value, ``pieces[1]``, ...,
    a value, ``pieces[-1]``, where a value is the longest run of VALUE_BYTES there (1 to MAX_VALUE_BYTES) and
    ``float()`` takes it. After a ``\\r`` (a whole segment), past blank segments before it (bytes of ``_BLANK``
    only, or none), a non-blank segment of the same line holds ``D/T`` + ``close`` (1 to MAX_FRACTION_DIGITS digits
    each, ``D`` not after a digit or a byte above 0x7f) after which no ``/`` follows a digit or such a byte. Not
    after a ``\\r``, the bytes of its line before it hold no ``\\r``, ``/`` or ``{`` (none, or a logger's prefix): no
    bar, its step and total -1. The values whose bits ``digits`` has set (value 0 its lowest) are digits only (1 to
    MAX_FRACTION_DIGITS). Returns
    ``(newlines, continued, starts, lines, steps, totals, columns)``: the newline bytes of ``data``, where each
    line ending in ``\\r`` starts, where each record starts and where its line starts, its ``D`` and ``T``, and a
    column per value, in the order of the data: of ints where ``digits`` has the value's bit (``int(float(text))``,
    read once here rather than converted where a step or total is used), else of floats.
    """
    if len(pieces) < 2 or not pieces[0] or not close:
        raise ValueError("two pieces at least, the first not empty; the close (the lead) not empty")
    if not 0 <= digits < 1 << 64:
        raise OverflowError("digits is a mask of 64 bits")
    starts: list[int] = []
    lines: list[int] = []
    steps: list[int] = []
    totals: list[int] = []
    columns: list[list[float]] = [[] for _ in pieces[1:]]
    integers = [bool(digits >> index & 1) for index in range(len(columns))]
    at = data.find(pieces[0])
    while at >= 0:
        found = _record_at(data, at, pieces, close, digits)
        if found is not None:
            starts.append(at)
            lines.append(data.rfind(b"\n", 0, at) + 1)
            steps.append(found[0])
            totals.append(found[1])
            for column, value, integer in zip(columns, found[2], integers, strict=True):
                column.append(int(value) if integer else value)
        at = data.find(pieces[0], at + 1)
    return data.count(b"\n"), _continued_lines(data), starts, lines, steps, totals, columns


def _continued_lines(data: bytes) -> list[int]:
    """Where the lines ending in ``\\r`` start."""
    continued, line = [], 0
    for end in _found(data, 0x0A):
        if end > line and data[end - 1] == 0x0D:
            continued.append(line)
        line = end + 1
    return continued


def bar_steps(leads: array[int], counts: array[int], totals: array[int], limit: int) -> list[int | None] | None:
    """Each bar's step, its lead's count times its total plus its count (bar_records' ``L * T + D``), None where its
    count is 0 (an epoch's start, no record); None (no list) where a step is over ``limit``."""
    steps: list[int | None] = [lead * total + count if count else None
                               for lead, count, total in zip(leads, counts, totals, strict=True)]
    return None if any(step is not None and step > limit for step in steps) else steps


def bars_apart(starts: array[int], ends: array[int], first: int, final: int) -> list[int]:
    """The bars ``first + 1`` to ``final - 1`` whose segment does not start right after the one before ends (after its
    ``\\r``): another segment between them, or a line's end."""
    if not 0 <= first <= final <= min(len(starts), len(ends)):
        raise IndexError("bars_apart: first and final are bars of starts and ends")
    return [index for index in range(first + 1, final) if starts[index] != ends[index - 1] + 1]


def sorted_difference(values: list[int], removed: array[int] | list[int]) -> list[int]:
    """The items of ``values`` not in ``removed`` (ascending: an array('q') or a list of ints), in order."""
    gone = set(removed)
    return [value for value in values if value not in gone]


def bar_taking(steps: list[int | None], lines: array[int], first: int, last: int, triggers: list[tuple[int, int]],
               held: int | None, taken: int | None) -> tuple[list[int], list[int], int | None, int | None]:
    """Which of the bars ``first`` to ``last - 1`` a segment reader takes, and where. A bar of the step ``taken``
    last is none; one of another step than the bar ``held`` takes it at its line (``lines[bar]``), then is held
    itself; a step None is skipped. Each trigger ``(bar, line)`` (ascending) takes the held bar, before the bar at
    that index, at ``line``. ``held``: the step of the bar held before ``first`` (None: none). Returns the bars taken
    and the line of each, the line the bar held before was taken at (None: not), the bar held at the end (-1: the
    one held before, None: none)."""
    if not 0 <= first <= last <= min(len(steps), len(lines)):
        raise IndexError("bar_taking: first and last are bars of steps and lines")
    if any(line < 0 for _, line in triggers):
        raise ValueError("bar_taking: a trigger's line is an offset, not negative")
    taken_bars: list[int] = []
    taken_at: list[int] = []
    before_taken_at: int | None = None
    held_index = -1

    def take(at: int) -> None:
        nonlocal before_taken_at, taken, held
        if held_index < 0:
            before_taken_at = at
        else:
            taken_bars.append(held_index)
            taken_at.append(at)
        taken, held = held, None

    index = first
    for bar, line in [*triggers, (last, -1)]:
        bar = min(bar, last)
        for at in range(index, bar):
            step = steps[at]
            if step is None or step == taken:
                continue
            if held is not None and held != step:
                take(lines[at])
            held, held_index = step, at
        index = max(index, bar)
        if line >= 0 and held is not None:
            take(line)
    return taken_bars, taken_at, before_taken_at, None if held is None else held_index


BarRecords = tuple[int, list[int], "array[int]", "array[int]", "array[int]", "array[int]", "array[int]",
                   "array[int]", "list[array[float]]"]


def bar_records(data: bytes, lead: bytes, pieces: tuple[bytes, ...], digits: int = 0) -> BarRecords:
    """A block's newlines, its lines ending in ``\\r``, and the tqdm bars drawn with their values, each a whole
    carriage-return segment (between ``\\r`` or ``\\n`` and the next): ``lead``, its count ``L``, ``:``, blanks,
    digits, ``%|``, the bar (no ``|``), ``|``, blanks, ``D/T [`` (1 to MAX_FRACTION_DIGITS digits each, ``L`` too),
    then bytes holding no ``]`` or ``=``, then a record of ``pieces`` as segment_records reads one (its values read
    by float(), or, one beginning with ``nan`` or ``inf`` after a sign, up to its first ``.``: a number padded to a
    width, ``nan.0``), ending the segment past bytes of ``_BLANK``. Returns ``(newlines, continued, starts, ends,
    lines, leads, steps, totals, columns)``: as segment_records, each bar's segment's start and end (its ``\\r`` or
    ``\\n``), its line's start, ``L``, ``D`` and ``T`` (each an ``array('q')``), and a column of floats per value (an
    ``array('d')``), in the order of the data.
    """
    if not lead or len(pieces) < 2 or not pieces[0]:
        raise ValueError("two pieces at least, the first not empty; the close (the lead) not empty")
    if not 0 <= digits < 1 << 64:
        raise OverflowError("digits is a mask of 64 bits")
    found: tuple[list[int], ...] = ([], [], [], [], [], [])
    columns: list[list[float]] = [[] for _ in pieces[1:]]
    at = data.find(lead)
    while at >= 0:
        bar = _bar_at(data, at, lead, pieces, digits) if at == 0 or data[at - 1] in b"\r\n" else None
        if bar is not None:
            *numbers, values = bar
            for column, number in zip(found, (at, *numbers), strict=True):
                column.append(number)
            for values_column, value in zip(columns, values, strict=True):
                values_column.append(value)
        at = data.find(lead, at + 1)
    starts, ends, lines, leads, steps, totals = (array("q", numbers) for numbers in found)
    return (data.count(b"\n"), _continued_lines(data), starts, ends, lines, leads, steps, totals,
            [array("d", column) for column in columns])


def _bar_at(data: bytes, at: int, lead: bytes, pieces: tuple[bytes, ...],
            digits: int) -> tuple[int, int, int, int, int, list[float]] | None:
    """``(end, line, L, D, T, values)`` of the bar whose segment starts at ``at`` with ``lead`` (see bar_records)."""
    end = min((cut for cut in (data.find(b"\r", at), data.find(b"\n", at)) if cut >= 0), default=-1)
    if end < 0:
        return None
    position, count = _digits_at(data, at + len(lead), end)
    if count is None or not data.startswith(b":", position):
        return None
    position = _past_blanks(data, position + 1)
    percent, _ = _digits_at(data, position, end)
    bar = data.find(b"|", percent + 2, end)
    if percent == position or not data.startswith(b"%|", percent) or bar < 0:
        return None
    position, step = _digits_at(data, _past_blanks(data, bar + 1), end)
    if step is None or not data.startswith(b"/", position):
        return None
    position, total = _digits_at(data, position + 1, end)
    if total is None or not data.startswith(b" [", position):
        return None
    record = data.find(pieces[0], position + 2, end)
    if record < 0 or b"]" in data[position:record] or b"=" in data[position:record]:
        return None
    values = _values_at(data, record, pieces, digits, padded=True)
    if values is None or _past_blanks(data, values[0]) != end:
        return None
    return end, data.rfind(b"\n", 0, at) + 1, count, step, total, values[1]


def _digits_at(data: bytes, position: int, end: int) -> tuple[int, int | None]:
    """Past the ASCII digits at ``position`` (before ``end``), and their number when they are 1 to
    MAX_FRACTION_DIGITS."""
    after = position
    while after < end and data[after] in _DIGITS:
        after += 1
    return after, int(data[position:after]) if 1 <= after - position <= MAX_FRACTION_DIGITS else None


def _past_blanks(data: bytes, position: int) -> int:
    while position < len(data) and data[position] in _BLANK:
        position += 1
    return position


def _found(data: bytes, byte: int) -> list[int]:
    """Where ``byte`` occurs in ``data``."""
    found, at = [], data.find(byte)
    while at >= 0:
        found.append(at)
        at = data.find(byte, at + 1)
    return found


def _record_at(data: bytes, at: int, pieces: tuple[bytes, ...], close: bytes,
               digits: int) -> tuple[int, int, list[float]] | None:
    found = _values_at(data, at, pieces, digits)
    if found is None:
        return None
    position, values = found
    position = _past_blanks(data, position)  # a terminal's padding
    if position >= len(data) or data[position] != 0x0A:
        return None
    if at == 0 or data[at - 1] != 0x0D:
        line = data.rfind(b"\n", 0, at) + 1
        return None if any(byte in data[line:at] for byte in b"\r/{") else (-1, -1, values)
    cut = at - 1  # the \r before the segment looked at
    while True:
        begin = max(data.rfind(b"\r", 0, cut), data.rfind(b"\n", 0, cut)) + 1
        if any(byte not in _BLANK for byte in data[begin:cut]):
            break
        if begin == 0 or data[begin - 1] == 0x0A:
            return None  # no non-blank segment before it on its line
        cut = begin - 1
    fraction = _last_fraction(data, begin, cut, close)
    return None if fraction is None else (*fraction, values)


def _values_at(data: bytes, at: int, pieces: tuple[bytes, ...], digits: int,
               padded: bool = False) -> tuple[int, list[float]] | None:
    """Where the record of ``pieces`` at ``at`` ends and its values (see segment_records; ``padded``: bar_records')."""
    values: list[float] = []
    position = at + len(pieces[0])
    for index, piece in enumerate(pieces[1:]):
        end = position
        while end < len(data) and data[end] in VALUE_BYTES:
            end += 1
        if not 1 <= end - position <= MAX_VALUE_BYTES or not data.startswith(piece, end):
            return None
        if digits >> index & 1 and not (end - position <= MAX_FRACTION_DIGITS and data[position:end].isdigit()):
            return None
        text = data[position:end]
        if padded and text.lstrip(b"+-")[:3].lower() in (b"nan", b"inf"):
            text = text.split(b".", 1)[0]
        try:
            values.append(float(text))
        except ValueError:
            return None
        position = end + len(piece)
    return position, values


def _last_fraction(data: bytes, begin: int, end: int, close: bytes) -> tuple[int, int] | None:
    """``(D, T)`` of the last ``D/T`` + ``close`` in ``data[begin:end]`` (see segment_records); None without."""
    for at in range(end - 1, begin - 1, -1):
        if at + len(close) <= end and data.startswith(close, at):
            digits = at
            while digits > begin and data[digits - 1] in _DIGITS:
                digits -= 1
            slash = digits - 1
            if 1 <= at - digits <= MAX_FRACTION_DIGITS and slash > begin and data[slash] == 0x2F:
                first = slash
                while first > begin and data[first - 1] in _DIGITS:
                    first -= 1
                if 1 <= slash - first <= MAX_FRACTION_DIGITS and (first == begin or data[first - 1] < 0x80):
                    return int(data[first:slash]), int(data[digits:at])
        if data[at] == 0x2F and at > begin and (data[at - 1] in _DIGITS or data[at - 1] >= 0x80):
            return None
    return None


def _matcher(anchors: tuple[bytes, ...], matcher: str) -> Callable[[bytes], list[int]]:
    """Start offsets of anchor occurrences, ascending (enough of them to find every line)."""
    if matcher == "ahocorasick":
        if BytesAhoCorasick is None:
            raise RuntimeError("ahocorasick_rs is not installed")
        # Leftmost-first matching is what enables the crate's SIMD (Teddy) prefilter.
        automaton = BytesAhoCorasick(list(anchors), matchkind=MatchKind.LeftmostFirst)
        return lambda data: [start for _, start, _ in automaton.find_matches_as_indexes(data)]
    if matcher == "regex":
        pattern = re.compile(b"|".join(re.escape(anchor) for anchor in anchors))
        return lambda data: [match.start() for match in pattern.finditer(data)]
    raise ValueError(f"unknown matcher {matcher!r}")


MAX_PREFIXES = 64


def _tag_at(data: bytes, at: int, end: int, tag_open: bytes, tag_close: bytes) -> int:
    """The length of the tag ``open name close`` (and one space after it) at ``at``; 0 when none is there."""
    if not data.startswith(tag_open, at, end):
        return 0
    name = at + len(tag_open)
    after = name
    while after < end and data[after] in _TAG_NAME:
        after += 1
    if after == name or not data.startswith(tag_close, after, end):
        return 0
    after += len(tag_close)
    return after + (after < end and data[after] == 0x20) - at


_TAG_NAME = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def group_lines(data: bytes, literal: bytes, tag_open: bytes, tag_close: bytes,
                loose_starts: bytes) -> tuple[list[bytes], list[int], list[array[int]], int, int] | None:
    """The newline-terminated lines of ``data`` grouped by their prefix (tags ``open name close``, each with one
    space after it, stacked; ``b""``: none), groups in order of first appearance: ``(prefixes, lines, starts, loose,
    tagged)``, each group's line count and where the text after the prefix starts on its lines holding
    ``literal`` there (an array of int64; none when it is empty: the counts only); ``loose``: lines without a prefix
    beginning with a byte of ``loose_starts``; ``tagged``: lines holding a tag after their prefix. None: more than
    MAX_PREFIXES prefixes."""
    if not tag_open or not tag_close:
        raise ValueError("tags must not be empty")
    groups: dict[bytes, int] = {}
    lines: list[int] = []
    starts: list[array[int]] = []
    loose = tagged = 0
    line = 0
    while (newline := data.find(b"\n", line)) >= 0:
        width = 0
        while tag := _tag_at(data, line + width, newline, tag_open, tag_close):
            width += tag
        prefix = data[line:line + width]
        group = groups.get(prefix)
        if group is None:
            if len(groups) == MAX_PREFIXES:
                return None
            group = groups[prefix] = len(groups)
            lines.append(0)
            starts.append(array("q"))
        lines[group] += 1
        body = line + width
        if not width and body < newline and data[body] in loose_starts:
            loose += 1
        bracket = data.find(tag_open[:1], body, newline)
        while bracket >= 0:
            if _tag_at(data, bracket, newline, tag_open, tag_close):
                tagged += 1
                break
            bracket = data.find(tag_open[:1], bracket + 1, newline)
        if literal and data.find(literal, body, newline) >= 0:
            starts[group].append(body)
        line = newline + 1
    return list(groups), lines, starts, loose, tagged


# A rank prefix at a line's start: ``[`` role letters, digits ``]:`` and one optional space, stacked
# (torchrun's ``[default1]:[rank5]: ``).
LINE_PREFIX = rb"(?:\[[A-Za-z_]+\d+\]: ?)+"
_LINE_PREFIXES = re.compile(rb"\n(" + LINE_PREFIX + rb")")
_PREFIX_ROLE = re.compile(rb"\[([A-Za-z_]+)\d+\]")
# A line whose first non-blank segment comes after a carriage return and may name a rank (a prefix, ``srun
# --label``'s task number).
_RANK_AFTER_RETURN = re.compile(rb"\n\r(?:[ \t\x0b\x0c]*\r)*(?:\[| *\d{1,6}: )")


def line_prefixes(data: bytes, literals: tuple[bytes, ...]) -> tuple[dict[bytes, int] | None, bool]:
    """The rank prefixes the lines of ``data`` (whole lines) begin with and how many lines begin with each, in
    order of first appearance; None when one of ``literals`` or a found prefix's ``[role`` occurs anywhere else
    than in those prefixes (counted as bytes.count). And whether a line's first non-blank segment comes after a
    carriage return and begins with ``[`` or `` *\\d{1,6}: `` (a rank named there)."""
    if any(not literal or b"\n" in literal for literal in literals):
        raise ValueError("the literals are bytes, not empty, without a newline")
    text = b"\n" + data
    found: dict[bytes, int] = {}
    for prefixes in _LINE_PREFIXES.findall(text):
        found[prefixes] = found.get(prefixes, 0) + 1
    checked = dict.fromkeys(literals)
    for prefixes in found:
        checked.update(dict.fromkeys(b"[" + role for role in _PREFIX_ROLE.findall(prefixes)))
    elsewhere = any(text.count(literal) != sum(prefixes.count(literal) * lines for prefixes, lines in found.items())
                    for literal in checked)
    return None if elsewhere else found, _RANK_AFTER_RETURN.search(text) is not None
