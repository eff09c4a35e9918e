"""The one walk over the metric table, as its three writers see it."""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest

from exporter import __version__
from exporter.export.collector import TrainingCollector
from exporter.export.families import ScrapeTime, walk
from exporter.export.metrics_table import (
    BUILD_INFO,
    COUNTER,
    EXPORTER,
    FILE_LAG,
    FILES_UNFOLLOWED,
    METRICS,
    OTLP_EXPORT_FAILURES,
    PROCESS_UP,
    MetricSpec,
)
from exporter.export.text_format import render
from exporter.parse.records import StepLine
from exporter.state import ExporterStats, TrainingState
from tests.support.records import in_batches

KEY = ("run", "node-0", "3")


def values(names: tuple[str, ...], label_values: tuple[str, ...]) -> dict[str, str]:
    return dict(zip(names, label_values, strict=True))


def reference(state: TrainingState, scrape_time: ScrapeTime) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state, scrape_time))
    return generate_latest(registry)


def test_every_family_in_table_order_and_the_outside_ones_read_at_walk_time():
    state = TrainingState()
    with state.lock:
        state.register(KEY, {"file": "worker_3.log", "role": "worker"}, 1.7e9)
        state.ingest(KEY, 1, in_batches(StepLine(7, {"loss": 2.5})), log_timestamp=None, now=1.7e9)
    failures = iter(range(1, 100))
    scrape_time = ScrapeTime(otlp_export_failures=lambda: next(failures),
                             process_up=lambda: {("run", "node-0"): True, ("other", "node-0"): False},
                             file_lag_bytes=lambda: {"/logs/worker_3.log": 120, "/logs/worker_1.log": 0},
                             files_unfollowed=lambda: 236)
    families = walk(state, values, scrape_time)
    assert [family.spec for family in families] == list(METRICS)
    by_name = {family.spec.name: family for family in families}
    assert by_name["training_step"].samples == [({"run": "run", "node": "node-0", "rank": "3"}, "", 7)]
    assert by_name[OTLP_EXPORT_FAILURES.name].samples == [({}, "", 1)]
    assert by_name[PROCESS_UP.name].samples == [({"run": "other", "node": "node-0"}, "", 0),
                                               ({"run": "run", "node": "node-0"}, "", 1)]
    assert by_name[FILE_LAG.name].samples == [({}, "/logs/worker_1.log", 0), ({}, "/logs/worker_3.log", 120)]
    assert by_name[FILES_UNFOLLOWED.name].samples == [({}, "", 236)]
    assert walk(state, values, scrape_time, [OTLP_EXPORT_FAILURES])[0].samples == [({}, "", 2)]  # asked again
    fixed = ScrapeTime(otlp_export_failures=lambda: 3, process_up=scrape_time.process_up,
                       file_lag_bytes=scrape_time.file_lag_bytes, files_unfollowed=scrape_time.files_unfollowed)
    text = render(state, fixed)
    assert text == reference(state, fixed)
    assert b'trainlog_otlp_export_failures_total 3.0\n' in text
    assert (b'training_process_up{node="node-0",run="other"} 0.0\n'
            b'training_process_up{node="node-0",run="run"} 1.0\n') in text
    assert b'trainlog_file_lag_bytes{file="/logs/worker_3.log"} 120.0\n' in text
    assert b'trainlog_files_unfollowed 236.0\n' in text


def test_without_readers_the_failures_are_0_and_there_is_no_process_or_lag_family():
    families = walk(TrainingState(), values)
    assert [family.spec for family in families] == [spec for spec in METRICS
                                                             if spec not in (PROCESS_UP, FILE_LAG, FILES_UNFOLLOWED)]
    by_name = {family.spec.name: family for family in families}
    assert by_name[OTLP_EXPORT_FAILURES.name].samples == [({}, "", 0)]


def test_build_info_is_one_series_of_1_with_the_version_revision_and_python():
    pinned = ScrapeTime(build_info=lambda: {"version": "1.2.3", "revision": "abc", "python": "3.11.7"})
    (family,) = walk(TrainingState(), values, pinned, [BUILD_INFO])
    assert family.samples == [({"python": "3.11.7", "revision": "abc", "version": "1.2.3"}, "", 1)]
    (real,) = walk(TrainingState(), values, specs=[BUILD_INFO])
    labels = real.samples[0][0]
    assert labels["version"] == __version__
    assert labels["python"] == platform.python_version()
    assert re.fullmatch(r"[0-9a-f]{12}|unknown", labels["revision"])


@dataclass
class StatsWithFormats(ExporterStats):
    """An ExporterStats with a counter per format: a dict-valued attribute and a label."""

    lines_parsed_by_format: dict[str, int] = field(default_factory=lambda: {"mindformers": 10, "megatron": 2})


def test_a_labelled_exporter_counter_is_one_spec_for_every_writer():
    spec = MetricSpec("trainlog_lines_parsed", "Lines parsed, by format.", "lines_parsed_by_format", "{line}", "format",
                      type=COUNTER, source=EXPORTER)
    state = TrainingState()
    state.stats = StatsWithFormats()
    (family,) = walk(state, values, specs=[spec])
    assert family.samples == [({}, "mindformers", 10), ({}, "megatron", 2)]  # in creation order
