"""The exporter as users run it: a real process, real files being written, real HTTP."""

from __future__ import annotations

import os
import subprocess
import time

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get, sample, scrape
from tests.support.runs import copy_example

STEP_LINE = ("[INFO] 2026-06-09 10:20:30 [.../loss_callback.py:231] _print_log: {{ step:[{step:5d}/ 1000], "
             "loss: {loss:10.6f}, per_step_time:    850ms, lr: 1.000000e-04, grad_norm:   1.234000, "
             "throughput:  12.34T }}\n")


def test_appended_step_shows_in_metrics_within_two_seconds(tmp_path):
    log_dir = copy_example(tmp_path, mtime=None)
    with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a") as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="3") == 200, 10,
                   what="catch-up to step 200")
        samples = scrape(exporter.url)
        assert sample(samples, "training_step", rank="3", node="node-a", run="deepseek-moe-8rank") == 200
        with open(log_dir / "worker_3.log", "a") as log:
            log.write(STEP_LINE.format(step=201, loss=1.875))
            log.flush()
            written = time.monotonic()
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="3") == 201, 2, interval=0.02,
                   what="step 201 in /metrics")
        assert time.monotonic() - written < 2
        samples = scrape(exporter.url)
        assert sample(samples, "training_loss", rank="3") == 1.875
        assert sample(samples, "training_step", rank="2") == 200  # other ranks untouched


def test_the_first_scrape_after_an_append_shows_it(tmp_path):
    """A scrape reads what was written before it: no waiting out the follow thread's batching."""
    log_dir = copy_example(tmp_path, mtime=None)
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="3") == 200, 10,
                   what="catch-up to step 200")
        with open(log_dir / "worker_3.log", "a") as log:
            for step in range(201, 211):
                log.write(STEP_LINE.format(step=step, loss=1.5 + step / 1000))
                log.flush()
                samples = scrape(exporter.url)
                assert sample(samples, "training_step", rank="3") == step
                assert sample(samples, "training_loss", rank="3") == 1.5 + step / 1000
            log.write(STEP_LINE.format(step=211, loss=1.0))
            log.flush()
            status, page = http_get(exporter.url + "/")
            assert status == 200 and "211" in page


def test_file_created_after_start_is_followed(tmp_path):
    log_dir = tmp_path / "job" / "msrun_log"
    log_dir.mkdir(parents=True)
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        eventually(lambda: http_get(exporter.url + "/-/ready")[0] == 200, 10, what="ready")
        (log_dir / "worker_9.log").write_text(STEP_LINE.format(step=7, loss=3.5))
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="9", run="job") == 7, 5, what="new file")
        assert sample(scrape(exporter.url), "trainlog_files_followed") == 1


def test_missing_directory_is_not_ready_until_it_appears(tmp_path):
    log_dir = tmp_path / "later" / "msrun_log"
    with ExporterProcess("--log-dir", str(log_dir), "--rescan-interval", "0.2") as exporter:
        status, body = http_get(exporter.url + "/-/ready")
        assert status == 503, body
        assert http_get(exporter.url + "/-/healthy")[0] == 200
        # The HTTP server answers before the follower's first scan: create the directory only
        # once the exporter said it waits for it, or it may never have had to.
        eventually(lambda: "waiting for the log directory" in exporter.output(), 5, what="waiting announced")
        log_dir.mkdir(parents=True)
        (log_dir / "worker_0.log").write_text(STEP_LINE.format(step=1, loss=9.0))
        eventually(lambda: http_get(exporter.url + "/-/ready")[0] == 200, 5, what="ready after mkdir")
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="0") == 1, 5, what="first step")
        output = exporter.stop()
    assert output.count(f"waiting for the log directory {log_dir}") == 1  # said once, not at every rescan
    assert f"log directory {log_dir} appeared" in output


def test_status_page_lists_ranks(tmp_path):
    log_dir = copy_example(tmp_path, mtime=None)
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        # The files are discovered in directory order, worker_7.log not necessarily last: wait for every row.
        eventually(lambda: http_get(exporter.url + "/")[1].count(" data-rank=") == 9, 10,
                   what="a row for each of 8 workers and the scheduler")
        status, page = http_get(exporter.url + "/")
        assert status == 200
        assert "worker_7.log" in page
        assert page.count(" data-rank=") == 9


def test_fifos_and_directories_named_like_logs_block_nothing(tmp_path):
    log_dir = tmp_path / "job" / "msrun_log"
    log_dir.mkdir(parents=True)
    (log_dir / "worker_0.log").write_text(STEP_LINE.format(step=1, loss=2.0))
    os.mkfifo(log_dir / "worker_1.log")  # opening it for reading would wait for a writer
    (log_dir / "worker_2.log").mkdir()
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        eventually(lambda: http_get(exporter.url + "/-/ready")[0] == 200, 10, what="ready despite the FIFO")
        with open(log_dir / "worker_0.log", "a") as log:
            log.write(STEP_LINE.format(step=2, loss=1.9))
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="0") == 2, 5,
                   what="the regular file read")
        output = exporter.stop()
    assert "worker_1.log: not a regular file" in output


def test_log_file_follows_one_file_whatever_its_name(tmp_path):
    """``--log-file train.out.current``: not a name a directory scan would follow; rank from the line prefixes."""
    log = tmp_path / "train.out.current"
    log.write_text(f"[rank2]:{STEP_LINE.format(step=7, loss=2.5)}")
    (tmp_path / "worker_9.log").write_text(STEP_LINE.format(step=1, loss=9.0))  # beside it, not followed
    with ExporterProcess("--log-file", str(log), "--run", "single") as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="2", run="single") == 7, 10,
                   what="step 7 of the single file")
        with open(log, "a") as appending:
            appending.write(f"[rank2]:{STEP_LINE.format(step=8, loss=2.25)}")
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="2") == 8, 5, what="step 8 appended")
        assert sample(scrape(exporter.url), "training_step", rank="9") is None


def test_log_file_dash_reads_standard_input(tmp_path):
    """``kubectl logs -f pod | trainlog-exporter --log-file -``: lines arrive through a pipe as they are written."""
    with ExporterProcess("--log-file", "-", "--node", "pod-a", stdin=subprocess.PIPE) as exporter:
        pipe = exporter._running().stdin
        assert pipe is not None
        pipe.write(f"[rank0]:{STEP_LINE.format(step=41, loss=3.0)}".encode())
        pipe.flush()
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="0", run="stdin", node="pod-a") == 41,
                   5, what="step 41 from the pipe")
        pipe.write(f"[rank0]:{STEP_LINE.format(step=42, loss=2.9)}".encode())
        pipe.flush()
        eventually(lambda: sample(scrape(exporter.url), "training_loss", rank="0") == 2.9, 5, what="step 42")
        pipe.close()
