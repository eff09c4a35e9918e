"""The status page as a person sees it, in headless Chromium."""

from __future__ import annotations

import re
from pathlib import Path

from exporter.simulate.demo import DemoRun
from tests.support.browser import chromium
from tests.support.cdp import Browser
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get, sample, scrape
from tests.support.replay import replay_directory
from tests.support.runs import copy_example

NAN_STEP = ("[INFO] 2026-06-09 10:30:00 [.../loss_callback.py:231] _print_log: { step:[  201/ 1000], loss:        nan, "
            "per_step_time:    850ms, lr: 1.000000e-04, grad_norm:   1.234000, throughput:  12.34T }\n")
DEMO_STEPS_SHOWN = 170  # past the demo's spike at step 120, within the ring of the last 256 steps
PRINTED_STEP = re.compile(r"step:\[\s*(\d+)/")
ROW_CLASS = re.compile(r'[^>]*?\bclass="([^"]*)"')  # a <tr>'s own classes, before its tag ends


def test_page_renders_every_rank_and_flags_the_failing_one(tmp_path):
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with open(log_dir / "worker_6.log", "a") as log:
        log.write(NAN_STEP)
    with ExporterProcess("--log-dir", str(log_dir), "--state-file", str(tmp_path / "state.json")) as exporter:
        eventually(lambda: "worker_7.log" in http_get(exporter.url + "/")[1], 10, what="rows on the page")
        dom = chromium(exporter.url + "/", tmp_path / "profile", "--dump-dom").stdout
        screenshot = tmp_path / "status.png"
        chromium(exporter.url + "/", tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1400,600")
    rows = [row for row in dom.split("<tr") if "worker_" in row]
    assert len(rows) == 8
    flagged = [row for row in rows if "bad" in _classes(row)]
    assert len(flagged) == 1 and "worker_6.log" in flagged[0] and "loss_nonfinite 1 at step 201" in flagged[0]
    assert 'data-root-cause="non-finite loss after step 201"' in flagged[0]  # the run's root cause, marked
    assert screenshot.stat().st_size > 10_000  # a rendered page, not an empty canvas


def _classes(row: str) -> list[str]:
    found = ROW_CLASS.match(row)
    return found.group(1).split() if found else []


def _last_step(log) -> int:
    steps = PRINTED_STEP.findall(log.read_text()) if log.exists() else []
    return int(steps[-1]) if steps else 0


def test_the_demo_run_shows_its_loss_curves_the_spike_at_its_step_and_the_slowdown(tmp_path):
    # The demo's run, 20x faster: rank 5 slow from step 30, which as in any synchronous run slows every
    # rank alike (the slowdown detector counts it 20 slow steps after the baseline, at the step it began), a
    # spike at 120.
    demo = DemoRun(step_interval=0.05)
    worker = demo.log_dir / "worker_7.log"
    demo.start()
    try:
        with ExporterProcess("--log-dir", str(demo.log_dir), "--state-file", str(tmp_path / "state.json")) as exporter:
            eventually(lambda: _last_step(worker) >= DEMO_STEPS_SHOWN, 60, what=f"{DEMO_STEPS_SHOWN} demo steps")
            demo.pause()
            last = _last_step(worker)
            eventually(lambda: all(sample(samples, "training_step", rank=str(rank)) == last
                                   for samples in [scrape(exporter.url)] for rank in range(8)), 15,
                       what=f"every rank at step {last}")
            dom = chromium(exporter.url + "/", tmp_path / "profile", "--dump-dom").stdout
            screenshot = tmp_path / "status-demo.png"
            chromium(exporter.url + "/", tmp_path / "profile", f"--screenshot={screenshot}", "--window-size=1400,1100")
    finally:
        demo.stop()
    print(f"screenshot of the demo run at step {last}: {screenshot}")
    assert screenshot.stat().st_size > 50_000
    assert dom.count('<svg class="loss-chart"') == 1
    lines = re.findall(r'<polyline class="rank-loss"[^>]*points="([^"]*)"', dom)
    assert len(lines) == 8 and {len(points.split()) for points in lines} == {last}  # every step of every rank
    assert re.search(r'<g class="marker anomaly" data-step="120">.*?loss spike @ step 120', dom)
    assert re.search(r'<tr class="anomaly" data-kind="loss_spike"><td>120</td><td>0-7</td>', dom)
    assert re.search(r'<g class="marker anomaly" data-step="(30|31)">.*?slowdown @ step', dom)
    assert re.search(r'<tr class="anomaly" data-kind="slowdown"><td>(30|31)</td><td>0-7</td>', dom)
    assert "TrainingSlowdown.md" in dom
    # Every rank waits for rank 5 at each collective: no rank's own step time stands out.
    slow = re.findall(r'<tr class="([^"]*)" data-rank="(\d+)">', dom)
    assert len(slow) == 8 and not [rank for css, rank in slow if "slow" in css.split()]
    assert "<rect class=\"bar slow\"" not in dom and "TrainingStraggler.md" not in dom


def test_the_refresh_replaces_the_content_and_keeps_the_scroll_position(tmp_path):
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with ExporterProcess("--log-dir", str(log_dir), "--state-file", str(tmp_path / "state.json")) as exporter:
        eventually(lambda: "worker_7.log" in http_get(exporter.url + "/")[1], 10, what="rows on the page")
        with Browser(tmp_path / "profile", width=1000, height=400) as browser:
            browser.navigate(exporter.url + "/")
            assert browser.evaluate("document.body.scrollHeight") > 700 + 400  # room to scroll
            browser.evaluate("window.scrollTo(0, 700); window.loadedOnce = true;"
                             "document.getElementById('content').dataset.before = 'refresh'")
            with open(log_dir / "worker_6.log", "a") as log:
                log.write(NAN_STEP)
            eventually(lambda: browser.evaluate(
                "document.getElementById('content').dataset.before === undefined"
                " && document.body.innerHTML.includes('loss_nonfinite 1 at step 201')"), 20,
                what="the content refreshed with the new step")
            assert browser.evaluate("window.loadedOnce") is True  # the same document: no reload
            assert browser.evaluate("window.scrollY") == 700


MSRUN_HANG = Path(__file__).resolve().parent / "fixtures" / "real" / "msrun_hang"  # tests/fixtures/SOURCES.md
REPLAY_SPEEDUP = 20.0


def test_a_real_msrun_hang_marks_its_step_names_the_hung_rank_and_gives_no_eta(tmp_path):
    """The real msrun hang (rank 1 silent inside step 8, ranks 0, 2, 3 failing in the ring all-reduce), written
    live in the order and at 20x the pace its lines were printed: the loss chart marks the failures at step 7 (none
    at step 1), the hung rank's row is the cause's, not a healthy one, and the stopped run has no ETA."""
    log_dir = tmp_path / "job" / "msrun_log"
    log_dir.mkdir(parents=True)
    with ExporterProcess("--log-dir", str(log_dir), "--rescan-interval", "0.2",
                         "--state-file", str(tmp_path / "state.json")) as exporter:
        replay_directory(MSRUN_HANG, log_dir, REPLAY_SPEEDUP)
        eventually(lambda: "root cause hang" in http_get(exporter.url + "/")[1], 30, what="the hang named on the page")
        dom = chromium(exporter.url + "/", tmp_path / "profile", "--dump-dom").stdout
    marks = re.findall(r"@ step (\d+)", dom)
    assert marks and set(marks) == {"7"}, marks
    assert "ETA" not in dom
    assert "stopped: root cause hang (silent inside a step) after step 7 on rank 1" in dom
    rows = {re.search(r"worker_(\d)\.log", row).group(1): row for row in dom.split("<tr") if "worker_" in row}
    assert "cause" in _classes(rows["1"]) and "bad" in _classes(rows["1"]), rows["1"]
    assert "hang 1 at step 7" in rows["1"]
    for rank in "023":
        assert "traceback 1 at step 7" in rows[rank] and "at step 1," not in rows[rank], rows[rank]
