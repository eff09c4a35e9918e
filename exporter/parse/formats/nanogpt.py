"""nanoGPT ``train.py`` iteration lines.

``iter 10: loss 3.2202, time 893.76ms, mfu 16.68%`` (older versions print no mfu). The mfu is
a running average and reads -100.00% until it has one: no value then. ``step 250: train loss
..., val loss ...`` is the evaluation, not a training step.

The grammar is a field table (the segments grammar: the step without a total, closed by ``:``,
then ``name value`` segments): runs of iteration lines are read by the step-field kernel, any
other line by the same table.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("time", Kind.DURATION, "step_time_seconds"),
), opener="", closer="", pair_separator=",", name_separator=":", step="iter", segments=True, step_close=":",
    percent="_percent")

parse = RECORD.read_line

FORMAT = register(Format("nanogpt", "nanogpt", b"iter ", parse, detection_order=55, step_table=RECORD))
