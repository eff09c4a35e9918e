"""The fast /metrics renderer prints exactly what prometheus-client prints for the collector."""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from exporter.export.collector import TrainingCollector
from exporter.export.text_format import render
from exporter.follow import Follower
from exporter.parse.records import ErrorEvent, RunInfo, StepLine
from exporter.pipeline import Pipeline
from exporter.state import TrainingState
from tests.support.records import in_batches

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "deepseek-moe-8rank" / "msrun_log"


def _reference(state: TrainingState) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TrainingCollector(state))
    return generate_latest(registry)


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
