"""``serve``: wire follow -> parse -> state -> export together and run until signalled."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import resource
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from exporter import checkpoint, native
from exporter.export import text_format
from exporter.export.collector import WebConfigCollector, runtime_registry
from exporter.export.families import STATE_ONLY, ScrapeTime
from exporter.export.http import ExporterHTTPServer, ListenError
from exporter.export.otlp import OtlpConfig, metrics_url, resource_attributes
from exporter.export.process_liveness import ProcessLiveness
from exporter.export.status_page import render_status_page
from exporter.export.web_config import WebConfigError, WebConfigReloader
from exporter.follow import Follower, run_label
from exporter.follow.discover import DEFAULT_INCLUDE, DirectoryRules
from exporter.follow.stream import STDIN, SourceError, StreamFollower
from exporter.parse.fields import label_value
from exporter.parse.formats import selection
from exporter.pipeline import Pipeline
from exporter.settings import LogDirectory, Settings
from exporter.simulate.demo import DemoRun
from exporter.state import TrainingState

if TYPE_CHECKING:
    from collections.abc import Callable

    from exporter.export.otlp_push import OtlpPush

log = logging.getLogger(__name__)

# How long a scrape waits for the follow thread to read what was written before it: reading a few
# batches takes milliseconds; a long backlog (a restart's catch-up) must not hold scrapes up.
SCRAPE_CATCH_UP_SECONDS = 0.25


def _run_label_value(directory: str, run: str | None) -> str:
    """The run label of a log directory, fit to be a label (a directory's name need not be UTF-8)."""
    return label_value(run_label(directory, run))


class Exporter:
    """One running exporter: state, follower and HTTP server."""

    def __init__(self, settings: Settings) -> None:
        # The server first: a bad web config or a busy port ends the start before anything
        # else is set up (the demo's directory, the checkpoint). It serves once started.
        self.web_config = WebConfigReloader(settings.web_config_file) if settings.web_config_file else None
        self.http = _http_server(settings, self, self.web_config)
        self.demo = DemoRun() if settings.demo else None
        if self.demo is not None:
            demo = LogDirectory.model_validate({"path": self.demo.log_dir})
            settings = settings.model_copy(update={"log_dir": [*settings.log_dir, demo]})
        self.settings = settings
        self.state = TrainingState(settings.detector_config)
        directories = [str(directory) for directory in settings.log_dir]
        run_of = functools.partial(_run_label_value, run=settings.run)
        formats = selection(((override.path_pattern, override.format) for override in settings.formats),
                            ((custom.name, custom.pattern, custom.contains) for custom in settings.custom_formats))
        state_file = checkpoint.usable_state_file(_state_file(settings))
        positions = checkpoint.resume(state_file, self.state) if state_file else {}
        pipeline = Pipeline(self.state, label_value(settings.node_label), run_of, formats=formats,
                            rank_offset=settings.rank_offset, positions=positions)
        self.checkpointer = (
            checkpoint.Checkpointer(state_file, pipeline, settings.checkpoint_interval) if state_file else None
        )
        self.follower = Follower(
            directories,
            pipeline,
            files=[path for path in settings.log_file if path != STDIN],
            max_line_bytes=settings.max_line_bytes,
            poll_interval=settings.poll_interval,
            rescan_interval=settings.rescan_interval,
            idle_flush_seconds=settings.idle_flush_seconds,
            rules={str(directory): _rules(directory, settings) for directory in settings.log_dir},
            max_open_files=_file_budget(open_file_limit()), open_file_limit=open_file_limit(),
            plog_ranks=settings.plog_ranks,
        )
        # --log-file -: standard input through the same pipeline (kubectl logs -f pod | trainlog-exporter ...).
        self.stdin = StreamFollower(pipeline, max_line_bytes=settings.max_line_bytes) if STDIN in settings.log_file \
            else None
        scrape_time = dataclasses.replace(_scrape_time(settings, [run_of(directory) for directory in directories]),
                                          file_lag_bytes=functools.partial(_file_lags, self.follower),
                                          files_unfollowed=self.follower.unfollowed)
        otlp = otlp_config(settings, socket.gethostname())
        self.otlp = _otlp_push(self.state, otlp, scrape_time) if otlp is not None else None
        if self.otlp is not None:
            scrape_time = dataclasses.replace(scrape_time, otlp_export_failures=self.otlp.failed_exports)
        self.scrape_time = scrape_time
        self.runtime = runtime_registry()
        if self.web_config is not None:
            self.runtime.register(WebConfigCollector(self.web_config))

    def metrics(self, openmetrics: bool) -> bytes:
        """/metrics: the walk's families and the process's own, after every line written so far."""
        self.follower.catch_up(SCRAPE_CATCH_UP_SECONDS)
        with self.state.lock:
            self.state.settle(time.time())  # a hang the silence shows by now
        return text_format.render(self.state, self.scrape_time, openmetrics=openmetrics, runtime=self.runtime)

    def ready(self) -> bool:
        return self.follower.ready

    def status_page(self) -> str:
        self.follower.catch_up(SCRAPE_CATCH_UP_SECONDS)
        return render_status_page(self.state, self.follower.ready, runbook_url=self.settings.runbook_url)

    def start(self) -> None:
        self.http.start()
        self.follower.start()
        if self.stdin is not None:
            self.stdin.start()
        if self.otlp is not None:
            self.otlp.start()
        if self.demo is not None:
            self.demo.start()
            log.info("demo: writing a simulated run to %s", self.demo.log_dir)
        if self.checkpointer is not None:
            self.checkpointer.start()
        log.info("listening on %s (%s%s), following %s", self.settings.web_listen_address,
                 "TLS" if self.http.tls else "plain HTTP", ", basic auth" if self.http.auth else "",
                 ", ".join([*(str(d) for d in self.settings.log_dir), *self.settings.log_file]))
        _report_speedups()

    def stop(self) -> dict[str, float]:
        """Stop every part in order; the seconds each took."""
        parts: list[tuple[str, Callable[[], object] | None]] = [
            ("demo", self.demo.stop if self.demo is not None else None),
            ("follower", self.follower.stop),
            # After the follower: the last checkpoint has every line read, the last push carries it.
            ("checkpoint", self.checkpointer.stop if self.checkpointer is not None else None),
            ("otlp", self.otlp.stop if self.otlp is not None else None),
            ("http", self.http.stop),
        ]
        took = {}
        for name, stop in parts:
            if stop is not None:
                started = time.monotonic()
                stop()
                took[name] = time.monotonic() - started
        return took


def serve(settings: Settings) -> int:
    """Run until SIGTERM or SIGINT; returns the exit status."""
    _raise_file_limit()
    exporter: Exporter | None = None
    stopping = threading.Event()
    try:
        exporter = Exporter(settings)
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stopping.set())
        exporter.start()
    except (WebConfigError, ListenError, checkpoint.StateFileError, SourceError) as error:
        return _start_failed(str(error), 2, exporter)
    except Exception as error:  # noqa: BLE001 - whatever it is, the start ends here, in one line
        return _start_failed(f"cannot start: {type(error).__name__}: {error}", 1, exporter)
    stopping.wait()
    log.info("shutting down")
    _report_slow_stop(exporter.stop())
    return 0


