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

Both layouts are one field table (the pairs grammar, its step in brackets, an epoch-based line's after
its epoch): runs of them are read by the step-field kernel, any other line by the same table.
"""

from __future__ import annotations

from exporter.parse.fields import WINDOW_UNIT
from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

# LogProcessor's window_size: the default, which configs rarely change. ``time`` and ``data_time`` are means over it.
WINDOW = 10
_RENAMED = {"eta": "", "memory": "memory_mb"}  # eta: a duration such as "8 days, 4:44:34", not a number

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    StepField("time", Kind.DURATION, "step_time_seconds", unit=WINDOW_UNIT.format(steps=WINDOW)),
), opener="", closer="", pair_separator=",", name_separator=": ", step="Iter(train)", step_aliases=("Iter",),
    step_brackets="[]", name_bytes="./-", renamed=tuple((printed, name, "") for printed, name in _RENAMED.items()),
    step_count="epoch", count_steps=("Epoch(train)", "Epoch"))

FORMAT = register(Format("mmengine", "openmmlab", b"lr: ", RECORD.read_line, detection_order=35, step_table=RECORD))
