"""A real Prometheus server scrapes the exporter; values come back through its query API."""

from __future__ import annotations

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually
from tests.support.prometheus import PrometheusServer
from tests.support.runs import copy_example


def test_prometheus_reads_training_loss_of_rank_3(tmp_path):
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    expected_loss = float(
        next(line for line in reversed((log_dir / "worker_3.log").read_text().splitlines()) if "loss:" in line)
        .split("loss:")[1].split(",")[0]
    )
    with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a") as exporter, \
            PrometheusServer(tmp_path / "prometheus", [f"127.0.0.1:{exporter.port}"]) as prometheus:
        result = eventually(lambda: prometheus.query('training_loss{rank="3"}'), timeout=30, interval=0.5,
                            what="training_loss in Prometheus")
        assert len(result) == 1
        labels = result[0]["metric"]
        assert labels["run"] == "deepseek-moe-8rank"
        assert labels["node"] == "node-a"
        assert labels["job"] == "trainlog-exporter"  # Prometheus's own labels are not clobbered
        assert float(result[0]["value"][1]) == expected_loss
        info = prometheus.query('training_info{rank="3", mode="pynative", framework="mindformers"}')
        assert [item["metric"]["file"] for item in info] == ["worker_3.log"]
        up = prometheus.query('up{job="trainlog-exporter"}')
        assert float(up[0]["value"][1]) == 1
