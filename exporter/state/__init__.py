"""State: the single source of truth that every exporter reads."""

from exporter.state.detectors import DetectorConfig
from exporter.state.store import (
    ANOMALY_KINDS,
    ERROR_KINDS,
    SCHEDULER_KINDS,
    ExporterStats,
    Limits,
    RankState,
    SeriesKey,
    TrainingState,
)

__all__ = [
    "ANOMALY_KINDS",
    "ERROR_KINDS",
    "SCHEDULER_KINDS",
    "DetectorConfig",
    "ExporterStats",
    "Limits",
    "RankState",
    "SeriesKey",
    "TrainingState",
]
