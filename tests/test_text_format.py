"""The fast /metrics renderer prints exactly what prometheus-client prints for the collector."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from unittest import mock

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics_exposition

from exporter.export import families
from exporter.export.collector import TrainingCollector
from exporter.export.text_format import render
from exporter.follow import Follower
from exporter.parse.records import ErrorEvent, RunInfo, SchedulerEvent, StepLine
from exporter.pipeline import Pipeline
from exporter.state import TrainingState
from tests.support.records import in_batches

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "deepseek-moe-8rank" / "msrun_log"


def _registry(state: TrainingState) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state))
    return registry


def _reference(state: TrainingState) -> bytes:
    return generate_latest(_registry(state))


def test_the_example_run_renders_like_prometheus_client():
    state = TrainingState()
    Follower([str(EXAMPLE)], Pipeline(state, "node-0", lambda _: "deepseek-moe-8rank", clock=lambda: 1.7e9)).run_once()
    assert len(state.series) == 9
    assert render(state) == _reference(state)


def test_awkward_values_and_labels_render_like_prometheus_client():
    state = TrainingState()
    with state.lock:
        odd = ("run \"quoted\" \\ back", "node\nnewline", "3")
        plain = ("run", "node", "12")
        for key in (odd, plain):
            state.register(key, {"file": 'worker "x".log', "role": "worker"}, 1.7e9)
        state.ingest(odd, 10, [
            RunInfo({"framework": "mindformers", "odd-key": "v\\1", "rank": "ignored: a label already"}),
            *in_batches(StepLine(12_345_678, {"total_steps": 10**9, "loss": math.nan, "learning_rate": 1e-07,
                                              "grad_norm": math.inf, "step_time_seconds": 0.85,
                                              "throughput": 1234567.891},
                                 named={"mtp_1_loss": -math.inf, "loss_scale": 65536.0})),
            ErrorEvent("nccl", {"message": "NCCL error"}),
        ], log_timestamp=1.7e9 + 0.5, now=1.7e9 + 1)
        state.ingest(plain, 3, [], log_timestamp=None, now=1.7e9)
        state.stats.lines_unparsed_total = 7 + 3
        state.stats.lines_parsed_total.update({"mindformers_pynative": 5, 'odd "format"\\': 2})
        state.stats.bytes_read_total = 10**12
    assert render(state) == _reference(state)


def test_an_empty_state_renders_every_family_header():
    state = TrainingState()
    assert render(state) == _reference(state)
    assert b"# TYPE training_step gauge" in render(state)


def test_negative_zero_and_zero_gauges_keep_their_own_text_in_one_scrape():
    # The renderer formats each value once per scrape; -0.0 == 0.0 must not make them share a text.
    state = TrainingState()
    with state.lock:
        for rank, loss in (("0", 0.0), ("1", -0.0), ("2", 0.0)):
            key = ("run", "node", rank)
            state.register(key, {"file": f"worker_{rank}.log", "role": "worker"}, 1.7e9)
            state.ingest(key, 1, in_batches(StepLine(5, {"loss": loss})), log_timestamp=1.7e9, now=1.7e9)
    body = render(state)
    assert body == _reference(state)
    assert b'training_loss{node="node",rank="1",run="run"} -0.0\n' in body
    assert b'training_loss{node="node",rank="2",run="run"} 0.0\n' in body


def _step(state: TrainingState, key: tuple[str, str, str], step: int, values: dict[str, float],
          named: dict[str, float] | None = None, records: list | None = None) -> None:
    with state.lock:
        state.ingest(key, 1, [*in_batches(StepLine(step, values, named=named or {})), *(records or [])],
                     log_timestamp=1.7e9 + step, now=1.7e9 + step)


def test_each_scrape_prints_what_changed_since_the_one_before():
    # The renderer keeps each series' lines while its value stays the same: every change must show,
    # -0.0 after 0.0 included, and a series left alone keeps its text.
    state = TrainingState()
    keys = [("run", "node", str(rank)) for rank in range(3)]
    with state.lock:
        for key in keys:
            state.register(key, {"file": f"worker_{key[2]}.log", "role": "worker"}, 1.7e9)
    for key in keys:
        _step(state, key, 1, {"loss": 0.0, "learning_rate": 1e-4}, named={"mtp_1_loss": 0.0, "loss_scale": 1.0})
    first = render(state)
    assert first == _reference(state)
    assert render(state) == first  # nothing changed: the same bytes
    _step(state, keys[1], 2, {"loss": -0.0, "learning_rate": 1e-4}, named={"mtp_1_loss": -0.0, "moe_loss": 0.5},
          records=[ErrorEvent("oom", {}), RunInfo({"framework": "mindformers"})])
    second = render(state)
    assert second == _reference(state)
    assert b'training_loss{node="node",rank="1",run="run"} -0.0\n' in second
    assert b'training_aux_loss{name="mtp_1_loss",node="node",rank="1",run="run"} -0.0\n' in second
    assert b'training_aux_loss{name="moe_loss",node="node",rank="1",run="run"} 0.5\n' in second
    assert b'training_errors_total{kind="oom",node="node",rank="1",run="run"} 1.0\n' in second
    assert b'framework="mindformers"' in second
    assert b'training_loss{node="node",rank="0",run="run"} 0.0\n' in second
    assert render(state, openmetrics=True) == openmetrics_exposition.generate_latest(_registry(state))


def test_states_with_the_same_series_render_their_own_values():
    # The kept lines hang on a series' labels, which every state with that series shares.
    states = [TrainingState(), TrainingState()]
    key = ("run", "node", "0")
    for loss, state in zip((1.5, 2.5), states, strict=True):
        with state.lock:
            state.register(key, {"file": "worker_0.log", "role": "worker"}, 1.7e9)
        _step(state, key, 1, {"loss": loss})
    for _ in range(2):
        for state in states:
            assert render(state) == _reference(state)


def _as_new(state: TrainingState) -> TrainingState:
    """The same values in new RankStates: what a render of them prints was read now, not kept."""
    fresh = TrainingState()
    fresh.series = copy.deepcopy(state.series)
    fresh.stats = copy.deepcopy(state.stats)
    fresh.causes = copy.deepcopy(state.causes)  # the runs' root causes (training_incident_info)
    return fresh


def _render_afresh(state: TrainingState) -> bytes:
    """A render of the same values with nothing kept from the renders before: new RankStates, and the
    walk's labels and info families made again."""
    with mock.patch.dict(families._labels_by_maker, clear=True), mock.patch.dict(families._info_labels, clear=True):
        return render(_as_new(state))


