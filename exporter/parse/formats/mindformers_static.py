"""MindFormers static-graph ``MFLossMonitor`` lines (mindformers/core/callback/callback.py).

``{ Epoch:[  1/  2], step:[    3/   19], loss: 9.673, per_step_time: 1754ms, lr: 9.981987e-06,
overflow cond: False, loss_scale: 1.0, global_norm: [10.579812], train_throughput_per_npu: 170.523T``
(the closing ``}`` ends the progress-bar line that follows). ``step:[x/y]`` counts within the
epoch, so the global step is ``(epoch - 1) * y + x`` (``max(epoch - 1, 0)``: some old versions
count epochs from 0, docs/formats.md). Values are printed with ``%s``: numpy arrays in brackets,
``unavailable`` for an unknown loss scale.

Two more layouts share the anchor. Older MFLossMonitor versions print no ``{`` and the step
time as ``time:``: ``Epoch:[  1/  2], step:[    3/   19], loss:[9.673/9.673], time:1754.123 ms,
lr:[1e-05], overflow cond: False, loss_scale: 1.0`` (the loss pair: this step's, the epoch's
mean). TrainingStateMonitor prints one value a line, which this rank computed for itself:
``Epoch:[  1/  1], step:[   10/ 1000] device_local_norm: 1.2345`` (also ``micro_local_loss``, once
per micro-batch, ``device_accum_local_loss`` and ``local_norm/<parameter>``). Those become named
values at the step (``training_metric``), per rank, for the rank-divergence view.

All three are one field table (the pairs grammar, its step in brackets within an outer count):
runs of them are read by the step-field kernel (every value of a rank's own kept), any other line
by the same table.
"""

from __future__ import annotations

from exporter.parse.fields import RANK_VALUE_PARTS
from exporter.parse.formats.mindformers import BANNER, FRAMEWORK
from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("per_step_time", Kind.DURATION, "step_time_seconds", default_unit="ms", aliases=("time",)),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("global_norm", Kind.FLOAT, "grad_norm"),
    StepField("train_throughput_per_npu", Kind.NUMBER_WITH_UNIT, "throughput", unit="T"),
), opener="", closer="", pair_separator=",}", name_separator=": ", step="step:", step_brackets="[]",
    name_bytes="./-", value_brackets="[]", outer="Epoch:",
    outer_names=("epoch", "total_epochs", "epoch_step", "steps_per_epoch"),
    # ``overflow cond: False``: the pairs grammar's name is the word before the colon.
    renamed=(("cond", "overflow", ""),), seconds=(("loss", "loss_epoch_mean"),), words=(("False", 0.0), ("True", 1.0)),
    every_value=RANK_VALUE_PARTS)  # the rank-divergence detector takes each of them

FORMAT = register(Format("mindformers_static", FRAMEWORK, b"Epoch:[", RECORD.read_line, detection_order=10,
                         step_table=RECORD, banner=BANNER))
