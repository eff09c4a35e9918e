"""Every exported metric, once: name, help, type, where its value is read, its unit.

``families.walk`` reads these specs in ``METRICS`` order for the text writer, the
prometheus-client collector and the OpenTelemetry instruments alike, so a metric added
here appears on /metrics and over OTLP with no other change.

OpenTelemetry names are derived from the Prometheus ones: a dot after the namespace
(``training.``, ``trainlog.``), no unit word (the unit travels in the metric's ``unit``
field) and no ``_total``. A Collector or Prometheus that converts OTLP to Prometheus
names (unit suffix appended, ``{...}`` annotations dropped, ``_total`` on counters) gives
back exactly the Prometheus name, so dashboards and alert rules work on either path.
Dimensionless values (loss, learning rate) carry no unit rather than ``1``: the
conversion would append ``_ratio`` to a gauge with unit ``1``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

RANK_LABELS = ("run", "node", "rank")

GAUGE, COUNTER, INFO = "gauge", "counter", "info"
# Where a family's values are read: a RankState attribute of every series, a value the
# rank's log printed (RankState.printed, by the name a format parser gives it), an
# ExporterStats attribute, or, at scrape time and outside the state, the OTLP adapter, /proc, the
# follower and the exporter's build.
RANKS, PRINTED, EXPORTER, OTLP_ADAPTER, PROCESSES, FOLLOWER, BUILD, KIND_TABLE, INCIDENTS = (
    "ranks", "printed", "exporter", "otlp adapter", "processes", "follower", "build", "kinds", "incidents")

# The unit words a Prometheus name ends with, by the UCUM unit the OTLP side carries.
_UNIT_SUFFIXES = {"s": "_seconds", "By": "_bytes"}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family. ``name`` is the Prometheus name, without ``_total`` for counters."""

    name: str
    help: str
    attribute: str  # the RankState, ExporterStats or ScrapeTime (a reader) attribute holding the value, or a dict of them
    unit: str = ""  # UCUM, as OpenTelemetry wants it: "s", "By", "{step}"
    label: str | None = None  # for dict-valued attributes: the label naming the key
    type: str = GAUGE
    source: str = RANKS

    @property
    def otel_name(self) -> str:
        """``training_step_duration_seconds`` (unit s) -> ``training.step_duration``."""
        base = self.name.removesuffix(_UNIT_SUFFIXES.get(self.unit, ""))
        namespace, _, rest = base.partition("_")
        return f"{namespace}.{rest}"


def _group(type_: str, source: str, *specs: MetricSpec) -> tuple[MetricSpec, ...]:
    # A printed gauge keeps its source among the rank's other gauges.
    return tuple(dataclasses.replace(spec, type=type_, source=PRINTED if spec.source == PRINTED else source)
                 for spec in specs)


def _printed(name: str, help_: str, value: str, unit: str = "") -> MetricSpec:
    """A gauge of a value the rank's log printed: ``value`` is the name format parsers give it."""
    return MetricSpec(name, help_, value, unit, source=PRINTED)


# Gauges per rank, present once a value was seen.
RANK_GAUGES = _group(
    GAUGE, RANKS,
    MetricSpec("training_step", "Current global training step.", "step", "{step}"),
    _printed("training_total_steps", "Total training steps printed with the step (step:[ x/ total]).", "total_steps", "{step}"),
    _printed("training_loss", "Training loss of the latest step.", "loss"),
    MetricSpec("training_loss_smoothed", "Exponentially smoothed training loss (plateau detector's view).", "loss_smoothed"),
    _printed("training_learning_rate", "Learning rate of the latest step.", "learning_rate"),
    _printed("training_grad_norm", "Global gradient norm of the latest step (a printed NaN, 'not obtained', leaves it unchanged).", "grad_norm"),
    _printed("training_step_duration_seconds", "Duration of the latest step in seconds.", "step_time_seconds", "s"),
    _printed("training_tflops_per_device", "Model TFLOP/s per device as the framework computes it (Megatron-LM's throughput per GPU, torchtitan's tflops).", "tflops_per_device"),
    _printed("training_throughput", "Training throughput as printed by the framework (unit in training_info's throughput_unit).", "throughput"),
    MetricSpec("training_last_log_timestamp_seconds", "Modification time of the rank's log at the last change seen (Unix seconds).", "last_log_timestamp", "s"),
    MetricSpec("training_last_step_timestamp_seconds", "When the exporter saw the rank's latest step record (Unix seconds).", "last_step_timestamp", "s"),
    MetricSpec("training_loss_best_step", "Step at which the smoothed loss last improved by the plateau margin.", "loss_best_step", "{step}"),
    MetricSpec("training_stall_threshold_seconds", "Silence after which the rank counts as stalled: several times its "
               "usual interval between step lines, the start-up allowance before its first step, never below the "
               "floor (docs/detectors.md).", "stall_threshold_seconds", "s"),
)

