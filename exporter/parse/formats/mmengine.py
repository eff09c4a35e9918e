"""OpenMMLab training lines: MMEngine's LogProcessor and mmcv 1.x's TextLoggerHook.

MMEngine: ``Iter(train) [  10/270]  lr: 1.000e-02  eta: 0:00:27  time: 0.004  data_time: 0.000
memory: 0  loss: 5.3294`` and, epoch-based, ``Epoch(train)  [1][   1/1051]  lr: 9.0530e-09 ...
loss: 7.6343  loss_cls: 3.1140``. mmcv: ``Iter [200/21600]\\tlr: 9.998e-03, eta: 1:05:45, time:
0.141, data_time: 0.008, memory: 22159, decode.loss_ce: 1.2669, ..., loss: 1.7573`` and ``Epoch
[3][50/2500]\\tlr: 0.02000, time: 1.090, ...``. An epoch-based line counts within the epoch:
the step is ``(epoch - 1) * iterations_per_epoch + i``. ``time`` is seconds per iteration, the mean
of the last ``window_size`` (10) iterations (as every smoothed value: ``loss`` too), so marked:
``memory`` MB. ``(val)``/``(test)`` lines are evaluation. Loss terms are named ``loss_*``
(``loss_cls``, ``decode.loss_ce``): plain values, as printed.

The iteration lines' grammar is a field table (the pairs grammar, its step in brackets): runs of
them are read by the step-field kernel, any other line by the same table; an epoch-based line,
whose step is arithmetic, by the regular expression below.
"""

from __future__ import annotations

from exporter.parse.fields import WINDOW_UNIT, add_named, metric_name, set_value, window_mean
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine
from exporter.parse.step_table import Kind, StepField, StepTable

# LogProcessor's window_size: the default, which configs rarely change. ``time`` and ``data_time`` are means over it.
WINDOW = 10
_GAUGES = {"loss": "loss", "lr": "learning_rate", "grad_norm": "grad_norm", "time": "step_time_seconds"}
_RENAMED = {"eta": "", "memory": "memory_mb"}  # eta: a duration such as "8 days, 4:44:34", not a number

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    StepField("time", Kind.DURATION, "step_time_seconds", unit=WINDOW_UNIT.format(steps=WINDOW)),
), opener="", closer="", pair_separator=",", name_separator=": ", step="Iter(train)", step_aliases=("Iter",),
    step_brackets="[]", name_bytes="./-", renamed=tuple((printed, name, "") for printed, name in _RENAMED.items()))

_EPOCH = lazy(r"\bEpoch(?:\(train\))?\s*\[\s*(?P<epoch>\d+)\]\[\s*(?P<inner>\d+)/\s*(?P<per_epoch>\d+)\]")
_FIELD = lazy(r"([\w./-]+):\s+([^,\s]+)")


def parse(text: str) -> StepLine | None:
    """One training line; None when the line holds none."""
    return RECORD.read_line(text) or _epoch_line(text)


def _epoch_line(text: str) -> StepLine | None:
    match = _EPOCH.search(text)
    if match is None:
        return None
    epoch, inner, per_epoch = (int(match.group(name)) for name in ("epoch", "inner", "per_epoch"))
    line = StepLine((epoch - 1) * per_epoch + inner, named={"epoch": epoch})
    for key, raw in _FIELD.findall(text, match.end()):
        value = parse_float(raw)
        if key in _GAUGES:
            set_value(line, _GAUGES[key], value)
        elif _RENAMED.get(key) != "":
            add_named(line, _RENAMED.get(key) or metric_name(key), value)
    window_mean(line, WINDOW)
    return line


FORMAT = register(Format("mmengine", "openmmlab", b"lr: ", parse, detection_order=35, step_table=RECORD))
