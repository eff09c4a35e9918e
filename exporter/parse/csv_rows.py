"""A CSV file whose first line names its columns (Lightning's ``CSVLogger`` ``metrics.csv``) as lines to parse.

``epoch,step,train/grad_norm,train/loss_step,train/lr`` then one row per logged step, ``0,3,5.52,6.62,0.045``:
each row becomes ``epoch=0 step=3 train/grad_norm=5.52 train/loss_step=6.62 train/lr=0.045`` (empty cells left
out, the printed numbers kept as they are), which the readers of named values take through parse/synonyms.py, so
the header's names mean what the same names mean on a console line. A row without a training loss (the epoch's
mean, a validation row) is no step, as on a console.

Lightning writes the whole file again, under a wider header, when a new column appears (an ``on_epoch`` mean at
the end of the first epoch); the tailer sees new first bytes and reads the file again from its start. Those rows
were read already: after a header that keeps every column of the one before, the rows up to the last step handed
out are skipped, so a rewrite is neither a restart nor a second copy of its steps. A header with other columns is
another file written in its place: its rows are read from the first.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.parse.numbers import parse_float

TABLE_SUFFIX = ".csv"


def is_table(path: str) -> bool:
    """True for a file read as a header-driven CSV table."""
    return path.endswith(TABLE_SUFFIX)


class CsvRows:
    """One CSV file's header and where its rows were read to; turns blocks of the file into ``name=value`` lines.

    ``first_line``: the file's first line, read when rows come before any header (reading resumed mid-file
    from a checkpoint); None or ``b""`` when it cannot be read.
    """

    def __init__(self, first_line: Callable[[], bytes | None] | None = None) -> None:
        self._first_line = first_line
        self._header: list[str] | None = None
        self._step_column: int | None = None
        self._last_step: float | None = None  # the step of the last row handed out
        self._skip_to: float | None = None  # after a rewrite: rows up to this step were read already

    def lines(self, block: bytes) -> bytes:
        """The block's rows as ``name=value`` lines (a header or a skipped row becomes an empty line)."""
        out = []
        for raw in block.split(b"\n"):
            cells = raw.rstrip(b"\r").decode("utf-8", "replace").split(",")
            if _is_header(cells):
                self._new_header(cells)
                out.append(b"")
            else:
                out.append(self._row(cells))
        return b"\n".join(out)

    def _new_header(self, cells: list[str]) -> None:
        old = self._header
        rewritten = old is not None and set(old) <= set(cells)
        self._skip_to = self._last_step if rewritten else None
        if not rewritten:
            self._last_step = None
        self._header = cells
        self._step_column = cells.index("step") if "step" in cells else None

    def _row(self, cells: list[str]) -> bytes:
        if self._header is None and not self._read_header():
            return b""
        header = self._header or []
        if cells == [""] or len(cells) != len(header):
            return b",".join(cell.encode() for cell in cells)  # not a row of this table: left to the parser as is
        step = parse_float(cells[self._step_column]) if self._step_column is not None else None
        if step is not None:
            if self._skip_to is not None and step <= self._skip_to:
                return b""
            self._skip_to = None
            self._last_step = step
        return " ".join(f"{name}={cell}" for name, cell in zip(header, cells, strict=True) if cell).encode()

    def _read_header(self) -> bool:
        first = self._first_line() if self._first_line is not None else None
        cells = first.rstrip(b"\r\n").decode("utf-8", "replace").split(",") if first else []
        if not _is_header(cells):
            return False
        self._new_header(cells)
        return True


def _is_header(cells: list[str]) -> bool:
    """Names only: every cell a name that is not a number (a row holds at least one number)."""
    return len(cells) > 1 and all(cell and parse_float(cell) is None for cell in cells)
