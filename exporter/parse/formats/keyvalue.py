"""Plain ``step=1200 loss=2.31 lr=0.0001 grad_norm=1.8`` lines."""

from __future__ import annotations

from exporter.parse.fields import add_named, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_duration_seconds, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

# A comma belongs to a value only as a thousands separator (1,234.5); otherwise it separates pairs.
_PAIR = lazy(r"(?<![\w.])([A-Za-z_][A-Za-z0-9_]*)=((?:[^\s,;|]|,(?=\d{3}(?!\d)))+)")
_STEP_KEYS = ("step", "global_step", "iteration")
_LR_KEYS = ("lr", "learning_rate")
_GRAD_NORM_KEYS = ("grad_norm", "gnorm", "global_norm")
_TIME_KEYS = ("step_time", "per_step_time", "time_per_step")
_THROUGHPUT_KEYS = ("throughput",)
_STEP_OF_TOTAL = lazy(r"^(\d+)(?:/(\d+))?$")


def parse(text: str) -> StepLine | None:
    """Parse a key=value step line: needs an integer step (``step=N`` or ``step=N/TOTAL``) and a loss."""
    fields = dict(_PAIR.findall(text))
    step = next((fields[key] for key in _STEP_KEYS if key in fields), None)
    step_of_total = None if step is None else _STEP_OF_TOTAL.match(step)
    if step_of_total is None or "loss" not in fields:
        return None
    total = step_of_total.group(2)
    line = StepLine(int(step_of_total.group(1)), {"total_steps": int(total)} if total else {})
    set_value(line, "loss", parse_float(fields.pop("loss")))
    for key in _STEP_KEYS:
        fields.pop(key, None)
    for name, raw in fields.items():
        if name in _LR_KEYS:
            set_value(line, "learning_rate", parse_float(raw))
        elif name in _GRAD_NORM_KEYS:
            set_value(line, "grad_norm", parse_float(raw))
        elif name in _TIME_KEYS:
            set_value(line, "step_time_seconds", parse_duration_seconds(raw))
        elif name in _THROUGHPUT_KEYS:
            set_value(line, "throughput", parse_float(raw))
        else:
            add_named(line, name, parse_float(raw))
    return line


# A convention many training loops follow, no framework's: the most generic anchor, tried last.
FORMAT = register(Format("keyvalue", "", b"step=", parse, detection_order=80))
