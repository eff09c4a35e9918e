"""MMEngine's ``vis_data/scalars.json``: the Runner's LoggerHook writes each logged iteration's scalars there.

``{"lr": 0.05, "data_time": 0.0019, "loss": 7.916, "time": 0.1168, "iter": 1, "memory": 1024, "step": 1}``: the
values of the console's line (parse/formats/mmengine.py) unrounded, ``step`` the global iteration (epoch-based runs
too). ``time`` is the mean iteration time of the LogProcessor's window, ``memory`` MB, as the console prints them.
A JSON grammar field table: runs of records are read by the step-field kernel, any other line by the same table.
"""

from __future__ import annotations

from exporter.parse.fields import WINDOW_UNIT
from exporter.parse.formats.mmengine import FORMAT as CONSOLE
from exporter.parse.formats.mmengine import WINDOW
from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    StepField("time", Kind.FLOAT, "step_time_seconds", unit=WINDOW_UNIT.format(steps=WINDOW)),
), opener="", closer="", pair_separator=",", name_separator=":", step="step", required="loss", json=True,
    renamed=(("memory", "memory_mb", ""),), marks=("data_time",))  # another JSON line is no scalars.json record

# Before the JSON lines format (70): its records are JSON lines too, ``data_time`` tells them.
FORMAT = register(Format("mmengine_scalars", CONSOLE.framework, b'"data_time": ', RECORD.read_line,
                         detection_order=65, step_table=RECORD))
