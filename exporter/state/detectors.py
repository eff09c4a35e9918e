"""Per-step anomaly detectors.

Prometheus scrapes every 15-60 s while a step takes about a second: a one-step spike or
a NaN between two scrapes never reaches PromQL. These detectors see every step record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


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
    baseline_alpha: float = 0.1
    # Consecutive spiking steps after which the new level is accepted as the baseline.
    spike_max_excursion_steps: int = 10
    # Plateau: the smoothed loss must improve by this fraction to count as progress.
    plateau_min_relative_improvement: float = 0.01
    plateau_alpha: float = 0.05


class SpikeDetector:
    """One-step jumps above an exponentially smoothed baseline; one count per excursion."""

    __slots__ = ("_config", "_mean", "_deviation", "_seen", "_excursion")

    def __init__(self, config: DetectorConfig) -> None:
        self._config = config
        self._mean = 0.0
        self._deviation = 0.0
        self._seen = 0
        self._excursion = 0

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
        alpha = config.baseline_alpha
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
    """The step at which the smoothed loss last improved by a relative margin."""

    __slots__ = ("_config", "_smoothed", "_best", "best_step")

    def __init__(self, config: DetectorConfig) -> None:
        self._config = config
        self._smoothed: float | None = None
        self._best = math.inf
        self.best_step: int | None = None

    def observe(self, step: int, loss: float) -> None:
        if self._smoothed is None:
            self._smoothed = loss
        else:
            self._smoothed += self._config.plateau_alpha * (loss - self._smoothed)
        margin = self._config.plateau_min_relative_improvement * abs(self._best)
        if self.best_step is None or self._smoothed < self._best - margin:
            self._best = self._smoothed
            self.best_step = step

    @property
    def smoothed(self) -> float | None:
        return self._smoothed

    def snapshot(self) -> dict[str, float | None]:
        """Internal state for a checkpoint."""
        return {"smoothed": self._smoothed, "best": self._best, "best_step": self.best_step}

    @classmethod
    def restored(cls, config: DetectorConfig, snapshot: dict[str, float | None]) -> PlateauTracker:
        """A tracker in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        tracker = cls(config)
        tracker._smoothed, tracker._best = snapshot["smoothed"], snapshot["best"]
        best_step = snapshot["best_step"]
        tracker.best_step = None if best_step is None else int(best_step)
        return tracker
