"""Loopback OTLP/HTTP receivers for the tests: one that decodes, one that hangs."""

from __future__ import annotations

import gzip
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


class OtlpReceiver:
    """A real HTTP server on 127.0.0.1:0 that decodes every POST /v1/metrics it gets."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], ExportMetricsServiceRequest]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def received(self) -> list[tuple[dict[str, str], ExportMetricsServiceRequest]]:
        with self._lock:
            return list(self.requests)

    def _handler_class(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/metrics":
                    self.send_error(404)
                    return
                request = ExportMetricsServiceRequest.FromString(body)
                with receiver._lock:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, request))
                answer = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args) -> None:
                pass

        return Handler

    def __enter__(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._server.shutdown()
        self._server.server_close()


class HangingReceiver:
    """Accepts connections and never answers: a collector stuck behind a full queue."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._connections: list[socket.socket] = []
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    @property
    def connections(self) -> int:
        return len(self._connections)

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(connection)
            self._accepted(connection)

    def _accepted(self, connection: socket.socket) -> None:
        """What happens to a connection once accepted: here, nothing (it hangs)."""

    def __enter__(self) -> HangingReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopped.set()
        self._listener.close()
        for connection in self._connections:
            connection.close()


def refused_url() -> str:
    """A loopback URL where nothing listens (the port was just released)."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class GrpcOtlpReceiver:
    """A real gRPC server on 127.0.0.1 implementing OTLP's MetricsService (opentelemetry-proto's stubs)."""

    def __init__(self) -> None:
        from concurrent import futures

        import grpc
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc

        receiver = self
        self.requests: list[tuple[dict[str, str], ExportMetricsServiceRequest]] = []
        self._lock = threading.Lock()

        class Service(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):  # noqa: N802 - the generated service's naming
                with receiver._lock:
                    receiver.requests.append((dict(context.invocation_metadata()), request))
                return ExportMetricsServiceResponse()

        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Service(), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def received(self) -> list[tuple[dict[str, str], ExportMetricsServiceRequest]]:
        with self._lock:
            return list(self.requests)

    def __enter__(self) -> GrpcOtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.stop(grace=None)


class TricklingReceiver(HangingReceiver):
    """Reads the request, then answers one byte a second: every read succeeds, the answer never ends."""

    ANSWER = b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100000\r\n\r\n" + b"\0" * 1000

    def _accepted(self, connection: socket.socket) -> None:
        threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        connection.settimeout(1)
        try:
            connection.recv(1 << 20)
            for byte in self.ANSWER:
                if self._stopped.wait(1):
                    return
                connection.sendall(bytes([byte]))
        except OSError:
            return
