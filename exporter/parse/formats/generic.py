"""The reader of step lines no format names: a step counter and a training loss, in the common shapes.

Tried last, only on lines no named format read (detection order 99), and never configured:
``step 61/74 | loss 3.208939 | norm 1.48 | lr 3.00e-04 | 44.57 ms | 91886 tok/s`` (``|``-separated,
``key value``), ``step: 289, loss: 0.4310, tokens_per_second: 76477.73`` (``key: value``),
``step=5 train_loss=4.18`` (``key=value``), names of one or two words before the value (``lm loss``,
``grad norm``), qualified before or after (``train/loss``, ``loss_train``). What each name is comes
from the one table of synonyms (parse/synonyms.py). A ``|``-separated field may hold a value before
its unit alone (``44.57 ms``: the step time; ``91886 tok/s``: the throughput). A line needs a step
counter and a training loss; a line with an evaluation's value or word (``val loss``, ``eval_loss``,
``validation``) is the evaluation's, never a training step.
"""

from __future__ import annotations

import math
import random

from exporter.parse import synonyms
from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, SegmentShape, nothing_filtered, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?i:nan|inf(?:inity)?)\b"
_WORD = r"[A-Za-z][\w./-]*"
# A name of one or two words, a separator (``:``, ``=`` or spaces), a number, ``/TOTAL`` after a step, a unit.
_PAIR = lazy(rf"(?<![\w./-])(?P<name>{_WORD}(?: {_WORD})?)\s*(?:[:=]\s*|\s+)(?P<value>{_NUMBER})"
             rf"(?:/(?P<total>\d+))?(?P<unit>ms|s|%)?(?![\w.])")
# A ``|``-separated field holding a value and its unit or name only: ``44.57 ms``, ``91886 tok/s``.
_UNIT_FIELD = lazy(rf"^\s*\(?(?P<value>{_NUMBER})\s*(?P<unit>[A-Za-z][\w/]*)\s*\)?\s*$")
_EVALUATION_WORD = lazy(r"(?i)\b(?:val|valid|validation|validating|eval|evaluation|evaluating)\b")
_SECONDS = {"ms": 1e-3, "s": 1.0}
# Numbers a line names that are no value of the training: which process printed it.
_NOT_VALUES = frozenset({"rank", "local_rank", "global_rank", "pid", "gpu", "device", "node", "worker"})


def parse(text: str) -> StepLine | None:
    """A training step line in a common shape; None for any other line, an evaluation's included."""
    if _EVALUATION_WORD.search(text):
        return None
    line: StepLine | None = None
    loss = None
    pending: list[tuple[synonyms.Name, str, float, str]] = []  # read before the step's pair
    for match in _PAIR.finditer(text):
        named = _resolve(match.group("name"))
        if named.evaluation:
            return None
        value = _number(match.group("value"))
        if value is None:
            continue
        if named.step and line is None:
            if match.group("unit") or not value.is_integer() or value < 0:
                continue
            line = StepLine(int(value))
            total = match.group("total")
            if total:
                line.values["total_steps"] = int(total)
            continue
        if named.gauge == "loss" and loss is None:
            loss = value
        pending.append((named, match.group("name"), value, match.group("unit") or ""))
    if line is None or loss is None:
        return None
    for named, printed, value, unit in pending:
        _set(line, named, printed, value, unit)
    if "|" in text:
        _unit_fields(line, text)
    return line


def _resolve(printed: str) -> synonyms.Name:
    """A name of two words that means nothing as a whole may be a word of the text and a name (``at step``)."""
    named = synonyms.name(printed)
    if " " in printed and not (named.gauge or named.step or named.evaluation):
        return synonyms.name(printed.rsplit(" ", 1)[1])
    return named


