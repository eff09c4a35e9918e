"""The HTTP face: /metrics, /-/healthy, /-/ready and the status page at /.

One asyncio event loop (the ``http`` thread) accepts connections, shakes TLS hands and reads
request heads, parsed by h11 (python-hyper's sans-I/O HTTP/1.1). A client that has not sent
a whole head costs a coroutine and the bytes it sent, never a thread: a head must arrive whole
within ``TIMEOUT_SECONDS`` (an idle keep-alive connection waits for its next head as long) and
hold at most ``MAX_HEAD_BYTES`` (431 and a close beyond), as Go's ``ReadHeaderTimeout`` and
``MaxHeaderBytes`` bound node_exporter. No endpoint takes a body: one announced is answered
(413, or 405 for a method other than GET and HEAD) and the connection closed without reading it.

Credentials are checked before a request gets a thread (web_config.py, ``Gate``): a cached
answer at once, in the loop; a bcrypt check on its own thread, rate-limited, so wrong passwords
queue behind each other and never in front of a scrape. Only a complete, authenticated request
goes to the ``WORKERS`` threads that render.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import gzip
import http
import logging
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

import h11

from exporter.export.text_format import CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE, wants_openmetrics
from exporter.export.web_config import ALLOWED, LIMITED, Served, static_served

log = logging.getLogger(__name__)

BACKLOG = 128  # connections the kernel queues before accept (http.server's was 5)
WORKERS = 8  # requests rendered at once; more would only contend for the GIL
QUEUED = 256  # requests waiting for a worker; beyond, 503
TIMEOUT_SECONDS = 10  # a TLS handshake, a whole request head, or writing a response: this long at most
MAX_HEAD_BYTES = 64 * 1024  # a request head larger than this gets 431 (Go's default is 1 MiB; ours are tiny)
MAX_CONNECTIONS = 1024  # open at once; beyond, new ones wait in the kernel's backlog
READ_BYTES = 16 * 1024  # read at a time: what a connection holds beyond its head, at most
ACCEPT_PAUSE_SECONDS = 0.5  # out of descriptors: accept again after this, not in a busy loop
HEALTH_RENDER_MAX_AGE = 30.0  # /-/healthy renders /metrics itself when nobody did for this long
TEXT = "text/plain; charset=utf-8"
SERVER = "trainlog-exporter"

Metrics = Callable[[bool], bytes]  # openmetrics? -> the exposition
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
Application = Callable[[dict[str, Any], StartResponse], list[bytes]]


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
                telemetry_path: str = "/metrics", headers: Iterable[tuple[str, str]] = ()) -> Application:
    """The WSGI application behind the server (credentials are checked before it is called)."""
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


@dataclass(frozen=True)
class Answer:
    """A response decided without the application (an error, 401, 429, 503)."""

    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def refusal(method: bytes, headers: Iterable[tuple[bytes, bytes]]) -> Answer | None:
    """The answer to a request that announces a body, None for one that does not.

    No endpoint takes a body, so none is read: the answer goes out at once and the
    connection is closed behind it, whatever the client still sends (no request can be
    smuggled in a body that is never parsed).
    """
    length = b"0"
    chunked = False
    for name, value in headers:
        if name == b"content-length":
            length = value
        elif name == b"transfer-encoding":
            chunked = True
    if not chunked and length.strip() in (b"", b"0"):
        return None
    if method not in (b"GET", b"HEAD"):
        return Answer(405, b"Only GET and HEAD.\n", (("Allow", "GET, HEAD"),), close=True)
    return Answer(413, b"No endpoint takes a request body.\n", close=True)


def environ_of(request: h11.Request, peer: str, https: bool) -> dict[str, Any]:
    """The WSGI environ of a request head (PEP 3333: the path percent-decoded as latin-1)."""
    target = request.target.decode("latin-1")
    if not target.startswith("/"):  # absolute-form (a proxy's) or "*": only the path matters here
        target = urllib.parse.urlsplit(target).path or "/"
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method.decode("latin-1"), "PATH_INFO": urllib.parse.unquote(path, "latin-1"),
        "QUERY_STRING": query, "SERVER_PROTOCOL": "HTTP/" + request.http_version.decode("latin-1"),
        "REMOTE_ADDR": peer, "wsgi.url_scheme": "https" if https else "http",
    }
    for name, value in request.headers:
        key = "HTTP_" + name.decode("latin-1").upper().replace("-", "_")
        text = value.decode("latin-1")
        environ[key] = f"{environ[key]}, {text}" if key in environ else text
    return environ


def _call(app: Application, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Run the application on a worker thread: (status code, headers, body)."""
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        started[:] = [int(status.split(" ", 1)[0]), headers]

    body = b"".join(app(environ, start_response))
    return started[0], started[1], body