SLOW_STOP_SECONDS = 10.0  # a third of a pod's default grace period, after which the kubelet kills


def _report_slow_stop(took: dict[str, float]) -> None:
    if sum(took.values()) > SLOW_STOP_SECONDS:
        log.warning("shutting down took %.1f s: %s", sum(took.values()),
                    ", ".join(f"{name} {seconds:.1f} s" for name, seconds in took.items()))


STOP_SECONDS = 5.0  # a start that failed stops what it started within this long, then the process exits


def _start_failed(message: str, status: int, exporter: Exporter | None) -> int:
    """One line on stderr; what was started is stopped; the process ends even if a thread would keep it."""
    print(f"trainlog-exporter: {message}", file=sys.stderr, flush=True)
    if exporter is not None:
        stopper = threading.Thread(target=_stop_quietly, args=(exporter,), name="stop", daemon=True)
        stopper.start()
        stopper.join(STOP_SECONDS)
    if any(thread.is_alive() and not thread.daemon and thread is not threading.current_thread()
           for thread in threading.enumerate()):
        # A non-daemon thread (a library's) would keep the process alive neither serving nor exiting.
        logging.shutdown()
        os._exit(status)
    return status


def _stop_quietly(exporter: Exporter) -> None:
    try:
        exporter.stop()
    except Exception as error:  # noqa: BLE001 - half-started parts may fail to stop; the exit follows anyway
        log.debug("stopping after a failed start: %s", error)


def _http_server(settings: Settings, exporter: Exporter, web_config: WebConfigReloader | None) -> ExporterHTTPServer:
    """The bound (not yet serving) server; raises ListenError."""
    host, port = settings.listen_host_port
    return ExporterHTTPServer(host, port, exporter.metrics, exporter.ready, exporter.status_page,
                              telemetry_path=settings.web_telemetry_path,
                              served=web_config.served if web_config is not None else None)