def _set(line: StepLine, named: synonyms.Name, printed: str, value: float, unit: str) -> None:
    gauge = named.gauge
    if gauge is None:
        if named.canonical in _NOT_VALUES:
            return
        if unit != "%" and named.canonical:
            add_named(line, metric_name(printed), value)
        elif named.canonical:
            add_named(line, f"{metric_name(printed)}_percent", value)
        return
    if gauge in line.values:
        return  # the first one printed: a second ``loss`` on a line is another loss (a term, an average)
    if gauge == "step_time_seconds":
        value *= _SECONDS.get(unit, 1e-3 if named.milliseconds else 1.0)
    elif unit == "%":
        return
    set_value(line, gauge, value)


def _unit_fields(line: StepLine, text: str) -> None:
    """``|``-separated fields that hold a value before its unit alone: the step time, the throughput."""
    for field in text.split("|"):
        match = _UNIT_FIELD.match(field)
        if match is None:
            continue
        value, unit = _number(match.group("value")), match.group("unit")
        if value is None:
            continue
        if unit in _SECONDS:
            line.values.setdefault("step_time_seconds", value * _SECONDS[unit])
        elif synonyms.name(unit).gauge == "throughput" and "throughput" not in line.values:
            line.values["throughput"] = value
            line.units["throughput"] = unit


def _number(raw: str) -> float | None:
    return parse_float(raw.replace(",", ""))


def describe(text: str) -> str:
    """How the generic reader read a line, for the log and the status page: ``step=step, loss=train loss, ...``."""
    found: dict[str, str] = {}
    for match in _PAIR.finditer(text):
        printed = match.group("name")
        named = _resolve(printed)
        what = "step" if named.step else named.gauge
        if what and what not in found:
            found[what] = printed.rsplit(" ", 1)[1] if named is not synonyms.name(printed) else printed
    return ", ".join(f"{what}={printed}" for what, printed in found.items())


# A line's values as the block-wise reader reads them (native.segment_records): runs of these bytes, numbers.
_RUN = lazy(rb"[0-9A-Za-z.+-]+")
_SCALES = (1.0, 1e-3)  # what parse multiplies a printed value by: seconds, milliseconds
_SAMPLES = 3  # lines of other values the shape must read as parse does


def segment_shape(line: bytes) -> SegmentShape | None:
    """The shape of ``line`` (a line's segment: the line, where it holds no carriage return): its numbers the
    values, the text around them the pieces, each value's target found by changing it alone and reading the line
    again (parse/carriage.py reads a block's lines of this shape at once). None when a line of the shape with other
    numbers could read otherwise: a value parse does not take alone or exactly (``1,234``; one of two steps), a line
    of other numbers read otherwise than the shape says, a line that does not begin with text."""
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        return None
    base = parse(text)
    runs = [run for run in _RUN.finditer(line) if _is_number(run.group())]
    if base is None or not runs or runs[0].start() == 0:
        return None
    cuts = [0, *(edge for run in runs for edge in run.span()), len(line)]
    pieces = tuple(line[begin:end] for begin, end in zip(cuts[::2], cuts[1::2], strict=True))
    if b"," in pieces:  # ``1,234``: one number of parse's, two values of the shape
        return None
    printed = [run.group().decode() for run in runs]
    read = [_target(base, pieces, printed, index) for index in range(len(printed))]
    if any(found is None for found in read):
        return None
    targets = [found for found in read if found]
    if len({target for target, _ in targets}) != len(targets):
        return None
    shape = _shape(pieces, read, base.units)
    rng = random.Random(len(line))
    for values in [printed, *([_sample(rng, raw) for raw in printed] for _ in range(_SAMPLES))]:
        if _as_shape_reads(shape, values) != _as_parse_reads(pieces, values):
            return None
    return shape


def _is_number(run: bytes) -> bool:
    """A run of value bytes that is a finite number as printed (a word, ``nan`` or ``bf16`` is text)."""
    if run[0] not in b"0123456789+-.":
        return False
    try:
        return math.isfinite(float(run))
    except ValueError:
        return False


