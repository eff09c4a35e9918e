"""Kernel: the per-step detectors over one series of values. This twin defines detectors.c.

Prometheus scrapes every 15-60 s while a step takes about a second: a one-step spike or a
NaN between two scrapes never reaches PromQL, so every value a step line prints goes
through here. The detectors' state travels as plain tuples, in and out (state/detectors.py
keeps them between calls and in checkpoints):

    check_series(config, spikes, plateau, steps, values)
        -> (nonfinite, last_nonfinite_step, spiked, spike_steps, spikes, plateau)

- ``config``: ``(spike_min_relative_jump, spike_deviations, spike_warmup_steps,
  spike_baseline_alpha, spike_max_excursion_steps, plateau_min_relative_improvement,
  plateau_noise_deviations, plateau_window_steps, plateau_alpha)``;
- ``spikes``: ``(mean, deviation, seen, excursion)`` of the spike detector, or None;
- ``plateau``: ``(smoothed or None, change, previous, history_steps, history_smoothed,
  best_step or None, best_smoothed or None)`` of the plateau tracker, or None;
- ``steps``, ``values``: the series, in order (a step of None: the rank's step is unknown).

Each value in order: a non-finite one is only counted; a finite one goes to the spike
detector (required once a value is finite), then, unless it is part of a spike, to the
plateau tracker. Returned: the counts, the step of the last non-finite value (a step of None is
never the one reported), the step of each spike (a block's batch holds thousands of values and
several spikes: each is an incident of its own), and the detectors' new state (None where none
was given).

    check_step_times(config, slowdown, steps, values, spans, productive, checkpoint)
        -> (slowdowns, last_slowdown_step, productive, checkpoint, slowdown)

- ``config``: ``(slowdown_factor, slowdown_steps, slowdown_warmup_steps,
  slowdown_baseline_alpha)``;
- ``slowdown``: ``(baseline, seen, slow_run, held, in_slowdown, warmup, held_span)``;
- ``steps``, ``values``: step times in seconds, in order; ``spans``: how many steps each
  of them stands for (a log line every 100 iterations prints the time of one: it stands
  for 100); ``productive``, ``checkpoint``: the seconds so far, to which each step time
  times its span is added in turn.

A step time that is not a time (not finite, not positive) is skipped. The detector itself
sees each step time once, whatever its span. Returned: the slowdowns begun, the step of
the last, the seconds with these steps added, the new state.

    covered(seconds, spans) -> float

The seconds a batch's step times stand for: ``math.fsum`` of each step time that is a time
times its span, exactly as fsum adds them; ``inf`` where that sum overflows (fsum raises:
a log printing step times near float's limit is not to stop the state).

    steps_counted(step_before, steps) -> int

How many steps a batch's lines printed, the rank at ``step_before``: each line whose step
is not the last one known (DeepSpeed prints one step's values on two lines; a line that
names no step, None, is a step of its own).

    consecutive(steps) -> bool

Whether each step of a batch is one after the step before it (every line printed one): the
state's usual batch, whose step times each stand for one step.

    extent(values) -> (lowest, highest) | None

The least and the greatest of a series' finite values (analyze's loss range), as ``min`` and
``max`` of them give them; None when none is finite.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from typing import cast

SpikeState = tuple[float, float, int, int]
PlateauState = tuple[float | None, float, float, list[int], list[float], int | None, float | None]
SeriesCheck = tuple[int, int | None, int, list[int | None], SpikeState | None, PlateauState | None]
SlowdownState = tuple[float, int, int, float, bool, list[float], float]
StepTimesCheck = tuple[int, int | None, float, float, SlowdownState]


def check_series(config: tuple, spikes: SpikeState | None, plateau: PlateauState | None,
                 steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck:
    """Feed one series' values in order; see the module's docstring."""
    (relative_jump, deviations, warmup, alpha, max_excursion,
     min_improvement, noise_deviations, window, plateau_alpha) = config
    spike = _Spikes(*spikes) if spikes is not None else None
    tracker = _Plateau(*plateau) if plateau is not None else None
    nonfinite = spiked = 0
    last_nonfinite = None
    spike_steps: list[int | None] = []
    for step, value in zip(steps, values, strict=False):  # the shorter of the two, as the C kernel
        if not math.isfinite(value):
            nonfinite += 1
            last_nonfinite = step if step is not None else last_nonfinite
            continue
        if spike is None:
            raise ValueError("a finite value needs a spike detector")
        if spike.observe(value, relative_jump, deviations, warmup, alpha, max_excursion):
            spiked += 1
            spike_steps.append(step)
        if tracker is not None and spike.excursion == 0:  # a spike says nothing about progress
            tracker.observe(step, value, plateau_alpha, window, min_improvement, noise_deviations)
    return (nonfinite, last_nonfinite, spiked, spike_steps,
            spike.state() if spike is not None else None, tracker.state() if tracker is not None else None)


# The spike detector's spread (its smoothed absolute deviation) follows a larger deviation at the baseline's
# alpha and a smaller one at this fraction of it: an envelope of the recent noise, which a quiet stretch does not
# shrink. A small batch's loss is heavy-tailed (one hard batch in fifty doubles it): with a plain average the
# spread fell within ten quiet steps and the next hard batch was a "spike" (5 on a healthy 3,000-step run).
_SPREAD_FALL = 0.2


class _Spikes:
    """One-step jumps above an exponentially smoothed baseline; one count per excursion.

    A value is a spike when it exceeds the smoothed baseline by both a relative margin and
    a number of the recent noise's spread (2.3 -> 25 is one, +-5 % noise is not, nor a
    small batch's hard batch), once the baseline has settled (the warm-up).
    """

    __slots__ = ("mean", "deviation", "seen", "excursion")

    def __init__(self, mean: float, deviation: float, seen: int, excursion: int) -> None:
        self.mean, self.deviation, self.seen, self.excursion = float(mean), float(deviation), int(seen), int(excursion)

    def observe(self, value: float, relative_jump: float, deviations: float, warmup: int, alpha: float,
                max_excursion: int) -> bool:
        """Feed a finite value; True when it starts a new spike."""
        if self.seen == 0:
            self.mean, self.seen = value, 1
            return False
        jump = value - self.mean
        if self.seen >= warmup and jump > relative_jump * abs(self.mean) and jump > deviations * self.deviation:
            self.excursion += 1
            if self.excursion < max_excursion:
                # Keep the spike out of the baseline, or one spike would hide the next.
                return self.excursion == 1
            # A level held this long is the new normal, not a spike.
            self.mean, self.excursion = value, 0
            return False
        self.excursion = 0
        rate = alpha if abs(jump) > self.deviation else alpha * _SPREAD_FALL
        deviation = self.deviation + rate * (abs(jump) - self.deviation)
        mean = self.mean + alpha * jump
        if not (math.isfinite(deviation) and math.isfinite(mean)):
            # Values near float's limit (1e308, then -1e308) overflow the baseline: an infinite
            # one no value could exceed would switch the detector off for good. Start afresh
            # (a new warm-up) without the value that overflowed it.
            self.mean, self.deviation, self.seen = 0.0, 0.0, 0
            return False
        self.deviation, self.mean = deviation, mean
        self.seen += 1
        return False

    def state(self) -> SpikeState:
        return self.mean, self.deviation, self.seen, self.excursion


class _Plateau:
    """The last step at which the smoothed value (the state feeds it losses) was clearly lower than
    a window of steps before, or than the smoothed value at the last such step.

    Comparing two smoothed values a window apart, rather than the current value with the
    lowest one so far, keeps noise from moving the step once the value is flat: the lowest
    so far sits at an arbitrary distance from the flat level, which noise then crosses.
    The value at the last progress is no noise extreme (it was taken for being clearly
    lower than another), and a loss that falls slowly, by less than its noise in a window,
    gets clearly below it after enough windows: progress too (a small batch's loss falling
    by a third over 2,000 steps is not flat).
    """

    __slots__ = ("smoothed", "change", "previous", "history", "best_step", "best_smoothed")

    def __init__(self, smoothed: float | None, change: float, previous: float, history_steps: Sequence[int],
                 history_smoothed: Sequence[float], best_step: int | None, best_smoothed: float | None) -> None:
        self.smoothed = None if smoothed is None else float(smoothed)
        self.change = float(change)  # smoothed |value - previous value|: the noise level
        self.previous = float(previous)
        # (step, smoothed) over the last window
        self.history = deque((int(step), float(value)) for step, value in zip(history_steps, history_smoothed,
                                                                              strict=True))
        self.best_step = None if best_step is None else int(best_step)
        self.best_smoothed = None if best_smoothed is None else float(best_smoothed)

    def observe(self, step: int | None, value: float, alpha: float, window: int, min_improvement: float,
                noise_deviations: float) -> None:
        """Feed a finite value; ``step`` is None while the rank's step is unknown (no best step then)."""
        if self.smoothed is None:
            self.smoothed = value
        else:
            change = self.change + alpha * (abs(value - self.previous) - self.change)
            smoothed = self.smoothed + alpha * (value - self.smoothed)
            if not (math.isfinite(change) and math.isfinite(smoothed)):
                # Overflowed near float's limit: an infinite noise level would hold progress off for
                # good. Start afresh, the window too, without the value that overflowed it.
                self.smoothed, self.change, self.previous = None, 0.0, value
                self.history.clear()
                return
            self.change, self.smoothed = change, smoothed
        self.previous = value
        if step is None:
            return
        history = self.history
        if history and history[-1][0] == step:
            history[-1] = (step, self.smoothed)  # the same step printed again: one entry a step, memory bounded
        else:
            history.append((step, self.smoothed))
        while len(history) > 1 and history[1][0] <= step - window:
            history.popleft()
        reference_step, reference = history[0]
        if reference_step > step - window:
            self._progress(step)  # less than a window seen: the run is just starting
            return
        # White noise of deviation s gives E|x_t - x_t-1| = 2s/sqrt(pi); two smoothed values
        # a window or more apart then differ with deviation s * sqrt(2 alpha / (2 - alpha)).
        noise = self.change * math.sqrt(math.pi) / 2 * math.sqrt(2 * alpha / (2 - alpha))
        deviations = noise_deviations * noise
        best = self.best_smoothed
        if self._clearly_below(reference, min_improvement, deviations) or (
                best is not None and self._clearly_below(best, min_improvement, deviations)):
            self._progress(step)

    def _clearly_below(self, reference: float, min_improvement: float, deviations: float) -> bool:
        """Whether the smoothed value (set: observe sets it first) is below ``reference`` by both margins."""
        return reference - cast(float, self.smoothed) > max(min_improvement * abs(reference), deviations)

    def _progress(self, step: int) -> None:
        self.best_step, self.best_smoothed = step, self.smoothed

    def state(self) -> PlateauState:
        return (self.smoothed, self.change, self.previous, [step for step, _ in self.history],
                [value for _, value in self.history], self.best_step, self.best_smoothed)


