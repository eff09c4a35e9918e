"""/metrics in both formats, over real HTTP: OpenMetrics on request, 0.0.4 otherwise, checked by
prometheus-client's parsers and promtool; the process's own metrics and build info; health."""

from __future__ import annotations

import http.client
import platform
import socket
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter import __version__
from exporter.app import Exporter
from exporter.cli import main
from exporter.export.collector import TrainingCollector, runtime_registry
from exporter.export.http import ExporterHTTPServer
from exporter.export.text_format import render, wants_openmetrics
from exporter.settings import load_settings
from tests.support.exporter_process import ExporterProcess
from tests.support.prometheus import require_binary
from tests.support.runs import copy_example, read_once

# What Prometheus 2.x sends (scrape/scrape.go, scrapeAcceptHeader).
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
RUNTIME_FAMILIES = {"process_virtual_memory_bytes", "process_resident_memory_bytes", "process_start_time_seconds",
                    "process_cpu_seconds", "process_open_fds", "process_max_fds", "python_info"}


@pytest.mark.parametrize(("accept", "openmetrics"), [
    (PROMETHEUS_ACCEPT, True), ("application/openmetrics-text", True), ("text/plain;version=0.0.4", False),
    ("application/openmetrics-text;version=0.0.1", False), ("*/*", False), (None, False)])
def test_openmetrics_is_chosen_as_prometheus_client_chooses_it(accept, openmetrics):
    assert wants_openmetrics(accept) is openmetrics


def test_openmetrics_renders_like_prometheus_client(tmp_path):
    state = read_once(copy_example(tmp_path))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state))
    assert render(state, openmetrics=True) == openmetrics_exposition.generate_latest(registry)


def test_both_formats_parse_with_the_process_metrics_and_build_info(tmp_path):
    state = read_once(copy_example(tmp_path))
    runtime = runtime_registry()
    openmetrics = render(state, openmetrics=True, runtime=runtime).decode()
    families = {family.name: family for family in parse_openmetrics(openmetrics)}
    assert families.keys() >= RUNTIME_FAMILIES
    assert families["process_cpu_seconds"].type == "counter" and families["process_cpu_seconds"].samples[0].value > 0
    (build,) = families["trainlog_build"].samples
    assert families["trainlog_build"].type == "info"
    assert (build.labels["version"], build.labels["python"], build.value) == (__version__,
                                                                              platform.python_version(), 1)
    assert families["training_errors"].type == "counter"
    text = render(state, runtime=runtime).decode()
    text_families = {family.name: family for family in parse_text(text)}
    assert {"training_loss", "trainlog_build_info", "process_cpu_seconds", *RUNTIME_FAMILIES} <= text_families.keys()
    _promtool_accepts(text)


def _promtool_accepts(text: str) -> None:
    result = subprocess.run([require_binary("promtool"), "check", "metrics"], input=text, capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _get(port: int, path: str, method: str = "GET", **headers: str) -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request(method, path, headers=headers)
    return connection.getresponse()


def test_the_served_metrics_negotiate_the_format_at_the_telemetry_path(tmp_path):
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with ExporterProcess("--log-dir", str(log_dir), "--web.telemetry-path", "/custom/metrics",
                         wait_for="/-/ready") as exporter:
        response = _get(exporter.port, "/custom/metrics", Accept=PROMETHEUS_ACCEPT)
        body = response.read().decode()
        assert response.status == 200 and response.version == 11
        assert response.getheader("Content-Type") == "application/openmetrics-text; version=1.0.0; charset=utf-8"
        assert body.endswith("# EOF\n") and "process_resident_memory_bytes" in body
        families = {family.name for family in parse_openmetrics(body)}
        assert {"training_loss", "trainlog_build", "process_cpu_seconds"} <= families
        response = _get(exporter.port, "/custom/metrics")
        text = response.read().decode()
        assert response.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
        _promtool_accepts(text)
        head = _get(exporter.port, "/custom/metrics", "HEAD")
        assert head.status == 200 and head.read() == b""
        assert _get(exporter.port, "/metrics").status == 404


def test_healthy_fails_while_metrics_cannot_render_and_recovers():
    broken = [True]

    def metrics(openmetrics: bool) -> bytes:
        if broken[0]:
            raise OverflowError("int too large to convert to float")
        return b"ok 1\n"

    server = ExporterHTTPServer("127.0.0.1", 0, metrics, lambda: True, lambda: "page")
    server.start()
    try:
        assert _get(server.port, "/-/healthy").status == 503  # checked without any scrape
        response = _get(server.port, "/metrics")
        assert (response.status, response.read()) == (500, b"cannot render metrics: OverflowError\n")
        broken[0] = False
        assert _get(server.port, "/metrics").status == 200
        assert _get(server.port, "/-/healthy").status == 200
    finally:
        server.stop()


def test_a_listen_address_without_host_serves_on_every_interface(tmp_path):
    # ":10042" is the default (DESIGN 3.1, exporters' convention): the host part left out means all of them.
    host, port = load_settings(log_dir=[str(tmp_path)], web_listen_address=":0").listen_host_port
    server = ExporterHTTPServer(host, port, lambda openmetrics: b"ok 1\n", lambda: True, lambda: "page")
    server.start()
    try:
        assert _get(server.port, "/metrics").status == 200
    finally:
        server.stop()


def test_a_busy_or_invalid_listen_address_exits_2_with_one_line_naming_it(tmp_path, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        assert main(["--log-dir", str(tmp_path), "--web.listen-address", address]) == 2
    assert capsys.readouterr().err == f"trainlog-exporter: cannot listen on {address}: Address already in use\n"
    assert main(["--log-dir", str(tmp_path), "--web.listen-address", "256.0.0.1:10042"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("trainlog-exporter: cannot listen on 256.0.0.1:10042: ") and error.count("\n") == 1


def test_help_shows_how_to_serve_and_a_mistyped_command_is_an_invalid_choice(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for option in ("--log-dir", "--web.listen-address", "--web.config.file", "--web.telemetry-path", "serve"):
        assert option in help_text
    with pytest.raises(SystemExit) as exit_status:
        main(["simualte", "--out", "x"])
    assert exit_status.value.code == 2
    assert "invalid choice: 'simualte'" in capsys.readouterr().err


def test_demo_leaves_no_checkpoint_file_behind(tmp_path):
    settings = load_settings(demo=True, xdg_state_home=str(tmp_path / "state"), web_listen_address="127.0.0.1:0")
    exporter = Exporter(settings)
    exporter.start()
    exporter.stop()
    assert exporter.checkpointer is None
    assert not any(Path(tmp_path / "state").rglob("*"))
