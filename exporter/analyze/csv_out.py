"""``--csv FILE``: a row per (run, node, rank, step), written as the lines are read.

Aux losses get a column each, but which ones a run prints is known only at its end: rows
go to a temporary file first, after the header of the plain columns. When no row has an aux
loss the temporary file is the CSV, renamed to its path (replacing a file there; a link, a
device or a pipe is written to instead); else the final file is written from it with the full header.
Both passes stream; memory holds one row, TEXT_CHUNK characters of rows not yet written and the batches (up to
ROWS_AHEAD) the kernel's threads are writing (native.rows_ahead) while the next are read.
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import operator
import os
import secrets
import shutil
import stat
import tempfile
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TextIO

from exporter import native
from exporter.parse.records import StepRows
from exporter.state import SeriesKey

COLUMNS = ("run", "node", "rank", "step", "time", "loss", "learning_rate", "grad_norm", "step_time_seconds",
           "throughput")
GAUGES = COLUMNS[5:]
TEXT_CHUNK = 1 << 16  # characters of single rows' texts written at once
# Batches of rows being written while the next are read: the writings' thread runs behind when the kernel's thread
# reading the next block takes the other core (one at a time, analyze --csv waited 0.25 s of 2.5 for it).
ROWS_AHEAD = 4
# What the scratch file is given: a text, or rows as native.write_rows takes them (columns, how many, lead).
Job = str | tuple[tuple[Sequence, ...], int, str]


class CsvError(Exception):
    """The CSV cannot be written (no such directory, a full disk): the message names the file and why."""


class StepCsv:
    """Collects step rows (``add``) into ``path`` (``close``); CsvError when the file cannot be written."""

    def __init__(self, path: str) -> None:
        self._path = path
        directory = os.path.dirname(os.path.abspath(path))
        # The scratch file, named when it may become the CSV: its header first, the rows after it.
        self._scratch_path: str | None = None
        try:
            if _replaceable(path):
                self._scratch_path, self._scratch = _named_scratch(directory, os.path.basename(path))
                csv.writer(self._scratch).writerow(COLUMNS)
                self._scratch.flush()
            else:  # written to at the end: the scratch file may be anywhere
                self._scratch = tempfile.TemporaryFile("w+", newline="")  # noqa: SIM115
        except OSError as error:
            raise self._error(error) from error
        self._rows_start = self._scratch.tell()
        self._rows = _RowWriter(self._scratch.fileno())  # every write to the scratch file, in order
        self._aux: dict[str, int] = {}  # aux loss -> its column among the aux columns
        self._pending: list | None = None  # the last row, completed by a second line of the same step
        self._pending_aux: dict[str, float] = {}
        self._keys: dict[tuple, str] = {}  # (run, node, rank) -> its cells as the csv module writes them
        self._multiline = False  # a key's cells hold a line break: the scratch file is read back as CSV
        self._widths: list[list[int]] = []  # [cells, rows] of consecutive rows: what each lacks of the header

    def add(self, key: SeriesKey, steps: Sequence[int | None], times: list[float | None], rows: StepRows) -> None:
        """A batch's step lines of one rank: each line's step, time and values."""
        try:
            self._add(key, steps, times, rows)
        except OSError as error:
            raise self._error(error) from error

    def close(self) -> None:
        """Write the final file: the header with every aux loss, then each row padded to it."""
        try:
            self._close()
        except OSError as error:
            raise self._error(error) from error

    def _error(self, error: OSError) -> CsvError:
        return CsvError(f"cannot write the CSV {self._path}: {error.strerror or error}")

    def _add(self, key: SeriesKey, steps: Sequence[int | None], times: list[float | None], rows: StepRows) -> None:
        count = len(steps)
        absent: list[float | None] = [None] * count
        columns: list[Sequence[float | None]] = [rows.gauges.get(name) or absent for name in GAUGES]
        if count < 2 or _repeats_a_step(steps) or self._completes_pending(key, steps[0]):
            # Lines that may make one row (DeepSpeed prints a step over two): row by row.
            self._add_rows(key, steps, times, columns, rows)
            return
        # The rows but the last written at once, the last pending: the next batch's first line may complete it.
        self._flush()
        for name in rows.aux:  # in the order the lines first print them, as row by row
            self._aux.setdefault(name, len(self._aux))
        aux: list[Sequence[float | None]] = [absent] * len(self._aux)
        for name, column in rows.aux.items():
            aux[self._aux[name]] = column
        last = count - 1
        self._rows.put(((steps, times, *columns, *aux), last, f"{self._key_cells(key)},"))
        self._count_rows(len(COLUMNS) + len(aux), last)
        self._pending = [*key, steps[last], times[last], *(column[last] for column in columns)]
        self._pending_aux = {name: value for name, column in rows.aux.items() if (value := column[last]) is not None}

    def _add_rows(self, key: SeriesKey, steps: Sequence[int | None], times: list[float | None],
                  columns: list[Sequence[float | None]], rows: StepRows) -> None:
        aux = [line_aux for _, line_aux in rows]
        for index, step in enumerate(steps):
            self._add_row(key, step, times[index], [column[index] for column in columns], aux[index])

    def _completes_pending(self, key: SeriesKey, step: int | None) -> bool:
        """True when a line of ``key`` at ``step`` belongs to the pending row (the same rank's same step)."""
        pending = self._pending
        return pending is not None and step is not None and pending[3] == step and tuple(pending[:3]) == key

    def _add_row(self, key: SeriesKey, step: int | None, when: float | None, gauges: list[float | None],
                 aux: dict[str, float]) -> None:
        pending = self._pending
        if pending is not None and self._completes_pending(key, step):
            # DeepSpeed prints one step over two lines: they make one row.
            for index, value in enumerate(gauges, 5):
                if value is not None:
                    pending[index] = value
            self._pending_aux.update(aux)
            return
        self._flush()
        self._pending = [*key, step, when, *gauges]
        self._pending_aux = dict(aux)

    def _close(self) -> None:
        self._flush()
        self._rows.flush()
        width = len(COLUMNS) + len(self._aux)
        if (self._scratch_path is not None and not self._aux and not self._multiline
                and all(cells == width for cells, _ in self._widths)):  # the scratch file is the CSV
            self._scratch.close()
            # The CSV before is removed first: renamed over, ext4 writes the new file's blocks out at once (its
            # guard of a replacing rename, 0.1 s a 180 MB CSV); a CSV made again from its logs needs no such guard.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path)
            os.replace(self._scratch_path, self._path)
            self._scratch_path = None
            return
        self._scratch.seek(self._rows_start)
        with open(self._path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow([*COLUMNS, *self._aux])
            if self._multiline:
                for row in csv.reader(self._scratch):
                    writer.writerow(row + [""] * (width - len(row)))
            elif all(cells == width for cells, _ in self._widths):  # every row as written: the bytes copied
                out.flush()
                shutil.copyfileobj(self._scratch.buffer, out.buffer)
            else:  # a row a line: each line as written, padded with empty cells
                lines = iter(self._scratch)
                for cells, rows in self._widths:
                    padding = "," * (width - cells)
                    rows_lines: Iterable[str] = itertools.islice(lines, rows)
                    if padding:
                        rows_lines = (f"{line[:-2]}{padding}\r\n" for line in rows_lines)
                    out.writelines(rows_lines)
        self.discard()

    def discard(self) -> None:
        """The scratch file closed and removed (the CSV, if written, stays)."""
        self._rows.stop()
        self._scratch.close()
        if self._scratch_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._scratch_path)
            self._scratch_path = None

    def _flush(self) -> None:
        row = self._pending
        if row is None:
            return
        aux: list[object] = [""] * len(self._aux)
        for name, value in self._pending_aux.items():
            column = self._aux.setdefault(name, len(self._aux))
            if column >= len(aux):
                aux.append("")
            aux[column] = value
        self._pending = None
        self._count_rows(len(row) + len(aux), 1)
        self._rows.put(f"{self._key_cells((row[0], row[1], row[2]))},{_cells([*row[3:], *aux])}")

    def _count_rows(self, cells: int, rows: int) -> None:
        """``rows`` rows of ``cells`` cells written after the others."""
        if self._widths and self._widths[-1][0] == cells:
            self._widths[-1][1] += rows
        else:
            self._widths.append([cells, rows])

    def _key_cells(self, key: tuple) -> str:
        """(run, node, rank) as the csv module writes them."""
        cells = self._keys.get(key)
        if cells is None:
            text = io.StringIO()
            csv.writer(text).writerow(key)
            cells = self._keys[key] = text.getvalue()[:-2]
            self._multiline = self._multiline or "\n" in cells or "\r" in cells
        return cells


def _replaceable(path: str) -> bool:
    """True when the finished CSV may be renamed to ``path``: nothing is there, or a regular file (not a link, a
    device, a pipe: those are written to)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return True


def _named_scratch(directory: str, name: str) -> tuple[str, TextIO]:
    """A new file beside the CSV, hidden, with the mode a new CSV gets (the umask's)."""
    while True:
        path = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        return path, open(fd, "w+", newline="")  # noqa: SIM115


_NUMBERS = frozenset((int, float, type(None)))


def _cells(values: list) -> str:
    """A row's cells after its key, ended: as the csv module writes them (None empty, a float as its repr: nan, inf
    as the log said), numbers without its per-character look for what to quote (they need none, and no number's
    repr holds the "None" that None's does)."""
    if _NUMBERS.issuperset(map(type, values)):
        return f"{','.join(map(repr, values)).replace('None', '')}\r\n"
    text = io.StringIO()
    csv.writer(text).writerow(values)
    return text.getvalue()


def _repeats_a_step(steps: Sequence[int | None]) -> bool:
    """A line at the step of the line before it: none in a range of steps or in consecutive ones (the usual batch,
    told at C speed)."""
    return type(steps) is list and not native.consecutive(steps) and any(map(operator.eq, steps, steps[1:]))


def _write(fd: int, jobs: list[Job]) -> None:
    """The jobs to ``fd``; rows holding a cell of a parser's own number type (write_rows refuses it) as the csv
    module writes them, row by row."""
    try:
        native.write_rows(fd, jobs)
    except TypeError:  # nothing was written: each job alone
        for job in jobs:
            try:
                native.write_rows(fd, [job])
            except TypeError:
                if isinstance(job, str):
                    raise
                columns, rows, lead = job
                rows_text = (lead + _cells(list(row)) for row in itertools.islice(zip(*columns, strict=False), rows))
                native.write_rows(fd, ["".join(rows_text)])


class _RowWriter:
    """The scratch file's writes, in order: single rows' texts joined (a log of single step lines makes each row a
    text of its own), a batch's rows formatted and written with them by the kernel on a thread of its own
    (native.rows_ahead) while the next batches are read; up to ROWS_AHEAD batches at a time, each writing after the
    one before it."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._texts: list[str] = []  # put since the last write
        self._length = 0
        self._writing: deque[native.RowsWriting] = deque()  # started, oldest first

    def put(self, job: Job) -> None:
        if isinstance(job, str):
            self._texts.append(job)
            self._length += len(job)
            if self._length >= TEXT_CHUNK:
                self._start(self._taken())
            return
        self._start([*self._taken(), job])

    def flush(self) -> None:
        """Every job put written."""
        if self._texts:
            self._start(self._taken())
        self._wait()

    def stop(self) -> None:
        """The writings under way waited for, whatever became of them: their file may be closed."""
        while self._writing:
            with contextlib.suppress(OSError):
                self._writing.popleft().wait()

    def _start(self, jobs: list[Job]) -> None:
        writing = self._writing
        if len(writing) >= ROWS_AHEAD:
            writing.popleft().wait()
        try:
            started = native.rows_ahead(self._fd, jobs, writing[-1] if writing else None)
        except TypeError:  # a cell of a parser's own number type: nothing was started
            started = None
        if started is None:
            self._wait()
            _write(self._fd, jobs)
        else:
            writing.append(started)

    def _wait(self) -> None:
        """Every writing started, ended (one that fails stays for stop())."""
        writing = self._writing
        while writing:
            writing[0].wait()
            writing.popleft()

    def _taken(self) -> list[Job]:
        texts, self._texts, self._length = self._texts, [], 0
        return ["".join(texts)] if texts else []
