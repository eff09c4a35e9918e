"""The HTTP face against clients without credentials: slow heads, huge heads, bodies, floods.

A real exporter process and real sockets on 127.0.0.1, every connection bounded in count and
time; the numbers the issue measured on cheroot (c431fb3) are what these tests would fail on.
"""

from __future__ import annotations

import base64
import http.client
import socket
import threading
import time

import bcrypt
import pytest
import yaml

from tests.support.exporter_process import ExporterProcess
from tests.support.runs import copy_example

USER, PASSWORD = "prometheus", "correct horse battery staple"
HEAD_TIMEOUT = 10  # exporter.export.http.TIMEOUT_SECONDS
HEAD_LIMIT = 64 * 1024  # exporter.export.http.MAX_HEAD_BYTES


def _basic(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


@pytest.fixture(scope="module")
def exporter(tmp_path_factory):
    log_dir = copy_example(tmp_path_factory.mktemp("logs"), mtime=None)
    with ExporterProcess("--log-dir", str(log_dir)) as running:
        yield running


def _timed_get(port: int, path: str = "/metrics", headers: dict[str, str] | None = None,
               timeout: float = 15) -> tuple[int, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status, time.monotonic() - started
    finally:
        connection.close()


def _answer(sock: socket.socket, timeout: float = 5) -> bytes:
    """Everything the server sends until it closes (or ``timeout`` of silence)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _trickle(port: int, stop: threading.Event, closed_after: list[float], byte_every: float = 0.5) -> None:
    """A client that sends a request head one byte at a time, never finishing it."""
    head = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 10_000
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for byte in head:
            if stop.is_set():
                return
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after.append(time.monotonic() - started)
                return
            time.sleep(byte_every)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":  # the server closed it
                    closed_after.append(time.monotonic() - started)
                    return
            except BlockingIOError:
                pass
            except OSError:  # reset: closed with our bytes unread
                closed_after.append(time.monotonic() - started)
                return
            finally:
                sock.setblocking(True)


def test_clients_trickling_heads_hold_up_no_scrape_and_are_closed_at_the_head_deadline(exporter):
    stop = threading.Event()
    closed_after: list[float] = []
    clients = [threading.Thread(target=_trickle, args=(exporter.port, stop, closed_after), daemon=True)
               for _ in range(48)]  # 6 times the worker threads: on cheroot 8 were enough to stop every scrape
    for client in clients:
        client.start()
    try:
        time.sleep(1.5)  # every trickler has sent bytes: on cheroot each now holds a worker
        durations = []
        for _ in range(10):
            status, seconds = _timed_get(exporter.port)
            assert status == 200
            durations.append(seconds)
            time.sleep(0.2)
        assert max(durations) < 2.0, durations
        for client in clients:
            client.join(HEAD_TIMEOUT + 5)
    finally:
        stop.set()
    assert len(closed_after) == len(clients)
    assert all(HEAD_TIMEOUT - 1 < seconds < HEAD_TIMEOUT + 3 for seconds in closed_after), sorted(closed_after)


def test_a_head_over_64_kib_gets_431_and_a_close_and_memory_does_not_grow_with_it(exporter):
    before = exporter.memory_kb("VmRSS")
    for _ in range(4):
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: ")
            sent = 0
            try:
                while sent < 64 * 1024 * 1024:  # 64 MiB offered, as in the issue
                    sock.sendall(b"a" * 65536)
                    sent += 65536
            except OSError:
                pass
            answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:100]
        assert sent < 16 * 1024 * 1024  # closed long before 64 MiB went in
    assert exporter.memory_kb("VmRSS") - before < 8 * 1024
    assert _timed_get(exporter.port)[0] == 200


@pytest.mark.parametrize(("request_head", "status"), [
    (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n", 413),
    (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n", 405),
    (b"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 413),
])
def test_a_body_is_answered_at_once_and_never_read(exporter, request_head, status):
    before = exporter.memory_kb("VmRSS")
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
        sock.sendall(request_head)
        sent = 0
        started = time.monotonic()
        try:
            while sent < 256 * 1024 * 1024 and time.monotonic() - started < 10:
                sock.sendall(b"b" * 65536)
                sent += 65536
        except OSError:
            pass
        answer = _answer(sock)
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:100]
    assert b"Connection: close" in answer or b"connection: close" in answer
    assert sent < 32 * 1024 * 1024  # the server closed; it did not read 256 MiB
    assert exporter.memory_kb("VmRSS") - before < 8 * 1024


def test_a_request_smuggled_behind_a_body_is_never_answered(exporter):
    smuggled = b"GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n"
                     % len(smuggled) + smuggled)
        answer = _answer(sock)
    assert answer.count(b"HTTP/1.1 ") == 1 and b"Healthy" not in answer


def test_keep_alive_serves_one_request_after_another(exporter):
    connection = http.client.HTTPConnection("127.0.0.1", exporter.port, timeout=5)
    try:
        for path in ("/-/healthy", "/metrics", "/-/ready"):
            connection.request("GET", path)
            response = connection.getresponse()
            assert response.status == 200 and response.read()
            assert response.getheader("Server") == "trainlog-exporter"
    finally:
        connection.close()


def test_a_malformed_request_line_gets_400(exporter):
    with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1 extra\r\n\r\n")
        assert _answer(sock).startswith(b"HTTP/1.1 400 ")


def _wrong_passwords(port: int, stop: threading.Event, answers: list[int]) -> None:
    number = 0
    while not stop.is_set():
        number += 1
        try:
            answers.append(_timed_get(port, headers=_basic(USER, f"wrong {threading.get_ident()} {number}"),
                                      timeout=10)[0])
        except OSError:
            answers.append(0)


def test_a_flood_of_wrong_passwords_neither_delays_a_cached_scrape_nor_lets_bcrypt_run_unbounded(tmp_path):
    config = tmp_path / "web-config.yml"
    config.write_text(yaml.safe_dump({"basic_auth_users": {
        USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=10)).decode()}}))
    log_dir = copy_example(tmp_path / "logs", mtime=None)
    with ExporterProcess("--log-dir", str(log_dir), "--web.config.file", str(config),
                         headers=_basic(USER, PASSWORD)) as exporter:
        assert _timed_get(exporter.port, headers=_basic(USER, PASSWORD))[0] == 200  # now cached
        stop = threading.Event()
        answers: list[int] = []
        flood = [threading.Thread(target=_wrong_passwords, args=(exporter.port, stop, answers), daemon=True)
                 for _ in range(24)]
        for client in flood:
            client.start()
        try:
            time.sleep(1)
            durations = []
            for _ in range(20):
                status, seconds = _timed_get(exporter.port, headers=_basic(USER, PASSWORD))
                assert status == 200
                durations.append(seconds)
                time.sleep(0.1)
        finally:
            stop.set()
            for client in flood:
                client.join(15)
        durations.sort()
        assert durations[-2] < 0.5, durations  # cheroot: 1.6 s each
        assert 429 in answers and 401 in answers
        assert set(answers) <= {401, 429}
        limited = [line for line in exporter.metrics().splitlines()
                   if line.startswith("trainlog_http_auth_limited_total ")]
        assert limited and float(limited[0].split()[1]) == answers.count(429)


def test_the_web_configs_rate_limit_bounds_the_bcrypt_checks_and_never_a_cached_scrape(tmp_path):
    config = tmp_path / "web-config.yml"
    config.write_text(yaml.safe_dump({
        "basic_auth_users": {USER: bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()},
        "rate_limit": {"interval": "1m", "burst": 3}}))
    with ExporterProcess("--log-dir", str(tmp_path), "--web.config.file", str(config),
                         headers=_basic(USER, PASSWORD)) as exporter:  # its start took one check of the 3
        statuses = [_timed_get(exporter.port, "/-/ready", headers=_basic(USER, f"wrong {number}"))[0]
                    for number in range(4)]
        assert statuses == [401, 401, 429, 429]
        assert _timed_get(exporter.port, "/-/ready", headers=_basic(USER, "wrong 0"))[0] == 401  # cached: no check
        assert _timed_get(exporter.port, "/-/ready", headers=_basic(USER, PASSWORD))[0] == 200
        with socket.create_connection(("127.0.0.1", exporter.port), timeout=5) as sock:
            sock.sendall(b"GET /-/ready HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
                         + base64.b64encode(f"{USER}:wrong 9".encode()) + b"\r\nConnection: close\r\n\r\n")
            answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 429 Too Many Requests\r\n") and b"Retry-After: 1\r\n" in answer
