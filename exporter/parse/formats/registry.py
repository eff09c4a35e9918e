"""What a log format declares about itself, and the registry each format module adds itself to.

Like node_exporter's collectors: every module of exporter/parse/formats/ ends with
``FORMAT = register(Format(...))``, and the package imports every module it holds, so a
new format is one new module, with no list to extend elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.parse.records import RunInfo, SchedulerEvent, StepLine
from exporter.parse.step_table import StepTable


@dataclass(frozen=True, slots=True)
class Banner:
    """Lines that state facts about the run once (framework, mode): a byte test, then the parser."""

    prefilter: bytes
    parse: Callable[[str], RunInfo | None]


@dataclass(frozen=True, slots=True)
class SegmentShape:
    """Records of one shape, as a format whose records sit on carriage-return segments reads them a block at a
    time (parse/carriage.py, native.segment_records).

    ``pieces``: the literal text around the values (one more piece than values; each value a plain number or
    word, read by ``float``); ``close``: what follows the ``step/total`` fraction of the bar drawn before a
    record; ``targets``: per value, whether it sets a gauge (True) or a named value (False), and which;
    ``filtered``: the lines (indexes) with a non-finite loss they do not show, from the columns (gauge name
    -> values), as the format's parser counts them; ``step``: the value that is the record's own step (a dict's
    ``'global_step'``: it wins over the bar's; its target is not read), -1 without; ``total``: the value that is
    the total of steps (digits only), -1 without; a target named "" is no value; ``scales``: what each value is
    multiplied by (none: all by 1), ``units``: the gauges' units. ``guessed``: a shape of the generic reader's,
    read only where a line holds the record alone, its values finite and its step a count; else its lines are read
    one at a time. ``lead``: a progress bar's own shape (Format.bar_shape, native.bar_records): each redraw is a
    segment beginning with ``lead`` and a count (an epoch), the bar, then the record as its postfix.
    """

    pieces: tuple[bytes, ...]
    close: bytes
    targets: tuple[tuple[bool, str], ...]
    filtered: Callable[[dict[str, list[float]]], list[int]]
    step: int = -1
    total: int = -1
    scales: tuple[float, ...] = ()
    units: tuple[tuple[str, str], ...] = ()
    guessed: bool = False
    lead: bytes = b""

    @property
    def digits(self) -> int:
        """The values of digits only, as native.segment_records takes them (and gives as ints): the total's bit, and
        a guessed shape's step's (the generic reader's step is a count: a record whose step is none is no record)."""
        total = 1 << self.total if self.total >= 0 else 0
        return total | (1 << self.step if self.guessed and self.step >= 0 else 0)


def nothing_filtered(values: dict[str, list[float]]) -> list[int]:
    """SegmentShape.filtered of a format whose records show every loss they have."""
    return []


@dataclass(frozen=True, slots=True)
class Format:
    """One log format: a cheap byte test, then the parser proper."""

    name: str
    framework: str  # for training_info; "" when the format is not one framework's
    prefilter: bytes  # every line the parser accepts contains these bytes
    parse: Callable[[str], StepLine | SchedulerEvent | None]
    # Auto-detection tries formats from the lowest order up: the most specific anchor first,
    # so that a line of one format is never taken for another (``{ Epoch:[..], step:[..]``
    # before ``{ step:[..]``, DeepSpeed's ``step=N, skipped=`` before plain ``step= loss=``).
    # None: never detected, only chosen (by ``role`` or the configuration).
    detection_order: int | None = None
    role: str | None = None  # files of this role (classify: "scheduler") get this format
    # The format's lines carry no loss (DeepSpeed's engine): keep looking for one that does.
    provisional: bool = False
    # The step record as data: its runs of step lines are read by the step-field kernel.
    step_table: StepTable | None = None
    banner: Banner | None = None  # facts about the run the format's logs print
    # Its records sit on carriage-return segments after the progress bar that names their step:
    # the parser is given the segment drawn before the record's, then ``\r``, then the record's.
    segment_context: bool = False
    # Its records read a block at a time (parse/carriage.py): the shape of one record segment, or None.
    segment_shape: Callable[[bytes], SegmentShape | None] | None = None
    # A progress bar that redraws a step several times (a count, then the count with new values):
    # only the last redraw of a step is a record. Its prefilter is in every redraw.
    redraws: bool = False
    # Its redraws read a block at a time (parse/redraws.py): the shape of one redraw segment, or None.
    bar_shape: Callable[[bytes], SegmentShape | None] | None = None
    # For a format that reads lines by guessing (the generic reader): how it read a line, said once per file.
    describe: Callable[[str], str] | None = None


_REGISTERED: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add a built-in format (a module of exporter/parse/formats/ does, once)."""
    if _REGISTERED.setdefault(fmt.name, fmt) is not fmt:
        raise ValueError(f"two formats are called {fmt.name!r}")
    return fmt


def registered() -> tuple[Format, ...]:
    """Every format registered so far, in no particular order."""
    return tuple(_REGISTERED.values())
