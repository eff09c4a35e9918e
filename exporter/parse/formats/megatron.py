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

The grammar is a field table (the segments grammar): runs of iteration lines are read by the
step-field kernel, any other line by the same table.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

THROUGHPUT_UNIT = "TFLOP/s/GPU"

# Names as normalised (parse/fields.metric_name): ``lm loss`` is lm_loss, ``elapsed time per iteration (ms)``
# elapsed_time_per_iteration in ms, ``number of nan iterations`` nan_iterations.
RECORD = StepTable((
    StepField("lm_loss", Kind.FLOAT, "loss", aliases=("loss",)),
    StepField("elapsed_time_per_iteration", Kind.DURATION, "step_time_seconds"),
    StepField("learning_rate", Kind.FLOAT, "learning_rate"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    # The model TFLOP/s per GPU, and Megatron's only throughput figure: both gauges (TFLOPs: Megatron-DeepSpeed's).
    StepField("throughput_per_gpu", Kind.FLOAT, "throughput", aliases=("tflops",), unit=THROUGHPUT_UNIT,
              also_sets=("tflops_per_device",)),
), opener="", closer="", pair_separator="|", name_separator=":", step="iteration", segments=True,
    dropped="number of ", unprinted_nonfinite="nan_iterations")

parse = RECORD.read_line

FORMAT = register(Format("megatron", "megatron", b"iteration", parse, detection_order=30, step_table=RECORD))
