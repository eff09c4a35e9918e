"""OTLP push: a real exporter following real files, a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Exporter, otlp_config
from exporter.cli import main
from exporter.export import metrics_table
from exporter.export.otlp import OtlpConfig, metrics_url, resource_attributes
from exporter.export.otlp_push import ExportHealth, OtlpPush
from exporter.settings import ConfigError, load_settings
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually
from tests.support.otlp import GrpcOtlpReceiver, HangingReceiver, OtlpReceiver, TricklingReceiver, refused_url
from tests.support.runs import copy_example, read_once

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "deepseek-moe-8rank" / "msrun_log"
OOM_LINE = "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n"
STEP_4 = ("[INFO] 2026-06-09 10:20:43 [loss_callback.py:231] _print_log: { step:[    4/ 1000], loss:   9.860285, "
          "per_step_time:    859ms, lr: 7.999684e-06, grad_norm:   3.566652, throughput:  12.21T }\n")
OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_EXPORTER_OTLP_HEADERS",
                  "OTEL_EXPORTER_OTLP_METRICS_HEADERS", "OTEL_EXPORTER_OTLP_TIMEOUT",
                  "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
                  "OTEL_METRIC_EXPORT_INTERVAL", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "POD_NAME",
                  "POD_NAMESPACE", "NODE_NAME", "TRAINLOG_OTLP_ENDPOINT")
ALL_SPECS = metrics_table.METRICS
COUNTER_SPECS = tuple(spec for spec in ALL_SPECS if spec.type == metrics_table.COUNTER)


@pytest.fixture(autouse=True)
def _no_otel_environment(monkeypatch):
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def write_run(tmp_path: Path) -> Path:
    """Two ranks, three steps each, an OOM on rank 1, a scheduler log timing node 1 out: run 'run1'."""
    log_dir = tmp_path / "run1" / "msrun_log"
    log_dir.mkdir(parents=True)
    scheduler = (EXAMPLE / "scheduler.log").read_text().splitlines(keepends=True)[:2]
    scheduler.append("[ERROR] DISTRIBUTED(2812801,ffff2a7fd0e0,python):2025-06-09-11:02:11.003.412 "
                     "[mindspore/ccsrc/distributed/cluster/topology/meta_server_node.cc:652] UpdateTopoState] "
                     "The node: 1 is timed out. It may exit with exception, please check this node's log.\n")
    (log_dir / "scheduler.log").write_text("".join(scheduler))
    for rank in (0, 1):
        head = (EXAMPLE / f"worker_{rank}.log").read_text().splitlines(keepends=True)[:9]
        (log_dir / f"worker_{rank}.log").write_text("".join(head) + (OOM_LINE if rank == 1 else ""))
    return log_dir


def start_exporter(log_dir: Path, endpoint: str, **options) -> Exporter:
    settings = load_settings(log_dir=[str(log_dir)], web_listen_address="127.0.0.1:0", node="node-a",
                             otlp_endpoint=endpoint, otel_metric_export_interval=100, **options)
    exporter = Exporter(settings)
    exporter.start()
    return exporter


def stop_within(exporter: Exporter, seconds: float) -> None:
    stopper = threading.Thread(target=exporter.stop)
    stopper.start()
    stopper.join(seconds)
    assert not stopper.is_alive(), f"Exporter.stop() still running after {seconds}s"


def scrape(exporter: Exporter) -> dict[tuple[str, frozenset], float]:
    """Samples keyed by (name, labels); raises TimeoutError when /metrics takes over 2 s."""
    with urllib.request.urlopen(f"http://127.0.0.1:{exporter.http.port}/metrics", timeout=2) as response:
        text = response.read().decode()
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def points(request) -> dict[str, tuple[object, list]]:
    """metric name -> (metric, data points) of one ExportMetricsServiceRequest."""
    found = {}
    for resource_metrics in request.resource_metrics:
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                data = getattr(metric, metric.WhichOneof("data"))
                found[metric.name] = (metric, list(data.data_points))
    return found


def attributes(point) -> dict[str, str]:
    return {item.key: item.value.string_value for item in point.attributes}


def value(point) -> float:
    return point.as_int if point.WhichOneof("value") == "as_int" else point.as_double


def point_value(request, metric: str, **wanted: str) -> float | None:
    for point in points(request).get(metric, (None, []))[1]:
        if wanted.items() <= attributes(point).items():
            return value(point)
    return None


def test_followed_run_arrives_with_names_units_values_and_attributes(tmp_path):
    log_dir = write_run(tmp_path)
    with OtlpReceiver() as receiver:
        exporter = start_exporter(
            log_dir, receiver.base_url, otel_exporter_otlp_headers="authorization=Bearer%20t0ken",
            pod_name="trainer-0", pod_namespace="ml", node_name="gpu-node-7",
            otel_resource_attributes="deployment.environment=test")
        try:
            def settled():
                received = receiver.received()
                done = [r for _, r in received if point_value(r, "training.steps", rank="0") == 3
                        and point_value(r, "training.steps", rank="1") == 3]
                return len(done) >= 2 and received[-1]  # one full push after both ranks were read
            headers, request = eventually(settled, 10, what="a push with both ranks at step 3")
            prometheus = scrape(exporter)
        finally:
            stop_within(exporter, 10)

    assert headers["authorization"] == "Bearer t0ken"
    assert headers["content-type"] == "application/x-protobuf"
    resource = {item.key: item.value.string_value for item in request.resource_metrics[0].resource.attributes}
    assert resource["service.name"] == "trainlog-exporter"
    assert resource["k8s.pod.name"] == "trainer-0"
    assert resource["k8s.namespace.name"] == "ml"
    assert resource["k8s.node.name"] == "gpu-node-7"
    assert resource["deployment.environment"] == "test"
    assert resource["host.name"]

    metrics = points(request)
    rank0 = {"run": "run1", "node": "node-a", "rank": "0"}
    assert point_value(request, "training.step", **rank0) == 3
    assert point_value(request, "training.total_steps", **rank0) == 1000
    assert point_value(request, "training.loss", **rank0) == pytest.approx(10.068178)
    assert point_value(request, "training.learning_rate", **rank0) == pytest.approx(5.999867e-06)
    assert point_value(request, "training.grad_norm", **rank0) == pytest.approx(3.649861)
    assert point_value(request, "training.step_duration", **rank0) == pytest.approx(0.833)
    assert point_value(request, "training.throughput", **rank0) == pytest.approx(12.59)
    assert point_value(request, "training.aux_loss", name="mtp_1_loss", **rank0) == pytest.approx(10.805864)
    assert point_value(request, "training.errors", kind="oom", rank="1") == 1
    assert point_value(request, "training.errors", kind="oom", rank="0") == 0
    assert point_value(request, "training.info", mode="pynative", file="worker_0.log", **rank0) == 1
    assert point_value(request, "training.scheduler_events", kind="worker_registered", rank="") is not None
    assert point_value(request, "trainlog.files_followed") == 3
    assert point_value(request, "trainlog.otlp_export_failures") == 0
    assert attributes(metrics["training.step"][1][0]).keys() == {"run", "node", "rank"}

    units = {name: metric.unit for name, (metric, _) in metrics.items()}
    assert units["training.step_duration"] == "s"
    assert units["training.last_error_timestamp"] == "s"
    assert units["trainlog.bytes_read"] == "By"
    assert units["training.steps"] == "{step}"
    assert units["training.loss"] == ""
    for spec in COUNTER_SPECS:
        metric = metrics[spec.otel_name][0]
        assert metric.WhichOneof("data") == "sum" and metric.sum.is_monotonic, spec.otel_name
        assert metric.sum.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    assert metrics["training.loss"][0].WhichOneof("data") == "gauge"

    # One source of truth: every pushed point is the Prometheus twin's sample, and back.
    prometheus_names = {spec.otel_name: spec.name + ("_total" if spec in COUNTER_SPECS else "") for spec in ALL_SPECS}
    pushed = {(prometheus_names[name], frozenset(attributes(point).items())): value(point)
              for name, (_, data_points) in metrics.items() for point in data_points}
    # The sidecar's own process_* and python_info (prometheus-client's collectors) are /metrics only.
    table = {key: number for key, number in prometheus.items() if key[0] in prometheus_names.values()}
    assert sorted(pushed.keys() ^ table.keys(), key=str) == []
    for key, number in pushed.items():
        assert number == pytest.approx(prometheus[key], nan_ok=True), key


# The hanging collector gets an export timeout twice the scrape's: were anything in the
# push path to hold the state lock while it waits, the scrapes below would time out.
@pytest.mark.parametrize(("collector", "timeout_millis", "failures"), [("refused", 300, 3), ("hanging", 4000, 1)])
def test_metrics_keep_serving_while_collector_is_down_or_hangs(tmp_path, caplog, collector, timeout_millis, failures):
    log_dir = write_run(tmp_path)
    caplog.set_level(logging.INFO)
    failures_key = ("trainlog_otlp_export_failures_total", frozenset())
    rank0 = frozenset({"run": "run1", "node": "node-a", "rank": "0"}.items())
    with HangingReceiver() as hanging:
        endpoint = hanging.base_url if collector == "hanging" else refused_url()
        exporter = start_exporter(log_dir, endpoint, otel_exporter_otlp_timeout=timeout_millis)
        try:
            if collector == "hanging":
                eventually(lambda: hanging.connections >= 1, 10, what="the push to connect and wait")
            for _ in range(5):
                scrape(exporter)  # each would time out if /metrics waited for the push
            with open(log_dir / "worker_0.log", "a") as log:
                log.write(STEP_4)
            eventually(lambda: scrape(exporter).get(("training_step", rank0)) == 4, 10, what="step 4 followed")
            eventually(lambda: scrape(exporter)[failures_key] >= failures, 10,
                       what=f"{failures} failed exports counted")
            records = [r for r in caplog.records if r.name.startswith(("exporter.export.otlp_push", "opentelemetry"))]
        finally:
            stop_within(exporter, 10)
    # Logged once when the failure began, not once per failed push; the SDK's own
    # per-attempt messages are folded into that one line.
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert [r.name for r in warnings] == ["exporter.export.otlp_push"], [r.getMessage() for r in warnings]
    assert endpoint in warnings[0].getMessage()


def test_export_health_logs_changes_at_once_and_ongoing_failure_once_a_minute():
    health = ExportHealth("http://collector:4318/v1/metrics")
    assert health.record(True, "", now=0)[1].endswith("works")
    assert health.record(True, "", now=1) is None
    level, message = health.record(False, "connection refused", now=2)
    assert level == logging.WARNING and "connection refused" in message
    assert health.record(False, "connection refused", now=30) is None
    assert health.record(False, "connection refused", now=61) is None
    level, message = health.record(False, "timed out", now=62)
    assert "4 failed exports in a row" in message and "timed out" in message
    assert health.record(False, "timed out", now=100) is None
    level, message = health.record(True, "", now=101)
    assert level == logging.INFO and "recovered after 5 failed exports" in message
    assert health.record(False, "again", now=102)[0] == logging.WARNING


def prometheus_name_of(otel_name: str, unit: str, counter: bool) -> str:
    """The OpenTelemetry-to-Prometheus name conversion that Collectors and Prometheus apply
    (specification "Prometheus and OpenMetrics compatibility"), for the units used here."""
    tokens = [token for token in re.split(r"[^a-zA-Z0-9]+", otel_name) if token]
    unit_word = {"s": "seconds", "By": "bytes", "1": "" if counter else "ratio"}.get(unit, "")
    if unit and not unit.startswith("{") and unit not in ("s", "By", "1"):
        unit_word = re.sub(r"[^a-zA-Z0-9]", "", unit)
    if unit_word and unit_word not in tokens:
        tokens.append(unit_word)
    if counter and "total" not in tokens:
        tokens.append("total")
    return "_".join(tokens)


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda spec: spec.name)
def test_otlp_names_convert_back_to_the_prometheus_names(spec):
    counter = spec in COUNTER_SPECS
    assert prometheus_name_of(spec.otel_name, spec.unit, counter) == spec.name + ("_total" if counter else "")


def test_process_liveness_is_pushed_per_run_and_node(tmp_path):
    log_dir = write_run(tmp_path)
    token = f"trainlog-otlp-liveness-{os.getpid()}"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", token])
    try:
        with OtlpReceiver() as receiver:
            exporter = start_exporter(log_dir, receiver.base_url, process_pattern=token, process_check_interval=0.1)
            try:
                request = eventually(lambda: next((r for _, r in reversed(receiver.received())
                                                   if point_value(r, "training.process_up") == 1), None),
                                     10, what="training.process_up == 1 pushed")
                (point,) = points(request)["training.process_up"][1]
                assert attributes(point) == {"run": "run1", "node": "node-a"}
                trainer.kill()
                trainer.wait()
                eventually(lambda: any(point_value(r, "training.process_up") == 0 for _, r in receiver.received()),
                           10, what="training.process_up == 0 pushed after the trainer exited")
            finally:
                stop_within(exporter, 10)
    finally:
        trainer.kill()
        trainer.wait()


def test_grpc_protocol_pushes_to_a_grpc_receiver_with_the_headers(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    log_dir = write_run(tmp_path)
    with GrpcOtlpReceiver() as receiver:
        exporter = start_exporter(log_dir, receiver.base_url, otel_exporter_otlp_headers="x-tenant=ml")
        try:
            headers, request = eventually(
                lambda: next(((h, r) for h, r in reversed(receiver.received())
                              if point_value(r, "training.steps", rank="1") == 3), None),
                10, what="a gRPC push with rank 1 at step 3")
            assert headers["x-tenant"] == "ml"
            assert point_value(request, "trainlog.otlp_export_failures") == 0
        finally:
            stop_within(exporter, 10)


def test_grpc_takes_the_endpoint_as_is_and_http_json_exits_2_naming_the_variable(tmp_path, monkeypatch, capsys):
    assert metrics_url(None, None, "http://collector:4317", "grpc") == "http://collector:4317"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    assert main(["--log-dir", str(tmp_path)]) == 2
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in capsys.readouterr().err


def test_docs_map_every_metric():
    text = (REPO / "docs" / "opentelemetry.md").read_text()
    for spec in ALL_SPECS:
        assert f"`{spec.otel_name}`" in text, spec.otel_name
        assert spec.name in text, spec.name


def test_endpoint_precedence_command_line_then_signal_variable_then_base(monkeypatch):
    def url() -> str | None:
        config = otlp_config(load_settings(), host_name="box")
        return None if config is None else config.endpoint

    assert url() is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://base:4318/")
    assert url() == "http://base:4318/v1/metrics"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:4318/custom")
    assert url() == "http://metrics:4318/custom"
    monkeypatch.setenv("TRAINLOG_OTLP_ENDPOINT", "http://cli:4318")
    assert url() == "http://cli:4318/v1/metrics"
    assert metrics_url("https://cli/otlp/v1/metrics", "http://metrics:4318/custom", None) == "https://cli/otlp/v1/metrics"
    assert metrics_url(None, None, None) is None


def test_otel_variables_are_read_and_checked_by_settings(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%2Cb, x-tenant = ml ")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "15000")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")  # empty means unset (specification)
    settings = load_settings()
    assert settings.otel_exporter_otlp_headers == {"api-key": "a,b", "x-tenant": "ml"}
    assert settings.otel_metric_export_interval == 15000
    assert otlp_config(settings, host_name="box") is None
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "0")
    with pytest.raises(ConfigError, match="OTEL_METRIC_EXPORT_INTERVAL"):
        load_settings()


def test_bad_otlp_endpoint_exits_2_naming_the_option(tmp_path, capsys):
    assert main(["--log-dir", str(tmp_path), "--otlp-endpoint", "collector:4318"]) == 2
    assert "otlp_endpoint" in capsys.readouterr().err


def test_resource_attributes_follow_the_specification_precedence(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    monkeypatch.setenv("POD_NAME", "trainer-0")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes,host.name=override")
    attributes = otlp_config(load_settings(), host_name="box").resource_attributes
    assert attributes["service.name"] == "from-attributes"
    assert attributes["host.name"] == "override"
    assert attributes["k8s.pod.name"] == attributes["service.instance.id"] == "trainer-0"
    assert "k8s.namespace.name" not in attributes
    monkeypatch.setenv("OTEL_SERVICE_NAME", "trainlog-gpu")
    assert otlp_config(load_settings(), host_name="box").resource_attributes["service.name"] == "trainlog-gpu"
    assert resource_attributes("box")["service.name"] == "trainlog-exporter"


def test_settings_turn_milliseconds_into_the_push_config(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "2500")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "15000")
    config = otlp_config(load_settings(otlp_endpoint="http://collector:4318",
                                       otel_exporter_otlp_headers="authorization=Bearer%20t"), host_name="box")
    assert (config.timeout_seconds, config.interval_seconds) == (2.5, 15.0)
    assert config.headers == {"authorization": "Bearer t"}


def test_a_sidecar_without_a_push_loads_no_opentelemetry_code():
    # The SDK and its protobuf runtime cost about 6 MB of the sidecar's memory (docs/benchmarks.md, scale).
    program = ("import sys, exporter.cli, exporter.app; "
               "print(sorted({m.split('.')[0] for m in sys.modules} & {'opentelemetry', 'google'}))")
    imported = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO)
    assert imported.stdout.strip() == "[]"


def test_the_push_needs_its_config_only(tmp_path):
    # A state and an OtlpConfig, no Settings: the push module does not even import them.
    program = "import sys, exporter.export.otlp_push; print('exporter.settings' in sys.modules)"
    imported = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO)
    assert imported.stdout.strip() == "False"
    state = read_once(copy_example(tmp_path))
    with OtlpReceiver() as receiver:
        config = OtlpConfig(receiver.base_url + "/v1/metrics", headers={"x-tenant": "ml"}, timeout_seconds=2,
                            interval_seconds=0.1, resource_attributes={"service.name": "config-only", "team": "ml"})
        push = OtlpPush(state, config)
        push.start()
        try:
            headers, request = eventually(lambda: next(iter(receiver.received()), None), 10, what="a push")
        finally:
            push.stop()
    assert headers["x-tenant"] == "ml"
    resource = {item.key: item.value.string_value for item in request.resource_metrics[0].resource.attributes}
    assert resource == {"service.name": "config-only", "team": "ml"}
    assert point_value(request, "training.step", run="deepseek-moe-8rank", rank="7") == 200
    assert point_value(request, "trainlog.otlp_export_failures") == 0
    assert push.failed_exports() == 0


def test_a_collector_answering_a_byte_a_second_fails_each_export_at_its_deadline(tmp_path):
    log_dir = write_run(tmp_path)
    with TricklingReceiver() as trickling:
        environment = {"OTEL_EXPORTER_OTLP_ENDPOINT": trickling.base_url, "OTEL_EXPORTER_OTLP_TIMEOUT": "1500",
                       "OTEL_METRIC_EXPORT_INTERVAL": "1000"}
        with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a", env=environment) as exporter:
            started = time.monotonic()
            # c431fb3: 0 after 40 s, the first push never ended.
            eventually(lambda: exporter.total("trainlog_otlp_export_failures_total") >= 3, timeout=15,
                       what="three exports failed at their deadline")
            assert time.monotonic() - started < 15
            for _ in range(5):
                scraped = time.monotonic()
                exporter.samples()
                assert time.monotonic() - scraped < 1.0
        assert "OTLP export to" in exporter.output() and "no whole answer within 1.5 s" in exporter.output()
