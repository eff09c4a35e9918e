"""Non-finite values, spikes and (for the loss) the plateau, over one printed series: loss or grad norm.

The arithmetic is the detector kernel's (exporter/native/detectors.py defines it,
detectors.c runs it); this unit keeps the state it hands back and makes a finding of each
spike the kernel names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter import native
from exporter.native.detectors import PlateauState, SpikeState
from exporter.state.detectors.base import Detector, Found, StepView

FRESH_SPIKES: SpikeState = (0.0, 0.0, 0, 0)
FRESH_PLATEAU: PlateauState = (None, 0.0, 0.0, [], [], None, None)


@dataclass(frozen=True)
class SeriesConfig:
    """Spike thresholds (loss and grad norm) and plateau thresholds (loss)."""

    # A value is a spike when it exceeds the smoothed baseline by both this relative
    # margin and this many smoothed absolute deviations: 2.3 -> 25 is one, +-5 % noise is not.
    spike_min_relative_jump: float = 0.5
    spike_deviations: float = 6.0
    # Steps observed before a spike can be declared: the baseline must settle first.
    spike_warmup_steps: int = 20
    # Smoothing factor of the baselines (exponentially weighted; ~1/alpha steps of memory).
    spike_baseline_alpha: float = 0.1
    # Consecutive spiking steps after which the new level is accepted as the baseline.
    spike_max_excursion_steps: int = 10
    # Plateau: progress is the smoothed loss being lower than `plateau_window_steps` steps
    # before, by this fraction and by this many standard deviations of the noise.
    plateau_min_relative_improvement: float = 0.01
    plateau_noise_deviations: float = 5.0
    plateau_window_steps: int = 100
    plateau_alpha: float = 0.03


def kernel_config(config: SeriesConfig) -> tuple:
    """The thresholds in the order the detector kernel takes them (native/detectors.py)."""
    return (config.spike_min_relative_jump, config.spike_deviations, config.spike_warmup_steps,
            config.spike_baseline_alpha, config.spike_max_excursion_steps, config.plateau_min_relative_improvement,
            config.plateau_noise_deviations, config.plateau_window_steps, config.plateau_alpha)


@dataclass(slots=True)
class SeriesState:
    """The kernel's spike and plateau state (None until a finite value came), and a run of non-finite values."""

    spikes: SpikeState | None = None  # (mean, deviation, values seen, length of the current excursion)
    # (smoothed, smoothed |change|, previous value, history steps, history smoothed, best step, its smoothed)
    plateau: PlateauState | None = None
    nonfinite_since: int | None = None  # the step a run of non-finite values going on began at
    nonfinite_open: bool = False  # the last value was not finite

    @property
    def in_spike(self) -> bool:
        """True while the latest value was part of a spike (kept out of the baseline)."""
        return self.spikes is not None and self.spikes[3] > 0

    @property
    def best_step(self) -> int | None:
        return self.plateau[5] if self.plateau is not None else None

    @property
    def smoothed(self) -> float | None:
        return self.plateau[0] if self.plateau is not None else None


SeriesCheck = tuple[int, int | None, int, list[int | None]]


def check_series(config: SeriesConfig, state: SeriesState, steps: Sequence[int | None], values: Sequence[float],
                 plateau: bool = True) -> SeriesCheck:
    """Feed one series' values in order: (non-finite values, step of the last, spikes, the step of each).

    A non-finite value is only counted; a finite one goes to the spike detector (started at the first
    finite value), then, unless it is part of a spike, to the plateau tracker (with ``plateau``). A step
    of None (the rank's step is unknown) is never the one reported.
    """
    if state.spikes is None and any(map(math.isfinite, values)):
        state.spikes = FRESH_SPIKES
        if plateau:
            state.plateau = FRESH_PLATEAU
    nonfinite, last_nonfinite, spiked, spike_steps, spikes, plateau_state = native.check_series(
        kernel_config(config), state.spikes, state.plateau, steps, values)
    state.spikes, state.plateau = spikes, plateau_state
    return nonfinite, last_nonfinite, spiked, spike_steps


class SeriesDetector(Detector):
    """The loss's or the grad norm's non-finite values and spikes (and the loss's plateau tracker)."""

    Config = SeriesConfig
    State = SeriesState

    def __init__(self, gauge: str, *, plateau: bool) -> None:
        self.name = gauge
        self.kinds = (f"{gauge}_nonfinite", f"{gauge}_spike")
        self._plateau = plateau

    def apply(self, config: SeriesConfig, state: SeriesState, view: StepView) -> list[Found]:
        found: list[Found] = []
        series = view.series.get(self.name)
        if series is not None and series.values:
            steps, values = series.steps, series.values
            nonfinite, _, _, spike_steps = check_series(config, state, steps, values, self._plateau)
            if nonfinite:
                found += self._nonfinite_runs(state, steps, values)
            else:
                state.nonfinite_open, state.nonfinite_since = False, None
            if spike_steps:
                found.append(Found(self.kinds[1], spike_steps[0], len(spike_steps), self.name, steps=spike_steps))
        if self._plateau and view.unprinted_nonfinite_losses:
            # Megatron-LM leaves a NaN loss out of its line and only counts "nan iterations".
            found.append(Found(self.kinds[0], view.step, view.unprinted_nonfinite_losses))
        return found

    def _nonfinite_runs(self, state: SeriesState, steps: Sequence[int | None], values: Sequence[float]) -> list[Found]:
        """A finding per run of non-finite values; a run going on from the batch before continues its incident."""
        found = []
        start = None
        for index, value in enumerate([*values, 0.0]):  # a finite value at the end closes the last run
            if not math.isfinite(value):
                start = index if start is None else start
                continue
            if start is None:
                continue
            continued = start == 0 and state.nonfinite_open
            last = steps[index - 1]
            found.append(Found(self.kinds[0], steps[start], index - start, self.name,
                               {} if last is None else {"last_step": last}, continued))
            if index == len(values):  # the run goes on at the batch's end
                state.nonfinite_since = state.nonfinite_since if continued else steps[start]
            start = None
        state.nonfinite_open = not math.isfinite(values[-1])
        if not state.nonfinite_open:
            state.nonfinite_since = None
        return found

