"""A prometheus-client custom Collector that reads state at scrape time.

Fresh metric families on every scrape, registered on a private registry: nothing is
duplicated into the client library's global registry.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from exporter.state import TrainingState

LABELS = ["run", "node", "rank"]

# (metric name, help, RankState attribute): one gauge per rank, present once seen.
_RANK_GAUGES = (
    ("training_step", "Current global training step.", "step"),
    ("training_total_steps", "Total training steps printed with the step (step:[ x/ total]).", "total_steps"),
    ("training_loss", "Training loss of the latest step.", "loss"),
    ("training_loss_smoothed", "Exponentially smoothed training loss (plateau detector's view).", "loss_smoothed"),
    ("training_learning_rate", "Learning rate of the latest step.", "learning_rate"),
    ("training_grad_norm", "Global gradient norm of the latest step (a printed NaN, 'not obtained', leaves it unchanged).", "grad_norm"),
    ("training_step_duration_seconds", "Duration of the latest step in seconds.", "step_time_seconds"),
    ("training_throughput", "Training throughput as printed by the framework (unit in training_info's throughput_unit).", "throughput"),
    ("training_last_log_timestamp_seconds", "Modification time of the rank's log at the last change seen (Unix seconds).", "last_log_timestamp"),
    ("training_last_step_timestamp_seconds", "When the exporter saw the rank's latest step record (Unix seconds).", "last_step_timestamp"),
    ("training_loss_best_step", "Step at which the smoothed loss last improved by the plateau margin.", "loss_best_step"),
)

_RANK_COUNTERS = (
    ("training_log_lines", "Log lines read from the rank's log.", "lines_total"),
    ("training_steps", "Step records parsed from the rank's log.", "steps_total"),
)

# (metric name, help, RankState dict attribute, extra label): counters by kind.
_KIND_COUNTERS = (
    ("training_anomalies", "Anomalies detected at step resolution, by kind.", "anomalies"),
    ("training_errors", "Failure signatures seen in the rank's log, by kind.", "errors"),
    ("training_scheduler_events", "Cluster events from msrun's scheduler.log, by kind.", "scheduler_events"),
)

_STATS_GAUGES = (("trainlog_files_followed", "Log files currently followed.", "files_followed"),)
_STATS_COUNTERS = (
    ("trainlog_bytes_read", "Bytes read from followed log files.", "bytes_read_total"),
    ("trainlog_rotations", "Log rotations followed (the path named a new file).", "rotations_total"),
    ("trainlog_truncations", "Truncations detected (size below the read offset or new first bytes: copytruncate).", "truncations_total"),
    ("trainlog_bytes_lost", "Bytes known lost at truncations: a copy's cut-off last line, or unread bytes when no copy was found (a lower bound).", "bytes_lost_total"),
    ("trainlog_lines_unparsed", "Lines that matched no format and no failure signature.", "lines_unparsed_total"),
    ("trainlog_lines_truncated", "Lines longer than the line cap, truncated to it.", "lines_truncated_total"),
    ("trainlog_series_dropped", "Series or values not created because a cardinality limit was reached.", "series_dropped_total"),
)


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
        for name, documentation, attribute in _RANK_GAUGES:
            family = GaugeMetricFamily(name, documentation, labels=LABELS)
            for key, rank in series:
                value = getattr(rank, attribute)
                if value is not None:
                    family.add_metric(key, value)
            yield family
        yield _named_gauge("training_aux_loss", "Extra losses printed with the step (MoE load balancing, MTP, ...).",
                           "name", series, lambda rank: rank.aux_losses)
        yield _named_gauge("training_metric", "Other numeric fields printed with the step (loss_scale, mfu, ...).",
                           "name", series, lambda rank: rank.extra)
        yield _named_gauge("training_last_anomaly_step", "Step of the latest anomaly of each kind.",
                           "kind", series, lambda rank: rank.last_anomaly_step)
        yield _named_gauge("training_last_error_timestamp_seconds", "When the latest failure of each kind was seen (Unix seconds).",
                           "kind", series, lambda rank: rank.last_error_timestamp)
        info = InfoMetricFamily("training", "Facts about the rank's log: framework, mode, file, throughput unit.")
        for key, rank in series:
            info.add_metric(key, {k: v for k, v in rank.info.items() if k not in LABELS})
        yield info
        for name, documentation, attribute in _RANK_COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=LABELS)
            for key, rank in series:
                family.add_metric(key, getattr(rank, attribute))
            yield family
        for name, documentation, attribute in _KIND_COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=[*LABELS, "kind"])
            for key, rank in series:
                for kind, count in getattr(rank, attribute).items():
                    family.add_metric([*key, kind], count)
            yield family
        stats = self._state.stats
        for name, documentation, attribute in _STATS_GAUGES:
            yield GaugeMetricFamily(name, documentation, value=getattr(stats, attribute))
        for name, documentation, attribute in _STATS_COUNTERS:
            yield CounterMetricFamily(name, documentation, value=getattr(stats, attribute))


def _named_gauge(name, documentation, label, series, values_of) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[*LABELS, label])
    for key, rank in series:
        for value_name, value in sorted(values_of(rank).items()):
            family.add_metric([*key, value_name], value)
    return family


