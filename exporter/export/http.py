"""The HTTP face: /metrics, /-/healthy, /-/ready and the status page at /.

Served by cheroot (CherryPy's HTTP/1.1 server): a listen backlog of ``BACKLOG``, a fixed
pool of ``WORKERS`` threads, keep-alive connections parked in a selector between requests
(an idle or half-open connection holds no thread), and one timeout for reads and idle
keep-alive connections. With a web config it adds TLS and basic auth (web_config.py).
"""

from __future__ import annotations

import contextlib
import gzip
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cheroot import wsgi
from cheroot.ssl.builtin import BuiltinSSLAdapter

from exporter.export.text_format import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE, wants_openmetrics
from exporter.export.web_config import BasicAuth, WebConfig, server_context

log = logging.getLogger(__name__)

BACKLOG = 128  # connections the kernel queues before accept (http.server's was 5)
WORKERS = 8  # requests served at once; more would only contend for the GIL
QUEUED = 256  # accepted connections waiting for a worker; beyond, 503
TIMEOUT_SECONDS = 10  # a read that stalls this long, or a keep-alive connection idle this long, is closed
HEALTH_RENDER_MAX_AGE = 30.0  # /-/healthy renders /metrics itself when nobody did for this long
TEXT = "text/plain; charset=utf-8"

Metrics = Callable[[bool], bytes]  # openmetrics? -> the exposition
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class ListenError(Exception):
    """The listen address cannot be bound, worded for the user (exit 2)."""


@dataclass
class RenderHealth:
    """Whether /metrics renders: the outcome of the latest render, by /metrics or by the probe.

    A scrape every 15 s keeps it current for free; without scrapes /-/healthy renders (and
    drops the output) at most every ``max_age`` seconds.
    """

    render: Metrics
    max_age: float = HEALTH_RENDER_MAX_AGE
    clock: Callable[[], float] = time.monotonic
    _failure: str | None = None
    _checked_at: float = field(default=float("-inf"))

    def metrics(self, openmetrics: bool) -> bytes:
        """Render, remembering the outcome; raises what the render raised."""
        try:
            body = self.render(openmetrics)
        except Exception as error:
            self._record(f"{type(error).__name__}: {error}")
            raise
        self._record(None)
        return body

    def failure(self) -> str | None:
        """None while /metrics renders; else what went wrong."""
        if self.clock() - self._checked_at > self.max_age:
            with contextlib.suppress(Exception):  # recorded by metrics(); the probe answers with it
                self.metrics(False)
        return self._failure

    def _record(self, failure: str | None) -> None:
        self._failure, self._checked_at = failure, self.clock()


