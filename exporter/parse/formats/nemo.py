"""NeMo 2 (Lightning) training progress lines (nemo/lightning/pytorch/callbacks/progress_printer.py).

``Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 |
global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106``.
The iteration counts batches within the epoch; ``global_step`` is the step. ``reduced_train_loss``
is the training loss (the mean over data-parallel ranks), ``val_loss`` the latest validation
loss, repeated on every line until the next validation: a plain value, not an aux loss.
Read before Megatron-LM, whose ``iteration N/M |`` anchor these lines also hold.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import finite_int, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_ANCHOR = lazy(r"\bTraining epoch (\d+), iteration (\d+)/(\d+)")
_GAUGES = {"reduced_train_loss": "loss", "train_loss": "loss", "lr": "learning_rate",
           "train_step_timing_in_s": "step_time_seconds", "grad_norm": "grad_norm"}


def parse(text: str) -> StepLine | None:
    """One progress line; None when the line holds none."""
    match = _ANCHOR.search(text)
    if match is None:
        return None
    line = StepLine(int(match.group(2)), named={"epoch": int(match.group(1))})
    for field in text[match.end():].split("|"):
        key, colon, raw = field.partition(":")
        value = parse_float(raw.strip()) if colon else None
        name = metric_name(key)
        if name == "global_step":
            line.step = finite_int(value) if value is not None else line.step
        elif name in _GAUGES:
            set_value(line, _GAUGES[name], value)
        else:
            add_named(line, name, value)
    return line


FORMAT = register(Format("nemo", "nemo", b"Training epoch ", parse, detection_order=25))
