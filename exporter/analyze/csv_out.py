"""``--csv FILE``: a row per (run, node, rank, step), written as the lines are read.

Aux losses get a column each, but which ones a run prints is known only at its end: rows
go to a temporary file first, the final file is written from it with the full header.
Both passes stream; memory holds one row.
"""

from __future__ import annotations

import csv
import io
import os
import tempfile
from typing import TextIO

from exporter.analyze.engine import StepRow

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
    def add(self, row: StepRow) -> None:
        run, node, rank, step, when, gauges, aux = row
        pending = self._pending
        if pending is not None and step is not None and pending[3] == step and pending[:3] == [run, node, rank]:
            # DeepSpeed prints one step over two lines: they make one row.
            for index, name in enumerate(GAUGES, 5):
                if name in gauges:
                    pending[index] = gauges[name]
            self._pending_aux.update(aux)
            return
        self._flush()
        self._pending = [run, node, rank, step, when, *map(gauges.get, GAUGES)]
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
            else:  # a row a line: each line as written, padded with empty cells
                lines = iter(self._scratch)
                for cells, rows in self._widths:
                    padding = "," * (width - cells)
                    for _ in range(rows):
                        line = next(lines)
                        out.write(f"{line[:-2]}{padding}\r\n" if padding else line)
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
        cells = len(row) + len(aux)
        if self._widths and self._widths[-1][0] == cells:
            self._widths[-1][1] += 1
        else:
            self._widths.append([cells, 1])
        key = self._keys.get((row[0], row[1], row[2]))
        if key is None:
            key = self._keys[row[0], row[1], row[2]] = self._key_cells(row[:3])
        values = [*row[3:], *aux]
        if _NUMBERS.issuperset(map(type, values)):
            # The cells as the csv module writes them (None empty, a float as its repr: nan, inf as the log
            # said), without its per-character look for what to quote: numbers need none (and no number's repr
            # holds the "None" that None's does).
            self._scratch.write(f"{key},{','.join(map(repr, values)).replace('None', '')}\r\n")
        else:
            self._writer.writerow([*row, *aux])

    def _key_cells(self, key: list) -> str:
        text = io.StringIO()
        csv.writer(text).writerow(key)
        cells = text.getvalue()[:-2]
        self._multiline = self._multiline or "\n" in cells or "\r" in cells
        return cells


_NUMBERS = frozenset((int, float, type(None)))
