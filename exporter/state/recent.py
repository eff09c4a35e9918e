"""The last steps of one rank, for the status page's charts: a bounded ring, compact and cheap to feed.

A batch hands its whole loss series; the ring copies only the tail that can still be
shown (at most ``RECENT_STEPS`` rows, at C speed), so catch-up over millions of lines
costs one slice per batch, not one Python step per line. Rows live in three typed arrays
(step, loss, step time: 16 bytes a row), which grow to twice the capacity and then drop
their older half: at most ``2 * RECENT_STEPS`` rows, 8 KiB a rank, about 8.5 MB at 1,024
ranks (tests/test_recent_steps.py measures it). Checkpoints do not keep the ring: after
a restart the charts fill again from the lines read next.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

RECENT_STEPS = 256  # rows a chart can show; the demo's spike at step 120 stays in view until step 376
UNKNOWN_STEP = -1  # a row of a format that prints no step (Hugging Face Trainer's log dicts)
_NAN = math.nan


class RecentSteps:
    """Rows of (step, loss, step time); a value a line did not print is NaN."""

    __slots__ = ("_losses", "_step_times", "_steps")

    def __init__(self) -> None:
        self._steps = array("q")
        self._losses = array("f")  # single precision: a chart needs no more, and it halves the memory
        self._step_times = array("f")

    def __len__(self) -> int:
        return min(len(self._steps), RECENT_STEPS)

    def add(self, steps: Sequence[int | None], losses: Sequence[float], step_time: float | None) -> None:
        """A batch's rows: its losses at their steps; ``step_time`` (the batch's latest) goes on the last row."""
        steps, losses = steps[-RECENT_STEPS:], losses[-RECENT_STEPS:]
        if not steps:
            return
        self._steps.extend(_step_column(steps))
        self._losses.extend(losses)
        self._step_times.extend((*[_NAN] * (len(steps) - 1), _NAN if step_time is None else step_time))
        if len(self._steps) > 2 * RECENT_STEPS:
            for column in (self._steps, self._losses, self._step_times):
                del column[:-RECENT_STEPS]

    def columns(self) -> tuple[array, array, array]:
        """Copies of the last ``RECENT_STEPS`` rows, oldest first, as (steps, losses, step times): a memory copy,
        quick enough to take under the state's lock."""
        return self._steps[-RECENT_STEPS:], self._losses[-RECENT_STEPS:], self._step_times[-RECENT_STEPS:]


def _step_column(steps: Sequence[int | None]) -> array:
    """The steps as a typed column, built whole before the ring changes; an unknown or absurd step is UNKNOWN_STEP."""
    if None in steps:
        steps = [UNKNOWN_STEP if step is None else step for step in steps]
    try:
        return array("q", steps)
    except OverflowError:  # a step beyond 2**63 is no step a trainer printed
        return array("q", [step if -(1 << 63) <= step < 1 << 63 else UNKNOWN_STEP for step in steps])  # type: ignore[operator]