class ExporterHTTPServer:
    """Binds at construction (so a busy port fails before anything starts), serves on a thread.

    ``served`` is read at every connection and request: the TLS context, the credentials and
    the extra headers of the latest good web config (web_config.py reloads it).
    """

    def __init__(
        self,
        host: str,
        port: int,
        metrics: Metrics,
        is_ready: Callable[[], bool],
        status_page: Callable[[], str],
        *,
        telemetry_path: str = "/metrics",
        served: Callable[[], Served] | None = None,
    ) -> None:
        # ":10042" (the exporters' default) means every interface.
        host = host or ANY_HOST
        self._served = served or static_served(Served())
        first = self._served()
        self.tls = first.context is not None
        self.auth = first.gate is not None
        self._app = application(metrics, is_ready, status_page, telemetry_path=telemetry_path)
        self._listener = _listen(host, port)
        self._workers = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="http-worker")
        self._waiting = 0  # requests handed to the workers and not answered yet
        self._connections: set[asyncio.Task[None]] = set()
        self._loop = asyncio.new_event_loop()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive() and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._thread.join(5)
        self._workers.shutdown(wait=False, cancel_futures=True)
        self._listener.close()

    def _run(self) -> None:
        self._loop.set_exception_handler(_quiet)
        try:
            self._loop.run_until_complete(self._accept_until_stopped())
        finally:
            self._loop.close()

    async def _accept_until_stopped(self) -> None:
        self._stopped = asyncio.Event()
        accepting = asyncio.ensure_future(self._accept())
        await self._stopped.wait()
        accepting.cancel()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(accepting, *self._connections, return_exceptions=True)

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        warned = False
        while True:
            if len(self._connections) >= MAX_CONNECTIONS:
                await asyncio.sleep(ACCEPT_PAUSE_SECONDS)  # the kernel's backlog holds the next ones
                continue
            try:
                sock, address = await loop.sock_accept(self._listener)
            except OSError as error:
                if error.errno not in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.debug("accept failed: %s", error)
                    continue
                # Out of descriptors: the connection stays in the backlog; try again shortly
                # rather than spin on a listener that stays readable.
                if not warned:
                    log.warning("cannot accept a connection: %s; retrying every %.1f s", error.strerror,
                                ACCEPT_PAUSE_SECONDS)
                    warned = True
                await asyncio.sleep(ACCEPT_PAUSE_SECONDS)
                continue
            warned = False
            task = asyncio.ensure_future(self._connection(sock, str(address[0])))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _connection(self, sock: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        served = self._served()
        reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES)
        protocol = asyncio.StreamReaderProtocol(reader)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock, ssl=served.context,
                ssl_handshake_timeout=TIMEOUT_SECONDS if served.context is not None else None)
        except (OSError, ssl.SSLError, asyncio.TimeoutError, ConnectionError) as error:
            log.debug("connection from %s: no TLS handshake: %s", peer, error)
            sock.close()
            return
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        try:
            await self._requests(reader, writer, peer, https=served.context is not None)
        except (OSError, ConnectionError, asyncio.TimeoutError, ssl.SSLError) as error:
            log.debug("connection from %s: %s", peer, error)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str,
                        https: bool) -> None:
        """Serve the connection's requests one after the other until it closes or errs."""
        connection = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
        while True:
            try:
                request = await asyncio.wait_for(_next_head(reader, connection), TIMEOUT_SECONDS)
            except asyncio.TimeoutError:
                return  # as Go's ReadHeaderTimeout: closed without an answer
            except h11.RemoteProtocolError as error:
                status = error.error_status_hint
                body = b"Request header fields too large.\n" if status == 431 else b"Bad request.\n"
                await _send_raw(writer, status, body)
                return
            if request is None:
                return
            answer = refusal(request.method, request.headers)
            if answer is None:
                answer = await self._authorized(request, peer)
            if answer is not None:
                status, headers, body = answer.status, [(*pair,) for pair in answer.headers], answer.body
                headers = [("Content-Type", TEXT), ("Content-Length", str(len(body))), *headers,
                           *self._served().headers]
                if answer.close:
                    headers.append(("Connection", "close"))
            else:
                reply = await self._render(environ_of(request, peer, https))
                if reply is None:
                    status, body = 503, b"Too many requests waiting; try again.\n"
                    headers = [("Content-Type", TEXT), ("Content-Length", str(len(body)))]
                else:
                    status, headers, body = reply
            if request.method == b"HEAD":
                body = b""
            await self._send(writer, connection, status, headers, body)
            if answer is None or not answer.close:
                _end_of_request(connection)
            if connection.our_state is not h11.DONE or connection.their_state is not h11.DONE:
                return  # a close was asked for, by either side, or a body is left unread
            connection.start_next_cycle()

    async def _authorized(self, request: h11.Request, peer: str) -> Answer | None:
        """None when the request may go on; else the answer (401, 429)."""
        gate = self._served().gate
        if gate is None:
            return None
        authorization = next((value for name, value in request.headers if name == b"authorization"), None)
        decision = await gate.decide(authorization, peer)
        if decision is ALLOWED:
            return None
        if decision is LIMITED:
            return Answer(429, b"Too many attempts with unknown credentials; try again later.\n",
                          (("Retry-After", "1"),))
        # Every path asks for credentials, the probes too, as exporter-toolkit does.
        return Answer(401, b"Unauthorized\n", (("WWW-Authenticate", "Basic"),))

    async def _render(self, environ: dict[str, Any]) -> tuple[int, list[tuple[str, str]], bytes] | None:
        if self._waiting >= WORKERS + QUEUED:
            return None
        self._waiting += 1
        try:
            status, headers, body = await asyncio.get_running_loop().run_in_executor(
                self._workers, _call, self._app, environ)
        finally:
            self._waiting -= 1
        return status, [*headers, *self._served().headers], body

    @staticmethod
    async def _send(writer: asyncio.StreamWriter, connection: h11.Connection, status: int,
                    headers: list[tuple[str, str]], body: bytes) -> None:
        head = [("Server", SERVER), ("Date", formatdate(usegmt=True)), *headers]
        data = connection.send(h11.Response(status_code=status, headers=head, reason=_reason(status)))
        if body:
            data += connection.send(h11.Data(data=body))
        data += connection.send(h11.EndOfMessage())
        writer.write(data)
        await asyncio.wait_for(writer.drain(), TIMEOUT_SECONDS)  # a client that does not read is let go


