"""The one door to compiled code: kernels over bytes, offsets, field tables and numbers.

Nothing here imports the rest of the package, reads a Python object's attributes or names
a framework: a grammar comes in as a field table of plain tuples, built in parse/. Each
kernel is C (``scan.c``, ``step_fields.c``, ``detectors.c``, built by ``pip install`` where a
C compiler is) beside a pure-Python twin that defines it (``scan.py``, ``step_fields.py``,
``detectors.py``; tests/test_native.py checks each pair bit for bit). The functions below
run the C kernel where it was built and the twin elsewhere; ``available()`` says which.

- ``scanner(anchors, line_starts=(), implementation=None).scan(data)``
  -> ``(newlines, starts, prefixed)``: a block's newline count, the start offsets of its
  lines holding any anchor, and those of them that begin with one of ``line_starts``.
- ``count_starts(data, prefix, literal)`` -> ``(lines, occurrences, newlines)``: how many lines begin
  with ``prefix``, how many times ``literal`` occurs, how many newlines (a block of one rank stream's lines).
- ``group_lines(data, literal, tag_open, tag_close, loose_starts)`` -> ``(prefixes, lines, starts,
  loose, tagged)``: a block's lines grouped by their prefix of tags, each group's line count and
  the offsets after the prefix of its lines holding ``literal`` (an interleaved console's streams).
- ``shift_offsets(offsets, delta)``: ``delta`` added to each of an ``array('q')`` of offsets, in place (the line
  starts of a rank stream's batch, read after their prefix).
- ``segment_records(data, pieces, close, digits=0)`` -> ``(newlines, continued, starts, lines, steps, totals,
  columns)``: the records on carriage-return segments made of ``pieces`` around values, each after a
  segment ending in a fraction ``D/T`` + ``close`` (a progress bar's count), or a whole line (step and total
  -1), and where their lines start; the values of the bits of ``digits`` digits only.
- ``bar_records(data, lead, pieces, digits=0)`` -> ``(newlines, continued, starts, ends, lines, leads, steps, totals,
  columns)``: tqdm bars drawn with a record of ``pieces`` as their postfix, each a whole carriage-return segment
  beginning with ``lead`` and a count (Lightning's ``Epoch 3: ... 7/10 [..., loss=2.1]``): where each segment starts
  and ends, where its line starts, the lead's count, the bar's fraction (arrays of int64) and the values (arrays of
  doubles).
- ``bar_steps(leads, counts, totals, limit)`` -> each bar's step (``L * T + D``), None where its count is 0; None
  where one is over ``limit``. ``bar_taking(steps, lines, first, last, triggers, held, taken)`` -> which of the bars
  a segment reader takes (the last bar of each step, at the next step's line or a trigger's) and where: the block
  path's redraws (parse/redraws.py) with no Python operation per bar; ``bars_apart(starts, ends, first, final)``
  -> the bars not starting right after the one before; ``sorted_difference(values, removed)`` -> the items of
  ``values`` not in the ascending ``removed``.
- ``line_prefixes(data, literals)`` -> ``(prefixes | None, rank_after_return)``: the rank prefixes the
  lines begin with and how many lines begin with each (None when a literal occurs elsewhere), and whether
  a line names a rank after a carriage return (a carriage-return console's block).
- ``ahead(data, passes)``: the passes (tuples: ``"scan"`` or ``"scan_segments"`` and a scanner, or the name of
  ``group_lines``, ``segment_records``, ``bar_records`` or ``line_prefixes`` and what it takes after the data)
  started over ``data`` on a thread of their own, which never takes the interpreter; ``.result(index)`` -> what that
  pass returns (waiting for it): a catch-up's next block scanned on the second core while the one before is parsed.
- ``steps_ahead(data, reader, literal, tag_open, tag_close, loose_starts)`` -> a StepsAhead or None: ``data``'s
  lines grouped as ``group_lines`` groups them (``.groups()``) and each group's run of step lines read by the
  reader's table from its first line, on a thread of their own; ``reader.read(data, starts, 0, limit, ahead)``
  then takes the run of the group whose lines are ``starts`` whole. None where the kernel is not built.
- ``step_reader(table)``: ``.read(data, starts, index, limit)`` -> how many lines of the run
  of step lines at ``starts[index]`` it read by the field table ``table``; ``.take()`` ->
  ``(steps, total, fields, named)`` of the runs read since the last take (the table's format
  and the result: step_fields.py); a series' values come as an ``array('d')``, not a float object each, and
  the detectors and ``write_rows`` read such an array's buffer.
- ``read_record(table, text)`` -> ``Record | None``: one line's record, from any text (the
  per-line parser's way: the compiled reader's reading of the line, the twin's of a line it declines).
- ``write_rows(fd, jobs)``: each job written to ``fd`` in order, a str or ``(columns, rows, lead)``: the first
  ``rows`` rows of ``columns`` (lists of ints, floats, None, or arrays of doubles) as CSV lines, each after
  ``lead`` and each number as repr() writes it (analyze's ``--csv``): every job read before any is written.
- ``check_series(config, spikes, plateau, steps, values)``
  -> ``(nonfinite, last_nonfinite_step, spiked, spike_steps, spikes, plateau)``: the
  per-step detectors over one series, their state as tuples in and out (detectors.py).
- ``check_step_times(config, slowdown, steps, values, spans, productive, checkpoint)``
  -> ``(slowdowns, last_slowdown_step, productive, checkpoint, slowdown)``: the slowdown
  detector over a series of step times, which also splits them into productive and
  checkpoint seconds (detectors.py).
"""

