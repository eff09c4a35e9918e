"""User-defined formats: a regular expression with named groups, from the config file.

Group names map to fields: ``step``, ``total_steps``, ``loss``, ``lr`` (or
``learning_rate``), ``grad_norm``, ``step_time_seconds``, ``step_time_ms``, ``throughput``;
any other group that holds a number becomes an extra gauge (``*_loss``: an auxiliary loss).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from exporter.parse.fields import add_named, set_value
from exporter.parse.numbers import finite_int, parse_float
from exporter.parse.records import StepLine


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """The compiled pattern; ValueError with a message for the user when it cannot serve as a format."""
    try:
        compiled = re.compile(pattern)
    except re.error as error:
        raise ValueError(f"not a valid regular expression: {error}") from None
    if not {"step", "loss"} & set(compiled.groupindex):
        raise ValueError("needs a named group 'step' or 'loss', e.g. (?P<loss>[-+.\\w]+)")
    return compiled


def make_parser(pattern: re.Pattern[str]) -> Callable[[str], StepLine | None]:
    """A ``parse(text)`` function for one user-defined format."""

    def parse(text: str) -> StepLine | None:
        match = pattern.search(text)
        if match is None:
            return None
        values = {name: parse_float(raw) for name, raw in match.groupdict().items() if raw is not None}
        if values.get("step") is None and values.get("loss") is None:
            return None
        return _record(values)

    return parse


def _record(values: dict[str, float | None]) -> StepLine:
    line = StepLine(finite_int(values.pop("step", None)))
    set_value(line, "total_steps", finite_int(values.pop("total_steps", None)))
    set_value(line, "loss", values.pop("loss", None))
    lr, learning_rate = values.pop("lr", None), values.pop("learning_rate", None)
    set_value(line, "learning_rate", lr if lr is not None else learning_rate)
    set_value(line, "grad_norm", values.pop("grad_norm", None))
    seconds, milliseconds = values.pop("step_time_seconds", None), values.pop("step_time_ms", None)
    set_value(line, "step_time_seconds",
              seconds if seconds is not None else (None if milliseconds is None else milliseconds / 1000))
    set_value(line, "throughput", values.pop("throughput", None))
    for name, value in values.items():
        add_named(line, name, value)
    return line

