"""MindFormers static-graph ``MFLossMonitor`` lines (mindformers/core/callback/callback.py).

``{ Epoch:[  1/  2], step:[    3/   19], loss: 9.673, per_step_time: 1754ms, lr: 9.981987e-06,
overflow cond: False, loss_scale: 1.0, global_norm: [10.579812], train_throughput_per_npu: 170.523T``
(the closing ``}`` ends the progress-bar line that follows). ``step:[x/y]`` counts within the
epoch, so the global step is ``(epoch - 1) * y + x``. Values are printed with ``%s``: numpy
arrays in brackets, ``unavailable`` for an unknown loss scale.

Two more layouts share the anchor. Older MFLossMonitor versions print no ``{`` and the step
time as ``time:``: ``Epoch:[  1/  2], step:[    3/   19], loss:[9.673/9.673], time:1754.123 ms,
lr:[1e-05], overflow cond: False, loss_scale: 1.0``. TrainingStateMonitor prints one value a
line, which this rank computed for itself: ``Epoch:[  1/  1], step:[   10/ 1000]
device_local_norm: 1.2345`` (also ``micro_local_loss``, once per micro-batch,
``device_accum_local_loss`` and ``local_norm/<parameter>``). Those become named values at the
step (``training_metric``), per rank, for the rank-divergence view.
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value
from exporter.parse.formats.mindformers import BANNER, FRAMEWORK
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_duration_seconds, parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_RECORD = lazy(r"(?:\{\s*)?Epoch:\[\s*(\d+)/\s*(\d+)\],\s*step:\[\s*(\d+)/\s*(\d+)\]"
                     r"(?:,(?P<body>[^{}]*)| (?P<tag>[\w./-]+): (?P<value>\S+)$)")
# ``key: value`` or ``global_norm [..]`` (no colon in some versions); values hold no comma but a thousands
# separator (a comma before exactly three digits: 1,234.5).
_FIELD = lazy(r"\s*(?P<key>[A-Za-z_][\w ]*?)\s*(?::\s*|(?=\[))"
                    r"(?P<value>(?:[^,]|,(?=[0-9]{3}(?![0-9])))*?)\s*(?:,|\}|$)")
_LOSS_PAIR = lazy(r"^\[\s*([^/\]]+?)\s*/\s*([^\]]+?)\s*\]$")  # non-sink mode: [this step/epoch mean]
_BOOLEANS = {"True": 1.0, "False": 0.0}


def parse(text: str) -> StepLine | None:
    """One MFLossMonitor record; None when the line holds none."""
    match = _RECORD.search(text)
    if match is None:
        return None
    epoch, epochs, epoch_step, steps_per_epoch = (int(group) for group in match.groups()[:4])
    # max(): some old versions count epochs from 0 (docs/formats.md).
    line = StepLine(max(epoch - 1, 0) * steps_per_epoch + epoch_step, {"total_steps": epochs * steps_per_epoch})
    if match.group("tag"):  # a TrainingStateMonitor value
        add_named(line, metric_name(match.group("tag")), parse_float(match.group("value")))
        return line
    line.named.update(epoch=epoch, total_epochs=epochs, epoch_step=epoch_step, steps_per_epoch=steps_per_epoch)
    for field in _FIELD.finditer(match.group("body")):
        _apply_field(line, field.group("key"), field.group("value"))
    return line


def _apply_field(line: StepLine, key: str, raw: str) -> None:
    if key == "loss":
        pair = _LOSS_PAIR.match(raw)
        if pair is not None:
            set_value(line, "loss", _number(pair.group(1)))
            add_named(line, "loss_epoch_mean", _number(pair.group(2)))
        else:
            set_value(line, "loss", _number(raw))
    elif key in ("per_step_time", "time"):  # "1754ms"; older versions "time:1754.123 ms"
        set_value(line, "step_time_seconds", parse_duration_seconds(raw, "ms"))
    elif key == "lr":
        set_value(line, "learning_rate", _number(raw))
    elif key == "global_norm":
        set_value(line, "grad_norm", _number(raw))
    elif key == "train_throughput_per_npu":
        set_value(line, "throughput", _number(raw.removesuffix("T")))
        line.units["throughput"] = "T"
    elif key == "overflow cond":
        add_named(line, "overflow", _BOOLEANS.get(raw.strip("[] ")))
    else:
        add_named(line, metric_name(key), _number(raw))


def _number(raw: str) -> float | None:
    """'1e-05', '[10.579812]', '[inf]'; 'unavailable' and arrays of several values are None."""
    return parse_float(raw.strip().strip("[]").strip())


FORMAT = register(Format("mindformers_static", FRAMEWORK, b"Epoch:[", parse, detection_order=10, banner=BANNER))