from __future__ import annotations

import functools
from array import array
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeAlias

from exporter.native import detectors as _detectors_twin
from exporter.native import scan as _scan_twin
from exporter.native import step_fields as _step_fields_twin

# Built by pip install where a C compiler is; where not, the twins run.
try:
    from exporter.native import _scan
except ImportError:  # pragma: no cover
    _scan = None  # type: ignore[assignment]
try:
    from exporter.native import _step_fields
except ImportError:  # pragma: no cover
    _step_fields = None  # type: ignore[assignment]
try:
    from exporter.native import _detectors
except ImportError:  # pragma: no cover
    _detectors = None  # type: ignore[assignment]

# Scanner implementations, fastest first: the C kernel, then its twin with Aho-Corasick
# (ahocorasick_rs, a wheel) or with a regular expression.
SCANNERS = ("native", "ahocorasick", "regex")


class Scanner(Protocol):
    def scan(self, data: bytes) -> tuple[int, list[int], list[int]]: ...

    def scan_segments(self, data: bytes) -> tuple[int, list[int], list[int]]: ...


def available() -> dict[str, bool]:
    """Which kernels run compiled here (False: their twin runs, same results, slower)."""
    return {"scan": _scan is not None, "step_fields": _step_fields is not None, "detectors": _detectors is not None}


def scan_simd() -> bool:
    """True when the scan kernel runs its AVX2 loop on this CPU."""
    return _scan is not None and bool(_scan.SIMD)


def best_scanner() -> str:
    """The fastest scanner implementation this installation has."""
    if _scan is not None:
        return "native"
    return "ahocorasick" if _scan_twin.has_aho_corasick() else "regex"


