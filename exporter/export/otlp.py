"""OpenTelemetry: push the same metrics to a collector over OTLP/HTTP.

Observable instruments whose callbacks read ``TrainingState`` under its lock, the way the
Prometheus collector does at scrape time: no second bookkeeping. The SDK's periodic
reader collects and exports on its own thread; the state lock is held only inside the
callbacks, never while a request is in flight, so a collector that is down, slow or
refusing cannot hold up following, parsing or /metrics. Failed exports are counted in
``ExporterStats.otlp_export_failures_total`` and logged on state changes, and at most
once a minute while the failure lasts.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from exporter import __version__
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
    MetricSpec,
)
from exporter.settings import Settings
from exporter.state import RankState, SeriesKey, TrainingState

log = logging.getLogger(__name__)

INSTRUMENTATION_SCOPE = "trainlog-exporter"
_REPEAT_FAILURE_LOG_SECONDS = 60.0
# Where the OTLP/HTTP exporter logs every failed attempt; we fold those into our own,
# rarer messages.
_SDK_EXPORT_LOGGER = OTLPMetricExporter.__module__
_MAX_REASON_CHARS = 400

Attributes = dict[str, str]
Reading = Iterator[tuple[float, Attributes]]


def resource_attributes(settings: Settings, host_name: str) -> Attributes:
    """Semantic-convention resource attributes; OTEL_RESOURCE_ATTRIBUTES overrides the
    detected ones and an explicit OTEL_SERVICE_NAME overrides both (as the spec says)."""
    attributes = {
        "service.name": settings.otel_service_name,
        "service.version": __version__,
        "service.instance.id": settings.pod_name or host_name,
        "host.name": host_name,
    }
    kubernetes = {
        "k8s.pod.name": settings.pod_name,
        "k8s.namespace.name": settings.pod_namespace,
        "k8s.node.name": settings.node_name,
    }
    attributes.update({key: value for key, value in kubernetes.items() if value})
    attributes.update(settings.otel_resource_attributes)
    if "otel_service_name" in settings.model_fields_set:
        attributes["service.name"] = settings.otel_service_name
    return attributes


def register_instruments(meter: Meter, state: TrainingState) -> None:
    """One observable instrument per entry of the shared metric table."""
    for spec in RANK_GAUGES:
        _gauge(meter, spec, _per_rank_callback(state, _rank_value(spec.attribute)))
    for spec in NAMED_GAUGES:
        _gauge(meter, spec, _per_rank_callback(state, _keyed_values(spec.attribute, spec.label)))
    _gauge(meter, RANK_INFO, _per_rank_callback(state, _rank_info))
    for spec in RANK_COUNTERS:
        _counter(meter, spec, _per_rank_callback(state, _rank_value(spec.attribute)))
    for spec in KIND_COUNTERS:
        _counter(meter, spec, _per_rank_callback(state, _keyed_values(spec.attribute, spec.label)))
    for spec in STATS_GAUGES:
        _gauge(meter, spec, _stats_callback(state, spec.attribute))
    for spec in STATS_COUNTERS:
        _counter(meter, spec, _stats_callback(state, spec.attribute))
    for spec in STATS_LABELLED_COUNTERS:
        _counter(meter, spec, _labelled_stats_callback(state, spec.attribute, spec.label))
    _gauge(meter, PROCESS_UP, _process_up_callback(state))


def _gauge(meter: Meter, spec: MetricSpec, callback) -> None:
    meter.create_observable_gauge(spec.otel_name, callbacks=[callback], unit=spec.unit, description=spec.help)


def _counter(meter: Meter, spec: MetricSpec, callback) -> None:
    meter.create_observable_counter(spec.otel_name, callbacks=[callback], unit=spec.unit, description=spec.help)


def _per_rank_callback(state: TrainingState, read: Callable[[SeriesKey, RankState], Reading]):
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        with state.lock:
            return [Observation(value, attributes)
                    for key, rank in state.series.items()
                    for value, attributes in read(key, rank)]
    return observe


def _stats_callback(state: TrainingState, attribute: str):
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        with state.lock:
            return [Observation(getattr(state.stats, attribute))]
    return observe


def _labelled_stats_callback(state: TrainingState, attribute: str, label: str):
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        with state.lock:
            return [Observation(count, {label: name}) for name, count in getattr(state.stats, attribute).items()]
    return observe


def _process_up_callback(state: TrainingState):
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        # Per (run, node), and only with --process-pattern: nothing observed otherwise.
        with state.lock:
            return [Observation(int(up), {"run": run, "node": node}) for (run, node), up in state.process_up.items()]
    return observe


def _rank_attributes(key: SeriesKey) -> Attributes:
    return dict(zip(RANK_LABELS, key, strict=True))


def _rank_value(attribute: str) -> Callable[[SeriesKey, RankState], Reading]:
    def read(key: SeriesKey, rank: RankState) -> Reading:
        value = getattr(rank, attribute)
        if value is not None:
            yield value, _rank_attributes(key)
    return read


def _keyed_values(attribute: str, label: str) -> Callable[[SeriesKey, RankState], Reading]:
    def read(key: SeriesKey, rank: RankState) -> Reading:
        for name, value in getattr(rank, attribute).items():
            yield value, {**_rank_attributes(key), label: name}
    return read


def _rank_info(key: SeriesKey, rank: RankState) -> Reading:
    facts = {name: value for name, value in rank.info.items() if name not in RANK_LABELS}
    yield 1, {**_rank_attributes(key), **facts}


@dataclass
class ExportHealth:
    """Decides what to log about exports: every state change at once, an ongoing failure
    again only after ``repeat_after`` seconds. Pure: the caller passes the clock."""

    endpoint: str
    repeat_after: float = _REPEAT_FAILURE_LOG_SECONDS
    consecutive_failures: int = 0
    worked_before: bool = False
    _last_logged: float = field(default=0.0, repr=False)

    def record(self, ok: bool, reason: str, now: float) -> tuple[int, str] | None:
        """Note one export's outcome; returns (level, message) when it deserves a log line."""
        if ok:
            failures, first = self.consecutive_failures, not self.worked_before
            self.consecutive_failures, self.worked_before = 0, True
            if failures:
                return logging.INFO, f"OTLP export to {self.endpoint} recovered after {failures} failed exports"
            return (logging.INFO, f"OTLP export to {self.endpoint} works") if first else None
        self.consecutive_failures += 1
        if self.consecutive_failures == 1:
            self._last_logged = now
            return logging.WARNING, f"OTLP export to {self.endpoint} failed (/metrics is not affected): {reason}"
        if now - self._last_logged >= self.repeat_after:
            self._last_logged = now
            return (logging.WARNING, f"OTLP export to {self.endpoint} still failing, "
                                     f"{self.consecutive_failures} failed exports in a row; last: {reason}")
        return None


