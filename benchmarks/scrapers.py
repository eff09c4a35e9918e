"""Scrapers: many concurrent scrapers of /metrics, the exporter beside prometheus-client's own server.

Each scraper keeps its connection open between requests (as Prometheus does) and scrapes
again as soon as it has its answer: the load of many Prometheus replicas and federation
at once. Latency is a whole request: send, render, read the body. An error is anything but
a complete 200.
"""

from __future__ import annotations

import http.client
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.measure import following
from benchmarks.scale import write_rank_logs
from tests.support.exporter_process import REPO, exporter_environment
from tests.support.net import eventually, free_port, http_get


@dataclass
class _Tally:
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def load(port: int, clients: int, seconds: float) -> dict[str, object]:
    """``clients`` scrapers for ``seconds`` against 127.0.0.1:``port``/metrics."""
    tally = _Tally()
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=_scrape_until, args=(port, deadline, tally)) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies = sorted(tally.latencies)
    return {
        "clients": clients,
        "seconds": seconds,
        "requests": len(latencies),
        "errors": len(tally.errors),
        "first_errors": tally.errors[:3],
        "p50_ms": 1000 * statistics.median(latencies) if latencies else None,
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] if latencies else None,
        "max_ms": 1000 * latencies[-1] if latencies else None,
    }


def _scrape_until(port: int, deadline: float, tally: _Tally) -> None:
    connection: http.client.HTTPConnection | None = None
    while time.monotonic() < deadline:
        begun = time.perf_counter()
        try:
            connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/metrics")
            response = connection.getresponse()
            body = response.read()
            if response.status != 200 or not body:
                raise OSError(f"status {response.status}, {len(body)} bytes")
            if response.getheader("Connection", "").lower() == "close":
                connection.close()
                connection = None
        except (OSError, http.client.HTTPException) as error:
            with tally.lock:
                tally.errors.append(f"{type(error).__name__}: {error}")
            if connection is not None:
                connection.close()
            connection = None
            continue
        with tally.lock:
            tally.latencies.append(time.perf_counter() - begun)
    if connection is not None:
        connection.close()


def measure(directory: Path, ranks: int, clients: int, seconds: float) -> dict[str, object]:
    """The exporter and the peer, one after the other, over the same logs."""
    write_rank_logs(directory, ranks)
    with following(directory) as exporter:
        eventually(lambda: "training_step{" in exporter.metrics(), timeout=60, what="steps in /metrics")
        results: dict[str, object] = {"ranks": ranks, "exporter": load(exporter.port, clients, seconds)}
    results["prometheus_client"] = _peer(directory, clients, seconds)
    return results


def _peer(directory: Path, clients: int, seconds: float) -> dict[str, object]:
    port = free_port()
    peer = subprocess.Popen([sys.executable, "-m", "benchmarks.client_python_peer", str(directory), str(port)],
                            cwd=REPO, env=exporter_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        eventually(lambda: http_get(f"http://127.0.0.1:{port}/metrics", timeout=1)[0] == 200, timeout=60,
                   what="prometheus-client's server")
        return load(port, clients, seconds)
    finally:
        peer.terminate()
        peer.wait(10)