# Gauges per rank and key of a dict-valued attribute; label values sorted.
NAMED_GAUGES = _group(
    GAUGE, RANKS,
    MetricSpec("training_aux_loss", "Extra losses printed with the step (MoE load balancing, MTP, ...).", "aux_losses", label="name"),
    MetricSpec("training_metric", "Other numeric fields printed with the step (loss_scale, mfu, ...).", "extra", label="name"),
    MetricSpec("training_rank_value", "Values the rank computed for itself (device_local_norm, local_norm/<parameter>, micro_local_loss).", "rank_values", label="name"),
    MetricSpec("training_last_anomaly_step", "Step of the latest anomaly of each kind.", "last_anomaly_step", "{step}", "kind"),
    MetricSpec("training_last_error_timestamp_seconds", "When the latest failure of each kind was seen (Unix seconds).", "last_error_timestamp", "s", "kind"),
)

# The info pseudo-metric: value 1, the rank's facts as labels (Prometheus adds _info).
RANK_INFO = MetricSpec("training_info", "Facts about the rank's log: framework, format, mode, file, throughput unit.", "info",
                       type=INFO)
# Present for a rank once it logged a failure (DESIGN 3.3).
LAST_ERROR_INFO = MetricSpec("training_last_error_info", "1 for the rank's latest failure: its kind, and the fault "
                             "knowledge's code and component (empty when none applies).", "last_error", type=INFO)

RANK_COUNTERS = _group(
    COUNTER, RANKS,
    MetricSpec("training_log_lines", "Log lines read from the rank's log.", "lines_total", "{line}"),
    MetricSpec("training_steps", "Step records parsed from the rank's log.", "steps_total", "{step}"),
    MetricSpec("training_restarts", "Times the training started again in the rank's log (a start banner after steps, "
               "the step going back, a new torchrun attempt directory, msrun's workers registering again).", "restarts_total",
               "{restart}"),
    MetricSpec("training_productive_seconds", "Printed step time of steps that moved past the highest step reached "
               "so far (goodput's numerator).", "productive_seconds_total", "s"),
)

# Counters per rank and kind, created at 0 for the known kinds; label values in creation order.
KIND_COUNTERS = _group(
    COUNTER, RANKS,
    MetricSpec("training_anomalies", "Anomalies detected at step resolution, by kind.", "anomalies", "{anomaly}", "kind"),
    MetricSpec("training_lost_seconds", "Time that did not train the model, by kind: replayed (steps re-run after a "
               "restart), startup (a (re)start to its first step), checkpoint (a one-step save above the baseline), "
               "stall (gaps between step records).", "lost_seconds_total", "s", "kind"),
    MetricSpec("training_errors", "Failure signatures seen in the rank's log, by kind.", "errors", "{error}", "kind"),
    MetricSpec("training_scheduler_events", "Cluster events from msrun's scheduler.log, by kind.", "scheduler_events", "{event}", "kind"),
    MetricSpec("training_scheduler_node_timeouts", "Nodes msrun's scheduler declared timed out, by node id (repeated lines count once).",
               "node_timeouts", "{timeout}", "node_id"),
)

# The exporter's own health; a dict-valued attribute gives a series per key (``label``), in creation order.
STATS_GAUGES = _group(GAUGE, EXPORTER, MetricSpec("trainlog_files_followed", "Log files currently followed.", "files_followed", "{file}"))

