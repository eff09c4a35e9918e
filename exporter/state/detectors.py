"""Per-step anomaly detectors: their thresholds, and their state between batches.

Prometheus scrapes every 15-60 s while a step takes about a second: a one-step spike or
a NaN between two scrapes never reaches PromQL. These detectors see every value a step
line prints. Their arithmetic is the detector kernel's (exporter/native/detectors.py
defines it, detectors.c runs it); here they keep the state it hands back, a tuple, until
the next batch and in checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from exporter import native
from exporter.native.detectors import PlateauState, SlowdownState, SpikeState


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
    # Rank divergence: a value a rank prints for itself (MindFormers' device_local_norm) departs
    # when it is this many times above or below that rank's own smoothed level.
    divergence_min_ratio: float = 2.0
    # ... and this many smoothed deviations from it (on a log scale: levels differ between ranks).
    divergence_deviations: float = 6.0
    # Values of the rank (per name) seen before a departure can be declared.
    divergence_warmup_values: int = 20
    # Slowdown (fail-slow): a step is slow when its time exceeds the rank's own baseline by
    # this factor; this many slow steps in a row are a slowdown (a single long step, such as a
    # checkpoint save, is not). The baseline is the median of the first warm-up steps, then
    # smoothed over steps that are not slow.
    slowdown_factor: float = 1.5
    slowdown_steps: int = 20
    slowdown_warmup_steps: int = 20
    slowdown_baseline_alpha: float = 0.05
    # Lost time: a gap between two step records (as the exporter reads them) longer than
    # this, beyond the steps' own printed time, is lost as a stall.
    stall_gap_seconds: float = 60.0


def kernel_config(config: DetectorConfig) -> tuple:
    """The thresholds in the order the detector kernel takes them (native/detectors.py)."""
    return (config.spike_min_relative_jump, config.spike_deviations, config.spike_warmup_steps,
            config.spike_baseline_alpha, config.spike_max_excursion_steps, config.plateau_min_relative_improvement,
            config.plateau_noise_deviations, config.plateau_window_steps, config.plateau_alpha)


class SpikeDetector:
    """One-step jumps above an exponentially smoothed baseline; one count per excursion."""

    __slots__ = ("state",)

    def __init__(self, state: SpikeState = (0.0, 0.0, 0, 0)) -> None:
        self.state = state  # (mean, deviation, values seen, length of the current excursion)

    @property
    def in_spike(self) -> bool:
        """True while the latest value was part of a spike (kept out of the baseline)."""
        return self.state[3] > 0

    def snapshot(self) -> dict[str, float]:
        """Internal state for a checkpoint: a restart resumes without a new warm-up."""
        mean, deviation, seen, excursion = self.state
        return {"mean": mean, "deviation": deviation, "seen": seen, "excursion": excursion}

    @classmethod
    def restored(cls, snapshot: dict[str, float]) -> SpikeDetector:
        """A detector in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        return cls((snapshot["mean"], snapshot["deviation"], int(snapshot["seen"]), int(snapshot["excursion"])))


