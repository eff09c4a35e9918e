"""DeepSpeed engine lines: the lr report and the throughput timer.

``[Rank 0] step=200, skipped=4, lr=[0.00024, 0.00024], mom=[(0.9, 0.999), ...]``
(deepspeed/runtime/engine.py ``_report_progress``) and ``epoch=0/micro_step=200/global_step=200,
RunningAvgSamplesPerSec=58.7, CurrSamplesPerSec=59.6, MemAllocated=6.01GB, MaxMemAllocated=19.52GB``
(deepspeed/utils/timer.py). Both name the same step on separate lines; state merges them.
The engine never prints the loss, so a DeepSpeed file keeps looking for a format that does
(Megatron-DeepSpeed prints Megatron iteration lines next to these).

The grammar is a field table (the pairs grammar, ``name=value`` pairs ended by a comma or a
``/``): runs of these lines are read by the step-field kernel, any other line by the same
table. A line is a record with its step (``step`` or ``global_step``) and ``skipped`` or
``CurrSamplesPerSec``; the lr printed per parameter group is the first group's.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Format, register
from exporter.parse.step_table import Kind, StepField, StepTable

RECORD = StepTable((
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("CurrSamplesPerSec", Kind.FLOAT, "throughput", unit="samples/s"),
), opener="", closer="", pair_separator=",/", name_separator="=", step="step", step_aliases=("global_step",),
    renamed=(("skipped", "skipped_steps", ""), ("mom", "", ""),
             ("RunningAvgSamplesPerSec", "running_avg_samples_per_sec", ""),
             ("MemAllocated", "mem_allocated_gb", "GB"), ("MaxMemAllocated", "max_mem_allocated_gb", "GB")),
    value_brackets="[]", marks=("skipped", "CurrSamplesPerSec"))

parse = RECORD.read_line

FORMAT = register(Format("deepspeed", "deepspeed", b"step=", parse, detection_order=60, provisional=True,
                         step_table=RECORD))
