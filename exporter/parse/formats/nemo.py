"""NeMo 2 (Lightning) training progress lines (nemo/lightning/pytorch/callbacks/progress_printer.py).

``Training epoch 0, iteration 120/149 | lr: 3e-05 | consumed_samples: 121 | global_batch_size: 1 |
global_step: 120 | reduced_train_loss: 1.233 | train_step_timing in s: 0.03146 | val_loss: 4.106``.
The iteration counts batches within the epoch; ``global_step`` is the step (the epoch a named
value). ``reduced_train_loss`` is the training loss (the mean over data-parallel ranks),
``val_loss`` the latest validation loss, repeated on every line until the next validation: a
plain value, not an aux loss. Read before Megatron-LM, whose ``iteration N/M |`` anchor these
lines also hold.

The grammar is a field table (the segments grammar, as Megatron-LM's): runs of progress lines
are read by the step-field kernel, any other line by the same table.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("reduced_train_loss", Kind.FLOAT, "loss", aliases=("train_loss",)),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("train_step_timing_in_s", Kind.DURATION, "step_time_seconds"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
), opener="", closer="", pair_separator="|", name_separator=":", step="iteration", segments=True,
    step_segment="global_step", lead="Training epoch", lead_name="epoch")

parse = RECORD.read_line

FORMAT = register(Format("nemo", "nemo", b"Training epoch ", parse, detection_order=25, step_table=RECORD))