def application(metrics: Metrics, is_ready: Callable[[], bool], status_page: Callable[[], str], *,
                telemetry_path: str = "/metrics", auth: BasicAuth | None = None,
                headers: Iterable[tuple[str, str]] = ()) -> Callable[[dict[str, Any], StartResponse], list[bytes]]:
    """The WSGI application behind the server."""
    health = RenderHealth(metrics)
    extra_headers = list(headers)

    def serve(environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        status, content_type, body, more = _answer(environ)
        response_headers = [("Content-Type", content_type), ("Content-Length", str(len(body))), *more,
                            *extra_headers]
        start_response(status, response_headers)
        return [] if environ["REQUEST_METHOD"] == "HEAD" else [body]

    def _answer(environ: dict[str, Any]) -> tuple[str, str, bytes, list[tuple[str, str]]]:
        if environ["REQUEST_METHOD"] not in ("GET", "HEAD"):
            return "405 Method Not Allowed", TEXT, b"Only GET and HEAD.\n", [("Allow", "GET, HEAD")]
        # Every path asks for credentials, the probes too, as exporter-toolkit does.
        if auth is not None and not auth.allows(environ.get("HTTP_AUTHORIZATION")):
            return "401 Unauthorized", TEXT, b"Unauthorized\n", [("WWW-Authenticate", "Basic")]
        path = environ.get("PATH_INFO") or "/"
        if path == telemetry_path:
            return _metrics(environ)
        if path == "/-/healthy":
            failure = health.failure()
            if failure is None:
                return "200 OK", TEXT, b"Healthy.\n", []
            return "503 Service Unavailable", TEXT, f"Unhealthy: /metrics cannot render: {failure}\n".encode(), []
        if path == "/-/ready":
            if is_ready():
                return "200 OK", TEXT, b"Ready.\n", []
            return "503 Service Unavailable", TEXT, b"Not ready: waiting for the log directories.\n", []
        if path == "/":
            return "200 OK", "text/html; charset=utf-8", status_page().encode(), []
        return "404 Not Found", TEXT, f"Not found. Try {telemetry_path}.\n".encode(), []

    def _metrics(environ: dict[str, Any]) -> tuple[str, str, bytes, list[tuple[str, str]]]:
        openmetrics = wants_openmetrics(environ.get("HTTP_ACCEPT"))
        try:
            body = health.metrics(openmetrics)
        except Exception as error:  # noqa: BLE001 - one bad value must not take the server down
            log.error("cannot render %s: %s: %s", telemetry_path, type(error).__name__, error)
            return "500 Internal Server Error", TEXT, f"cannot render metrics: {type(error).__name__}\n".encode(), []
        content_type = OPENMETRICS_CONTENT_TYPE if openmetrics else CONTENT_TYPE
        if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
            # Level 1: 2.7 MB of 1,024 ranks in 3 ms instead of 40 ms, 20 % larger.
            return "200 OK", content_type, gzip.compress(body, compresslevel=1), [("Content-Encoding", "gzip")]
        return "200 OK", content_type, body, []

    return serve


ANY_HOST = "0.0.0.0"


class ExporterHTTPServer:
    """Binds at construction (so a busy port fails before anything starts), serves on a thread."""

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        is_ready: Callable[[], bool],
        status_page: Callable[[], str],
        *,
        telemetry_path: str = "/metrics",
        web_config: WebConfig | None = None,
        web_config_path: Path = Path("-"),
    ) -> None:
        # ":10042" (the exporters' default) means every interface; cheroot wants that spelled out.
        host = host or ANY_HOST
        web_config = web_config or WebConfig()
        app = application(metrics, is_ready, status_page, telemetry_path=telemetry_path,
                          auth=BasicAuth(web_config.basic_auth_users) if web_config.basic_auth_users else None,
                          headers=web_config.http_server_config.headers.items())
        self._server = _Server((host, port), app, numthreads=WORKERS, max=WORKERS, request_queue_size=BACKLOG,
                               timeout=TIMEOUT_SECONDS, accepted_queue_size=QUEUED, server_name="trainlog-exporter")
        tls = web_config.tls_server_config
        if tls is not None:
            self._server.ssl_adapter = _LazyHandshake(server_context(tls, web_config_path), str(tls.cert_file),
                                                      str(tls.key_file))
        self.tls = tls is not None
        self.auth = bool(web_config.basic_auth_users)
        self._listen(host, port)
        self._thread = threading.Thread(target=self._server.serve, name="http", daemon=True)

    def _listen(self, host: str, port: int) -> None:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            self._server.prepare()
        except OSError as error:
            reason = self._server.bind_error or error
            raise ListenError(f"cannot listen on {address}: {getattr(reason, 'strerror', None) or reason}") from None

    @property
    def port(self) -> int:
        return self._server.bind_addr[1]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.stop()
        self._thread.join(5)


class _Server(wsgi.Server):
    """cheroot's server, parking new connections until they speak, logging through
    ``logging``, keeping the reason a bind failed."""

    bind_error: OSError | None = None

    def process_conn(self, conn: Any) -> None:
        # cheroot hands a new connection straight to a worker, which then waits for its
        # request: 8 connections that send nothing would stop the server for a timeout.
        # A new one waits in the selector, with the idle keep-alive ones, until it has
        # bytes to read (or is closed after the timeout, like them).
        if not getattr(conn, "spoke", False):
            conn.spoke = True
            self._connections.put(conn)  # type: ignore[attr-defined] # cheroot's, set by prepare()
            return
        super().process_conn(conn)

    def bind(self, family: int, type: int, proto: int = 0) -> Any:  # noqa: A002 - cheroot's signature
        try:
            return super().bind(family, type, proto)
        except OSError as error:
            self.bind_error = error
            raise

    def error_log(self, msg: str = "", level: int = logging.INFO, traceback: bool = False) -> None:
        # Dropped connections, failed handshakes and plain HTTP on the TLS port are the
        # clients' business: debug, never a traceback on stderr.
        log.debug("%s", msg, exc_info=traceback and log.isEnabledFor(logging.DEBUG))


class _LazyHandshake(BuiltinSSLAdapter):
    """TLS with the handshake on a worker thread, at the connection's first read.

    cheroot shakes hands in its accept loop: one client that connects and sends nothing
    would stall every other connection for a whole timeout. Here the accept loop only wraps
    the socket, and the handshake runs when the selector saw the client's first bytes.
    """

    def __init__(self, context: ssl.SSLContext, cert_file: str, key_file: str) -> None:
        super().__init__(cert_file, key_file)
        self.context = context

    def wrap(self, sock: Any) -> tuple[Any, dict[str, str]]:
        wrapped = self.context.wrap_socket(sock, do_handshake_on_connect=False, server_side=True)
        return wrapped, {"wsgi.url_scheme": "https", "HTTPS": "on"}
