"""--process-pattern: is the trainer alive? Real processes, real /proc, the real exporter."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from exporter.follow.processes import ProcessWatcher, command_lines, is_running
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, sample, scrape

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.fixture
def trainer():
    """A stand-in trainer: a real process whose command line carries a unique marker."""
    marker = f"run_mindformer-{uuid.uuid4().hex}"
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--config", marker])
    # Right after exec the kernel may show an empty command line for a moment.
    eventually(lambda: marker.encode() in Path(f"/proc/{process.pid}/cmdline").read_bytes(), 5, what="the trainer")
    yield process, marker
    process.kill()
    process.wait()


def test_command_lines_join_arguments_with_spaces(trainer):
    process, marker = trainer
    commands = dict(command_lines())
    assert commands[process.pid].endswith(f"--config {marker}")


def test_running_then_gone(trainer):
    process, marker = trainer
    pattern = re.compile(re.escape(marker))
    assert is_running(pattern)
    assert not is_running(pattern, exclude=frozenset({process.pid}))
    process.kill()
    process.wait()
    assert not is_running(pattern)


def test_a_killed_unreaped_process_counts_as_gone(trainer):
    process, marker = trainer
    process.kill()  # not waited for: a zombie keeps its /proc entry but loses its command line
    eventually(lambda: not is_running(re.compile(re.escape(marker))), 5, what="the zombie to lose its command line")


def test_watcher_reports_every_check(trainer):
    process, marker = trainer
    reports: list[bool] = []
    watcher = ProcessWatcher(re.escape(marker), reports.append, interval=0.05)
    watcher.start()
    try:
        eventually(lambda: reports and reports[-1] is True, 5, what="up")
        process.kill()
        process.wait()
        eventually(lambda: reports[-1] is False, 5, what="down")
    finally:
        watcher.stop()


def test_watcher_never_counts_its_own_process():
    reports: list[bool] = []
    own_command_line = re.escape(dict(command_lines())[os.getpid()])
    ProcessWatcher(f"^{own_command_line}$", reports.append).check()
    assert reports == [False]


def test_unreadable_proc_reports_nothing(tmp_path):
    reports: list[bool] = []
    ProcessWatcher("anything", reports.append, proc_root=str(tmp_path / "no-proc")).check()
    assert reports == []


def test_exporter_exposes_training_process_up(tmp_path, trainer):
    process, marker = trainer
    log_dir = tmp_path / "job-7" / "msrun_log"
    log_dir.mkdir(parents=True)
    # The exporter's own command line holds the marker too: it must not count itself.
    with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a", "--process-pattern", marker,
                         env={"TRAINLOG_PROCESS_CHECK_INTERVAL": "0.1"}) as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_process_up", run="job-7", node="node-a") == 1, 10,
                   what="training_process_up 1")
        process.kill()
        process.wait()
        eventually(lambda: sample(scrape(exporter.url), "training_process_up", run="job-7", node="node-a") == 0, 10,
                   what="training_process_up 0")


def test_without_a_pattern_there_is_no_process_metric(tmp_path):
    with ExporterProcess("--log-dir", str(tmp_path)) as exporter:
        assert sample(scrape(exporter.url), "training_process_up") is None
