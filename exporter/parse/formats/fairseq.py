"""fairseq's plain progress records (fairseq/logging/progress_bar.py, SimpleProgressBar).

``| epoch 001:    450 / 1891 loss=11.521, nll_loss=10.881, ppl=1886.05, wps=52922, ups=0.5,
wpb=104928, bsz=5325, num_updates=445, lr=8.90889e-05, gnorm=1.543, clip=0%, oom=0,
loss_scale=2.000, wall=882, train_wall=756`` (newer versions put a logger prefix such as
``2021-03-02 10:00:00 | INFO | train_inner |`` in front). The ``450 / 1891`` counts batches
within the epoch; ``num_updates`` is the step. ``wps`` (words per second) is the throughput.
``--log-format json`` records are read by ``jsonl``.

The grammar is a field table (the pairs grammar, ``name=value`` pairs after the lead ``epoch 001:
550 / 1891``, whose counter is the named value ``epoch``): runs of progress records are read by the
step-field kernel, any other line by the same table. A line is a record with its lead, its
``num_updates`` (fairseq before 0.6 prints none: no step, no record) and its ``loss``. The lead's
batch count keeps out the tqdm bar (``--log-format tqdm`` on a terminal: ``| epoch 001:   0%| |
50/11265 [02:25<9:05:31,  2.92s/it, loss=0.000, ...``), whose postfix tqdm cuts at the terminal's
width, numbers too.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("gnorm", Kind.FLOAT, "grad_norm"),
    StepField("wps", Kind.FLOAT, "throughput", unit="words/s"),
), opener="", closer="", pair_separator=",", name_separator="=", step="num_updates", required="loss",
    lead="epoch", lead_name="epoch", lead_close=":")

parse = RECORD.read_line

FORMAT = register(Format("fairseq", "fairseq", b" loss=", parse, detection_order=65, step_table=RECORD))
