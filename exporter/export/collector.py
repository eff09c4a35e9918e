"""A prometheus-client custom Collector that reads state at scrape time.

Fresh metric families on every scrape, registered on a private registry: nothing is
duplicated into the client library's global registry. The metrics themselves are listed
in ``metrics_table``, shared with the OpenTelemetry instruments.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.export.metrics_table import (
    KIND_COUNTERS,
    NAMED_GAUGES,
    PROCESS_UP,
    RANK_COUNTERS,
    RANK_GAUGES,
    RANK_INFO,
    RANK_LABELS,
    STATS_COUNTERS,
    STATS_GAUGES,
    STATS_LABELLED_COUNTERS,
)
from exporter.state import TrainingState

LABELS = list(RANK_LABELS)


class TrainingCollector(Collector):
    """Yields every training_* and trainlog_* family from one consistent state snapshot."""

    def __init__(self, state: TrainingState) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        with self._state.lock:
            families = list(self._families())
        yield from families

    def _families(self) -> Iterator[Metric]:
        series = sorted(self._state.series.items())
        for spec in RANK_GAUGES:
            family = GaugeMetricFamily(spec.name, spec.help, labels=LABELS)
            for key, rank in series:
                value = getattr(rank, spec.attribute)
                if value is not None:
                    family.add_metric(key, value)
            yield family
        for spec in NAMED_GAUGES:
            family = GaugeMetricFamily(spec.name, spec.help, labels=[*LABELS, spec.label])
            for key, rank in series:
                for value_name, value in sorted(getattr(rank, spec.attribute).items()):
                    family.add_metric([*key, value_name], value)
            yield family
        info = InfoMetricFamily(RANK_INFO.name.removesuffix("_info"), RANK_INFO.help, labels=LABELS)
        for key, rank in series:
            info.add_metric(key, {k: v for k, v in getattr(rank, RANK_INFO.attribute).items() if k not in LABELS})
        yield info
        for spec in RANK_COUNTERS:
            family = CounterMetricFamily(spec.name, spec.help, labels=LABELS)
            for key, rank in series:
                family.add_metric(key, getattr(rank, spec.attribute))
            yield family
        for spec in KIND_COUNTERS:
            family = CounterMetricFamily(spec.name, spec.help, labels=[*LABELS, spec.label])
            for key, rank in series:
                for kind, count in getattr(rank, spec.attribute).items():
                    family.add_metric([*key, kind], count)
            yield family
        stats = self._state.stats
        for spec in STATS_GAUGES:
            yield GaugeMetricFamily(spec.name, spec.help, value=getattr(stats, spec.attribute))
        for spec in STATS_COUNTERS:
            yield CounterMetricFamily(spec.name, spec.help, value=getattr(stats, spec.attribute))
        for spec in STATS_LABELLED_COUNTERS:
            family = CounterMetricFamily(spec.name, spec.help, labels=[spec.label])
            for value_name, count in sorted(getattr(stats, spec.attribute).items()):
                family.add_metric([value_name], count)
            yield family
        if self._state.process_up:  # only with --process-pattern
            process_up = GaugeMetricFamily(PROCESS_UP.name, PROCESS_UP.help, labels=["run", "node"])
            for (run, node), up in sorted(getattr(self._state, PROCESS_UP.attribute).items()):
                process_up.add_metric([run, node], int(up))
            yield process_up