def test_every_change_the_store_makes_shows_in_the_next_scrape():
    # A rank's values are read again only after the store changed its version: each way the store changes a
    # rank must show, as a render of the same values in new RankStates (nothing kept for them) shows it.
    state = TrainingState()
    key, scheduler = ("run", "node", "0"), ("run", "node", "scheduler")
    def locked(change):
        def apply():
            with state.lock:
                change()
        return apply

    changes = [
        locked(lambda: state.register(key, {"file": "worker_0.log", "role": "worker"}, 1.7e9)),
        locked(lambda: state.register(scheduler, {"file": "scheduler.log", "role": "scheduler"}, None)),
        lambda: _step(state, key, 1, {"loss": 2.0, "step_time_seconds": 0.5}, named={"mtp_1_loss": 1.0}),
        lambda: _step(state, key, 2, {"loss": -0.0, "step_time_seconds": 0.5}, named={"mtp_1_loss": 0.5, "mfu": 0.4}),
        locked(lambda: state.ingest(key, 3, [], log_timestamp=1.7e9 + 9, now=1.7e9 + 9)),
        locked(lambda: state.ingest(key, 1, [ErrorEvent("oom", {})], log_timestamp=None, now=1.7e9 + 10)),
        locked(lambda: state.ingest(key, 1, [RunInfo({"framework": "mindformers"})], log_timestamp=None,
                                    now=1.7e9 + 11)),
        locked(lambda: state.register(key, {"file": "worker_0.log", "role": "worker", "format": "mine"}, None)),
        locked(lambda: state.register(key, {"file": "worker_0.log", "role": "worker"}, 1.7e9 + 12)),  # a new mtime
        lambda: _step(state, key, 1, {"loss": 9.0}),  # the step went back: a restart
        locked(lambda: state.ingest(scheduler, 1, [SchedulerEvent("node_timeout", "7")], log_timestamp=None,
                                    now=1.7e9)),
    ]
    for change in changes:
        render(state)  # what it read of each rank is kept
        change()
        assert render(state) == _render_afresh(state)