class _SdkLogCapture(logging.Filter):
    """Keeps the SDK's per-attempt export messages as the failure's reason instead of
    letting each one through (they would flood the log at short export intervals)."""

    def __init__(self) -> None:
        super().__init__()
        self._messages: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.note(record.getMessage())
        return log.isEnabledFor(logging.DEBUG)

    def note(self, message: str) -> None:
        self._messages.append(message)

    def take_reason(self) -> str:
        distinct = list(dict.fromkeys(self._messages))
        self._messages.clear()
        return " / ".join(distinct)[:_MAX_REASON_CHARS] or "no detail from the OTLP exporter"


class _CountingExporter(MetricExporter):
    """Wraps the OTLP exporter: counts failed exports in the state, logs them sparingly.

    Temporality stays the default, cumulative, whatever
    OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE says: Prometheus-style backends and
    the counters' ``_total`` twins need cumulative sums.
    """

    def __init__(self, delegate: MetricExporter, state: TrainingState, health: ExportHealth,
                 sdk_log: _SdkLogCapture) -> None:
        super().__init__()
        self._delegate = delegate
        self._state = state
        self._health = health
        self._sdk_log = sdk_log

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        try:
            result = self._delegate.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception as error:  # noqa: BLE001 - a surprise in the SDK must not end the push thread
            log.debug("OTLP exporter raised", exc_info=True)
            result = MetricExportResult.FAILURE
            self._sdk_log.note(repr(error))
        ok = result is MetricExportResult.SUCCESS
        if not ok:
            with self._state.lock:
                self._state.stats.otlp_export_failures_total += 1
        decision = self._health.record(ok, self._sdk_log.take_reason(), time.monotonic())
        if decision is not None:
            log.log(*decision)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._delegate.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._delegate.shutdown(timeout_millis=timeout_millis, **kwargs)


class OtlpPush:
    """A private MeterProvider that pushes the state's metrics to one OTLP/HTTP endpoint
    (``settings.otlp_metrics_url``, which must be set)."""

    def __init__(self, state: TrainingState, settings: Settings, host_name: str | None = None) -> None:
        self.endpoint = settings.otlp_metrics_url
        self._state = state
        self._settings = settings
        self._resource = Resource(resource_attributes(settings, host_name or socket.gethostname()))
        self._sdk_log = _SdkLogCapture()
        self._provider: MeterProvider | None = None

    def start(self) -> None:
        settings = self._settings
        timeout_millis = settings.otel_exporter_otlp_timeout
        delegate = OTLPMetricExporter(endpoint=self.endpoint, headers=settings.otel_exporter_otlp_headers,
                                      timeout=timeout_millis / 1000)
        exporter = _CountingExporter(delegate, self._state, ExportHealth(self.endpoint), self._sdk_log)
        logging.getLogger(_SDK_EXPORT_LOGGER).addFilter(self._sdk_log)
        # The reader starts its export thread on construction.
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=settings.otel_metric_export_interval,
                                               export_timeout_millis=timeout_millis)
        self._provider = MeterProvider(metric_readers=[reader], resource=self._resource, shutdown_on_exit=False)
        register_instruments(self._provider.get_meter(INSTRUMENTATION_SCOPE, __version__), self._state)
        log.info("pushing metrics over OTLP to %s every %gs", self.endpoint, settings.otel_metric_export_interval / 1000)

    def stop(self) -> None:
        """One last push, bounded by the export timeout, then release the connection."""
        if self._provider is not None:
            self._provider.shutdown(timeout_millis=self._settings.otel_exporter_otlp_timeout)
            self._provider = None
        logging.getLogger(_SDK_EXPORT_LOGGER).removeFilter(self._sdk_log)
