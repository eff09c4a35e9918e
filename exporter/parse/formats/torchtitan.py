"""torchtitan ``MetricsProcessor.log`` lines (torchtitan/components/metrics.py).

``step: 10  loss:  8.1234  grad_norm:  1.2345  memory: 61.20GiB(77.39%)  tps: 5,822
tflops: 335.90  mfu: 33.96%``, colored with ANSI escapes unless disabled; older versions
print ``wps:`` and no grad_norm. ``validate step:`` lines are validation, not training.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_duration_seconds, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_ANSI = lazy(r"\x1b\[[0-9;]*m")
_ANCHOR = lazy(r"(?<!validate )\bstep:\s*(\d+)\s+loss:\s*(\S+)")
_FIELD = lazy(r"(\w+):\s*(\S+)")
_MEMORY = lazy(r"([\d.]+)GiB\(([\d.]+)%\)")


def parse(text: str) -> StepLine | None:
    """One training metrics line; None when the line holds none."""
    text = _ANSI.sub("", text)
    match = _ANCHOR.search(text)
    if match is None:
        return None
    line = StepLine(int(match.group(1)))
    set_value(line, "loss", parse_float(match.group(2)))
    for key, raw in _FIELD.findall(text, match.end()):
        if key == "grad_norm":
            set_value(line, "grad_norm", parse_float(raw))
        elif key in ("tps", "wps"):
            set_value(line, "throughput", parse_float(raw))
            line.units["throughput"] = "tokens/s"
        elif key == "elapsed_time_per_step":
            set_value(line, "step_time_seconds", parse_duration_seconds(raw))
        elif key == "memory":
            memory = _MEMORY.match(raw)
            if memory is not None:
                line.named["memory_gib"] = float(memory.group(1))
                line.named["memory_percent"] = float(memory.group(2))
        elif key == "tflops":
            set_value(line, "tflops_per_device", parse_float(raw))
        elif key == "mfu":
            add_named(line, "mfu_percent", parse_float(raw.removesuffix("%")))
        else:
            add_named(line, metric_name(key), parse_float(raw))
    return line


FORMAT = register(Format("torchtitan", "torchtitan", b"loss:", parse, detection_order=50))
