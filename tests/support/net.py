"""Loopback HTTP helpers: free ports, bounded waits, scraping."""

from __future__ import annotations

import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TypeVar

from prometheus_client.parser import text_string_to_metric_families

T = TypeVar("T")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]  # (name, sorted labels) -> value


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_get(url: str, timeout: float = 5.0, *, headers: dict[str, str] | None = None,
             context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout,
                                    context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def eventually(probe: Callable[[], T | None], timeout: float, interval: float = 0.05,
               what: str | Callable[[], str] = "condition") -> T:
    """Poll until probe returns a truthy value; fail after timeout seconds, saying what was awaited
    (``what`` may be a function, to describe the state at the time of failure)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
            if value:
                return value
        except (OSError, ValueError, KeyError) as error:
            last_error = error
        time.sleep(interval)
    what = what() if callable(what) else what
    last = f" (last error: {last_error})" if last_error else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{last}")


def scrape(base_url: str, names: tuple[str, ...] = ()) -> Samples:
    """Samples of /metrics keyed by (name, sorted labels); with ``names``, of those metrics only (their lines alone
    are parsed: the parser is pure Python, a scrape of thousands of series takes it seconds)."""
    status, body = http_get(base_url + "/metrics")
    assert status == 200, body
    if names:
        wanted = {name.removesuffix("_total") for name in names}
        body = "".join(line for line in body.splitlines(keepends=True) if _metric_of(line) in wanted)
    samples: Samples = {}
    for family in text_string_to_metric_families(body):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def _metric_of(line: str) -> str:
    """The metric an exposition line is of (``# HELP``/``# TYPE`` lines' too), without ``_total``."""
    words = line.split(" ", 3)
    name = (words[2] if len(words) > 2 else "") if line.startswith("#") else words[0]
    return name.split("{", 1)[0].removesuffix("_total")


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, matching the given labels (others ignored); None if absent."""
    for (sample_name, sample_labels), value in samples.items():
        if sample_name == name and all(dict(sample_labels).get(k) == v for k, v in labels.items()):
            return value
    return None
