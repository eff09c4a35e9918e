"""The peer of the scrapers benchmark: prometheus-client's own ``start_http_server`` serving the
same families (the exporter's private registry over the same logs, read once).

    python -m benchmarks.client_python_peer LOG_DIR PORT
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from prometheus_client import start_http_server

from exporter.export.collector import exporter_registry
from tests.support.runs import read_once


def main() -> None:
    log_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    server, thread = start_http_server(port, addr="127.0.0.1", registry=exporter_registry(read_once(log_dir)))
    threading.Event().wait()  # until killed
    server.shutdown()
    thread.join()


if __name__ == "__main__":
    main()
