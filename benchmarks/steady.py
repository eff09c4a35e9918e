"""Steady state: ranks writing step and noise lines while the exporter follows them.

Two phases over the same writers, because measuring latency needs a scraper polling
/metrics every 20 ms, which would itself cost the exporter more CPU than the target:

1. CPU: a Prometheus-like scrape every 15 s; the exporter's CPU share and memory.
2. Latency: /metrics polled every 20 ms; for every step line, the time from its write
   to the first scrape showing that rank's ``training_step`` at that step or later.

The writer is a separate process (``python -m benchmarks.steady write ...``) that logs
when it wrote each step line.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from benchmarks.generate import noise_pool, step_line
from benchmarks.measure import following
from tests.support.exporter_process import ExporterProcess, exporter_environment

SCRAPE_INTERVAL = 15.0  # what a typical Prometheus job does
PROBE_INTERVAL = 0.02
_STEP_SAMPLE = re.compile(r'^training_step\{[^}]*rank="(\d+)"[^}]*\} (\S+)$', re.MULTILINE)


def measure(directory: Path, ranks: int, noise_per_second: int, duration: float) -> dict[str, object]:
    """Run both phases; CPU over ``duration`` seconds, latency over half of it."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        (directory / f"worker_{rank}.log").write_bytes(b"")
    latency_duration = max(duration / 2, 1.0)
    with following(directory) as exporter:
        writer = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.steady", "write", str(directory), "--ranks", str(ranks),
             "--noise", str(noise_per_second), "--duration", str(duration + latency_duration + 1)],
            stdout=subprocess.PIPE, text=True, env=exporter_environment())
        written: dict[tuple[int, int], float] = {}
        reader = threading.Thread(target=_read_ledger, args=(writer.stdout, written), daemon=True)
        reader.start()
        time.sleep(1.0)  # let the writers start and the exporter settle
        cpu = _cpu_phase(exporter, duration)
        seen, probe_started = _latency_phase(exporter, latency_duration)
        writer.wait()
        reader.join()
        rss_mb, peak_mb = exporter.memory_kb("VmRSS") / 1024, exporter.memory_kb("VmHWM") / 1024
    latencies = sorted(seen[key] - at for key, at in written.items() if at >= probe_started and key in seen)
    if not latencies:
        raise AssertionError("no step line written during the latency phase was seen in /metrics")
    return {
        "ranks": ranks,
        "lines_per_second": ranks * (noise_per_second + 1),
        "cpu_window_seconds": duration,
        "cpu_share_of_one_core": cpu,
        "rss_mb": rss_mb,
        "peak_rss_mb": peak_mb,
        "latency_samples": len(latencies),
        "latency_p50_ms": 1000 * _percentile(latencies, 50),
        "latency_p99_ms": 1000 * _percentile(latencies, 99),
        "latency_max_ms": 1000 * latencies[-1],
    }


def _cpu_phase(exporter: ExporterProcess, duration: float) -> float:
    cpu_before, started = exporter.cpu_seconds(), time.monotonic()
    next_scrape = started
    while (now := time.monotonic()) < started + duration:
        if now >= next_scrape:
            exporter.metrics()
            next_scrape += SCRAPE_INTERVAL
        time.sleep(min(0.5, started + duration - now))
    return (exporter.cpu_seconds() - cpu_before) / (time.monotonic() - started)


def _latency_phase(exporter: ExporterProcess, duration: float) -> tuple[dict[tuple[int, int], float], float]:
    """When each (rank, step) was first visible, and when probing started (wall clock)."""
    seen: dict[tuple[int, int], float] = {}
    latest: dict[int, int] = {}
    started = time.time()
    while time.time() < started + duration:
        body = exporter.metrics()
        at = time.time()
        for rank_text, value in _STEP_SAMPLE.findall(body):
            rank, step = int(rank_text), int(float(value))
            for earlier in range(latest.get(rank, step - 1) + 1, step + 1):
                seen[(rank, earlier)] = at
            latest[rank] = max(step, latest.get(rank, step))
        time.sleep(PROBE_INTERVAL)
    return seen, started


def _read_ledger(stream, written: dict[tuple[int, int], float]) -> None:
    for line in stream:
        rank, step, at = line.split()
        written[(int(rank), int(step))] = float(at)


def _percentile(ordered: list[float], percent: float) -> float:
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(percent) - 1]


def write(directory: Path, ranks: int, noise_per_second: int, duration: float) -> None:
    """Each rank writes ``noise_per_second`` noise lines and one step line per second, one
    write per line, spread evenly; prints ``rank step wall_time`` for every step line."""
    rng = random.Random(7)
    noise = [line.encode() + b"\n" for line in noise_pool(rng, size=2000)]
    files = [os.open(directory / f"worker_{rank}.log", os.O_WRONLY | os.O_APPEND) for rank in range(ranks)]
    per_rank = noise_per_second + 1
    interval = 1.0 / (ranks * per_rank)
    steps = [0] * ranks
    started = time.monotonic()
    tick = 0
    while tick * interval < duration:
        ahead = started + tick * interval - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)  # behind schedule (a busy machine): catch up without sleeping
        rank, slot = tick % ranks, tick // ranks % per_rank
        if slot == rank * per_rank // ranks:  # the step line, at a different moment for each rank
            steps[rank] += 1
            at = time.time()
            os.write(files[rank], step_line(steps[rank], 10**6, 2.0 + rng.random(), 1.0).encode() + b"\n")
            print(rank, steps[rank], f"{at:.6f}", flush=True)
        else:
            os.write(files[rank], noise[tick % len(noise)])
        tick += 1
    for handle in files:
        os.close(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description="steady-state writer")
    parser.add_argument("command", choices=["write"])
    parser.add_argument("directory", type=Path)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--noise", type=int, default=100)
    parser.add_argument("--duration", type=float, default=60.0)
    arguments = parser.parse_args()
    write(arguments.directory, arguments.ranks, arguments.noise, arguments.duration)


if __name__ == "__main__":
    main()
