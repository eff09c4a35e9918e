"""Plain ``step=1200 loss=2.31 lr=0.0001 grad_norm=1.8`` lines.

The record's grammar is a field table (the pairs grammar): runs of step lines are read by the
step-field kernel, any other line by the same table in Python. A record needs an integer step
(``step=N`` or ``step=N/TOTAL``, else ``global_step`` or ``iteration``) and a loss.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("lr", Kind.FLOAT, "learning_rate", aliases=("learning_rate",)),
    StepField("grad_norm", Kind.FLOAT, "grad_norm", aliases=("gnorm", "global_norm")),
    StepField("step_time", Kind.DURATION, "step_time_seconds", aliases=("per_step_time", "time_per_step")),
    StepField("throughput", Kind.FLOAT, "throughput"),
    # A comma ends a value but as a thousands separator (1,234.5).
), opener="", closer="", pair_separator=",;|", name_separator="=", step="step",
    step_aliases=("global_step", "iteration"), required="loss")

parse = RECORD.read_line

# A convention many training loops follow, no framework's: the most generic anchor, tried last.
FORMAT = register(Format("keyvalue", "", b"step=", parse, detection_order=80, step_table=RECORD))
