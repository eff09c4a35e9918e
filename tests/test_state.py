from __future__ import annotations

import math

from exporter.parse import ErrorEvent, SchedulerEvent, StepRecord
from exporter.state import ANOMALY_KINDS, ERROR_KINDS, Limits, TrainingState

KEY = ("run", "node-0", "3")


def ingest(state: TrainingState, *records, key=KEY) -> None:
    with state.lock:
        state.ingest(key, len(records), list(records), log_timestamp=None, now=1.0)


def test_counters_exist_at_zero_once_a_file_is_registered():
    state = TrainingState()
    with state.lock:
        state.register(KEY, {"file": "worker_3.log", "role": "worker"}, log_timestamp=5.0)
    rank = state.series[KEY]
    assert rank.anomalies == dict.fromkeys(ANOMALY_KINDS, 0)
    assert rank.errors == dict.fromkeys(ERROR_KINDS, 0)
    assert rank.last_log_timestamp == 5.0
    assert rank.step is None


def test_nonfinite_loss_and_grad_norm_are_anomalies_at_their_step():
    state = TrainingState()
    ingest(state, StepRecord(step=10, loss=2.0, grad_norm=1.0), StepRecord(step=11, loss=math.nan, grad_norm=math.inf))
    rank = state.series[KEY]
    assert rank.anomalies["loss_nonfinite"] == 1
    assert rank.anomalies["grad_norm_nonfinite"] == 1
    assert rank.last_anomaly_step == {"loss_nonfinite": 11, "grad_norm_nonfinite": 11}
    assert math.isnan(rank.loss)


def test_missing_grad_norm_is_no_anomaly_and_keeps_the_last_value():
    state = TrainingState()
    ingest(state, StepRecord(step=1, loss=2.0, grad_norm=1.5), StepRecord(step=2, loss=1.9, grad_norm=None))
    rank = state.series[KEY]
    assert rank.grad_norm == 1.5
    assert rank.anomalies["grad_norm_nonfinite"] == 0
    assert rank.steps_total == 2


def test_one_step_spike_counts_once_and_noise_never():
    state = TrainingState()
    steps = [StepRecord(step=i, loss=2.3 + (0.05 if i % 2 else -0.05)) for i in range(1, 60)]
    ingest(state, *steps)
    assert state.series[KEY].anomalies["loss_spike"] == 0
    ingest(state, StepRecord(step=60, loss=25.0), StepRecord(step=61, loss=2.3))
    rank = state.series[KEY]
    assert rank.anomalies["loss_spike"] == 1
    assert rank.last_anomaly_step["loss_spike"] == 60


def test_unknown_error_kinds_count_as_other():
    state = TrainingState()
    ingest(state, ErrorEvent("weird"), ErrorEvent("oom", {"message": "CUDA out of memory"}))
    rank = state.series[KEY]
    assert rank.errors["other"] == 1
    assert rank.errors["oom"] == 1
    assert rank.last_error_facts == {"oom": {"message": "CUDA out of memory"}}  # "weird" said nothing about itself


def test_cardinality_guard_drops_and_counts_new_series():
    state = TrainingState(limits=Limits(max_series=2, max_named_values_per_series=1))
    for rank in ("0", "1", "2"):
        ingest(state, StepRecord(step=1, loss=1.0, aux_losses={"a_loss": 1.0, "b_loss": 2.0}), key=("r", "n", rank))
    assert len(state.series) == 2
    assert state.series[("r", "n", "0")].aux_losses == {"a_loss": 1.0}
    assert state.stats.series_dropped_total == 1 + 2  # one series, one extra aux loss on each kept series


def test_a_second_record_for_the_current_step_completes_it():
    # DeepSpeed prints the lr and the throughput of a step on two lines.
    state = TrainingState()
    ingest(state, StepRecord(step=200, learning_rate=2.4e-4), StepRecord(step=200, throughput=59.7),
           StepRecord(step=201, learning_rate=2.3e-4))
    rank = state.series[KEY]
    assert (rank.steps_total, rank.step, rank.learning_rate, rank.throughput) == (2, 201, 2.3e-4, 59.7)


def test_records_without_a_step_count_and_keep_the_last_known_step():
    state = TrainingState()
    ingest(state, StepRecord(step=None, loss=2.0), StepRecord(step=40, loss=1.9), StepRecord(step=None, loss=math.nan))
    rank = state.series[KEY]
    assert (rank.steps_total, rank.step) == (3, 40)
    assert rank.last_anomaly_step == {"loss_nonfinite": 40}


def test_nan_iterations_of_an_interval_are_nonfinite_losses_counted_once():
    state = TrainingState()
    ingest(state, StepRecord(step=200, loss=2.2, nonfinite_loss_steps=2), StepRecord(step=300, loss=math.nan,
                                                                                     nonfinite_loss_steps=1))
    rank = state.series[KEY]
    assert rank.anomalies["loss_nonfinite"] == 3
    assert rank.last_anomaly_step["loss_nonfinite"] == 300


def test_scheduler_node_timeouts_are_counted_by_node_id():
    state = TrainingState()
    ingest(state, SchedulerEvent("node_timeout", "3", 3), SchedulerEvent("node_timeout", "5"),
           SchedulerEvent("worker_registered", "5", 5))
    rank = state.series[KEY]
    assert rank.scheduler_events == {"node_timeout": 2, "worker_registered": 1}
    assert rank.node_timeouts == {"3": 1, "5": 1}


def test_the_latest_failure_of_each_kind_keeps_what_it_said():
    state = TrainingState()
    ingest(state, ErrorEvent("nccl_timeout", {"op": "ALLREDUCE", "seq_num": 7}), ErrorEvent("oom", {"device": "npu"}),
           ErrorEvent("nccl_timeout", {"op": "BROADCAST", "seq_num": 9}), ErrorEvent("oom"))
    assert state.series[KEY].last_error_facts == {"nccl_timeout": {"op": "BROADCAST", "seq_num": 9},
                                                  "oom": {"device": "npu"}}
