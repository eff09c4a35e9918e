"""The batch builder: a rank's consecutive step lines gathered into one StepBatch.

Lines come one at a time from the format parsers (StepLine), or a run at a time through
the step-field kernel (native.step_reader: columns, no Python object per line); either way
the batch is what applying its lines one by one does, a column at a time
(tests/test_block_parse.py compares the state both give). Here, and only here, a named
value becomes an aux loss or a plain gauge (fields.is_aux_loss).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import NamedTuple, cast

from exporter import native
from exporter.native.step_fields import Run, Steps
from exporter.parse.fields import is_aux_loss, is_rank_value
from exporter.parse.records import LineSteps, Named, Series, StepBatch, StepLine, StepRows

# The gauges whose every value the state's detectors and time accounting need; of the others the
# latest is enough (and of the named values, those a rank prints for itself: fields.is_rank_value).
SERIES_FIELDS = ("loss", "grad_norm", "step_time_seconds")
MAX_ROW_READERS = 64  # a rank's readers kept for the sets of aux losses its runs print


class KernelColumn(NamedTuple):
    """What a column of a kernel's field table sets: its gauge, further gauges (their latest only) and the gauge's unit
    where the value prints none."""

    gauge: str
    also: tuple[str, ...] = ()
    unit: str = ""


class StepBatchBuilder:
    """One rank's step lines since the last ``take``."""

    _steps: LineSteps
    _known_step: int | None  # the batch's last printed step: a line printing none is at it
    _latest: dict[str, float]
    _series: dict[str, Series]
    _units: dict[str, str]
    _named: dict[str, tuple[float, int]]  # name -> (latest value, lines)
    _unprinted_nonfinite_losses: int
    _line_starts: array[int]  # array('q'): a block's runs of lines copied in, not an int object each
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
        self._rows_table: tuple | None = None
        self._row_readers: dict[tuple[str, ...], native.StepReader] = {}  # aux losses -> a reader keeping them all
        self._gauges: tuple[str, ...] = ()
        self._columns: tuple[KernelColumn, ...] = ()
        self._clear()

    def __len__(self) -> int:
        return len(self._steps) + (len(self._reader) if self._reader is not None else 0)

    @property
    def reads_runs(self) -> bool:
        """True once runs of lines come through a reader (``read_by``)."""
        return self._reader is not None

    def read_by(self, reader: native.StepReader, columns: tuple[KernelColumn, ...], table: tuple | None = None) -> None:
        """Runs of lines will come through ``reader``, whose table's fields set the gauges of ``columns`` (and keep
        every value of the series fields); with ``rows``, ``table`` is that table: a run's aux losses (the reader
        keeps their latest only) are read again by it with each aux loss a series field of its own, and a run whose
        columns still do not give each line's values (a line without a series gauge or an aux loss the others
        print) line by line."""
        self._merge_reader()
        self._reader, self._columns = reader, columns
        self._gauges = tuple(column.gauge for column in columns)
        self._rows_table, self._row_readers = table, {}

    def read_run(self, data: bytes, starts: native.Starts, index: int, limit: int,
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
            if self._keep_rows and not self._add_run_rows(run, data, starts, index):
                self._read_rows(data, starts, index, taken)
            self._merge_run(run)
        if taken and self._keep_starts:
            self._line_starts.extend(starts[index : index + taken])
        return taken, ended

    def _add_run_rows(self, run: Run, data: bytes, starts: native.Starts, index: int) -> bool:
        """The rows of a run its columns give; False when they do not (a series gauge or an aux loss that some
        lines lack, in a run printing a step twice)."""
        steps, _, fields, named = run
        aligned = _Aligner(steps)
        columns = {}
        for gauge, (_, _, series_steps, values) in zip(self._gauges, fields, strict=True):
            if values and gauge in self._series_fields:
                column = aligned(series_steps, values)
                if column is None:
                    return False
                columns[gauge] = column
        aux_lines = {entry[0]: entry[2] for entry in named if is_aux_loss(entry[0])}
        aux_names = tuple(aux_lines)
        aux = {}
        if aux_names:
            reader = self._row_readers.get(aux_names)
            if reader is None:
                if len(self._row_readers) >= MAX_ROW_READERS:  # a log whose runs print ever other aux losses
                    self._row_readers.clear()
                reader = self._row_readers[aux_names] = native.step_reader(
                    _keeping_aux(self._rows_table, len(self._gauges), aux_names))
            taken = reader.read(data, starts, index, len(steps))
            aux_fields = reader.take()[2][len(self._gauges):]
            if taken != len(steps):
                return False
            for name, (_, _, series_steps, values) in zip(aux_names, aux_fields, strict=True):
                # A field unset by a later unreadable value of its name: the named value kept the line's first.
                column = aligned(series_steps, values) if len(values or ()) == aux_lines[name] else None
                if column is None:
                    return False
                aux[name] = column
        self._rows.extend(len(steps), columns, aux)
        return True

    def _read_rows(self, data: bytes, starts: native.Starts, index: int, count: int) -> None:
        """Each of the ``count`` lines at ``starts[index]``, just read as a run, read again alone: its own values
        and aux losses, its row."""
        table, gauges, rows = self._rows_table, self._gauges, self._rows
        assert table is not None
        reader = self._row_readers.get(())
        if reader is None:
            reader = self._row_readers[()] = native.step_reader(table)
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
        self._steps = _joined(self._steps, [line.step])
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
                steps, values = self._series_of(name)
                steps.append(self._known_step)
                values.append(value)
        # A line-by-line application sets a line's aux losses before its other named values.
        for name in sorted(line.named, key=lambda name: not is_aux_loss(name)):
            self._note_named(name, line.named[name], 1)
            if is_rank_value(name):  # the rank-divergence detector needs every value
                steps, values = self._series_of(name)
                steps.append(self._known_step)
                values.append(line.named[name])
        if not line.unprinted_nonfinite_losses:
            return False
        self._unprinted_nonfinite_losses = line.unprinted_nonfinite_losses
        return True

    def add_lines(self, steps: Sequence[int | None], values: dict[str, list], named: dict[str, list[float]],
                  starts: list[int] | None, unprinted_nonfinite_losses: int = 0,
                  units: dict[str, str] | None = None) -> None:
        """Lines given as columns (one item per line in each), every one printing a step (or none printing one),
        every gauge of ``values`` and every name of ``named``, no step going back, only the last one with
        non-finite losses it does not show (and its loss finite): what ``add_line`` of each line in turn does
        (parse/carriage.py); ``units``: those of the gauges, the same on every line."""
        self._merge_reader()
        count = len(steps)
        if units:
            self._units.update(units)
        self._steps = _joined(self._steps, steps)
        if steps[-1] is not None:
            self._known_step = steps[-1]
        at = steps if steps[-1] is not None else [self._known_step] * count  # a line printing none: the known step
        if self._keep_starts:
            self._line_starts.extend(starts or [0] * count)
        order = sorted(named, key=lambda name: not is_aux_loss(name))
        if self._keep_rows:
            self._rows.extend(count, {name: column for name, column in values.items() if name in self._series_fields},
                              {name: column for name, column in named.items() if is_aux_loss(name)})
        for name, column in values.items():
            self._latest[name] = column[-1]
            if name in self._series_fields:
                series_steps, series_values = self._series_of(name)
                series_steps.extend(at)
                series_values.extend(column)
        for name in order:
            column = named[name]
            self._note_named(name, column[-1], count)
            if is_rank_value(name):
                series_steps, series_values = self._series_of(name)
                series_steps.extend(at)
                series_values.extend(column)
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
            self._steps = _joined(self._steps, steps)
        else:  # the run's own steps (the reader keeps none): a batch of one run copies no column
            self._steps = cast("LineSteps", steps)
        self._known_step = steps[-1]
        if total is not None:
            self._latest["total_steps"] = total
        for (gauge, also, fixed_unit), (value, unit, series_steps, series_values) in zip(self._columns, fields,
                                                                                          strict=True):
            if value is not None:
                self._latest[gauge] = value
                for other in also:
                    self._latest[other] = value
                unit = unit or fixed_unit
            if unit:
                self._units[gauge] = unit
            if series_steps and series_values:
                series = self._series.get(gauge)
                if series is None:
                    self._series[gauge] = Series(cast("LineSteps", series_steps), series_values)
                else:
                    series.values.extend(series_values)
                    self._series[gauge] = Series(_joined(series.steps, series_steps), series.values)
        new = []
        for name, value, lines, first, position, every in named:
            seen = self._named.get(name)
            if seen is None:
                new.append((first, not is_aux_loss(name), position, name, value, lines))
            else:
                self._named[name] = (value, seen[1] + lines)
            if every is not None:  # a rank's own value (fields.is_rank_value): the table keeps each
                every_steps, values = self._series_of(name)
                every_steps.extend(every[0])
                values.extend(every[1])
        # Lines in order, each line's aux losses first, then as printed: a line-by-line order.
        for _, _, _, name, value, lines in sorted(new):
            self._named[name] = (value, lines)

    def _series_of(self, gauge: str) -> tuple[list[int | None], list[float] | array[float]]:
        """The gauge's series to add to: its steps a list (a run's range made one) and its values."""
        series = self._series.get(gauge)
        if series is None:
            series = self._series[gauge] = Series([], [])
        elif type(series.steps) is range:
            series = self._series[gauge] = Series(list(series.steps), series.values)
        return cast("list[int | None]", series.steps), series.values

    def _note_named(self, name: str, value: float, lines: int) -> None:
        seen = self._named.get(name)
        self._named[name] = (value, lines + (seen[1] if seen else 0))

    def _clear(self) -> None:
        self._steps, self._known_step, self._line_starts, self._rows = [], None, array("q"), StepRows()
        self._latest, self._series, self._units, self._named = {}, {}, {}, {}
        self._unprinted_nonfinite_losses = 0


class _Aligner:
    """A series field's values as a column of a run's lines: the field's steps name its lines when no two lines
    print one step."""

    def __init__(self, steps: Steps) -> None:
        self._steps = steps
        self._unique: bool | None = None

    def __call__(self, series_steps: Steps | None, values: Sequence[float] | None) -> Sequence | None:
        steps = self._steps
        if values is None or series_steps is None:
            return None
        if len(values) == len(steps):
            return values
        if self._unique is None:  # a range never repeats a step
            self._unique = type(steps) is range or len(set(steps)) == len(steps)
        if not self._unique:
            return None
        by_step = dict(zip(series_steps, values, strict=True))
        return [by_step.get(step) for step in steps]


def _keeping_aux(table: tuple | None, columns: int, names: tuple[str, ...]) -> tuple:
    """The kernel's field table (its ``columns`` columns, a gauge each) with each of ``names`` a float series field
    of a column of its own after them."""
    assert table is not None
    added = tuple((name.encode(), int(native.Kind.FLOAT), 1, b"", b"", columns + number)
                  for number, name in enumerate(names))
    return (*table[:6], table[6] + added, *table[7:])


def _joined(kept: LineSteps, more: Sequence[int | None]) -> LineSteps:
    """The steps of ``more`` after those of ``kept``: one range where a range goes on as another (runs read one after
    the other), else a list (``kept`` itself grown, when it is one)."""
    if type(kept) is range:
        if type(more) is range and more.step == kept.step and more.start == kept.stop:
            return range(kept.start, more.stop, kept.step)
        kept = list(kept)
    kept += more
    return kept
