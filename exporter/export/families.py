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
same (docs/benchmarks.md, "Scale"). What the walk read of a rank is kept until the store
changes the rank (``_RankRows``): a scrape reads again only the ranks that changed.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from exporter.export.build_info import build_info
from exporter.export.metrics_table import (
    BUILD,
    COUNTER,
    EXPORTER,
    FOLLOWER,
    INCIDENTS,
    INFO,
    KIND_TABLE,
    METRICS,
    OTLP_ADAPTER,
    PRINTED,
    PROCESSES,
    RANK_LABELS,
    RANKS,
    MetricSpec,
)
from exporter.kinds import KINDS
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
# order, that a writer may read after the state's lock is released, and must not change: the next walks
# give the same copy while the rank is unchanged); None for no sample.
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
    # log files found but left unfollowed for the open-file limit; None when nothing is followed.
    files_unfollowed: Callable[[], int | None] = _no_follower


# Nothing outside the state: no OTLP push, no --process-pattern.
STATE_ONLY = ScrapeTime()


def walk(state: TrainingState, series_labels: SeriesLabels[Labels], scrape_time: ScrapeTime = STATE_ONLY,
         specs: Iterable[MetricSpec] = METRICS) -> list[Family[Labels]]:
    """The families of ``specs`` (default: all, in exposition order) that have something to say."""
    specs = list(specs)
    rank_specs = tuple(spec for spec in specs if spec.source in (RANKS, PRINTED))
    with state.lock:
        keys, ranks = _in_key_order(state.series) if rank_specs else ((), [])
        rank_labels = _rank_labels(keys, ranks, series_labels)
        columns = iter(_rank_rows(rank_specs).columns(ranks))
        families = [_rank_family(spec, ranks, rank_labels, next(columns), series_labels)
                    if spec.source in (RANKS, PRINTED) else _exporter_family(spec, series_labels((), ()), state.stats)
                    for spec in specs if spec.source in (RANKS, PRINTED, EXPORTER)]
        incidents = _incident_labels(state) if any(spec.source == INCIDENTS for spec in specs) else []
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
        elif spec.source == INCIDENTS:
            families.append(Family(spec, [series_labels(INCIDENT_LABELS, values) for values in incidents],
                                   [1] * len(incidents)))
        elif spec.source == KIND_TABLE:
            families.append(Family(spec, [series_labels(KIND_LABELS, values) for values in _kind_labels()],
                                   [1] * len(KINDS)))
        elif spec.source == FOLLOWER:
            value = getattr(scrape_time, spec.attribute)()
            if value is not None:
                families.append(Family(spec, [series_labels((), ())], [dict(value) if spec.label else value]))
    return families


KIND_LABELS = ("kind", "family", "severity", "alert")
INCIDENT_LABELS = ("run", "node", "rank", "kind", "step")


def _incident_labels(state: TrainingState) -> list[tuple[str, str, str, str, str]]:
    """Each run's root cause as training_incident_info's labels, by run. Call with the state's lock held."""
    found = sorted(state.causes.causes().items())
    return [(*cause.event.key, cause.event.kind, "" if cause.event.step is None else str(cause.event.step))
            for _, cause in found]


def _kind_labels() -> list[tuple[str, str, str, str]]:
    return [(kind.name, kind.family, kind.severity, kind.alert or "") for kind in KINDS.values()]


def _in_key_order(series: Mapping[SeriesKey, RankState]) -> tuple[tuple[SeriesKey, ...],
                                                                   list[tuple[SeriesKey, RankState]]]:
    """The keys in insertion order (the very tuple of the walk before while they are the same) and the
    series sorted by key, as every writer lists them. The order is kept while the keys are the same
    (series come, rarely; never go but at a checkpoint's restore): 1,024 keys' sort took 1.5 ms."""
    global _key_order  # one entry, replaced whole: safe from several threads
    keys = tuple(series)
    known_keys, order = _key_order
    if keys != known_keys:
        order = sorted(range(len(keys)), key=keys.__getitem__)
        _key_order = known_keys, order = keys, order
    items = list(series.items())
    return known_keys, [items[index] for index in order]


_key_order: tuple[tuple[SeriesKey, ...], list[int]] = ((), [])


def _rank_labels(keys: tuple[SeriesKey, ...], ranks: Sequence[tuple[SeriesKey, RankState]],
                 series_labels: SeriesLabels[Labels]) -> list[Labels]:
    """Each series' rank labels in key order: the very list of the walk before while the keys are the same,
    so that a writer tells an unchanged family by identity, not by a pass over 1,024 series."""
    known = _labels_by_maker.get(series_labels)
    if known is not None and known[0] is keys:
        return known[1]
    labels = [series_labels(RANK_LABELS, key) for key, _ in ranks]
    _labels_by_maker[series_labels] = (keys, labels)  # one entry per label maker (text, collector, OTLP)
    return labels


_labels_by_maker: dict[object, tuple[tuple[SeriesKey, ...], list[Any]]] = {}
# Per label maker, the info family's facts column and the family made of it, in the walk before.
_info_labels: dict[tuple[str, object], tuple[Sequence[SeriesValue], Family[Any]]] = {}


