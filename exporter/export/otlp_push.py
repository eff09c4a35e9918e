"""OpenTelemetry: push the same metrics to a collector over OTLP/HTTP or OTLP/gRPC.

Observable instruments whose callbacks read ``families.walk``, the way /metrics does at
scrape time: no second bookkeeping. The SDK's periodic reader collects and exports on its
own thread; the state lock is held only inside the walk, never while a request is in
flight, so a collector that is down, slow or refusing cannot hold up following, parsing or
/metrics. The push counts its own failed exports (``trainlog_otlp_export_failures_total``
on /metrics, read from here at scrape time) and logs them on state changes, and at most
once a minute while the failure lasts.

It takes an ``OtlpConfig`` (otlp.py), not the exporter's settings.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from exporter import __version__
from exporter.export.families import STATE_ONLY, ScrapeTime, walk
from exporter.export.metrics_table import COUNTER, METRICS, MetricSpec
from exporter.export.otlp import GRPC, Attributes, OtlpConfig
from exporter.state import TrainingState

log = logging.getLogger(__name__)

INSTRUMENTATION_SCOPE = "trainlog-exporter"
_REPEAT_FAILURE_LOG_SECONDS = 60.0
# Where the OTLP exporters log every failed attempt; we fold those into our own, rarer messages.
_SDK_EXPORT_LOGGERS = {"http/protobuf": (OTLPMetricExporter.__module__,),
                       GRPC: ("opentelemetry.exporter.otlp.proto.grpc.exporter",
                              "opentelemetry.exporter.otlp.proto.grpc.metric_exporter")}
_MAX_REASON_CHARS = 400
# Exports left running past their deadline (a collector trickling its answer) before the next
# ones fail at once instead of adding threads.
MAX_OVERDUE = 2


def register_instruments(meter: Meter, state: TrainingState, scrape_time: ScrapeTime = STATE_ONLY) -> None:
    """One observable instrument per family of the metric table, reading its part of the walk."""
    for spec in METRICS:
        create = meter.create_observable_counter if spec.type == COUNTER else meter.create_observable_gauge
        create(spec.otel_name, callbacks=[_observe(state, scrape_time, spec)], unit=spec.unit, description=spec.help)


def _observe(state: TrainingState, scrape_time: ScrapeTime, spec: MetricSpec
             ) -> Callable[[CallbackOptions], Iterable[Observation]]:
    def observe(_options: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, attributes if spec.label is None else {**attributes, spec.label: label_value})
                for family in walk(state, _attributes, scrape_time, (spec,))
                for attributes, label_value, value in family.samples]
    return observe


def _attributes(names: tuple[str, ...], values: tuple[str, ...]) -> Attributes:
    return dict(zip(names, values, strict=True))


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
            return (logging.WARNING, (f"OTLP export to {self.endpoint} still failing, "
                                      f"{self.consecutive_failures} failed exports in a row; last: {reason}"))
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
    """Wraps the OTLP exporter: reports failed exports to ``count_failure``, logs them sparingly.

    Temporality stays the default, cumulative, whatever
    OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE says: Prometheus-style backends and
    the counters' ``_total`` twins need cumulative sums.
    """

    def __init__(self, delegate: MetricExporter, count_failure: Callable[[], None], health: ExportHealth,
                 sdk_log: _SdkLogCapture) -> None:
        super().__init__()
        self._delegate = delegate
        self._count_failure = count_failure
        self._health = health
        self._sdk_log = sdk_log
        self._overdue: list[threading.Thread] = []  # exports left running past their deadline

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        result = self._export_by_deadline(metrics_data, timeout_millis, kwargs)
        ok = result is MetricExportResult.SUCCESS
        if not ok:
            self._count_failure()
        decision = self._health.record(ok, self._sdk_log.take_reason(), time.monotonic())
        if decision is not None:
            log.log(*decision)
        return result

    def _export_by_deadline(self, metrics_data: MetricsData, timeout_millis: float,
                            kwargs: dict[str, Any]) -> MetricExportResult:
        """The delegate's export on a thread of its own, waited for ``timeout_millis`` of wall-clock time.

        The SDK's timeout bounds each read, not the request: a collector that answers a byte
        a second keeps an export going for ever. Past the deadline the export counts as failed
        and the reader moves on; the thread is left to end when the connection does, and at
        most ``MAX_OVERDUE`` such threads are left before the next exports fail at once.
        """
        self._overdue = [thread for thread in self._overdue if thread.is_alive()]
        if len(self._overdue) >= MAX_OVERDUE:
            self._sdk_log.note(f"{len(self._overdue)} earlier exports still run past their deadline")
            return MetricExportResult.FAILURE
        outcome: list[MetricExportResult] = []
        thread = threading.Thread(target=self._attempt, args=(metrics_data, timeout_millis, kwargs, outcome),
                                  name="otlp-export", daemon=True)
        thread.start()
        thread.join(timeout_millis / 1000)
        if thread.is_alive():
            self._overdue.append(thread)
            self._sdk_log.note(f"no whole answer within {timeout_millis / 1000:g} s")
            return MetricExportResult.FAILURE
        return outcome[0] if outcome else MetricExportResult.FAILURE

    def _attempt(self, metrics_data: MetricsData, timeout_millis: float, kwargs: dict[str, Any],
                 outcome: list[MetricExportResult]) -> None:
        try:
            outcome.append(self._delegate.export(metrics_data, timeout_millis=timeout_millis, **kwargs))
        except Exception as error:  # noqa: BLE001 - an exporter that raises is a failed export
            log.debug("OTLP exporter raised", exc_info=True)
            self._sdk_log.note(repr(error))
            outcome.append(MetricExportResult.FAILURE)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self._delegate.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        self._delegate.shutdown(timeout_millis=timeout_millis, **kwargs)


class OtlpPush:
    """A private MeterProvider that pushes the walk's families to one OTLP/HTTP endpoint.

    ``scrape_time`` reads what lives outside the state (process liveness); the push adds its
    own failed-export count to it.
    """

    def __init__(self, state: TrainingState, config: OtlpConfig, scrape_time: ScrapeTime = STATE_ONLY) -> None:
        self.endpoint = config.endpoint
        self._state = state
        self._config = config
        self._scrape_time = dataclasses.replace(scrape_time, otlp_export_failures=self.failed_exports)
        self._failed_exports = 0  # written by the SDK's export thread only
        self._sdk_log = _SdkLogCapture()
        self._provider: MeterProvider | None = None

    def failed_exports(self) -> int:
        """Exports that failed since the start: trainlog_otlp_export_failures_total."""
        return self._failed_exports

    def _count_failure(self) -> None:
        self._failed_exports += 1

    def start(self) -> None:
        config = self._config
        exporter = _CountingExporter(_sdk_exporter(config), self._count_failure, ExportHealth(self.endpoint),
                                     self._sdk_log)
        for name in _SDK_EXPORT_LOGGERS[config.protocol]:
            logging.getLogger(name).addFilter(self._sdk_log)
        # The reader starts its export thread on construction.
        reader = PeriodicExportingMetricReader(exporter, export_interval_millis=config.interval_seconds * 1000,
                                               export_timeout_millis=config.timeout_seconds * 1000)
        self._provider = MeterProvider(metric_readers=[reader], resource=Resource(dict(config.resource_attributes)),
                                       shutdown_on_exit=False)
        meter = self._provider.get_meter(INSTRUMENTATION_SCOPE, __version__)
        register_instruments(meter, self._state, self._scrape_time)
        log.info("pushing metrics over OTLP (%s) to %s every %gs", config.protocol, self.endpoint,
                 config.interval_seconds)

    def stop(self) -> None:
        """One last push, bounded by the export timeout, then release the connection."""
        if self._provider is not None:
            self._provider.shutdown(timeout_millis=self._config.timeout_seconds * 1000)
            self._provider = None
        for name in _SDK_EXPORT_LOGGERS[self._config.protocol]:
            logging.getLogger(name).removeFilter(self._sdk_log)


def _sdk_exporter(config: OtlpConfig) -> MetricExporter:
    """The OpenTelemetry SDK's exporter for the configured protocol."""
    if config.protocol == GRPC:
        # Imported only when asked for: grpcio is a large import.
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcExporter

        # insecure: from the URL's scheme (http:// plain, https:// TLS), as the SDK decides it.
        return GrpcExporter(endpoint=config.endpoint, headers=dict(config.headers), timeout=config.timeout_seconds)
    return OTLPMetricExporter(endpoint=config.endpoint, headers=dict(config.headers), timeout=config.timeout_seconds)
