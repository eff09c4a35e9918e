"""``serve``: wire follow -> parse -> state -> export together and run until signalled."""

from __future__ import annotations

import logging
import resource
import signal
import threading

from prometheus_client.registry import CollectorRegistry

from exporter.export.collector import TrainingCollector
from exporter.export.http import ExporterHTTPServer
from exporter.export.otlp import OtlpPush
from exporter.export.status_page import render_status_page
from exporter.follow import Follower
from exporter.parse.formats import selection
from exporter.pipeline import Pipeline
from exporter.settings import Settings
from exporter.state import TrainingState

log = logging.getLogger(__name__)


class Exporter:
    """One running exporter: state, follower and HTTP server."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.state = TrainingState()
        directories = [str(directory) for directory in settings.log_dir]
        formats = selection(((override.path_pattern, override.format) for override in settings.formats),
                            ((custom.name, custom.pattern, custom.contains) for custom in settings.custom_formats))
        pipeline = Pipeline(self.state, settings.node, settings.run_for_directory, formats=formats,
                            rank_offset=settings.rank_offset)
        self.follower = Follower(
            directories,
            pipeline,
            max_line_bytes=settings.max_line_bytes,
            poll_interval=settings.poll_interval,
            rescan_interval=settings.rescan_interval,
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(TrainingCollector(self.state))
        host, port = settings.listen_host_port
        self.http = ExporterHTTPServer(
            host,
            port,
            self.registry,
            is_ready=lambda: self.follower.ready,
            status_page=lambda: render_status_page(self.state, self.follower.ready),
        )
        self.otlp = OtlpPush(self.state, settings) if settings.otlp_metrics_url else None

    def start(self) -> None:
        self.http.start()
        self.follower.start()
        if self.otlp is not None:
            self.otlp.start()
        log.info("listening on %s, following %s", self.settings.web_listen_address,
                 ", ".join(str(d) for d in self.settings.log_dir))

    def stop(self) -> None:
        self.follower.stop()
        if self.otlp is not None:
            self.otlp.stop()  # after the follower: the last push carries everything read
        self.http.stop()


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT; returns the exit status."""
    _raise_file_limit()
    exporter = Exporter(settings)
    stopping = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stopping.set())
    exporter.start()
    stopping.wait()
    log.info("shutting down")
    exporter.stop()
    return 0


def _raise_file_limit() -> None:
    # One descriptor per followed file: hundreds of ranks exceed the usual soft limit of 1024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))
        except (ValueError, OSError):
            log.debug("could not raise the open file limit from %d", soft)