def _rank_family(spec: MetricSpec, ranks: Sequence[tuple[SeriesKey, RankState]], rank_labels: list[Labels],
                 values: Sequence[SeriesValue], series_labels: SeriesLabels[Labels]) -> Family[Labels]:
    if spec.type == INFO:  # the value read is the rank's facts: labels of their own (under the lock), the number 1
        known = _info_labels.get((spec.attribute, series_labels))
        if known is not None and known[0] is values:  # no rank changed: the family of the walk before
            return cast("Family[Labels]", known[1])
        facts = cast("Sequence[Mapping[str, str]]", values)
        # training_info has a series for every rank; another info family (the latest failure) only where there
        # are facts.
        labels = [_with_facts(series_labels, key, info) for (key, _), info in zip(ranks, facts, strict=True)
                  if info or spec.attribute == "info"]
        family = Family(spec, labels, [1] * len(labels))
        _info_labels[(spec.attribute, series_labels)] = (values, family)
        return family
    return Family(spec, rank_labels, values)


class _RankRows:
    """What the families of ``specs`` read of each rank, as one row per rank; with ``keep``, a rank's row
    is read again only after the store changed the rank (``RankState.version``).

    At 1,024 ranks, reading every family of every rank at each scrape (a getattr, a copy of
    each dict) was most of a render, though between two scrapes many ranks may not change at
    all. A kept row is the very tuple of the scrape before, so a writer can tell a family none
    of whose ranks changed by identity, in one C-level pass (text_format).

    A row holds the rank and its version it was read at, the plain attributes, then the printed
    values, then a copy of each dict of a labelled family: three C-level reads instead of a call
    per family, and no object but the row and the copies (a changed rank at every scrape should
    not cost more collections of the garbage collector). ``columns`` puts the values back in the
    specs' order. The info family's value is the rank's facts, the live dict:
    the walk makes its labels under the lock, and a kept row is reused only while the rank,
    its facts included, is unchanged.
    """

    def __init__(self, specs: tuple[MetricSpec, ...], *, keep: bool) -> None:
        plain = [spec for spec in specs if spec.source == RANKS and spec.label is None]
        printed = [spec for spec in specs if spec.source == PRINTED]
        copied = [spec for spec in specs if spec.source == RANKS and spec.label is not None]
        self._plain = _attributes([spec.attribute for spec in plain])
        self._printed = tuple(spec.attribute for spec in printed)
        self._copied = _attributes([spec.attribute for spec in copied])
        row_order = [*plain, *printed, *copied]
        self._positions = [2 + row_order.index(spec) for spec in specs]  # after the rank and its version
        self._keep = keep
        # series key -> its row. The rank by identity, as the state holds it: a checkpoint's restore or
        # another state with the same series has other RankStates.
        self._kept: dict[SeriesKey, tuple[object, ...]] = {}
        self._last: tuple[list[tuple[object, ...]], list[Sequence[SeriesValue]]] = ([], [])  # rows, columns

    def columns(self, ranks: Sequence[tuple[SeriesKey, RankState]]) -> list[Sequence[SeriesValue]]:
        """Per spec, each rank's value (a dict: a copy, that neither the state nor a writer changes).
        Call with the state's lock held."""
        rows = [self._row(key, rank) for key, rank in ranks]
        if len(self._kept) > 2 * len(ranks) + 64:  # series gone (a restore) or of other states: forget them
            current = {key for key, _ in ranks}
            self._kept = {key: kept for key, kept in list(self._kept.items()) if key in current}
        if not rows:
            return [()] * len(self._positions)
        last_rows, last_columns = self._last
        if len(rows) == len(last_rows) and all(map(operator.is_, rows, last_rows)):
            return last_columns  # no rank changed: the very columns of the walk before, told by identity
        by_row_position = list(zip(*rows, strict=True))
        columns = [cast("Sequence[SeriesValue]", by_row_position[position]) for position in self._positions]
        if self._keep:
            self._last = rows, columns
        return columns

    def _row(self, key: SeriesKey, rank: RankState) -> tuple[object, ...]:
        kept = self._kept.get(key)
        if kept is not None and kept[0] is rank and kept[1] == rank.version:
            return kept
        row = (rank, rank.version, *self._plain(rank), *map(rank.printed.get, self._printed),
               *map(dict.copy, self._copied(rank)))
        if self._keep:
            self._kept[key] = row
        return row


def _rank_rows(specs: tuple[MetricSpec, ...]) -> _RankRows:
    """The table's rows, kept from walk to walk; a reader of other families' (OTLP reads a family at a
    time, tests a few) keeps nothing: no second copy of every rank's values."""
    return _TABLE_ROWS if specs == _TABLE_RANK_SPECS else _RankRows(specs, keep=False)


def _attributes(names: list[str]) -> Callable[[RankState], tuple[Any, ...]]:
    """A reader of these attributes of an object, as a tuple (``attrgetter`` of one name gives it bare)."""
    if len(names) > 1:
        return operator.attrgetter(*names)
    return lambda item: tuple(getattr(item, name) for name in names)


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

_TABLE_RANK_SPECS = tuple(spec for spec in METRICS if spec.source in (RANKS, PRINTED))
_TABLE_ROWS = _RankRows(_TABLE_RANK_SPECS, keep=True)
