"""The last steps of one rank, for the status page's charts: a bounded ring, compact and cheap to feed.

A batch hands its whole loss series; the ring copies only the tail that can still be
shown (at most ``RECENT_STEPS`` rows, at C speed), so catch-up over millions of lines
costs one slice per batch, not one Python step per line. A batch of ``RECENT_STEPS`` rows
or more is the whole ring: its tail is kept as it came (two slices) and made rows only
when the ring is read or added to, so a catch-up's thousands of long batches make none
but the last (its batches of a block a rank cost a tenth of the main thread's time
otherwise: the 2,000,000-line torchrun console). Rows live in three typed arrays
(step, loss, step time: 16 bytes a row), which grow to twice the capacity and then drop
their older half: at most ``2 * RECENT_STEPS`` rows, 8 KiB a rank, about 8.5 MB at 1,024
ranks (tests/test_recent_steps.py measures it); a tail kept as it came holds its rows'
step objects a while longer (some 11 KiB, until the next read or batch). Checkpoints do
not keep the ring: after a restart the charts fill again from the lines read next.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from typing import cast

from exporter.parse.records import every_step_printed

RECENT_STEPS = 256  # rows a chart can show; the demo's spike at step 120 stays in view until step 376
UNKNOWN_STEP = -1  # a row of a format that prints no step (Hugging Face Trainer's log dicts)
_NAN = math.nan
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NANS = array("f", [_NAN] * (RECENT_STEPS - 1))  # the step times of a batch's rows before its last


class RecentSteps:
    """Rows of (step, loss, step time); a value a line did not print is NaN."""

    __slots__ = ("_losses", "_step_times", "_steps", "_tail")

    def __init__(self) -> None:
        self._steps = array("q")
        self._losses = array("f")  # single precision: a chart needs no more, and it halves the memory
        self._step_times = array("f")
        # A batch's last RECENT_STEPS rows as they came (steps, losses, step time), the whole ring until it is read or
        # added to; None: the arrays hold it.
        self._tail: tuple[Sequence[int | None], Sequence[float], float | None] | None = None

    def __len__(self) -> int:
        return RECENT_STEPS if self._tail is not None else min(len(self._steps), RECENT_STEPS)

    def add(self, steps: Sequence[int | None], losses: Sequence[float], step_time: float | None) -> None:
        """A batch's rows: its losses at their steps; ``step_time`` (the batch's latest) goes on the last row."""
        if len(steps) >= RECENT_STEPS:  # the whole ring: the rows before it are never shown again
            self._tail = (steps[-RECENT_STEPS:], losses[-RECENT_STEPS:], step_time)
            return
        if not steps:
            return
        self._settle()
        self._append(steps, losses, step_time)

    def _settle(self) -> None:
        """The tail kept as it came, made the ring's rows."""
        if self._tail is None:
            return
        steps, losses, step_time = self._tail
        self._tail = None
        for column in (self._steps, self._losses, self._step_times):
            del column[:]
        self._append(steps, losses, step_time)

    def _append(self, steps: Sequence[int | None], losses: Sequence[float], step_time: float | None) -> None:
        """Rows at the ring's end (at most RECENT_STEPS of them), its older half dropped once it holds twice that."""
        self._add_steps(steps)
        self._losses.extend(array("f", losses))  # a list into a new array is the fast path; extend(list) is not
        self._step_times.extend(_NANS[:len(steps) - 1])
        self._step_times.append(_NAN if step_time is None else step_time)
        if len(self._steps) > 2 * RECENT_STEPS:
            for column in (self._steps, self._losses, self._step_times):
                del column[:-RECENT_STEPS]

    def _add_steps(self, steps: Sequence[int | None]) -> None:
        """The steps; an unknown (None) or absurd one (beyond 64 bits) as UNKNOWN_STEP."""
        known = steps if every_step_printed(steps) else [UNKNOWN_STEP if step is None else step for step in steps]
        try:
            column = array("q", cast("Sequence[int]", known))
        except OverflowError:  # no trainer prints a step beyond 2**63; a damaged line might
            column = array("q", [step if _INT64_MIN <= step <= _INT64_MAX else UNKNOWN_STEP
                                 for step in cast("Sequence[int]", known)])
        self._steps.extend(column)

    def columns(self) -> tuple[array, array, array]:
        """Copies of the last ``RECENT_STEPS`` rows, oldest first, as (steps, losses, step times): a memory copy,
        quick enough to take under the state's lock (once after a long batch, its rows made first)."""
        self._settle()
        return self._steps[-RECENT_STEPS:], self._losses[-RECENT_STEPS:], self._step_times[-RECENT_STEPS:]

