"""``serve``: wire follow -> parse -> state -> export together and run until signalled."""

from __future__ import annotations

import logging
import resource
import signal
import threading
from pathlib import Path

from exporter import checkpoint, native
from exporter.export import text_format
from exporter.export.http import ExporterHTTPServer
from exporter.export.otlp import OtlpPush
from exporter.export.status_page import render_status_page
from exporter.follow import Follower
from exporter.follow.processes import ProcessWatcher
from exporter.parse.formats import selection
from exporter.pipeline import Pipeline
from exporter.settings import Settings
from exporter.simulate.demo import DemoRun
from exporter.state import TrainingState

log = logging.getLogger(__name__)


class Exporter:
    """One running exporter: state, follower and HTTP server."""

    def __init__(self, settings: Settings) -> None:
        self.demo = DemoRun() if settings.demo else None
        if self.demo is not None:
            settings = settings.model_copy(update={"log_dir": [*settings.log_dir, self.demo.log_dir]})
        self.settings = settings
        self.state = TrainingState(settings.detector_config)
        directories = [str(directory) for directory in settings.log_dir]
        formats = selection(((override.path_pattern, override.format) for override in settings.formats),
                            ((custom.name, custom.pattern, custom.contains) for custom in settings.custom_formats))
        state_file = checkpoint.usable_state_file(_state_file(settings))
        positions = checkpoint.resume(state_file, self.state) if state_file else {}
        pipeline = Pipeline(self.state, settings.node, settings.run_for_directory, formats=formats,
                            rank_offset=settings.rank_offset, positions=positions)
        self.checkpointer = (
            checkpoint.Checkpointer(state_file, pipeline, settings.checkpoint_interval) if state_file else None
        )
        self.follower = Follower(
            directories,
            pipeline,
            max_line_bytes=settings.max_line_bytes,
            poll_interval=settings.poll_interval,
            rescan_interval=settings.rescan_interval,
            idle_flush_seconds=settings.idle_flush_seconds,
        )
        host, port = settings.listen_host_port
        self.http = ExporterHTTPServer(
            host,
            port,
            lambda: text_format.render(self.state),
            is_ready=lambda: self.follower.ready,
            status_page=lambda: render_status_page(self.state, self.follower.ready),
        )
        self.otlp = OtlpPush(self.state, settings) if settings.otlp_metrics_url else None
        self.processes = None
        if settings.process_pattern:
            self.processes = ProcessWatcher(settings.process_pattern, self._process_checked,
                                            settings.process_check_interval)

    def _process_checked(self, up: bool) -> None:
        # One trainer per pod: its liveness holds for every run this exporter follows.
        runs = {self.settings.run_for_directory(str(directory)) for directory in self.settings.log_dir}
        with self.state.lock:
            for run in runs:
                self.state.process_up[(run, self.settings.node)] = up

    def start(self) -> None:
        self.http.start()
        self.follower.start()
        if self.otlp is not None:
            self.otlp.start()
        if self.processes is not None:
            self.processes.start()
        if self.demo is not None:
            self.demo.start()
            log.info("demo: writing a simulated run to %s", self.demo.log_dir)
        if self.checkpointer is not None:
            self.checkpointer.start()
        log.info("listening on %s, following %s", self.settings.web_listen_address,
                 ", ".join(str(d) for d in self.settings.log_dir))
        _report_speedups()

    def stop(self) -> None:
        if self.demo is not None:
            self.demo.stop()
        if self.processes is not None:
            self.processes.stop()
        self.follower.stop()
        if self.checkpointer is not None:
            self.checkpointer.stop()  # after the follower: the last checkpoint has every line read
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


def _report_speedups() -> None:
    # Without the C speedups (installed where no compiler was) everything works, only
    # catch-up is several times slower: say so once rather than leave it to be guessed.
    missing = [kernel for kernel, built in native.available().items() if not built]
    if missing:
        log.warning("native kernels not built (%s): using their Python twins, catch-up is several times "
                    "slower; reinstall with a C compiler (gcc) present", ", ".join(missing))
    else:
        log.info("native kernels: scan %s, step fields, detectors", "with AVX2" if native.scan_simd() else "byte-wise")


def _state_file(settings: Settings) -> Path | None:
    path = settings.checkpoint_file()
    if path is None:
        log.warning("the default state file would be inside a log directory: running without checkpoints; "
                    "give --state-file PATH outside the log directories")
    return path


def _raise_file_limit() -> None:
    # One descriptor per followed file: hundreds of ranks exceed the usual soft limit of 1024.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):
        log.warning("could not raise the open file limit from %d: at most that many logs can be followed", soft)