def _rules(directory: LogDirectory, settings: Settings) -> DirectoryRules:
    """Which files of a log directory are followed: its own patterns and symlink policy, else the defaults."""
    symlinks = directory.follow_symlinks_outside
    return DirectoryRules(tuple(directory.include or DEFAULT_INCLUDE), tuple(directory.exclude),
                          settings.follow_symlinks_outside if symlinks is None else symlinks)


def _file_lags(follower: Follower) -> dict[str, int]:
    """trainlog_file_lag_bytes: each followed path, made a label value, with the bytes not read yet."""
    return {label_value(path): lag for path, lag in follower.lag_bytes().items()}


def _report_speedups() -> None:
    # Without the C speedups (installed where no compiler was) everything works, only
    # catch-up is several times slower: say so once rather than leave it to be guessed.
    missing = [kernel for kernel, built in native.available().items() if not built]
    if missing:
        log.warning("native kernels not built (%s): using their Python twins, catch-up is several times "
                    "slower; reinstall with a C compiler (gcc) present", ", ".join(missing))
    else:
        log.info("native kernels: scan %s, step fields, detectors", "with AVX2" if native.scan_simd() else "byte-wise")


def _scrape_time(settings: Settings, runs: list[str]) -> ScrapeTime:
    """What /metrics and the push read outside the state: with --process-pattern, process
    liveness, for every (run, node) followed (one trainer per pod)."""
    if not settings.process_pattern:
        return STATE_ONLY
    liveness = ProcessLiveness(settings.process_pattern, [(run, label_value(settings.node_label)) for run in runs],
                               max_age=settings.process_check_interval)
    return ScrapeTime(process_up=liveness.process_up)


def _otlp_push(state: TrainingState, config: OtlpConfig, scrape_time: ScrapeTime) -> OtlpPush:
    # Imported only when a push is configured: the SDK and protobuf are about 6 MB of a sidecar's memory.
    from exporter.export.otlp_push import OtlpPush

    return OtlpPush(state, config, scrape_time)


def otlp_config(settings: Settings, host_name: str) -> OtlpConfig | None:
    """The OTLP push's configuration from the settings, or None when no endpoint is set."""
    protocol = settings.otel_exporter_otlp_protocol
    endpoint = metrics_url(settings.otlp_endpoint, settings.otel_exporter_otlp_metrics_endpoint,
                           settings.otel_exporter_otlp_endpoint, protocol)
    if endpoint is None:
        return None
    attributes = resource_attributes(host_name, service_name=settings.otel_service_name, pod_name=settings.pod_name,
                                     pod_namespace=settings.pod_namespace, node_name=settings.node_name,
                                     overrides=settings.otel_resource_attributes)
    # The OTEL_* variables are in milliseconds, as the specification says.
    return OtlpConfig(endpoint, settings.otel_exporter_otlp_headers, protocol=protocol,
                      timeout_seconds=settings.otel_exporter_otlp_timeout / 1000,
                      interval_seconds=settings.otel_metric_export_interval / 1000, resource_attributes=attributes)


def _state_file(settings: Settings) -> Path | None:
    """--state-file, else the checkpoint module's default in the state home; with --demo, none."""
    if settings.state_file is not None:
        return settings.state_file
    if settings.demo:
        # The demo's run lives in a new temporary directory each time: a checkpoint named
        # after it would be a new file per start, never read again.
        log.info("demo: no checkpoint without --state-file")
        return None
    # Named after everything followed: two exporters on one host following different files never share one.
    followed = [*settings.log_dir_paths, *(Path(file) for file in settings.log_file if file != STDIN)]
    path = checkpoint.default_state_file(followed, settings.state_home)
    if path is None:
        log.warning("the default state file would be inside a log directory: running without checkpoints; "
                    "give --state-file PATH outside the log directories")
    return path


# Descriptors kept out of the followed files' reach: the listener, probe and scrape connections, the
# inotify instance, the checkpoint, the OTLP push, the status page. The follower takes the rest.
FILE_RESERVE = 64


def open_file_limit() -> int | None:
    """The soft open-file limit now (None: unlimited)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _file_budget(limit: int | None) -> int | None:
    """Files the follower may hold open: the limit less the reserve, at least one."""
    return None if limit is None else max(1, limit - FILE_RESERVE)


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
