"""``--csv FILE``: a row per (run, node, rank, step), written as the lines are read.

Aux losses get a column each, but which ones a run prints is known only at its end: rows
go to a temporary file first, the final file is written from it with the full header.
Both passes stream; memory holds one row.
"""

from __future__ import annotations

import csv
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

    def add(self, row: StepRow) -> None:
        run, node, rank, step, when, gauges, aux = row
        pending = self._pending
        if pending is not None and pending[:4] == [run, node, rank, step] and step is not None:
            # DeepSpeed prints one step over two lines: they make one row.
            for index, name in enumerate(GAUGES, 5):
                if name in gauges:
                    pending[index] = gauges[name]
            self._pending_aux.update(aux)
            return
        self._flush()
        self._pending = [run, node, rank, step, when, *(gauges.get(name) for name in GAUGES)]
        self._pending_aux = dict(aux)

    def close(self) -> None:
        """Write the final file: the header with every aux loss, then each row padded to it."""
        self._flush()
        self._scratch.seek(0)
        width = len(COLUMNS) + len(self._aux)
        with open(self._path, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow([*COLUMNS, *self._aux])
            for row in csv.reader(self._scratch):
                writer.writerow(row + [""] * (width - len(row)))
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
        # The csv module writes None as an empty cell and a float as its repr: nan, inf, as the log said.
        self._writer.writerow([*row, *aux])
        self._pending = None
