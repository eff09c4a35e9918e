"""torchtitan ``MetricsProcessor.log`` lines (torchtitan/components/metrics.py).

``step: 10  loss:  8.1234  grad_norm:  1.2345  memory: 61.20GiB(77.39%)  tps: 5,822
tflops: 335.90  mfu: 33.96%``, colored with ANSI escapes unless disabled; older versions
print ``wps:`` and no grad_norm. ``validate step:`` lines are validation, not training.

The grammar is a field table (the pairs grammar, spaced, its escapes read as absent): runs of
training lines are read by the step-field kernel, any other line by the same table.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    StepField("grad_norm", Kind.FLOAT, "grad_norm"),
    StepField("tps", Kind.FLOAT, "throughput", unit="tokens/s", aliases=("wps",)),
    StepField("elapsed_time_per_step", Kind.DURATION, "step_time_seconds"),
    StepField("tflops", Kind.FLOAT, "tflops_per_device"),
), opener="", closer="", pair_separator="", name_separator=": ", step="step", required="loss",
    renamed=(("memory", "memory_gib", "GiB"), ("memory_percent", "memory_percent", "%"), ("mfu", "mfu_percent", "%")),
    seconds=(("memory", "memory_percent"),), escapes=True, item_brackets="()", not_after=("validate",))

parse = RECORD.read_line

FORMAT = register(Format("torchtitan", "torchtitan", b"loss:", parse, detection_order=50, step_table=RECORD))
