"""Slowdown (fail-slow): a rank's step time held well above its own baseline for a sustained run of steps.

In synchronous training every rank waits for the slowest at each collective, so a slow
card or link shows as every rank slowing down together: each rank is compared with its
own history, never with the others. A run of slow steps shorter than ``slowdown_steps``
is a blip and stays out of the baseline. A one-step blip is what a checkpoint save looks
like: the detector, which alone can tell one, also splits the step time into productive
and checkpoint time (the kernel, native/detectors.py, says how).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter import native
from exporter.native.detectors import SlowdownState
from exporter.state.detectors.base import Detector, Found, StepView

FRESH_SLOWDOWN: SlowdownState = (0.0, 0, 0, 0.0, False, [], 1.0)


@dataclass(frozen=True)
class SlowdownConfig:
    """Slowdown thresholds, and the stall gap of the time accounting."""

    # Slowdown (fail-slow): a step is slow when its time exceeds the rank's own baseline by
    # this factor; this many slow steps in a row are a slowdown (a single long step, such as a
    # checkpoint save, is not). The baseline is the median of the first warm-up steps, then
    # smoothed over steps that are not slow.
    slowdown_factor: float = 1.5
    slowdown_steps: int = 20
    slowdown_warmup_steps: int = 20
    slowdown_baseline_alpha: float = 0.05
    # Lost time (goodput, beside the slowdown's split of step time): a gap between two step records
    # (as the exporter reads them) longer than this, beyond the steps' own printed time, is lost as a stall.
    stall_gap_seconds: float = 60.0


@dataclass(slots=True)
class SlowdownTimes:
    """The kernel's state: (baseline, steps seen, length of the current slow run, time held of its first step,
    in a slowdown, the warm-up's step times until their median is the baseline, how many steps the held time
    stands for); and where the slow run in progress began."""

    kernel: SlowdownState = FRESH_SLOWDOWN
    # The event of the slow run's first step, made when the batch holding it was applied: the slowdown is
    # reported there once the run has lasted. Not kept in checkpoints (then it is told from the steps).
    slow_start: Any = field(default=None, metadata={"checkpoint": False})

    @property
    def baseline(self) -> float:
        return self.kernel[0]

    @property
    def seen(self) -> int:
        return self.kernel[1]

    @property
    def slow_run(self) -> int:
        """How many slow steps in a row end the values seen so far."""
        return self.kernel[2]


class SlowdownDetector(Detector):
    """Sustained slow step times, reported at the step the slow run began."""

    name = "slowdown"
    kinds = ("slowdown",)
    Config = SlowdownConfig
    State = SlowdownTimes

    def apply(self, config: SlowdownConfig, state: SlowdownTimes, view: StepView) -> list[Found]:
        series = view.series.get("step_time_seconds")
        if series is None or not series.values:
            return []
        steps: Sequence[int | None] = series.steps
        seconds, baseline = series.values, state.baseline
        # One slow step shows in every window mean it is part of: the run of slow means must be that much longer.
        needed = config.slowdown_steps + view.step_time_window - 1
        slowdowns, declared_step, productive, checkpoint, state.kernel = native.check_step_times(
            (config.slowdown_factor, needed, config.slowdown_warmup_steps,
             config.slowdown_baseline_alpha), state.kernel, steps, seconds, view.spans, *view.time_split)
        view.time_split[:] = [productive, checkpoint]
        found = []
        if slowdowns:
            declared = steps.index(declared_step) if declared_step in steps else len(steps) - 1
            first = _slow_run_first(seconds, declared, needed)
            detail: dict[str, str | int | float] = {"baseline": baseline, "steps": needed}
            if first is not None:
                found.append(Found(self.kinds[0], steps[first], slowdowns, "step_time_seconds", detail))
            else:  # the run began in a batch before this one
                earlier = state.slow_start
                step = earlier.step if earlier is not None else _counted_back(declared_step, needed)
                found.append(Found(self.kinds[0], step, slowdowns, "step_time_seconds", detail, earlier=earlier))
        if not state.slow_run:
            state.slow_start = None
        else:
            first = _slow_run_first(seconds, len(seconds) - 1, state.slow_run)
            if first is not None:  # the run in progress began in this batch
                state.slow_start = view.event_at(self.kinds[0], steps[first], "step_time_seconds")
        return found


def _slow_run_first(seconds: Sequence[float], end: int, length: int) -> int | None:
    """Where a run of ``length`` step times ending at index ``end`` began (values that are no time are not
    counted, as the kernel skips them); None when it began before these values."""
    for index in range(end, -1, -1):
        if 0 < seconds[index] < math.inf:
            length -= 1
            if length == 0:
                return index
    return None


def _counted_back(declared: int | None, needed: int) -> int | None:
    """The first step of a slow run declared at ``declared``, one step a line (its batch is gone)."""
    return None if declared is None else max(1, declared - (needed - 1))
