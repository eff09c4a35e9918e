"""PaddleNLP Trainer log lines (paddlenlp/trainer/trainer.py, ``logger.info`` of the logs dict).

``[    INFO] - loss: 2.00048828, learning_rate: 2.1e-06, global_step: 20, interval_runtime: 26.3106,
interval_samples_per_second: 6.081193361471736, interval_steps_per_second: 0.760149170183967,
epoch: 0.0014``. The interval figures are averages over the logging interval: the step time
is one over ``interval_steps_per_second``. (Its tqdm mode prints Hugging Face-style dicts
instead, read by ``hf_trainer``.)

The grammar is a field table (the pairs grammar, ``name: value`` pairs): runs of logs lines are
read by the step-field kernel, any other line by the same table. A line is a record with its
``global_step`` and its ``loss``.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("learning_rate", Kind.FLOAT, "learning_rate"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    StepField("interval_steps_per_second", Kind.RECIPROCAL, "step_time_seconds"),
    StepField("interval_samples_per_second", Kind.FLOAT, "throughput", unit="samples/s"),
), opener="", closer="", pair_separator=",", name_separator=": ", step="global_step", required="loss")

parse = RECORD.read_line

FORMAT = register(Format("paddlenlp", "paddlenlp", b"global_step: ", parse, detection_order=45, step_table=RECORD))
