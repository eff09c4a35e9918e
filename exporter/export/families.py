"""One walk over the metric table: every family's samples, for every writer.

The text writer (/metrics), the prometheus-client collector and the OpenTelemetry
instruments all print what ``walk`` reads, so they cannot disagree on a value, a label or
the order (client_python's exposition writes every format from one pass the same way).
The families read from the state are read under one hold of its lock: one consistent
snapshot. The ones read at scrape time outside the state (``ScrapeTime``) are read after
the lock is released: scanning /proc must never hold up the follower.

Each writer says how it holds a series' labels (``SeriesLabels``): the walk asks for them
once per series and walk, not once per sample, so the text writer can keep a rank's
labels escaped. A family is read as one value per series (a number, or for a family with
a label its names and numbers), not as samples: at 1,024 ranks a tuple per sample was most
of a scrape, and the text writer keeps each series' lines for as long as its value is the
same (docs/benchmarks.md, "Scale").
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

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


# A series' value: a number; for a family with a label, its numbers by label value (a copy, in creation
# order, that a writer may read after the state's lock is released); None for no sample.
SeriesValue = float | Mapping[str, float] | None


@dataclass(frozen=True, slots=True)
class Family(Generic[Labels]):
    """One metric family as read: its spec, and a value per series (``values[i]`` is ``series[i]``'s)."""

    spec: MetricSpec
    series: Sequence[Labels]
    values: Sequence[SeriesValue]

    @property
    def samples(self) -> list[Sample[Labels]]:
        """Every sample, in exposition order."""
        if self.spec.label is None:
            return [(labels, "", cast("float", value)) for labels, value in zip(self.series, self.values, strict=True)
                    if value is not None]
        return [(labels, name, number) for labels, value in zip(self.series, self.values, strict=True)
                for name, number in named_samples(self.spec, cast("Mapping[str, float]", value))]


def named_samples(spec: MetricSpec, numbers: Mapping[str, float]) -> Iterable[tuple[str, float]]:
    """A series' (label value, number) pairs in exposition order: a counter's in creation order (the known
    kinds first, as they were created at 0), a gauge's sorted by label value."""
    return numbers.items() if spec.type == COUNTER else sorted(numbers.items())


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
        ranks = _in_key_order(state.series) if reads_ranks else []
        rank_labels = [series_labels(RANK_LABELS, key) for key, _ in ranks]
        families = [_rank_family(spec, ranks, rank_labels, series_labels) if spec.source in (RANKS, PRINTED) else
                    _exporter_family(spec, series_labels((), ()), state.stats)
                    for spec in specs if spec.source in (RANKS, PRINTED, EXPORTER)]
    for spec in specs:
        if spec.source == OTLP_ADAPTER:
            families.append(Family(spec, [series_labels((), ())], [getattr(scrape_time, spec.attribute)()]))
        elif spec.source == PROCESSES:
            up = getattr(scrape_time, spec.attribute)()
            if up is not None:
                ordered = sorted(up.items())
                families.append(Family(spec, [series_labels(PROCESS_LABELS, key) for key, _ in ordered],
                                       [int(alive) for _, alive in ordered]))
        elif spec.source == BUILD:
            info = getattr(scrape_time, spec.attribute)()
            names = tuple(sorted(info))
            families.append(Family(spec, [series_labels(names, tuple(info[name] for name in names))], [1]))
        elif spec.source == FOLLOWER:
            lags = getattr(scrape_time, spec.attribute)()
            if lags is not None:
                families.append(Family(spec, [series_labels((), ())], [dict(lags)]))
    return families


def _in_key_order(series: Mapping[SeriesKey, RankState]) -> list[tuple[SeriesKey, RankState]]:
    """The series sorted by key, as every writer lists them. The order is kept while the keys are the
    same (series come, rarely; never go but at a checkpoint's restore): 1,024 keys' sort took 1.5 ms."""
    global _key_order  # one entry, replaced whole: safe from several threads
    keys = tuple(series)
    known_keys, order = _key_order
    if keys != known_keys:
        order = sorted(range(len(keys)), key=keys.__getitem__)
        _key_order = keys, order
    items = list(series.items())
    return [items[index] for index in order]


_key_order: tuple[tuple[SeriesKey, ...], list[int]] = ((), [])


def _rank_family(spec: MetricSpec, ranks: Sequence[tuple[SeriesKey, RankState]], rank_labels: list[Labels],
                 series_labels: SeriesLabels[Labels]) -> Family[Labels]:
    # A list comprehension per shape: this runs under the state's lock, once per family and rank.
    attribute = spec.attribute
    values: list[SeriesValue]
    if spec.source == PRINTED:
        values = [rank.printed.get(attribute) for _, rank in ranks]
    elif spec.type == INFO:
        return Family(spec, [_with_facts(series_labels, key, rank.info) for key, rank in ranks], [1] * len(ranks))
    elif spec.label is None:
        values = [getattr(rank, attribute) for _, rank in ranks]
    else:
        values = [getattr(rank, attribute).copy() for _, rank in ranks]
    return Family(spec, rank_labels, values)


def _exporter_family(spec: MetricSpec, labels: Labels, stats: ExporterStats) -> Family[Labels]:
    """A number, or with a ``label`` a dict: a sample per key."""
    value = getattr(stats, spec.attribute)
    return Family(spec, [labels], [value if spec.label is None else dict(value)])


def _with_facts(series_labels: SeriesLabels[Labels], key: SeriesKey, info: Mapping[str, str]) -> Labels:
    """A rank's labels and its info facts; a fact named like a rank label cannot override it."""
    if _RANK_LABEL_SET.isdisjoint(info):  # the usual case, without a Python loop per fact
        return series_labels((*RANK_LABELS, *info), (*key, *info.values()))
    facts = [(name, value) for name, value in info.items() if name not in _RANK_LABEL_SET]
    return series_labels((*RANK_LABELS, *(name for name, _ in facts)), (*key, *(value for _, value in facts)))


_RANK_LABEL_SET = frozenset(RANK_LABELS)