class PlateauTracker:
    """The last step at which the smoothed loss was clearly lower than a window of steps before."""

    __slots__ = ("state",)

    def __init__(self, state: PlateauState = (None, 0.0, 0.0, [], [], None)) -> None:
        # (smoothed loss, smoothed |change|, previous loss, history steps, history smoothed, best step)
        self.state = state

    @property
    def best_step(self) -> int | None:
        return self.state[5]

    @property
    def smoothed(self) -> float | None:
        return self.state[0]

    def snapshot(self) -> dict[str, object]:
        """Internal state for a checkpoint."""
        smoothed, change, previous, steps, values, best_step = self.state
        return {"smoothed": smoothed, "change": change, "previous": previous,
                "history": [[step, value] for step, value in zip(steps, values, strict=True)], "best_step": best_step}

    @classmethod
    def restored(cls, snapshot: dict) -> PlateauTracker:
        """A tracker in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        history = snapshot["history"]
        best_step = snapshot["best_step"]
        return cls((snapshot["smoothed"], snapshot["change"], snapshot["previous"],
                    [int(step) for step, _ in history], [float(value) for _, value in history],
                    None if best_step is None else int(best_step)))


class SlowdownDetector:
    """A rank's step time held well above its own baseline for a sustained run of steps.

    In synchronous training every rank waits for the slowest at each collective, so a slow
    card or link shows as every rank slowing down together: each rank is compared with its
    own history, never with the others. A run of slow steps shorter than
    ``slowdown_steps`` is a blip and stays out of the baseline. A one-step blip is what a
    checkpoint save looks like: the detector, which alone can tell one, also splits the step
    time into productive and checkpoint time (the kernel, native/detectors.py, says how).
    """

    __slots__ = ("state",)

    def __init__(self, state: SlowdownState = (0.0, 0, 0, 0.0, False, [], 1.0)) -> None:
        # (baseline, steps seen, length of the current slow run, time held of its first step,
        # in a slowdown, the warm-up's step times until their median is the baseline, how
        # many steps the held time stands for)
        self.state = state

    @property
    def baseline(self) -> float:
        return self.state[0]

    @property
    def seen(self) -> int:
        return self.state[1]

    @property
    def slow_run(self) -> int:
        """How many slow steps in a row end the values seen so far."""
        return self.state[2]

    def check(self, config: DetectorConfig, steps: Sequence[int | None], seconds: Sequence[float],
              spans: Sequence[float], time_split: tuple[float, float]) -> tuple[int, int | None, tuple[float, float]]:
        """Feed step times in order: (slowdowns begun, step of the last, ``time_split`` — productive and
        checkpoint seconds so far — with these steps' time added, one step at a time, each time
        as many times as its span says steps it stands for)."""
        slowdowns, last_step, productive, checkpoint, self.state = native.check_step_times(
            (config.slowdown_factor, config.slowdown_steps, config.slowdown_warmup_steps,
             config.slowdown_baseline_alpha), self.state, steps, seconds, spans, *time_split)
        return slowdowns, last_step, (productive, checkpoint)

    def snapshot(self) -> dict[str, object]:
        """Internal state for a checkpoint."""
        baseline, seen, slow_run, held, in_slowdown, warmup, held_span = self.state
        return {"baseline": baseline, "seen": seen, "slow_run": slow_run, "held": held, "in_slowdown": in_slowdown,
                "warmup": list(warmup), "held_span": held_span}

    @classmethod
    def restored(cls, snapshot: dict) -> SlowdownDetector:
        """A detector in the state ``snapshot`` recorded (KeyError when a value is missing)."""
        return cls((float(snapshot["baseline"]), int(snapshot["seen"]), int(snapshot["slow_run"]),
                    float(snapshot["held"]), bool(snapshot["in_slowdown"]),
                    [float(value) for value in snapshot["warmup"]],
                    float(snapshot.get("held_span", 1.0))))  # checkpoints before spans held one step


SeriesCheck = tuple[int, int | None, int, int | None]


def check_series(config: DetectorConfig, spikes: SpikeDetector | None, plateau: PlateauTracker | None,
                 steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck:
    """Feed one series' values in order: (non-finite values, step of the last, spikes, step of the last).

    A non-finite value is only counted; a finite one goes to ``spikes`` (required once a
    value is finite), then, unless it is part of a spike, to ``plateau``. A step of None
    (the rank's step is unknown) is never the one reported.
    """
    nonfinite, last_nonfinite, spiked, last_spike, spike_state, plateau_state = native.check_series(
        kernel_config(config), spikes.state if spikes is not None else None,
        plateau.state if plateau is not None else None, steps, values)
    if spikes is not None and spike_state is not None:
        spikes.state = spike_state
    if plateau is not None and plateau_state is not None:
        plateau.state = plateau_state
    return nonfinite, last_nonfinite, spiked, last_spike


# (mean of log(value), smoothed |change| of log(value), values seen, length of the current excursion)
DepartureState = tuple[float, float, int, int]
NEW_DEPARTURE: DepartureState = (0.0, 0.0, 0, 0)


def check_departures(config: DetectorConfig, state: DepartureState, steps: Sequence[int | None],
                     values: Sequence[float]) -> tuple[int, int | None, DepartureState]:
    """Feed one rank's values of one name in order: (departures begun, step of the last, new state).

    The spike detector's rule on a log scale and in both directions: a value departs when it
    is ``divergence_min_ratio`` times above or below the rank's own smoothed level and
    ``divergence_deviations`` smoothed deviations away from it. One count per excursion;
    departed values stay out of the level, until a departure held for
    ``spike_max_excursion_steps`` values becomes the new level. Whether the other ranks
    departed too is the alert's question (TrainingRankDivergence), not this one's: each
    exporter sees only its node's ranks. Values that are not positive and finite are skipped.
    """
    mean, deviation, seen, excursion = state
    departures, last_step = 0, None
    threshold = math.log(config.divergence_min_ratio)
    for step, value in zip(steps, values, strict=True):
        if not (value > 0 and math.isfinite(value)):
            continue
        level = math.log(value)
        if seen == 0:
            mean, seen = level, 1
            continue
        change = level - mean
        if (seen >= config.divergence_warmup_values and abs(change) > threshold
                and abs(change) > config.divergence_deviations * deviation):
            excursion += 1
            if excursion < config.spike_max_excursion_steps:
                if excursion == 1:
                    departures += 1
                    last_step = step if step is not None else last_step
                continue
            mean, excursion = level, 0  # a level held this long is the rank's new normal
            continue
        excursion = 0
        deviation += config.spike_baseline_alpha * (abs(change) - deviation)
        mean += config.spike_baseline_alpha * change
        seen += 1
    return departures, last_step, (mean, deviation, seen, excursion)
