"""--process-pattern: is the trainer alive? Real processes, real /proc, the real exporter."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from exporter.app import Exporter
from exporter.export.process_liveness import ProcessLiveness, command_lines, is_running
from exporter.settings import load_settings
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


def test_liveness_is_checked_when_asked(trainer):
    process, marker = trainer
    liveness = ProcessLiveness(re.escape(marker), [("job-7", "node-a"), ("job-8", "node-a")], max_age=0)
    assert liveness.process_up() == {("job-7", "node-a"): True, ("job-8", "node-a"): True}
    process.kill()
    process.wait()
    assert liveness.process_up() == {("job-7", "node-a"): False, ("job-8", "node-a"): False}


def test_asks_within_max_age_reuse_the_last_check(trainer):
    process, marker = trainer
    now = [100.0]
    liveness = ProcessLiveness(re.escape(marker), [("job-7", "node-a")], max_age=5, clock=lambda: now[0])
    assert liveness.process_up() == {("job-7", "node-a"): True}
    process.kill()
    process.wait()
    now[0] += 4.9
    assert liveness.process_up() == {("job-7", "node-a"): True}  # /proc not read again
    now[0] += 0.1
    assert liveness.process_up() == {("job-7", "node-a"): False}


def test_liveness_never_counts_its_own_process():
    # In a process of its own whose command line no other process has (a pytest beside this one would).
    marker = f"liveness-self-check-{uuid.uuid4().hex}"
    probe = ("import re, sys; from exporter.export.process_liveness import ProcessLiveness; "
             "print(ProcessLiveness(re.escape(sys.argv[1]), [('r', 'n')]).process_up())")
    result = subprocess.run([sys.executable, "-c", probe, marker], capture_output=True, text=True, timeout=60,
                            check=True)
    assert result.stdout.strip() == "{('r', 'n'): False}"


def test_unreadable_proc_gives_no_answer(tmp_path):
    assert ProcessLiveness("anything", [("r", "n")], proc_root=str(tmp_path / "no-proc")).process_up() is None


def test_a_scrape_reads_proc_itself_and_later_scrapes_reuse_it(tmp_path):
    # A trainer started after the exporter shows on the very first scrape: no check made
    # before it (at start-up, or on a thread's schedule) answers for it. Its exit shows on
    # the first scrape once the answer is older than --process-check-interval.
    log_dir = tmp_path / "job-7" / "msrun_log"
    log_dir.mkdir(parents=True)
    marker = f"run_mindformer-{uuid.uuid4().hex}"
    interval = 2.0
    exporter = Exporter(load_settings(log_dir=[str(log_dir)], web_listen_address="127.0.0.1:0", node="node-a",
                                      state_file=str(tmp_path / "state.json"), process_pattern=re.escape(marker),
                                      process_check_interval=interval))
    exporter.start()
    url = f"http://127.0.0.1:{exporter.http.port}"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "--config", marker])
    try:
        eventually(lambda: marker.encode() in Path(f"/proc/{trainer.pid}/cmdline").read_bytes(), 5, what="the trainer")
        checked = time.monotonic()
        assert sample(scrape(url), "training_process_up", run="job-7", node="node-a") == 1
        trainer.kill()
        trainer.wait()
        assert sample(scrape(url), "training_process_up", run="job-7", node="node-a") == 1  # the answer of the first
        assert time.monotonic() - checked < interval, "too slow to see the reuse"
        time.sleep(interval)
        assert sample(scrape(url), "training_process_up", run="job-7", node="node-a") == 0
    finally:
        trainer.kill()
        trainer.wait()
        exporter.stop()


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
