"""OpenTelemetry: where and as what the metrics are pushed over OTLP (the push itself is otlp_push.py).

The endpoint policy (``metrics_url``) and the resource attributes (``resource_attributes``)
are decided here, from the values settings.py read. This module imports no OpenTelemetry
code: the SDK and its protobuf runtime cost the sidecar about 6 MB of memory, so app.py
imports ``otlp_push`` only when a push is configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from exporter import __version__

DEFAULT_SERVICE_NAME = "trainlog-exporter"
METRICS_PATH = "v1/metrics"
GRPC = "grpc"

Attributes = dict[str, str]


@dataclass(frozen=True, slots=True)
class OtlpConfig:
    """Everything the push needs: where, with which headers, how often, as which resource."""

    endpoint: str  # the full URL of the metrics endpoint (metrics_url)
    headers: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 10.0  # one export, retries included, before it counts as failed
    interval_seconds: float = 60.0
    resource_attributes: Mapping[str, str] = field(default_factory=dict)
    protocol: str = "http/protobuf"  # or "grpc" (OTEL_EXPORTER_OTLP_PROTOCOL)


def metrics_url(endpoint: str | None, metrics_endpoint: str | None, base_endpoint: str | None,
                protocol: str = "http/protobuf") -> str | None:
    """Where to send metrics, or None when OTLP is off.

    ``endpoint`` (--otlp-endpoint: a base URL, or a full URL when it has a path) wins; then
    ``metrics_endpoint`` (OTEL_EXPORTER_OTLP_METRICS_ENDPOINT), used as is; then
    ``base_endpoint`` (OTEL_EXPORTER_OTLP_ENDPOINT) plus /v1/metrics, as the specification says.
    Over gRPC the URL names the server only (the service, not a path, selects the metrics).
    """
    if protocol == GRPC:
        return endpoint or metrics_endpoint or base_endpoint
    if endpoint:
        return endpoint if urlsplit(endpoint).path.strip("/") else _join_url(endpoint, METRICS_PATH)
    if metrics_endpoint:
        return metrics_endpoint
    if base_endpoint:
        return _join_url(base_endpoint, METRICS_PATH)
    return None


def _join_url(base: str, path: str) -> str:
    return f"{base.rstrip('/')}/{path}"


def resource_attributes(host_name: str, *, service_name: str | None = None, pod_name: str | None = None,
                        pod_namespace: str | None = None, node_name: str | None = None,
                        overrides: Mapping[str, str] | None = None) -> Attributes:
    """Semantic-convention resource attributes; ``overrides`` (OTEL_RESOURCE_ATTRIBUTES)
    replace the detected ones and an explicit ``service_name`` (OTEL_SERVICE_NAME) replaces
    both, as the specification says. The Kubernetes names come from the downward API."""
    attributes = {
        "service.name": DEFAULT_SERVICE_NAME,
        "service.version": __version__,
        "service.instance.id": pod_name or host_name,
        "host.name": host_name,
    }
    kubernetes = {"k8s.pod.name": pod_name, "k8s.namespace.name": pod_namespace, "k8s.node.name": node_name}
    attributes.update({key: value for key, value in kubernetes.items() if value})
    attributes.update(overrides or {})
    if service_name:
        attributes["service.name"] = service_name
    return attributes
