"""Rank divergence: a value a rank prints for itself (MindFormers' device_local_norm) departs from its own level.

Whether the other ranks departed too is the alert's question (TrainingRankDivergence), not
this one's: each exporter sees only its node's ranks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.state.detectors.base import Detector, Found, StepView
from exporter.state.detectors.series import SeriesConfig

# (mean of log(value), smoothed |change| of log(value), values seen, length of the current excursion)
DepartureState = tuple[float, float, int, int]
NEW_DEPARTURE: DepartureState = (0.0, 0.0, 0, 0)


@dataclass(frozen=True)
class DivergenceConfig(SeriesConfig):
    """Rank-divergence thresholds (smoothing and excursions as the spike detector's)."""

    # Rank divergence: a value a rank prints for itself (MindFormers' device_local_norm) departs
    # when it is this many times above or below that rank's own smoothed level.
    divergence_min_ratio: float = 2.0
    # ... and this many smoothed deviations from it (on a log scale: levels differ between ranks).
    divergence_deviations: float = 6.0
    # Values of the rank (per name) seen before a departure can be declared.
    divergence_warmup_values: int = 20


@dataclass(slots=True)
class Departures:
    """Each name's level: name -> DepartureState."""

    levels: dict[str, DepartureState] = field(default_factory=dict)


class DivergenceDetector(Detector):
    """Each value a rank computed for itself against its own history."""

    name = "rank_divergence"
    kinds = ("rank_divergence",)
    Config = DivergenceConfig
    State = Departures

    def apply(self, config: DivergenceConfig, state: Departures, view: StepView) -> list[Found]:
        found = []
        for name, steps, values, previous in view.rank_values:
            departures, step, state.levels[name] = check_departures(
                config, state.levels.get(name, NEW_DEPARTURE), steps, values)
            if departures:
                index = steps.index(step) if step in steps else len(values) - 1
                before = values[index - 1] if index > 0 else previous
                found.append(Found(self.kinds[0], step, departures, detail={"name": name},
                                   value=(before, values[index])))
        return found


def check_departures(config: DivergenceConfig, state: DepartureState, steps: Sequence[int | None],
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
