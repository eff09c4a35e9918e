"""MindFormers PyNative step lines gathered into a StepBatch, one batch per block.

During catch-up a worker log holds tens of thousands of step lines: a StepRecord each, then
applying them one by one, costs more than reading the whole file. ``new_step_columns``
gives the native accumulator (parse/_speedups.c) where the extension is built, else the
Python one below, which defines what the native one does (tests/test_speedups.py).

``add`` declines a line (False) that holds no record, and a line that has to be read by
the line parser instead: one with a torchrun rank prefix, and, for the native one, a line
that is not ASCII or whose step does not fit in 64 bits.
"""

from __future__ import annotations

import itertools
from typing import Protocol

from exporter.parse import mindformers
from exporter.parse.prefixes import RANK_PREFIX
from exporter.parse.records import StepBatch, StepRecord

try:
    from exporter.parse._speedups import StepColumns as NativeStepColumns
except ImportError:  # pragma: no cover - built without a C compiler
    NativeStepColumns = None

class Columns(Protocol):
    def add(self, line: bytes) -> bool: ...

    def add_lines(self, data: bytes, starts: list[int], index: int) -> int: ...

    def take(self) -> StepBatch: ...

    def __len__(self) -> int: ...


class StepColumns:
    """Step records of consecutive lines, kept as a StepBatch is made of them."""

    def __init__(self, batch_type: type = StepBatch) -> None:
        self._batch_type = batch_type
        self._clear()

    def __len__(self) -> int:
        return len(self._steps)

    def add(self, line: bytes) -> bool:
        if RANK_PREFIX.match(line):  # its rank is the line parser's business
            return False
        record = mindformers.parse_pynative(line.decode("utf-8", "replace"))
        if record is None:
            return False
        self._append(record)
        return True

    def add_lines(self, data: bytes, starts: list[int], index: int) -> int:
        """``add`` the lines starting at ``starts[index:]`` up to the first one declined; how many were added."""
        taken = 0
        for start in itertools.islice(starts, index, None):
            end = data.find(b"\n", start)
            if not self.add(data[start:end if end >= 0 else len(data)]):
                break
            taken += 1
        return taken

    def take(self) -> StepBatch:
        batch = self._batch_type(self._steps, self._total_steps, self._loss_steps, self._losses,
                                 self._grad_norm_steps, self._grad_norms, self._learning_rate,
                                 self._step_time_seconds, self._throughput, self._throughput_unit, self._named)
        self._clear()
        return batch

    def _append(self, record: StepRecord) -> None:
        self._steps.append(record.step)
        self._total_steps = record.total_steps
        if record.learning_rate is not None:
            self._learning_rate = record.learning_rate
        if record.step_time_seconds is not None:
            self._step_time_seconds = record.step_time_seconds
        if record.throughput is not None:
            self._throughput = record.throughput
            if record.throughput_unit:
                self._throughput_unit = record.throughput_unit
        for name, value in (*record.aux_losses.items(), *record.extra.items()):
            self._named[name] = (value, self._named.get(name, (None, 0))[1] + 1)
        if record.loss is not None:
            self._loss_steps.append(record.step)
            self._losses.append(record.loss)
        if record.grad_norm is not None:
            self._grad_norm_steps.append(record.step)
            self._grad_norms.append(record.grad_norm)

    def _clear(self) -> None:
        self._steps: list[int] = []
        self._total_steps: int | None = None
        self._loss_steps: list[int] = []
        self._losses: list[float] = []
        self._grad_norm_steps: list[int] = []
        self._grad_norms: list[float] = []
        self._learning_rate: float | None = None
        self._step_time_seconds: float | None = None
        self._throughput: float | None = None
        self._throughput_unit: str | None = None
        self._named: dict[str, tuple[float, int]] = {}


def new_step_columns() -> Columns:
    """The fastest accumulator this installation has."""
    return NativeStepColumns(StepBatch) if NativeStepColumns is not None else StepColumns()