def _target(base: StepLine, pieces: tuple[bytes, ...], printed: list[str], index: int) -> tuple | None:
    """What the value ``index`` sets: ``((kind, name), scale)`` (kind "step", "total", "gauge" or "named"), () for
    nothing, None when it is not read alone. (A step's name printed before the step, with a fraction that parse then
    does not take for the step, sets the step with an integer: two values would set it, and the shape is none.)"""
    sample = 9_000_007 + 7 * index  # digits, as a total prints them; a value no other of the line is
    read = parse(_joined(pieces, [*printed[:index], str(sample), *printed[index + 1:]]))
    return None if read is None else _changed(base, read, float(sample))


def _changed(base: StepLine, read: StepLine, value: float) -> tuple | None:
    """Which one field of ``read`` differs from ``base``, as the value ``value`` times a scale; () for none."""
    changes = []
    if read.step != base.step:
        changes.append((("step", "step"), 1.0) if read.step == value else None)
    for kind, mine, theirs in (("gauge", read.values, base.values), ("named", read.named, base.named)):
        for name in mine.keys() | theirs.keys():
            if mine.get(name) != theirs.get(name):
                kind_here = "total" if name == "total_steps" else kind
                scale = next((scale for scale in _SCALES if mine.get(name) == value * scale), None)
                changes.append(None if scale is None else ((kind_here, name), scale))
    if None in changes or len(changes) > 1 or read.units != base.units:
        return None
    return changes[0] if changes else ()


def _shape(pieces: tuple[bytes, ...], read: list, units: dict[str, str]) -> SegmentShape:
    kinds = [found[0][0] if found else "" for found in read]
    targets = tuple((kind in ("gauge", "total"), found[0][1] if found else "") for kind, found in zip(kinds, read,
                                                                                                       strict=True))
    return SegmentShape(pieces, b" [", targets, nothing_filtered, step=kinds.index("step") if "step" in kinds else -1,
                        total=kinds.index("total") if "total" in kinds else -1,
                        scales=tuple(found[1] if found else 1.0 for found in read),
                        units=tuple(units.items()), guessed=True)


def _as_shape_reads(shape: SegmentShape, printed: list[str]) -> tuple:
    """What the block-wise reader makes of a line of ``shape`` printing ``printed``."""
    values: dict[str, float] = {}
    named: dict[str, float] = {}
    step = None
    for index, ((gauge, name), raw, scale) in enumerate(zip(shape.targets, printed, shape.scales, strict=True)):
        value = float(raw)
        if index == shape.step:
            step = int(value) if value.is_integer() and value >= 0 else -1
        elif index == shape.total:
            values[name] = int(value)
        elif name:
            (values if gauge else named)[name] = value * scale
    return step, values, list(named.items()), dict(shape.units)


def _as_parse_reads(pieces: tuple[bytes, ...], printed: list[str]) -> tuple | None:
    read = parse(_joined(pieces, printed))
    return None if read is None else (read.step, read.values, list(read.named.items()), read.units)


def _joined(pieces: tuple[bytes, ...], printed: list[str]) -> str:
    return "".join(piece.decode() + value for piece, value in zip(pieces, [*printed, ""], strict=True))


def _sample(rng: random.Random, raw: str) -> str:
    """Another number printed as ``raw`` is (digits, a fraction, an exponent)."""
    if "e" in raw.lower():
        return f"{rng.random() * 10 ** rng.randint(-6, 6):.2e}"
    if "." in raw:
        return f"{rng.random() * 10 ** rng.randint(0, 5):.{rng.randint(1, 6)}f}"
    return str(rng.randint(0, 10 ** rng.randint(1, 9)))


# Any loss-like name holds "oss" (loss, Loss, lm loss, train_loss): the scan skips every other line.
FORMAT = register(Format("generic", "", b"oss", parse, detection_order=99, describe=describe,
                         segment_shape=segment_shape))