async def _next_head(reader: asyncio.StreamReader, connection: h11.Connection) -> h11.Request | None:
    """The next request head, or None when the client closed; raises h11.RemoteProtocolError."""
    while True:
        event = connection.next_event()
        if isinstance(event, h11.Request):
            return event
        if isinstance(event, h11.ConnectionClosed):
            return None
        if event is h11.NEED_DATA:
            connection.receive_data(await reader.read(READ_BYTES))
            continue
        return None  # PAUSED or anything unexpected: nothing more to serve here


def _end_of_request(connection: h11.Connection) -> None:
    """Take the EndOfMessage of a request without a body (h11 holds it until asked)."""
    if connection.their_state is h11.SEND_BODY:
        event = connection.next_event()
        if not isinstance(event, h11.EndOfMessage):  # a body after all: never read, the connection ends
            return


async def _send_raw(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    """An answer to a head that could not be parsed (h11 refuses to send on a broken connection)."""
    reason = _reason(status).decode()
    writer.write(f"HTTP/1.1 {status} {reason}\r\nServer: {SERVER}\r\nContent-Type: {TEXT}\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    with contextlib.suppress(OSError, ConnectionError, asyncio.TimeoutError):
        await asyncio.wait_for(writer.drain(), TIMEOUT_SECONDS)


def _reason(status: int) -> bytes:
    try:
        return http.HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


def _listen(host: str, port: int) -> socket.socket:
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart binds while old ones linger
        listener.bind((host, port))
        listener.listen(BACKLOG)
    except (OSError, OverflowError) as error:
        listener.close()
        reason = getattr(error, "strerror", None) or error
        raise ListenError(f"cannot listen on {address}: {reason}") from None
    listener.setblocking(False)
    return listener


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # Dropped connections, failed handshakes and plain HTTP on the TLS port are the clients'
    # business: debug, never a traceback on stderr.
    log.debug("http: %s", context.get("message"), exc_info=context.get("exception"))
