"""Megatron-LM ``training_log`` lines (megatron/training/training.py).

`` [2025-03-02 10:15:31.123456] iteration      100/   50000 | consumed samples: 51200 |
elapsed time per iteration (ms): 1523.4 | ... | lm loss: 2.345678E+00 | load_balancing_loss: ... |
mtp_1 loss: ... | loss scale: 1.0 | grad norm: 0.873 | number of skipped iterations: 0 |
number of nan iterations: 0 |``. Every field but the iteration is optional and versions add
more, so the line is split on ``|`` and read as ``key: value`` pairs. Versions before 2021
(and the DeepSpeedExamples copy) print some keys without the colon: ``learning rate 1.258E-04 |
lm loss 4.799004E+00 | loss scale 32768.0 |``; there the value is the field's last word.

Megatron prints a loss only ``if avg >= 0.0``: a NaN loss vanishes from the line. The
"number of nan iterations" of the interval is kept so state can count it as a non-finite loss.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import finite_int, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

THROUGHPUT_UNIT = "TFLOP/s/GPU"

_ANCHOR = lazy(r"\biteration\s+(\d+)/\s*(\d+)\s*\|")


def parse(text: str) -> StepLine | None:
    """One iteration line; None when the line holds none."""
    match = _ANCHOR.search(text)
    if match is None:
        return None
    line = StepLine(int(match.group(1)), {"total_steps": int(match.group(2))})
    for field in text[match.end():].split("|"):
        key, colon, raw = field.partition(":")
        if not colon:
            key, _, raw = field.strip().rpartition(" ")
        if key:
            _apply_field(line, key.strip(), parse_float(raw.strip()))
    return line


def _apply_field(line: StepLine, key: str, value: float | None) -> None:
    if value is None:
        return
    name = metric_name(key.removeprefix("number of "))
    if name in ("lm_loss", "loss"):
        set_value(line, "loss", value)
    elif name == "elapsed_time_per_iteration":
        set_value(line, "step_time_seconds", value / 1000 if "(ms)" in key else value)
    elif name == "learning_rate":
        set_value(line, "learning_rate", value)
    elif name == "grad_norm":
        set_value(line, "grad_norm", value)
    elif name in ("throughput_per_gpu", "tflops"):  # TFLOPs: Megatron-DeepSpeed's spelling
        # The model TFLOP/s per GPU, and Megatron's only throughput figure: both gauges.
        set_value(line, "tflops_per_device", value)
        set_value(line, "throughput", value)
        line.units["throughput"] = THROUGHPUT_UNIT
    else:
        if name == "nan_iterations":
            # A count printed as "nan" (an interval whose every loss was NaN) says nothing countable.
            line.unprinted_nonfinite_losses = finite_int(value) or 0
        # "mtp_1 loss" -> mtp_1_loss: loss terms are auxiliary losses.
        add_named(line, name, value)


FORMAT = register(Format("megatron", "megatron", b"iteration", parse, detection_order=30))
