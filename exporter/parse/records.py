"""What parse/ hands on: plain value objects, no behaviour.

``rank`` on a record is the global rank named by the line's own prefix (``[rank3]:``, or
``[default3]:`` plus the node's rank offset) in a file that mixes ranks; None means "the
file's rank". Format parsers never set it: the per-file LineParser does.

Steps leave parse/ as StepBatch only, whatever the format: a format parser reads one line
into a StepLine, the batch builder (step_batch.py) gathers consecutive ones of a rank.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(slots=True)
class StepLine:
    """What one step line printed, as a format parser reads it (internal to parse/)."""

    step: int | None  # None when the format prints no step (Hugging Face Trainer's log dicts)
    # The gauges it printed, by the name of the value they set: loss, grad_norm, learning_rate,
    # step_time_seconds, throughput, total_steps, ... Non-finite values stay float('nan'/'inf').
    values: dict[str, float] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)  # of a value printed with its unit: throughput -> "T"
    # Other numeric fields (aux losses, loss_scale, mfu, ...), in the order printed.
    named: dict[str, float] = field(default_factory=dict)
    # Steps of the logging interval whose loss was non-finite although the line shows none
    # (Megatron-LM's "number of nan iterations": it drops a NaN loss from the line).
    unprinted_nonfinite_losses: int = 0


# Each line's step, None where it printed none: a range where the step kernel read steps one difference apart (no
# int object a line; never changed, so shared by a batch and its series), else a list.
LineSteps = list[int | None] | range


def every_step_printed(steps: Sequence[int | None]) -> bool:
    """No line without a step: a range holds none (``None in`` would walk it, an int made each)."""
    return type(steps) is range or None not in steps


class Series(NamedTuple):
    """Every value of a field a batch printed, with the step of its line (for the detectors)."""

    steps: LineSteps  # None: the rank's step before the batch (no line of the batch printed one yet)
    values: list[float] | array[float]  # an array('d') as the step kernel reads a run: no float object each


class Named(NamedTuple):
    """A named value of a batch: the latest printed, on how many lines, and whether it is an aux loss."""

    value: float
    lines: int
    aux_loss: bool


@dataclass(slots=True)
class StepRows:
    """Each step line's own values as columns, one item a line (None: the line printed none): the gauges a
    batch keeps every value of (LineParser's series fields) and the aux losses. analyze's CSV writes them."""

    count: int = 0
    # A column the step kernel read whole is its array('d') (the rows' writer reads its buffer), else a list.
    gauges: dict[str, list[float | None] | array[float]] = field(default_factory=dict)
    aux: dict[str, list[float | None] | array[float]] = field(default_factory=dict)

    def add(self, gauges: Mapping[str, float], aux: Mapping[str, float]) -> None:
        """One line's values."""
        self.extend(1, {name: [value] for name, value in gauges.items()},
                    {name: [value] for name, value in aux.items()})

    def extend(self, count: int, gauges: Mapping[str, Sequence[float | None]],
               aux: Mapping[str, Sequence[float | None]]) -> None:
        """``count`` lines, given as columns of ``count`` items each."""
        for columns, given in ((self.gauges, gauges), (self.aux, aux)):
            for name, values in given.items():
                column = columns.get(name)
                if column is None and not self.count and isinstance(values, array):
                    columns[name] = values[:]  # copied at once: the batch's series keeps the kernel's array
                    continue
                if column is None:
                    column = columns[name] = [None] * self.count
                elif isinstance(column, array) and not isinstance(values, array):
                    column = columns[name] = list(column)  # values that may be None follow
                column.extend(values)  # type: ignore[arg-type]  # an array only ever gets floats: a list took over
            for name, column in columns.items():
                if len(column) == self.count:  # no value of these lines
                    if isinstance(column, array):
                        column = columns[name] = list(column)
                    column.extend([None] * count)
        self.count += count

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[tuple[dict[str, float], dict[str, float]]]:
        """Line by line: (its gauges by name, its aux losses in the order the lines first printed them)."""
        gauges, aux = sorted(self.gauges.items()), list(self.aux.items())
        for line in range(self.count):
            yield _present(gauges, line), _present(aux, line)


def _present(columns: list[tuple[str, list[float | None] | array[float]]], line: int) -> dict[str, float]:
    """A line's values of ``columns`` by name, those it printed."""
    values = {}
    for name, column in columns:
        value = column[line]
        if value is not None:
            values[name] = value
    return values


@dataclass(slots=True)
class StepBatch:
    """Consecutive step lines of one rank: what the state needs of them, a column at a time.

    Applying a batch does what applying its lines one by one would: the fields of
    different columns never interact, and within a column the order is kept.
    """

    steps: LineSteps  # each line's step; None: the line printed none
    latest: dict[str, float]  # every gauge a line printed -> its latest value
    series: dict[str, Series]  # loss, grad_norm and the rank values (device_local_norm): every value, for the detectors
    units: dict[str, str]  # gauge -> unit of the latest line that printed one
    # Named values in the order a line-by-line application first meets them (aux losses
    # of a line before its other values), with the lines holding each: every one of them
    # is a value dropped when a cardinality limit is reached.
    named: dict[str, Named]
    # Non-finite losses of the last line's logging interval the line does not show; a batch
    # ends at such a line, so they count at its step, after the losses before them.
    unprinted_nonfinite_losses: int = 0
    rank: int | None = None
    # Where each line starts in the block it was read from (LineParser(line_offsets=True)), else None.
    line_starts: array[int] | None = None
    # Each line's own values, with LineParser(step_rows=True) (analyze's CSV), else None.
    rows: StepRows | None = None


@dataclass(slots=True)
class ErrorEvent:
    """A failure signature: out of memory, communication error, crash, ..."""

    kind: str
    detail: dict[str, str | float] = field(default_factory=dict)
    rank: int | None = None


@dataclass(slots=True)
class SchedulerEvent:
    """A cluster event from msrun's scheduler.log."""

    kind: str
    node_id: str | None = None
    # The rank the event is about (from the node's registration), not the series it lands in.
    node_rank: int | None = None
    detail: dict[str, str | float] = field(default_factory=dict)
    rank: int | None = None


@dataclass(slots=True)
class RunInfo:
    """Facts about the run printed once (banners): framework, mode, ..."""

    values: dict[str, str]
    rank: int | None = None


@dataclass(slots=True)
class PhaseStart:
    """A line announcing a long phase without steps (parse/phases.py): a checkpoint save, an evaluation."""

    phase: str
    rank: int | None = None


Record = StepBatch | ErrorEvent | SchedulerEvent | RunInfo | PhaseStart
