"""The status page as a person sees it, in headless Chromium."""

from __future__ import annotations

from tests.support.browser import chromium
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get
from tests.support.runs import copy_example

NAN_STEP = ("[INFO] 2026-06-09 10:30:00 [.../loss_callback.py:231] _print_log: { step:[  201/ 1000], loss:        nan, "
            "per_step_time:    850ms, lr: 1.000000e-04, grad_norm:   1.234000, throughput:  12.34T }\n")


def test_page_renders_every_rank_and_flags_the_failing_one(tmp_path):
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with open(log_dir / "worker_6.log", "a") as log:
        log.write(NAN_STEP)
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        eventually(lambda: "worker_7.log" in http_get(exporter.url + "/")[1], 10, what="rows on the page")
        dom = chromium(exporter.url + "/", tmp_path / "profile", "--dump-dom").stdout
        screenshot = tmp_path / "status.png"
        chromium(exporter.url + "/", tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1400,600")
    rows = [row for row in dom.split("<tr") if "worker_" in row]
    assert len(rows) == 8
    flagged = [row for row in rows if 'class="bad"' in row]
    assert len(flagged) == 1 and "worker_6.log" in flagged[0] and "loss_nonfinite 1" in flagged[0]
    assert screenshot.stat().st_size > 10_000  # a rendered page, not an empty canvas
