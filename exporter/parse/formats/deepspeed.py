"""DeepSpeed engine lines: the lr report and the throughput timer.

``[Rank 0] step=200, skipped=4, lr=[0.00024, 0.00024], mom=[(0.9, 0.999), ...]``
(deepspeed/runtime/engine.py ``_report_progress``) and ``epoch=0/micro_step=200/global_step=200,
RunningAvgSamplesPerSec=58.7, CurrSamplesPerSec=59.6, MemAllocated=6.01GB, MaxMemAllocated=19.52GB``
(deepspeed/utils/timer.py). Both name the same step on separate lines; state merges them.
The engine never prints the loss, so a DeepSpeed file keeps looking for a format that does
(Megatron-DeepSpeed prints Megatron iteration lines next to these).
"""

from __future__ import annotations

from exporter.parse.fields import set_value
from exporter.parse.formats.registry import Format, register
from exporter.parse.numbers import parse_float
from exporter.parse.patterns import lazy
from exporter.parse.records import StepLine

_PROGRESS = lazy(r"\bstep=(\d+), skipped=(\d+), lr=\[([^\],]*)")
_TIMER = lazy(
    r"\bepoch=(\d+)/micro_step=(\d+)/global_step=(\d+), RunningAvgSamplesPerSec=([^,\s]+), CurrSamplesPerSec=([^,\s]+)"
    r"(?:, MemAllocated=([\d.]+)GB, MaxMemAllocated=([\d.]+)GB)?")


def parse(text: str) -> StepLine | None:
    """An lr report or a throughput line; None when the line holds neither."""
    match = _PROGRESS.search(text)
    if match is not None:
        line = StepLine(int(match.group(1)), named={"skipped_steps": int(match.group(2))})
        set_value(line, "learning_rate", parse_float(match.group(3)))
        return line
    match = _TIMER.search(text)
    if match is None:
        return None
    epoch, micro_step, step, running_avg, current, allocated, max_allocated = match.groups()
    line = StepLine(int(step), units={"throughput": "samples/s"})
    set_value(line, "throughput", parse_float(current))
    named = {"epoch": parse_float(epoch), "micro_step": parse_float(micro_step),
             "running_avg_samples_per_sec": parse_float(running_avg),
             "mem_allocated_gb": parse_float(allocated or ""), "max_mem_allocated_gb": parse_float(max_allocated or "")}
    line.named.update({name: value for name, value in named.items() if value is not None})
    return line


FORMAT = register(Format("deepspeed", "deepspeed", b"step=", parse, detection_order=60, provisional=True))
