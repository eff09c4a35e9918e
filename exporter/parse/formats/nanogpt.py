"""nanoGPT ``train.py`` iteration lines.

``iter 10: loss 3.2202, time 893.76ms, mfu 16.68%`` (older versions print no mfu). The mfu is
a running average and reads -100.00% until it has one. ``step 250: train loss ..., val loss
...`` is the evaluation, not a training step.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_duration_seconds, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_RECORD = lazy(r"\biter (\d+): loss (\S+), time ([\d.]+ms)(?:, mfu (-?[\d.]+)%)?")


def parse(text: str) -> StepLine | None:
    """One iteration line; None when the line holds none."""
    match = _RECORD.search(text)
    if match is None:
        return None
    step, loss, duration, mfu = match.groups()
    line = StepLine(int(step))
    set_value(line, "loss", parse_float(loss))
    set_value(line, "step_time_seconds", parse_duration_seconds(duration))
    mfu_percent = parse_float(mfu or "")
    if mfu_percent is not None and mfu_percent >= 0:  # -100: not estimated yet
        add_named(line, "mfu_percent", mfu_percent)
    return line


FORMAT = register(Format("nanogpt", "nanogpt", b"iter ", parse, detection_order=55))