STATS_COUNTERS = _group(
    COUNTER, EXPORTER,
    MetricSpec("trainlog_bytes_read", "Bytes read from followed log files.", "bytes_read_total", "By"),
    MetricSpec("trainlog_rotations", "Log rotations followed (the path named a new file).", "rotations_total", "{rotation}"),
    MetricSpec("trainlog_truncations", "Truncations detected (size below the read offset or new first bytes: copytruncate).", "truncations_total", "{truncation}"),
    MetricSpec("trainlog_bytes_lost", "Bytes known lost at truncations: a copy's cut-off last line, or unread bytes when no copy was found (a lower bound).", "bytes_lost_total", "By"),
    MetricSpec("trainlog_lines_unparsed", "Lines that matched no format and no failure signature.", "lines_unparsed_total", "{line}"),
    MetricSpec("trainlog_lines_truncated", "Lines longer than the line cap, truncated to it.", "lines_truncated_total", "{line}"),
    MetricSpec("trainlog_series_dropped", "Series or values not created because a cardinality limit was reached.", "series_dropped_total", "{series}"),
    MetricSpec("trainlog_lines_parsed", "Lines a log format's parser read a record from, by format.", "lines_parsed_total",
               "{line}", "format"),
    MetricSpec("trainlog_lines_rejected", "Lines skipped because reading them failed (a number beyond 18 digits, a parser error), by reason; "
               "the rest of their read goes on.", "lines_rejected_total", "{line}", "reason"),
    MetricSpec("trainlog_lines_dropped", "Lines read whose content, whole or in part, never reached the state, by reason: "
               "number_out_of_range and parse_error (trainlog_lines_rejected_total), truncated (the rest of a line over "
               "the line cap, trainlog_lines_truncated_total), series_limit (lines of a series the cardinality limit keeps out).",
               "lines_dropped_total", "{line}", "reason"),
)

# Read at scrape time, outside the state: the OTLP adapter's own count (0 without OTLP)...
OTLP_EXPORT_FAILURES = MetricSpec("trainlog_otlp_export_failures", "OTLP metric exports that failed (collector down, slow or refusing).",
                                  "otlp_export_failures", "{export}", type=COUNTER, source=OTLP_ADAPTER)
# ... the bytes each followed file holds beyond what was read (its path as the label: one series per file,
# as many as files are followed, at most the open-file limit) ...
FILE_LAG = MetricSpec("trainlog_file_lag_bytes", "Bytes a followed file holds beyond what the exporter has read (at scrape time).",
                      "file_lag_bytes", "By", "file", source=FOLLOWER)
# ... the log files found but left unfollowed because the open-file limit leaves no descriptor for them ...
FILES_UNFOLLOWED = MetricSpec("trainlog_files_unfollowed", "Log files found but not followed: the open-file limit "
                              "(less a reserve for the listener) is reached.", "files_unfollowed", "{file}",
                              source=FOLLOWER)
# ... and, only with --process-pattern, per (run, node): not a rank's series.
PROCESS_UP = MetricSpec("training_process_up", "1 while a process matching --process-pattern runs, else 0.", "process_up",
                        source=PROCESSES)

# ... and the exporter's version, so a fleet's versions can be told apart.
BUILD_INFO = MetricSpec("trainlog_build_info", "1, labeled with the exporter's version, source revision and Python version.",
                        "build_info", type=INFO, source=BUILD)

# ... and the table of kinds (exporter/kinds.py): which alert pages on each kind, so that the rules join on it
# (``and on (kind) trainlog_kind_info{alert="..."}``) and a new kind needs no rule of its own.
KIND_INFO = MetricSpec("trainlog_kind_info", "1 for every kind of event the exporter counts, labeled with its family, "
                       "severity and the alert that pages on it (empty: none).", "kinds", type=INFO, source=KIND_TABLE)

# ... and, under the state's lock, the root cause of each run's current incident (state/cause.py), per run.
INCIDENT_INFO = MetricSpec("training_incident_info", "1 for the root cause of the run's current incident (the primary "
                           "event its followers are explained by), labeled with its rank, kind and step; gone when "
                           "the run trains on.", "incidents", type=INFO, source=INCIDENTS)

# Every family in exposition order; the ones read from the state come first (one lock hold).
METRICS = (*RANK_GAUGES, *NAMED_GAUGES, RANK_INFO, LAST_ERROR_INFO, *RANK_COUNTERS, *KIND_COUNTERS, *STATS_GAUGES,
           *STATS_COUNTERS, INCIDENT_INFO, OTLP_EXPORT_FAILURES, FILE_LAG, FILES_UNFOLLOWED, PROCESS_UP, BUILD_INFO,
           KIND_INFO)
