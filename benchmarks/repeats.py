"""One step line printed again and again (a trainer that logs every micro-batch): memory and checkpoint size.

The exporter follows a log of ``repeats`` copies of one MindFormers step line, then one of a
thousand, each to its end; their resident memory and checkpoint sizes side by side show what
the repeats cost: a repeated step updates the rank's state in place, so neither may grow with
the number of lines.
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.generate import step_line
from benchmarks.measure import following
from tests.support.net import eventually, sample, scrape

BASELINE_LINES = 1_000


def measure(directory: Path, repeats: int) -> dict[str, object]:
    """The exporter's memory and checkpoint after ``repeats`` copies of one step line, and after a thousand."""
    return {"repeats": repeats, "after_repeats": _follow(directory / "repeats", repeats),
            "after_baseline": _follow(directory / "baseline", BASELINE_LINES)}


def _follow(directory: Path, lines: int) -> dict[str, float]:
    log = directory / "logs" / "worker_0.log"
    log.parent.mkdir(parents=True)
    line = (step_line(100, 1000, 2.5, 1.2) + "\n").encode()
    with log.open("wb") as out:
        chunk = line * 10_000
        for _ in range(lines // 10_000):
            out.write(chunk)
        out.write(line * (lines % 10_000))
    started = time.monotonic()
    with following(log.parent) as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_log_lines_total") == lines, 600, interval=0.5,
                   what=f"{lines} lines read")
        seconds = time.monotonic() - started
        rss_mb, peak_mb = exporter.memory_kb("VmRSS") / 1024, exporter.memory_kb("VmHWM") / 1024
    checkpoints = [path for path in (directory / "state").rglob("*") if path.is_file()]
    return {"lines": lines, "seconds": seconds, "rss_mb": rss_mb, "peak_rss_mb": peak_mb,
            "checkpoint_bytes": sum(path.stat().st_size for path in checkpoints)}
