"""A prometheus-client custom Collector that reads state at scrape time.

Fresh metric families on every scrape, registered on a private registry: nothing is
duplicated into the client library's global registry. The families are ``families.walk``'s,
as for the text writer and the OpenTelemetry instruments.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import PlatformCollector, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.export.families import STATE_ONLY, Family, ScrapeTime, walk
from exporter.export.metrics_table import COUNTER, INFO
from exporter.export.web_config import WebConfigReloader
from exporter.state import TrainingState


class TrainingCollector(Collector):
    """Yields every training_* and trainlog_* family from one consistent state snapshot."""

    def __init__(self, state: TrainingState, scrape_time: ScrapeTime = STATE_ONLY) -> None:
        self._state = state
        self._scrape_time = scrape_time

    def collect(self) -> Iterator[Metric]:
        for family in walk(self._state, _label_dict, self._scrape_time):
            yield _metric(family)


def _label_dict(names: tuple[str, ...], values: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(names, values, strict=True))


def _metric(family: Family[dict[str, str]]) -> Metric:
    spec = family.spec
    # An info family is named without its _info suffix; its samples carry it.
    name = spec.name.removesuffix("_info") if spec.type == INFO else spec.name
    metric = Metric(name, spec.help, spec.type)
    sample_name = {COUNTER: f"{name}_total", INFO: f"{name}_info"}.get(spec.type, name)
    for labels, label_value, value in family.samples:
        metric.add_sample(sample_name, labels if spec.label is None else {**labels, spec.label: label_value}, value)
    return metric


def runtime_registry() -> CollectorRegistry:
    """The sidecar's own ``process_*`` (CPU, memory, open files) and ``python_info``, from
    prometheus-client's collectors, on a private registry."""
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return registry


def exporter_registry(state: TrainingState, scrape_time: ScrapeTime = STATE_ONLY) -> CollectorRegistry:
    """Everything /metrics serves, on a private registry: the walk's families, then the runtime's."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state, scrape_time))
    registry.register(runtime_registry())
    return registry


class WebConfigCollector(Collector):
    """``--web.config.file``'s reload outcome and the credential checks refused, read at scrape time."""

    def __init__(self, reloader: WebConfigReloader) -> None:
        self._reloader = reloader

    def collect(self) -> Iterator[Metric]:
        reloader = self._reloader
        yield GaugeMetricFamily("trainlog_web_config_last_reload_successful",
                                "1 if the latest read of --web.config.file succeeded; 0: the last good config serves.",
                                value=1.0 if reloader.last_reload_successful else 0.0)
        yield GaugeMetricFamily("trainlog_web_config_last_reload_success_timestamp_seconds",
                                "When --web.config.file was last read successfully.",
                                value=reloader.last_reload_seconds)
        yield CounterMetricFamily("trainlog_http_auth_limited",
                                  "Requests answered 429: bcrypt checks of unknown credentials over the rate limit.",
                                  value=reloader.checks.limiter.limited)
