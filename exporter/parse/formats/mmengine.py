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
"""

from __future__ import annotations

from exporter.parse.fields import add_named, metric_name, set_value, window_mean
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_ANCHOR = lazy(r"\b(?:Iter(?:\(train\))?\s*\[\s*(?P<iter>\d+)/\s*(?P<iters>\d+)\]"
                     r"|Epoch(?:\(train\))?\s*\[\s*(?P<epoch>\d+)\]\[\s*(?P<inner>\d+)/\s*(?P<per_epoch>\d+)\])")
_FIELD = lazy(r"([\w./-]+):\s+([^,\s]+)")
_GAUGES = {"loss": "loss", "lr": "learning_rate", "grad_norm": "grad_norm", "time": "step_time_seconds"}
_SKIPPED = ("eta",)
# LogProcessor's window_size: the default, which configs rarely change. ``time`` and ``data_time`` are means over it.
WINDOW = 10  # a duration such as "8 days, 4:44:34", not a number


def parse(text: str) -> StepLine | None:
    """One training line; None when the line holds none."""
    match = _ANCHOR.search(text)
    if match is None:
        return None
    if match.group("iter"):
        line = StepLine(int(match.group("iter")), {"total_steps": int(match.group("iters"))})
    else:
        epoch, inner, per_epoch = (int(match.group(name)) for name in ("epoch", "inner", "per_epoch"))
        line = StepLine((epoch - 1) * per_epoch + inner, named={"epoch": epoch})
    for key, raw in _FIELD.findall(text, match.end()):
        if key in _SKIPPED:
            continue
        value = parse_float(raw)
        if key in _GAUGES:
            set_value(line, _GAUGES[key], value)
        else:
            add_named(line, "memory_mb" if key == "memory" else metric_name(key), value)
    window_mean(line, WINDOW)
    return line


FORMAT = register(Format("mmengine", "openmmlab", b"lr: ", parse, detection_order=35))
