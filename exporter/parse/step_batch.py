"""The batch builder: a rank's consecutive step lines gathered into one StepBatch.

Lines come one at a time from the format parsers (StepLine), or a run at a time through
the step-field kernel (native.step_reader: columns, no Python object per line); either way
the batch is what applying its lines one by one does, a column at a time
(tests/test_block_parse.py compares the state both give). Here, and only here, a named
value becomes an aux loss or a plain gauge (fields.is_aux_loss).
"""

from __future__ import annotations

import math
from typing import cast

from exporter import native
from exporter.native.step_fields import Run
from exporter.parse.fields import is_aux_loss, is_rank_value
from exporter.parse.records import Named, Series, StepBatch, StepLine, StepRows

# The gauges whose every value the state's detectors and time accounting need; of the others the
# latest is enough (and of the named values, those a rank prints for itself: fields.is_rank_value).
SERIES_FIELDS = ("loss", "grad_norm", "step_time_seconds")


class StepBatchBuilder:
    """One rank's step lines since the last ``take``."""

    _steps: list[int | None]
    _known_step: int | None  # the batch's last printed step: a line printing none is at it
    _latest: dict[str, float]
    _series: dict[str, Series]
    _units: dict[str, str]
    _named: dict[str, tuple[float, int]]  # name -> (latest value, lines)
    _unprinted_nonfinite_losses: int
    _line_starts: list[int]
    _rows: StepRows

    def __init__(self, rank: int | None, series_fields: tuple[str, ...] = SERIES_FIELDS,
                 line_starts: bool = False, rows: bool = False) -> None:
        """``series_fields``: the gauges whose every value a batch keeps; ``line_starts``: keep where each
        line starts; ``rows``: keep each line's own values of those gauges and its aux losses (StepBatch.rows)."""
        self.rank = rank
        self._series_fields = series_fields
        self._keep_starts = line_starts
        self._keep_rows = rows
        self._reader: native.StepReader | None = None
        self._row_reader: native.StepReader | None = None
        self._gauges: tuple[str, ...] = ()
        self._clear()

    def __len__(self) -> int:
        return len(self._steps) + (len(self._reader) if self._reader is not None else 0)

    @property
    def reads_runs(self) -> bool:
        """True once runs of lines come through a reader (``read_by``)."""
        return self._reader is not None

    def read_by(self, reader: native.StepReader, gauges: tuple[str, ...],
                row_reader: native.StepReader | None = None) -> None:
        """Runs of lines will come through ``reader``, whose table's fields set ``gauges`` (and keep every value of
        the series fields); with ``rows``, a run whose columns do not give each line's values (a line without a
        series gauge, aux losses: the reader keeps their latest only) is read again line by line by ``row_reader``
        (a reader of the same table)."""
        self._merge_reader()
        self._reader, self._gauges, self._row_reader = reader, gauges, row_reader

    def read_run(self, data: bytes, starts: list[int], index: int, limit: int,
                 ahead: object = None) -> tuple[int, StepBatch | None]:
        """Read the run of step lines at ``starts[index]`` (at most ``limit``): how many lines it took, and the
        batch of the lines before it when its first step goes back below theirs (a restart: the run starts
        a new batch). ``ahead``: native.steps_ahead over ``data``, whose run of these lines the reader takes.

        The reader sees the steps of its own lines only: after lines added one by one (another
        format's, in a file that mixes them; a line the reader declined), the run is taken at
        once and its first step compared with theirs.
        """
        reader = self._reader
        if reader is None:
            return 0, None
        after_lines_alone = bool(self._steps) and not len(reader)
        taken = reader.read(data, starts, index, limit) if ahead is None else reader.read(data, starts, index, limit,
                                                                                          ahead)
        ended = None
        if taken and (after_lines_alone or self._keep_rows):
            run = reader.take()
            if after_lines_alone and self._known_step is not None and run[0][0] < self._known_step:
                ended = self.take()
            if self._keep_rows and not self._add_run_rows(run):
                self._read_rows(data, starts, index, taken)
            self._merge_run(run)
        if taken and self._keep_starts:
            self._line_starts += starts[index : index + taken]
        return taken, ended

    def _add_run_rows(self, run: Run) -> bool:
        """The rows of a run its columns give (every line printing each series gauge, or none of them, and no aux
        loss); False when they do not."""
        steps, _, fields, named = run
        count = len(steps)
        if any(is_aux_loss(entry[0]) for entry in named):
            return False
        columns = {}
        for gauge, (_, _, _, values) in zip(self._gauges, fields, strict=True):
            if values is None or gauge not in self._series_fields:
                continue
            if len(values) != count:
                if values:
                    return False
                continue
            columns[gauge] = values
        self._rows.extend(count, columns, {})
        return True

    def _read_rows(self, data: bytes, starts: list[int], index: int, count: int) -> None:
        """Each of the ``count`` lines at ``starts[index]``, just read as a run, read again alone: its own values
        and aux losses, its row."""
        reader, gauges, rows = self._row_reader, self._gauges, self._rows
        assert reader is not None
        for line in range(index, index + count):
            reader.read(data, starts, line, 1)
            fields, named = reader.take()[2:]
            rows.add({gauge: field[0] for gauge, field in zip(gauges, fields, strict=True)
                      if field[0] is not None and gauge in self._series_fields},
                     {entry[0]: entry[1] for entry in named if is_aux_loss(entry[0])})

    def goes_back(self, step: int | None) -> bool:
        """True when a line at ``step`` is below the batch's latest step: a restart, which starts a new batch
        (a batch's steps never go back, so the state tells replayed steps by their number alone)."""
        self._merge_reader()
        return step is not None and self._known_step is not None and step < self._known_step

    def add_line(self, line: StepLine, start: int = 0) -> bool:
        """Add one line's values (``start``: where the line starts in its block); True when the batch must end
        after it (see unprinted_nonfinite_losses)."""
        self._merge_reader()
        self._steps.append(line.step)
        if self._keep_starts:
            self._line_starts.append(start)
        if self._keep_rows:
            self._rows.add({name: value for name, value in line.values.items() if name in self._series_fields},
                           {name: value for name, value in line.named.items() if is_aux_loss(name)})
        if line.step is not None:
            self._known_step = line.step
        for name, value in line.values.items():
            self._latest[name] = value
            unit = line.units.get(name)
            if unit:
                self._units[name] = unit
            if name in self._series_fields and not (name == "loss" and line.unprinted_nonfinite_losses
                                              and not math.isfinite(value)):
                # A non-finite loss the line's interval count already holds would count twice.
                series = self._series_of(name)
                series.steps.append(self._known_step)
                series.values.append(value)
        # A line-by-line application sets a line's aux losses before its other named values.
        for name in sorted(line.named, key=lambda name: not is_aux_loss(name)):
            self._note_named(name, line.named[name], 1)
            if is_rank_value(name):  # the rank-divergence detector needs every value
                series = self._series_of(name)
                series.steps.append(self._known_step)
                series.values.append(line.named[name])
        if not line.unprinted_nonfinite_losses:
            return False
        self._unprinted_nonfinite_losses = line.unprinted_nonfinite_losses
        return True

    def add_lines(self, steps: list[int], values: dict[str, list], named: dict[str, list[float]],
                  starts: list[int] | None, unprinted_nonfinite_losses: int = 0) -> None:
        """Lines given as columns (one item per line in each), every one printing a step, every gauge of
        ``values`` and every name of ``named``, no step going back, only the last one with non-finite losses
        it does not show (and its loss finite): what ``add_line`` of each line in turn does (parse/carriage.py)."""
        self._merge_reader()
        count = len(steps)
        self._steps += steps
        self._known_step = steps[-1]
        if self._keep_starts:
            self._line_starts += starts or [0] * count
        order = sorted(named, key=lambda name: not is_aux_loss(name))
        if self._keep_rows:
            self._rows.extend(count, {name: column for name, column in values.items() if name in self._series_fields},
                              {name: column for name, column in named.items() if is_aux_loss(name)})
        for name, column in values.items():
            self._latest[name] = column[-1]
            if name in self._series_fields:
                series = self._series_of(name)
                series.steps.extend(steps)
                series.values.extend(column)
        for name in order:
            column = named[name]
            self._note_named(name, column[-1], count)
            if is_rank_value(name):
                series = self._series_of(name)
                series.steps.extend(steps)
                series.values.extend(column)
        if unprinted_nonfinite_losses:
            self._unprinted_nonfinite_losses = unprinted_nonfinite_losses

    def take(self) -> StepBatch | None:
        """The batch of the lines added since the last take (None: none were); the builder starts over."""
        self._merge_reader()
        if not self._steps:
            return None
        named = {name: Named(value, lines, is_aux_loss(name)) for name, (value, lines) in self._named.items()}
        batch = StepBatch(self._steps, self._latest, self._series, self._units, named,
                          self._unprinted_nonfinite_losses, self.rank,
                          self._line_starts if self._keep_starts else None, self._rows if self._keep_rows else None)
        self._clear()
        return batch

    def _merge_reader(self) -> None:
        """The lines the reader read since the last merge, after those added before them."""
        if self._reader is not None and len(self._reader):
            self._merge_run(self._reader.take())

    def _merge_run(self, run: Run) -> None:
        steps, total, fields, named = run
        if self._steps:
            self._steps += steps
        else:  # the run's own lists (the reader keeps none): a batch of one run copies no column
            self._steps = cast("list[int | None]", steps)
        self._known_step = steps[-1]
        if total is not None:
            self._latest["total_steps"] = total
        for gauge, (value, unit, series_steps, series_values) in zip(self._gauges, fields, strict=True):
            if value is not None:
                self._latest[gauge] = value
            if unit:
                self._units[gauge] = unit
            if series_steps and series_values:
                series = self._series.get(gauge)
                if series is None:
                    self._series[gauge] = Series(cast("list[int | None]", series_steps), series_values)
                else:
                    series.steps.extend(series_steps)
                    series.values.extend(series_values)
        new = []
        for name, value, lines, first, position in named:
            seen = self._named.get(name)
            if seen is None:
                new.append((first, not is_aux_loss(name), position, name, value, lines))
            else:
                self._named[name] = (value, seen[1] + lines)
        # Lines in order, each line's aux losses first, then as printed: a line-by-line order.
        for _, _, _, name, value, lines in sorted(new):
            self._named[name] = (value, lines)

    def _series_of(self, gauge: str) -> Series:
        series = self._series.get(gauge)
        if series is None:
            series = self._series[gauge] = Series([], [])
        return series

    def _note_named(self, name: str, value: float, lines: int) -> None:
        seen = self._named.get(name)
        self._named[name] = (value, lines + (seen[1] if seen else 0))

    def _clear(self) -> None:
        self._steps, self._known_step, self._line_starts, self._rows = [], None, [], StepRows()
        self._latest, self._series, self._units, self._named = {}, {}, {}, {}
        self._unprinted_nonfinite_losses = 0