def scanner(anchors: Iterable[bytes], line_starts: Iterable[bytes] = (), implementation: str | None = None, *,
            simd: bool = True) -> Scanner:
    """A scanner for ``anchors`` (bytes, three at least each for the C kernel)."""
    anchors, line_starts = tuple(sorted(set(anchors))), tuple(line_starts)
    if not anchors or not all(anchors):
        raise ValueError("anchors must be non-empty byte strings")
    implementation = implementation or best_scanner()
    if implementation == "native":
        if _scan is None:
            raise RuntimeError("the scan kernel is not built here")
        if len(anchors) <= KERNEL_ANCHORS:
            return _scan_kernel(anchors, line_starts, simd)
        # Dealt by length, like cards: each kernel gets short and long anchors alike.
        by_length, parts = sorted(anchors, key=lambda anchor: (len(anchor), anchor)), -(-len(anchors) // KERNEL_ANCHORS)
        return _Scanners([_scan_kernel(tuple(by_length[part::parts]), line_starts, simd) for part in range(parts)])
    return _scan_twin.Scanner(anchors, line_starts, matcher=implementation)


def _scan_kernel(anchors: tuple[bytes, ...], line_starts: tuple[bytes, ...], simd: bool) -> Scanner:
    assert _scan is not None
    return _scan.Scanner(anchors, line_starts, offsets=tuple(map(_scan_twin.fingerprint_offset, anchors)),
                         commonness=_scan_twin.COMMONNESS, simd=simd)


# The scan kernel sorts its anchors into sixteen fingerprint buckets (scan.c). The more anchors
# share a bucket, the more positions its nibble sets admit and the more are verified; one pass
# over the 79 anchors of a MindFormers file costs 40 % fewer instructions than two passes over
# half of them each, and so does one over the 90 anchors of every format (docs/benchmarks.md).
KERNEL_ANCHORS = 128


class _Scanners:
    """Scan kernels over parts of the anchors, answering as one kernel over all of them."""

    __slots__ = ("_kernels",)

    def __init__(self, kernels: list[Scanner]) -> None:
        self._kernels = kernels

    def scan(self, data: bytes) -> tuple[int, list[int], list[int]]:
        return self._merged([kernel.scan(data) for kernel in self._kernels])

    def scan_segments(self, data: bytes) -> tuple[int, list[int], list[int]]:
        return self._merged([kernel.scan_segments(data) for kernel in self._kernels])

    @staticmethod
    def _merged(found: list[tuple[int, list[int], list[int]]]) -> tuple[int, list[int], list[int]]:
        newlines, starts, prefixed = found[0]
        for _, more_starts, more_prefixed in found[1:]:
            if more_starts:
                starts = sorted({*starts, *more_starts})
                prefixed = sorted({*prefixed, *more_prefixed})
        return newlines, starts, prefixed


# Where lines start, as StepReader.read takes them: a list, or group_lines' array of int64 (no int object a line).
Starts: TypeAlias = "list[int] | array[int]"


class StepReader(Protocol):
    def read(self, data: bytes, starts: Starts, index: int, limit: int, ahead: Any = None) -> int: ...

    def take(self) -> _step_fields_twin.Run: ...

    def __len__(self) -> int: ...


def steps_ahead(data: bytes, reader: StepReader, literal: bytes, tag_open: bytes, tag_close: bytes,
                loose_starts: bytes) -> Any:
    """The rank streams of ``data`` grouped, and their runs of step lines read, on a thread of their own (see the
    module's docstring); None where the kernel is not built or ``reader`` is not one of its own."""
    if _step_fields is None or not isinstance(reader, _step_fields.StepReader):
        return None
    return _step_fields.StepsAhead(data, reader, literal, tag_open, tag_close, loose_starts)


def step_reader(table: tuple) -> StepReader:
    """A reader of runs of step lines by the field table ``table`` (exporter/native/step_fields.py)."""
    if _step_fields is not None:
        return _step_fields.StepReader(table)
    return _step_fields_twin.StepReader(table)


def shape_in_lines(data: bytes, starts: array[int] | list[int], shape: bytes, width: int) -> list[int]:
    """The indexes of ``starts`` whose line's first ``width`` bytes hold ``shape`` (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.shape_in_lines(data, starts, shape, width)
    return _scan_twin.shape_in_lines(data, starts, shape, width)


def first_bytes(data: bytes, offsets: list[int]) -> bytes:
    """The distinct bytes of ``data`` at ``offsets`` (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.first_bytes(data, offsets)
    return _scan_twin.first_bytes(data, offsets)


def shift_offsets(offsets: array[int], delta: int) -> None:
    """Add ``delta`` to each of ``offsets`` (an array('q')), in place (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.shift_offsets(offsets, delta)
    return _scan_twin.shift_offsets(offsets, delta)


def count_starts(data: bytes, prefix: bytes, literal: bytes) -> tuple[int, int, int]:
    """How many lines of ``data`` begin with ``prefix``, and how many times ``literal`` occurs (as bytes.count)."""
    if _scan is not None:
        return _scan.count_starts(data, prefix, literal)
    return _scan_twin.count_starts(data, prefix, literal)


def group_lines(data: bytes, literal: bytes, tag_open: bytes, tag_close: bytes,
                loose_starts: bytes) -> tuple[list[bytes], list[int], list[array[int]], int, int] | None:
    """A block's lines grouped by their prefix of tags (an interleaved console's streams): exporter/native/scan.py."""
    if _scan is not None:
        return _scan.group_lines(data, literal, tag_open, tag_close, loose_starts)
    return _scan_twin.group_lines(data, literal, tag_open, tag_close, loose_starts)
def line_prefixes(data: bytes, literals: tuple[bytes, ...]) -> tuple[dict[bytes, int] | None, bool]:
    """The rank prefixes at the lines' starts and whether a line names a rank after a carriage return (scan.py)."""
    if _scan is not None:
        return _scan.line_prefixes(data, literals)
    return _scan_twin.line_prefixes(data, literals)


def segment_records(data: bytes, pieces: tuple[bytes, ...], close: bytes, digits: int = 0) -> _scan_twin.Records:
    """Records on carriage-return segments and the fraction of the segment before each (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.segment_records(data, pieces, close, digits)
    return _scan_twin.segment_records(data, pieces, close, digits)


def bar_records(data: bytes, lead: bytes, pieces: tuple[bytes, ...], digits: int = 0) -> _scan_twin.BarRecords:
    """tqdm bars drawn with their values, a carriage-return segment each (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.bar_records(data, lead, pieces, digits)
    return _scan_twin.bar_records(data, lead, pieces, digits)


def bar_steps(leads: array[int], counts: array[int], totals: array[int], limit: int) -> list[int | None] | None:
    """Each bar's step, None where its count is 0; None where one is over ``limit`` (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.bar_steps(leads, counts, totals, limit)
    return _scan_twin.bar_steps(leads, counts, totals, limit)


def bar_taking(steps: list[int | None], lines: array[int], first: int, last: int, triggers: list[tuple[int, int]],
               held: int | None, taken: int | None) -> tuple[list[int], list[int], int | None, int | None]:
    """Which bars a segment reader takes, and at which line (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.bar_taking(steps, lines, first, last, triggers, held, taken)
    return _scan_twin.bar_taking(steps, lines, first, last, triggers, held, taken)


def bars_apart(starts: array[int], ends: array[int], first: int, final: int) -> list[int]:
    """The bars ``first + 1`` to ``final - 1`` not starting right after the one before (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.bars_apart(starts, ends, first, final)
    return _scan_twin.bars_apart(starts, ends, first, final)


def sorted_difference(values: list[int], removed: array[int] | list[int]) -> list[int]:
    """The items of ``values`` not in ``removed`` (ascending), in order (exporter/native/scan.py)."""
    if _scan is not None:
        return _scan.sorted_difference(values, removed)
    return _scan_twin.sorted_difference(values, removed)


class Ahead(Protocol):
    def result(self, index: int) -> Any: ...


SCAN_PASSES = ("scan", "scan_segments")


def ahead(data: bytes, passes: tuple[tuple, ...]) -> Ahead:
    """The passes over ``data`` started on a thread of their own (see the module's docstring). Where the scan kernel
    is not built, or a scanner is not one of its own, each pass runs when its result is asked for."""
    if _scan is not None and all(call[0] not in SCAN_PASSES or isinstance(call[1], _scan.Scanner) for call in passes):
        return _scan.Ahead(data, passes)
    return _Later(data, passes)


class _Later:
    """Passes run when their results are asked for, as the functions above run them."""

    def __init__(self, data: bytes, passes: tuple[tuple, ...]) -> None:
        for call in passes:
            if call[0] not in SCAN_PASSES and call[0] not in _PASSES:
                raise ValueError(f"no pass {call!r}")
        self._data, self._passes = data, passes

    def result(self, index: int) -> Any:
        return run_pass(self._data, self._passes[index])


def run_pass(data: bytes, call: tuple) -> Any:
    """One pass (a tuple, as ``ahead`` takes them) over ``data``, run here."""
    name, *arguments = call
    if name in SCAN_PASSES:
        return getattr(arguments[0], name)(data)
    return _PASSES[name](data, *arguments)


_PASSES: dict[str, Callable[..., Any]] = {"group_lines": group_lines, "segment_records": segment_records,
                                          "line_prefixes": line_prefixes, "bar_records": bar_records}

Kind = _step_fields_twin.Kind
Record = _step_fields_twin.Record


def read_record(table: tuple, text: str) -> Record | None:
    """The first record of one line of any text; None when it holds none. The compiled reader reads the line
    when it takes it (a run of one: the same record, tests/test_native.py), the twin when it declines it (not
    ASCII, tagged, a number too long, pairs read ambiguously) or holds no record."""
    reader = _line_reader(table) if _step_fields is not None and text.isascii() else None
    if reader is not None and reader.read(text.encode("ascii") + b"\n", [0], 0, 1):
        steps, total, fields, named = reader.take()
        return Record(steps[0], total, [(latest, unit) for latest, unit, *_ in fields],
                      {name: value for name, value, *_ in named})
    return _step_fields_twin.read_record(table, text)


@functools.lru_cache(maxsize=16)
def _line_reader(table: tuple) -> StepReader:
    """A compiled reader kept for one line at a time (each read is taken at once: it holds nothing between calls)."""
    assert _step_fields is not None
    return _step_fields.StepReader(table)


def write_rows(fd: int, jobs: list) -> None:
    """Each job to ``fd`` in order: a str, or ``(columns, rows, lead)`` as CSV lines after ``lead``, each cell repr()
    of its number (step_fields.py)."""
    if _step_fields is not None:
        return _step_fields.write_rows(fd, jobs)
    return _step_fields_twin.write_rows(fd, jobs)


class RowsWriting(Protocol):
    def wait(self) -> None: ...


def rows_ahead(fd: int, jobs: list, after: RowsWriting | None = None) -> RowsWriting | None:
    """write_rows(fd, jobs) on a thread of its own once ``after`` (a writing of rows_ahead's) has written, its
    ``wait()`` ending it (the jobs read, and refused, here); None where the kernel is not built."""
    if _step_fields is None:
        return None
    assert after is None or isinstance(after, _step_fields.RowsAhead)
    return _step_fields.RowsAhead(fd, jobs, after)


def check_series(config: tuple, spikes: Any, plateau: Any, steps: Sequence[int | None],
                 values: Sequence[float]) -> _detectors_twin.SeriesCheck:
    """The detectors over one series (exporter/native/detectors.py)."""
    if _detectors is not None:
        try:
            return _detectors.check_series(config, spikes, plateau, steps, values)
        except OverflowError:  # a number beyond the C kernel's 64 bits: the twin's integers are unbounded
            pass
    return _detectors_twin.check_series(config, spikes, plateau, steps, values)


def check_step_times(config: tuple, slowdown: Any, steps: Sequence[int | None], values: Sequence[float],
                     spans: Sequence[float], productive: float, checkpoint: float) -> _detectors_twin.StepTimesCheck:
    """The slowdown detector over one series of step times (exporter/native/detectors.py)."""
    if _detectors is not None:
        try:
            return _detectors.check_step_times(config, slowdown, steps, values, spans, productive, checkpoint)
        except OverflowError:  # a number beyond the C kernel's 64 bits: the twin's integers are unbounded
            pass
    return _detectors_twin.check_step_times(config, slowdown, steps, values, spans, productive, checkpoint)


def covered(seconds: Sequence[float], spans: Sequence[float]) -> float:
    """The seconds a batch's step times stand for (exporter/native/detectors.py)."""
    if _detectors is not None:
        return _detectors.covered(seconds, spans)
    return _detectors_twin.covered(seconds, spans)


def steps_counted(step_before: int | None, steps: list[int | None] | range) -> int:
    """How many steps a batch's lines printed (exporter/native/detectors.py)."""
    if _detectors is not None:
        return _detectors.steps_counted(step_before, steps)
    return _detectors_twin.steps_counted(step_before, steps)


def consecutive(steps: list[int | None] | range) -> bool:
    """Each step one after the step before it, every one printed (exporter/native/detectors.py)."""
    if _detectors is not None:
        try:
            return _detectors.consecutive(steps)
        except OverflowError:  # a step beyond the C kernel's 64 bits: the twin's integers are unbounded
            pass
    return _detectors_twin.consecutive(steps)


def extent(values: Sequence[float]) -> tuple[float, float] | None:
    """The least and the greatest of a series' finite values (exporter/native/detectors.py)."""
    if _detectors is not None:
        return _detectors.extent(values)
    return _detectors_twin.extent(values)
