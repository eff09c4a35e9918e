"""``--csv FILE``: a row per (run, node, rank, step), written as the lines are read.

Aux losses get a column each, but which ones a run prints is known only at its end: rows
go to a temporary file first, the final file is written from it with the full header.
Both passes stream; memory holds one row.
"""

from __future__ import annotations

import csv
import io
import itertools
import operator
import os
import shutil
import tempfile
from collections.abc import Iterable
from typing import TextIO

from exporter import native
from exporter.parse.records import StepRows
from exporter.state import SeriesKey

COLUMNS = ("run", "node", "rank", "step", "time", "loss", "learning_rate", "grad_norm", "step_time_seconds",
           "throughput")
GAUGES = COLUMNS[5:]


class StepCsv:
    """Collects step rows (``add``) into ``path`` (``close``)."""

    def __init__(self, path: str) -> None:
        self._path = path
        directory = os.path.dirname(os.path.abspath(path))
        self._scratch: TextIO = tempfile.TemporaryFile("w+", newline="", dir=directory)  # noqa: SIM115
        self._writer = csv.writer(self._scratch)
        self._aux: dict[str, int] = {}  # aux loss -> its column among the aux columns
        self._pending: list | None = None  # the last row, completed by a second line of the same step
        self._pending_aux: dict[str, float] = {}
        self._keys: dict[tuple, str] = {}  # (run, node, rank) -> its cells as the csv module writes them
        self._multiline = False  # a key's cells hold a line break: the scratch file is read back as CSV
        self._widths: list[list[int]] = []  # [cells, rows] of consecutive rows: what each lacks of the header

    def add(self, key: SeriesKey, steps: list[int | None], times: list[float | None], rows: StepRows) -> None:
        """A batch's step lines of one rank: each line's step, time and values."""
        count = len(steps)
        columns: list[list[float | None]] = [rows.gauges.get(name) or [None] * count for name in GAUGES]
        if count < 2 or rows.aux or any(map(operator.eq, steps, steps[1:])) or self._completes_pending(key, steps[0]):
            # Lines that may make one row (DeepSpeed prints a step over two), or aux losses: row by row.
            self._add_rows(key, steps, times, columns, rows)
            return
        # The rows but the last as one text (the cells as _flush writes numbers), the last pending: the next
        # batch's first line may complete it.
        self._flush()
        last = count - 1
        try:
            rows_cells = native.format_rows((steps, times, *columns), last, f"{self._key_cells(key)},")
        except TypeError:  # a cell that is no int or float (a parser's own number type): as the csv module writes it
            self._add_rows(key, steps, times, columns, rows)
            return
        self._scratch.write(rows_cells)
        self._count_rows(len(COLUMNS), last)
        self._pending = [*key, steps[last], times[last], *(column[last] for column in columns)]
        self._pending_aux = {}

    def _add_rows(self, key: SeriesKey, steps: list[int | None], times: list[float | None],
                  columns: list[list[float | None]], rows: StepRows) -> None:
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

    def close(self) -> None:
        """Write the final file: the header with every aux loss, then each row padded to it."""
        self._flush()
        self._scratch.seek(0)
        width = len(COLUMNS) + len(self._aux)
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
        self._scratch.close()

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
        key = self._key_cells((row[0], row[1], row[2]))
        values = [*row[3:], *aux]
        if _NUMBERS.issuperset(map(type, values)):
            # The cells as the csv module writes them (None empty, a float as its repr: nan, inf as the log
            # said), without its per-character look for what to quote: numbers need none (and no number's repr
            # holds the "None" that None's does).
            self._scratch.write(f"{key},{','.join(map(repr, values)).replace('None', '')}\r\n")
        else:
            self._writer.writerow([*row, *aux])

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


_NUMBERS = frozenset((int, float, type(None)))
