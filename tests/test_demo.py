"""serve --demo: a live simulated run for a first look, cleaned up on exit."""

from __future__ import annotations

from exporter.simulate.demo import DemoRun
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, sample, scrape


def test_demo_metrics_move(tmp_path):
    with ExporterProcess("--demo", "--node", "node-a") as exporter:
        first = eventually(lambda: sample(scrape(exporter.url), "training_step", run="demo", rank="7"), 15,
                           what="a first demo step")
        eventually(lambda: sample(scrape(exporter.url), "training_step", run="demo", rank="7") > first, 15,
                   what="the next demo step")
        samples = scrape(exporter.url)
        assert sample(samples, "training_loss", run="demo", rank="0", node="node-a") > 0
        assert sample(samples, "trainlog_files_followed") == 9  # 8 workers + scheduler.log


def test_demo_run_writes_live_and_cleans_up():
    demo = DemoRun(step_interval=0.02)
    demo.start()
    try:
        worker = demo.log_dir / "worker_0.log"
        eventually(lambda: worker.exists() and worker.read_text().count("_print_log") >= 3, 10, what="demo steps")
        assert demo.log_dir.parent.name == "demo"  # hence the run label
    finally:
        demo.stop()
    assert not demo.log_dir.exists()
