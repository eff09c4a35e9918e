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

from exporter.parse import synonyms
from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
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


# Any loss-like name holds "oss" (loss, Loss, lm loss, train_loss): the scan skips every other line.
FORMAT = register(Format("generic", "", b"oss", parse, detection_order=99, describe=describe))
