"""Feed a directory of logs through the real follow -> parse -> state path once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.export.collector import TrainingCollector
from exporter.export.families import STATE_ONLY, ScrapeTime
from exporter.follow import Follower
from exporter.pipeline import Pipeline
from exporter.state import TrainingState

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_RUN = REPO / "examples" / "deepseek-moe-8rank" / "msrun_log"
FIXED_TIME = 1781000000.0


def copy_example(destination: Path, mtime: float | None = FIXED_TIME) -> Path:
    """A copy of the bundled 8-rank example, with fixed modification times."""
    target = destination / "deepseek-moe-8rank" / "msrun_log"
    shutil.copytree(EXAMPLE_RUN, target)
    if mtime is not None:
        for path in target.iterdir():
            os.utime(path, (mtime, mtime))
    return target


def read_once(log_dir: Path, node: str = "node-0", run: str | None = None, clock=lambda: FIXED_TIME,
              **pipeline_options) -> TrainingState:
    """Follow a directory once; pipeline_options: ``formats`` and ``rank_offset`` of Pipeline."""
    state = TrainingState()
    pipeline = Pipeline(state, node, lambda directory: run or Path(directory).parent.name, clock=clock,
                        **pipeline_options)
    follower = Follower([str(log_dir)], pipeline)
    try:
        follower.run_once()
    finally:
        follower.stop()
    return state


def exposition(state: TrainingState, scrape_time: ScrapeTime = STATE_ONLY) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state, scrape_time))
    return generate_latest(registry).decode()