def check_step_times(config: tuple, slowdown: SlowdownState, steps: Sequence[int | None], values: Sequence[float],
                     spans: Sequence[float], productive: float, checkpoint: float) -> StepTimesCheck:
    """Feed one series of step times in order; see the module's docstring."""
    factor, needed, warmup_steps, alpha = config
    baseline, seen, slow_run, held, in_slowdown, warmup, held_span = slowdown
    baseline, held, held_span, warmup = float(baseline), float(held), float(held_span), [float(v) for v in warmup]
    slowdowns, last_slowdown = 0, None
    for step, value, span in zip(steps, values, spans, strict=False):
        if not 0 < value < math.inf:  # not a time (NaN fails every comparison)
            continue
        if seen < warmup_steps:
            productive += value * span
            warmup.append(value)
            seen += 1
            if seen == warmup_steps:
                baseline, warmup = _median(warmup), []
            continue
        if value > factor * baseline:
            slow_run += 1
            if slow_run == 1:
                held, held_span = value, span  # a save or the start of a slowdown: the next step tells which
            else:
                if slow_run == 2:  # not a one-step blip: slow training, but training
                    productive += held * held_span
                    held = 0.0
                productive += value * span
            if slow_run == needed and not in_slowdown:
                in_slowdown = True
                slowdowns += 1
                last_slowdown = step if step is not None else last_slowdown
            continue
        if slow_run == 1:  # a one-step blip: its time above the baseline saved a checkpoint
            productive += baseline * held_span
            checkpoint += (held - baseline) * held_span
            held = 0.0
        slow_run, in_slowdown = 0, False
        productive += value * span
        baseline += alpha * (value - baseline)
        seen += 1
    return (slowdowns, last_slowdown, productive, checkpoint,
            (baseline, seen, slow_run, held, in_slowdown, warmup, held_span))


def covered(seconds: Sequence[float], spans: Sequence[float]) -> float:
    """The seconds the step times stand for; see the module's docstring."""
    try:
        return math.fsum(value * span for value, span in zip(seconds, spans, strict=True) if 0 < value < math.inf)
    except OverflowError:  # intermediate overflow: more seconds than a float holds
        return math.inf


def steps_counted(step_before: int | None, steps: list[int | None] | range) -> int:
    """How many steps the lines printed; see the module's docstring."""
    counted, known = 0, step_before
    for step in steps:
        counted += step is None or step != known
        if step is not None:
            known = step
    return counted


def consecutive(steps: list[int | None] | range) -> bool:
    """Each step one after the step before it, every one printed (an empty list: False)."""
    first, last = (steps[0], steps[-1]) if steps else (None, None)
    if first is None or last is None or last - first != len(steps) - 1:
        return False
    return list(steps) == list(range(first, last + 1))


def _median(values: list[float]) -> float:
    """statistics.median, spelled out as the C kernel computes it."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def extent(values: Sequence[float]) -> tuple[float, float] | None:
    """The least and the greatest of the finite values; None when none is."""
    finite = [value for value in values if math.isfinite(value)]
    return (min(finite), max(finite)) if finite else None
