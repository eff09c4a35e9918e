"""Per-step anomaly detectors.

Prometheus scrapes every 15-60 s while a step takes about a second: a one-step spike or
a NaN between two scrapes never reaches PromQL. These detectors see every step record.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

try:
    from exporter.state import _speedups
except ImportError:  # pragma: no cover - built without a C compiler
    _speedups = None


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Thresholds; the defaults are documented in docs/detectors.md."""

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


class SpikeDetector:
    """One-step jumps above an exponentially smoothed baseline; one count per excursion."""

    __slots__ = ("_config", "_mean", "_deviation", "_seen", "_excursion")

    def __init__(self, config: DetectorConfig) -> None:
        self._config = config
        self._mean = 0.0
        self._deviation = 0.0
        self._seen = 0
        self._excursion = 0

    @property
    def in_spike(self) -> bool:
        """True while the latest value was part of a spike (kept out of the baseline)."""
        return self._excursion > 0

    def observe(self, value: float) -> bool:
        """Feed a finite value; True when it starts a new spike."""
        config = self._config
        if self._seen == 0:
            self._mean, self._seen = value, 1
            return False
        jump = value - self._mean
        is_spike = (
            self._seen >= config.spike_warmup_steps
            and jump > config.spike_min_relative_jump * abs(self._mean)
            and jump > config.spike_deviations * self._deviation
        )
        if is_spike:
            self._excursion += 1
            if self._excursion < config.spike_max_excursion_steps:
                # Keep the spike out of the baseline, or one spike would hide the next.
                return self._excursion == 1
            # A level held this long is the new normal, not a spike.
            self._mean, self._excursion = value, 0
            return False
        self._excursion = 0
        alpha = config.spike_baseline_alpha
        self._deviation += alpha * (abs(jump) - self._deviation)
        self._mean += alpha * jump
        self._seen += 1
        return False

    def snapshot(self) -> dict[str, float]:
        """Internal state for a checkpoint: a restart resumes without a new warm-up."""
        return {"mean": self._mean, "deviation": self._deviation, "seen": self._seen, "excursion": self._excursion}

    @classmethod
    def restored(cls, config: DetectorConfig, snapshot: dict[str, float]) -> SpikeDetector:
        """A detector in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        detector = cls(config)
        detector._mean, detector._deviation = snapshot["mean"], snapshot["deviation"]
        detector._seen, detector._excursion = int(snapshot["seen"]), int(snapshot["excursion"])
        return detector


class PlateauTracker:
    """The last step at which the smoothed loss was clearly lower than a window of steps before.

    Comparing two smoothed values a window apart, rather than the current value with the
    best one so far, keeps noise from moving the step once the loss is flat: the best
    so far sits at an arbitrary distance from the flat level, which noise then crosses.
    """

    __slots__ = ("_config", "_smoothed", "_change", "_previous", "_history", "best_step")

    def __init__(self, config: DetectorConfig) -> None:
        self._config = config
        self._smoothed: float | None = None
        self._change = 0.0  # smoothed |loss - previous loss|: the noise level
        self._previous = 0.0
        self._history: deque[tuple[int, float]] = deque()  # (step, smoothed) over the last window
        self.best_step: int | None = None

    def observe(self, step: int | None, loss: float) -> None:
        """Feed a finite loss; ``step`` is None while the rank's step is unknown (no best step then)."""
        config = self._config
        alpha = config.plateau_alpha
        if self._smoothed is None:
            self._smoothed = loss
        else:
            self._change += alpha * (abs(loss - self._previous) - self._change)
            self._smoothed += alpha * (loss - self._smoothed)
        self._previous = loss
        if step is None:
            return
        history = self._history
        history.append((step, self._smoothed))
        while len(history) > 1 and history[1][0] <= step - config.plateau_window_steps:
            history.popleft()
        reference_step, reference = history[0]
        if reference_step > step - config.plateau_window_steps:
            self.best_step = step  # less than a window seen: the run is just starting
            return
        # White noise of deviation s gives E|x_t - x_t-1| = 2s/sqrt(pi); two smoothed values
        # a window apart then differ with deviation s * sqrt(2 alpha / (2 - alpha)).
        noise = self._change * math.sqrt(math.pi) / 2 * math.sqrt(2 * alpha / (2 - alpha))
        needed = max(config.plateau_min_relative_improvement * abs(reference), config.plateau_noise_deviations * noise)
        if reference - self._smoothed > needed:
            self.best_step = step

    @property
    def smoothed(self) -> float | None:
        return self._smoothed

    def snapshot(self) -> dict[str, object]:
        """Internal state for a checkpoint."""
        return {"smoothed": self._smoothed, "change": self._change, "previous": self._previous,
                "history": [list(item) for item in self._history], "best_step": self.best_step}

    @classmethod
    def restored(cls, config: DetectorConfig, snapshot: dict) -> PlateauTracker:
        """A tracker in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        tracker = cls(config)
        tracker._smoothed, tracker._change, tracker._previous = snapshot["smoothed"], snapshot["change"], snapshot["previous"]
        tracker._history = deque((int(step), float(smoothed)) for step, smoothed in snapshot["history"])
        best_step = snapshot["best_step"]
        tracker.best_step = None if best_step is None else int(best_step)
        return tracker


SeriesCheck = tuple[int, int | None, int, int | None]


def check_series(spikes: SpikeDetector | None, plateau: PlateauTracker | None,
                 steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck:
    """Feed one series' values in order: (non-finite values, step of the last, spikes, step of the last).

    A non-finite value is only counted; a finite one goes to ``spikes`` (required once a
    value is finite), then, unless it is part of a spike, to ``plateau``. A step of None
    (the rank's step is unknown) is never the one reported. The native twin
    (state/_speedups.c) runs the same loop in C, bit for bit; a step too large for it falls
    back to this one.
    """
    if _speedups is not None:
        try:
            return _speedups.check_series(spikes, plateau, steps, values)
        except OverflowError:
            pass
    return python_check_series(spikes, plateau, steps, values)


def python_check_series(spikes: SpikeDetector | None, plateau: PlateauTracker | None,
                        steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck:
    """check_series in Python: what the native loop must give."""
    nonfinite = spiked = 0
    last_nonfinite = last_spike = None
    for step, value in zip(steps, values):
        if not math.isfinite(value):
            nonfinite += 1
            last_nonfinite = step if step is not None else last_nonfinite
            continue
        if spikes is None:
            raise ValueError("a finite value needs a spike detector")
        if spikes.observe(value):
            spiked += 1
            last_spike = step if step is not None else last_spike
        if plateau is not None and not spikes.in_spike:  # a spike says nothing about progress
            plateau.observe(step, value)
    return nonfinite, last_nonfinite, spiked, last_spike
