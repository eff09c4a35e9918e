"""Hostile clients: what a stranger or a flood does to a scrape with the right credentials.

One exporter process with basic auth (bcrypt cost 10, as htpasswd -nBC 10 makes it) and a
scraper whose credentials are cached after its first scrape. Three loads, one at a time,
each while that scraper scrapes /metrics in a loop on its own connection:

- ``trickle``: connections that send a request head one byte a second (a slowloris), opened
  again when the exporter closes them at its head deadline;
- ``flood``: clients sending wrong passwords, a new one each request (no cache can answer);
- ``bodies``: clients announcing and sending 1 GiB bodies, connecting again when closed;
  the exporter's resident memory is sampled every 20 ms against its idle value.

Everything goes to 127.0.0.1 and ends after ``seconds``.
"""

from __future__ import annotations

import base64
import http.client
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import bcrypt
import yaml

from benchmarks.scale import write_rank_logs
from tests.support.exporter_process import ExporterProcess

USER, PASSWORD = "prometheus", "benchmark password"
GIB = 1 << 30


def _basic(password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{USER}:{password}".encode()).decode()}


def _latencies(port: int, stop: threading.Event) -> tuple[list[float], int]:
    """Scrape /metrics with the right credentials until ``stop``: seconds per scrape, failures."""
    latencies, failures = [], 0
    connection: http.client.HTTPConnection | None = None
    while not stop.is_set():
        begun = time.perf_counter()
        try:
            connection = connection or http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            connection.request("GET", "/metrics", headers=_basic(PASSWORD))
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                failures += 1
        except (OSError, http.client.HTTPException):
            failures += 1
            connection = None
            continue
        latencies.append(time.perf_counter() - begun)
        time.sleep(0.05)
    return latencies, failures


def _summary(latencies: list[float], failures: int) -> dict[str, object]:
    ordered = sorted(latencies)
    return {"scrapes": len(ordered), "failures": failures,
            "p50_ms": 1000 * statistics.median(ordered) if ordered else None,
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else None,
            "max_ms": 1000 * ordered[-1] if ordered else None}


def _while_loaded(port: int, seconds: float, load: Callable[[threading.Event], dict[str, object]]
                  ) -> dict[str, object]:
    stop = threading.Event()
    outcome: dict[str, object] = {}
    loader = threading.Thread(target=lambda: outcome.update(load(stop)), daemon=True)
    loader.start()
    time.sleep(min(2.0, seconds / 4))  # the load is on before the first measured scrape
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    latencies, failures = _latencies(port, stop)
    loader.join(30)
    return {**_summary(latencies, failures), **outcome}


def _trickle(port: int, clients: int) -> Callable[[threading.Event], dict[str, object]]:
    def run(stop: threading.Event) -> dict[str, object]:
        head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100_000
        sockets: dict[int, tuple[socket.socket, int]] = {}
        reopened = 0
        while not stop.is_set():
            for number in range(clients):
                sock, sent = sockets.get(number, (None, 0))
                if sock is None:
                    try:
                        sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                    except OSError:
                        continue
                try:
                    sock.send(head[sent:sent + 1])
                    sockets[number] = (sock, sent + 1)
                except OSError:  # closed at the head deadline: a new one, as a slowloris does
                    sock.close()
                    sockets.pop(number, None)
                    reopened += 1
            stop.wait(1.0)
        for sock, _ in sockets.values():
            sock.close()
        return {"trickling": clients, "closed_and_reopened": reopened}
    return run


def _flood(port: int, clients: int) -> Callable[[threading.Event], dict[str, object]]:
    def run(stop: threading.Event) -> dict[str, object]:
        answers: dict[int, int] = {}
        lock = threading.Lock()

        def client(number: int) -> None:
            attempt = 0
            while not stop.is_set():
                attempt += 1
                try:
                    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    connection.request("GET", "/metrics", headers=_basic(f"wrong {number} {attempt}"))
                    status = connection.getresponse().status
                    connection.close()
                except (OSError, http.client.HTTPException):
                    status = 0
                with lock:
                    answers[status] = answers.get(status, 0) + 1

        threads = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(35)
        return {"flooding": clients, "answers": {str(status): count for status, count in sorted(answers.items())}}
    return run


def _bodies(exporter: ExporterProcess, clients: int) -> Callable[[threading.Event], dict[str, object]]:
    def run(stop: threading.Event) -> dict[str, object]:
        sent = [0] * clients
        connections = [0] * clients
        before = exporter.memory_kb("VmRSS")  # after the other loads: what this one adds is measured
        peak = [before]

        def client(number: int) -> None:
            chunk = b"b" * (1 << 20)
            while not stop.is_set():
                try:
                    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
                        connections[number] += 1
                        sock.sendall(b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % GIB)
                        for _ in range(1024):
                            if stop.is_set():
                                return
                            sock.sendall(chunk)
                            sent[number] += len(chunk)
                except OSError:
                    continue

        threads = [threading.Thread(target=client, args=(number,), daemon=True) for number in range(clients)]
        for thread in threads:
            thread.start()
        while not stop.is_set():
            peak[0] = max(peak[0], exporter.memory_kb("VmRSS"))
            stop.wait(0.02)
        for thread in threads:
            thread.join(10)
        return {"sending": clients, "connections": sum(connections), "bytes_accepted_mb": sum(sent) / 1e6,
                "rss_before_kb": before, "peak_rss_kb": peak[0], "peak_above_idle_mb": (peak[0] - before) / 1024}
    return run


def measure(directory: Path, trickling: int, flooding: int, sending: int, seconds: float) -> dict[str, object]:
    """The three loads against one exporter, each for ``seconds``."""
    logs = directory / "msrun_log"
    write_rank_logs(logs, 8)
    config = directory / "web-config.yml"
    config.write_text(yaml.safe_dump({"basic_auth_users": {
        USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()}}))
    with ExporterProcess("--log-dir", str(logs), "--web.config.file", str(config),
                         headers=_basic(PASSWORD)) as exporter:
        exporter.metrics()  # the credentials are cached from here on
        time.sleep(1)
        idle_kb = exporter.memory_kb("VmRSS")
        results: dict[str, object] = {"idle_rss_kb": idle_kb}
        results["trickle"] = _while_loaded(exporter.port, seconds, _trickle(exporter.port, trickling))
        results["flood"] = _while_loaded(exporter.port, seconds, _flood(exporter.port, flooding))
        results["bodies"] = _while_loaded(exporter.port, seconds, _bodies(exporter, sending))
    return results
