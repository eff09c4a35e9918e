"""One walk over the metric table: every family's samples, for every writer.

The text writer (/metrics), the prometheus-client collector and the OpenTelemetry
instruments all print what ``walk`` reads, so they cannot disagree on a value, a label or
the order (client_python's exposition writes every format from one pass the same way).
The families read from the state are read under one hold of its lock: one consistent
snapshot. The ones read at scrape time outside the state (``ScrapeTime``) are read after
the lock is released: scanning /proc must never hold up the follower.

Each writer says how it holds a series' labels (``SeriesLabels``): the walk asks for them
once per series and walk, not once per sample, so the text writer can keep a rank's
labels escaped (docs/benchmarks.md, "Scale").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from exporter.export.build_info import build_info
from exporter.export.metrics_table import (
    BUILD,
    COUNTER,
    EXPORTER,
    FOLLOWER,
    INFO,
    METRICS,
    OTLP_ADAPTER,
    PRINTED,
    PROCESSES,
    RANK_LABELS,
    RANKS,
    MetricSpec,
)
from exporter.state import ExporterStats, RankState, SeriesKey, TrainingState

Labels = TypeVar("Labels")
# A writer's form of a series' labels, from their names and values: ("run", "node", "rank"),
# ("job-7", "node-a", "3"); ("run", "node") for training_process_up; () for the exporter's
# own; the rank's labels and its facts for training_info.
SeriesLabels = Callable[[tuple[str, ...], tuple[str, ...]], Labels]
# A sample: the series' labels, the value of the family's own label (``spec.label``, the key
# of a dict-valued attribute; "" for a family without one), the number.
Sample = tuple[Labels, str, float]
PROCESS_LABELS = ("run", "node")


@dataclass(frozen=True, slots=True)
class Family(Generic[Labels]):
    """One metric family as read: its spec and its samples."""

    spec: MetricSpec
    samples: list[Sample[Labels]]


def _no_export_failures() -> int:
    return 0


def _no_process_check() -> None:
    return None


def _no_follower() -> None:
    return None


@dataclass(frozen=True, slots=True)
class ScrapeTime:
    """Readers of the values that live outside the state, called at each walk.

    The defaults stand for an exporter without OTLP push (no failed export: 0), without
    --process-pattern (no ``training_process_up`` family at all) and without a follower (no
    ``trainlog_file_lag_bytes``).
    """

    otlp_export_failures: Callable[[], int] = _no_export_failures
    # (run, node) -> whether a matching process runs; None when not checked.
    process_up: Callable[[], Mapping[tuple[str, str], bool] | None] = _no_process_check
    # trainlog_build_info's labels (a test pins them: the revision changes with every commit).
    build_info: Callable[[], Mapping[str, str]] = build_info
    # followed file (as a label value) -> bytes it holds beyond what was read; None when nothing is followed.
    file_lag_bytes: Callable[[], Mapping[str, int] | None] = _no_follower


# Nothing outside the state: no OTLP push, no --process-pattern.
STATE_ONLY = ScrapeTime()


def walk(state: TrainingState, series_labels: SeriesLabels[Labels], scrape_time: ScrapeTime = STATE_ONLY,
         specs: Iterable[MetricSpec] = METRICS) -> list[Family[Labels]]:
    """The families of ``specs`` (default: all, in exposition order) that have something to say."""
    specs = list(specs)
    reads_ranks = any(spec.source in (RANKS, PRINTED) for spec in specs)
    with state.lock:
        ranks = [(key, series_labels(RANK_LABELS, key), rank) for key, rank in sorted(state.series.items())
                 ] if reads_ranks else []
        families = [_rank_family(spec, ranks, series_labels) if spec.source in (RANKS, PRINTED) else
                    _exporter_family(spec, series_labels((), ()), state.stats)
                    for spec in specs if spec.source in (RANKS, PRINTED, EXPORTER)]
    for spec in specs:
        if spec.source == OTLP_ADAPTER:
            families.append(Family(spec, [(series_labels((), ()), "", getattr(scrape_time, spec.attribute)())]))
        elif spec.source == PROCESSES:
            up = getattr(scrape_time, spec.attribute)()
            if up is not None:
                families.append(Family(spec, [(series_labels(PROCESS_LABELS, key), "", int(alive))
                                              for key, alive in sorted(up.items())]))
        elif spec.source == BUILD:
            info = sorted(getattr(scrape_time, spec.attribute)().items())
            families.append(Family(spec, [(series_labels(tuple(name for name, _ in info),
                                                         tuple(value for _, value in info)), "", 1)]))
        elif spec.source == FOLLOWER:
            lags = getattr(scrape_time, spec.attribute)()
            if lags is not None:
                labels = series_labels((), ())
                families.append(Family(spec, [(labels, file, lag) for file, lag in sorted(lags.items())]))
    return families


def _rank_family(spec: MetricSpec, ranks: Sequence[tuple[SeriesKey, Labels, RankState]],
                 series_labels: SeriesLabels[Labels]) -> Family[Labels]:
    # Spelled out per shape: a function call or a tuple more per sample would cost a third
    # of the text writer's time at 1,024 ranks.
    attribute, label = spec.attribute, spec.label
    samples: list[Sample[Labels]]
    if spec.source == PRINTED:
        samples = [(labels, "", value) for _, labels, rank in ranks
                   if (value := rank.printed.get(attribute)) is not None]
    elif spec.type == INFO:
        samples = [(_with_facts(series_labels, key, getattr(rank, attribute)), "", 1) for key, _, rank in ranks]
    elif label is None:
        samples = [(labels, "", value) for _, labels, rank in ranks if (value := getattr(rank, attribute)) is not None]
    elif spec.type == COUNTER:  # in creation order: the known kinds first, as they were created at 0
        samples = [(labels, name, value) for _, labels, rank in ranks
                   for name, value in getattr(rank, attribute).items()]
    else:
        samples = [(labels, name, value) for _, labels, rank in ranks
                   for name, value in sorted(getattr(rank, attribute).items())]
    return Family(spec, samples)


def _exporter_family(spec: MetricSpec, labels: Labels, stats: ExporterStats) -> Family[Labels]:
    """A number, or with a ``label`` a dict: a sample per key, in creation order."""
    value = getattr(stats, spec.attribute)
    if spec.label is None:
        return Family(spec, [(labels, "", value)])
    return Family(spec, [(labels, name, number) for name, number in value.items()])


def _with_facts(series_labels: SeriesLabels[Labels], key: SeriesKey, info: Mapping[str, str]) -> Labels:
    """A rank's labels and its info facts; a fact named like a rank label cannot override it."""
    names, values = list(RANK_LABELS), list(key)
    for name, value in info.items():
        if name not in RANK_LABELS:
            names.append(name)
            values.append(value)
    return series_labels(tuple(names), tuple(values))
