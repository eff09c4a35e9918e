"""The per-step detectors, each a registered unit (base.py says what a unit is).

Adding one: a module here with its thresholds (a frozen dataclass), its state (a dataclass),
its anomaly kinds and ``apply``; its unit in ``DETECTORS`` and its thresholds among
``DetectorConfig``'s bases (the settings make a flag, a ``TRAINLOG_*`` variable and a config
key of each field); its kinds in exporter/kinds.py; a rule and a runbook.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.state.detectors.base import Detector, Found, RankValue, StepView
from exporter.state.detectors.divergence import (
    NEW_DEPARTURE,
    DepartureState,
    DivergenceConfig,
    DivergenceDetector,
    check_departures,
)
from exporter.state.detectors.series import SeriesDetector, SeriesState, check_series, kernel_config
from exporter.state.detectors.slowdown import SlowdownConfig, SlowdownDetector
from exporter.state.detectors.stall import StallConfig

__all__ = ["DETECTORS", "NEW_DEPARTURE", "DepartureState", "Detector", "DetectorConfig", "Found", "RankValue",
           "SeriesState", "StepView", "check_departures", "check_series", "kernel_config"]


@dataclass(frozen=True)
class DetectorConfig(DivergenceConfig, SlowdownConfig, StallConfig):
    """Every registered detector's thresholds; the defaults are documented in docs/detectors.md."""


# In the order they see a batch (the order of their events).
DETECTORS: tuple[Detector, ...] = (
    SeriesDetector("loss", plateau=True),
    SeriesDetector("grad_norm", plateau=False),
    SlowdownDetector(),
    DivergenceDetector(),
)
