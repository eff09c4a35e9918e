"""Lines real runs printed (tests/fixtures/real/, sources in tests/fixtures/SOURCES.md), through the
exporter's serving path: a worker log in a log directory, the exporter process, /metrics over HTTP."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess, exporter_command, exporter_environment
from tests.support.net import eventually, http_get, sample, scrape

REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.mark.parametrize(("fixture", "step", "tflops", "framework"), [
    ("megatron_tflops.log", 73, 224.0, "megatron"),  # throughput per GPU (TFLOP/s/GPU)
    ("torchtitan_tflops.log", 210, 323.92, "torchtitan"),  # tflops:, behind torchrun's [rank0]: prefix
])
def test_model_tflops_per_device_is_one_gauge_for_every_framework(tmp_path, fixture, step, tflops, framework):
    log_dir = tmp_path / "job" / "logs"
    log_dir.mkdir(parents=True)
    shutil.copy(REAL / fixture, log_dir / "worker_0.log")
    with ExporterProcess("--log-dir", str(log_dir), "--run", "job") as exporter:
        eventually(lambda: http_get(exporter.url + "/-/ready")[0] == 200, 10, what="ready")
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="0") == step, 10, what="last step")
        metrics = scrape(exporter.url)
        assert sample(metrics, "training_tflops_per_device", run="job", rank="0") == pytest.approx(tflops)
        assert sample(metrics, "training_info", rank="0", framework=framework) == 1
        # Not also a training_metric: the value has its gauge.
        assert not [labels for metric, labels in metrics
                    if metric == "training_metric" and ("name", "tflops") in labels]


def _expected_errors(fixture: str) -> dict[tuple[str, str], int]:
    """(rank label, kind) -> count, from the fixture's expected events (no rank: the file's, 0)."""
    counts: dict[tuple[str, str], int] = {}
    for record in json.loads((REAL / f"{fixture}.expected.json").read_text()):
        if record["type"] == "error":
            key = (str(record["rank"] if record["rank"] is not None else 0), record["kind"])
            counts[key] = counts.get(key, 0) + 1
    return counts


def _served_errors(samples) -> dict[tuple[str, str], int]:
    """(rank label, kind) -> count of every non-zero training_errors_total sample."""
    served = {}
    for (metric, labels), value in samples.items():
        if metric == "training_errors_total" and value:
            named = dict(labels)
            served[(named["rank"], named["kind"])] = int(value)
    return served


@pytest.mark.parametrize("fixture", ["errors_torchelastic", "errors_nccl", "errors_ascend", "errors_ascend_faults",
                                     "errors_host", "healthy_noise"])
def test_each_failure_family_counts_by_kind_and_rank_through_the_exporter(tmp_path, fixture):
    log_dir = tmp_path / "job" / "logs"
    log_dir.mkdir(parents=True)
    shutil.copy(REAL / f"{fixture}.log", log_dir / "worker_0.log")
    expected = _expected_errors(fixture)
    lines = (REAL / f"{fixture}.log").read_bytes().count(b"\n")
    with ExporterProcess("--log-dir", str(log_dir), "--run", "job") as exporter:
        eventually(lambda: exporter.total("training_log_lines_total") == lines, 10, what="every line read")
        assert _served_errors(exporter.samples()) == expected
    if fixture == "healthy_noise":
        assert expected == {}
    else:
        assert expected, "a failure fixture without failures proves nothing"


HEALTHY = sorted((REAL / "healthy").glob("*.log"))  # sources in tests/fixtures/real/healthy/SOURCES.md


def test_healthy_lines_of_every_family_raise_no_failure_event_through_the_exporter(tmp_path):
    # Each file a worker log of its own directory: its format is detected as in production.
    assert len(HEALTHY) >= 10
    for fixture in HEALTHY:
        log_dir = tmp_path / "logs" / fixture.stem
        log_dir.mkdir(parents=True)
        shutil.copy(fixture, log_dir / "worker_0.log")
    lines = sum(fixture.read_bytes().count(b"\n") for fixture in HEALTHY)
    with ExporterProcess("--log-dir", str(tmp_path / "logs"), "--run", "healthy") as exporter:
        eventually(lambda: exporter.total("training_log_lines_total") == lines, 20, what="every line read")
        assert exporter.total("training_errors_total") == 0, _served_errors(exporter.samples())


RESTARTS = REAL / "torchelastic_restarts"  # torchrun --max-restarts 2 --redirects 3, tests/fixtures/SOURCES.md


def test_torchrun_attempts_whose_files_hold_no_step_count_as_restarts(tmp_path):
    # Attempts 1 and 2 failed before their first step: their attempt_K/ files hold a traceback only.
    # Live: each later attempt directory is a restart of each rank.
    log_dir = tmp_path / "logs"
    shutil.copytree(RESTARTS, log_dir)
    lines = sum(path.read_bytes().count(b"\n") for path in log_dir.rglob("*.log"))
    with ExporterProcess("--log-dir", str(log_dir), "--run", "job") as exporter:
        eventually(lambda: exporter.total("training_log_lines_total") == lines, 20, what="every line read")
        metrics = scrape(exporter.url)
        assert {rank: sample(metrics, "training_restarts_total", run="job", rank=rank) for rank in "01"} == \
            {"0": 2, "1": 2}
        assert sample(metrics, "training_step", run="job", rank="1") == 5
    # analyze: the same restarts, in its findings.
    result = subprocess.run(exporter_command("analyze", str(log_dir), "--format", "json", "--run", "job"),
                            capture_output=True, text=True, env=exporter_environment(), timeout=120, check=True)
    (run,) = json.loads(result.stdout)["runs"]
    restarts = sorted(finding["rank"] for finding in run["findings"] if finding["kind"] == "restart")
    assert restarts == ["0", "0", "1", "1"]
