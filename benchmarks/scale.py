"""Scale: many followed files (one per rank): memory, and the time to render /metrics."""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

from benchmarks.generate import noise_pool, step_line
from benchmarks.measure import following
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get

STEPS_PER_FILE = 3
NOISE_PER_STEP = 5
RENDERS = 15


def write_rank_logs(directory: Path, files: int) -> None:
    """worker_0.log ... worker_{files-1}.log, a few step lines each between noise."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(11)
    noise = noise_pool(rng, size=500)
    for rank in range(files):
        lines = []
        for step in range(1, STEPS_PER_FILE + 1):
            lines += rng.sample(noise, NOISE_PER_STEP)
            lines.append(step_line(step, 1000, 3.0 - step / 10, 1.0 + rank / files))
        (directory / f"worker_{rank}.log").write_text("\n".join(lines) + "\n")


def measure(directory: Path, files: int) -> dict[str, object]:
    write_rank_logs(directory, files)
    started = time.monotonic()
    with following(directory) as exporter:
        body = eventually(lambda: _all_ranks_stepped(exporter, files), timeout=300, what=f"{files} ranks in /metrics")
        followed_after = time.monotonic() - started
        renders = []
        for _ in range(RENDERS):
            begun = time.perf_counter()
            http_get(exporter.url + "/metrics")
            renders.append(time.perf_counter() - begun)
        rss_mb = exporter.memory_kb("VmRSS") / 1024
        peak_mb = exporter.memory_kb("VmHWM") / 1024
    return {
        "files": files,
        "seconds_until_all_followed": followed_after,
        "rss_mb": rss_mb,
        "peak_rss_mb": peak_mb,
        "metrics_bytes": len(body.encode()),
        "metrics_samples": sum(1 for line in body.splitlines() if line and not line.startswith("#")),
        "render_median_ms": 1000 * statistics.median(renders),
        "render_max_ms": 1000 * max(renders),
    }


def _all_ranks_stepped(exporter: ExporterProcess, files: int) -> str | None:
    body = exporter.metrics()
    last_step = f" {STEPS_PER_FILE}.0"
    stepped = sum(1 for line in body.splitlines() if line.startswith("training_step{") and line.endswith(last_step))
    return body if stepped == files else None
