from __future__ import annotations

import json
import math
import random

import pytest

from exporter.parse import ErrorEvent, SchedulerEvent
from exporter.parse.records import StepLine
from exporter.state import ANOMALY_KINDS, ERROR_KINDS, Limits, TrainingState
from tests.support.records import in_batches
from tests.support.state_dump import batching_free_dump

KEY = ("run", "node-0", "3")


def ingest(state: TrainingState, *lines, key=KEY) -> None:
    """Step lines (in StepBatches, as parse/ hands them on) and other records, as one batch of lines."""
    with state.lock:
        state.ingest(key, len(lines), in_batches(*lines), log_timestamp=None, now=1.0)


def step(number, unprinted_nonfinite_losses=0, named=None, **values) -> StepLine:
    return StepLine(number, {name: value for name, value in values.items() if value is not None}, named=named or {},
                    unprinted_nonfinite_losses=unprinted_nonfinite_losses)


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
    ingest(state, step(10, loss=2.0, grad_norm=1.0), step(11, loss=math.nan, grad_norm=math.inf))
    rank = state.series[KEY]
    assert rank.anomalies["loss_nonfinite"] == 1
    assert rank.anomalies["grad_norm_nonfinite"] == 1
    assert rank.last_anomaly_step == {"loss_nonfinite": 11, "grad_norm_nonfinite": 11}
    assert math.isnan(rank.loss)


def test_missing_grad_norm_is_no_anomaly_and_keeps_the_last_value():
    state = TrainingState()
    ingest(state, step(1, loss=2.0, grad_norm=1.5), step(2, loss=1.9, grad_norm=None))
    rank = state.series[KEY]
    assert rank.grad_norm == 1.5
    assert rank.anomalies["grad_norm_nonfinite"] == 0
    assert rank.steps_total == 2


def test_one_step_spike_counts_once_and_noise_never():
    state = TrainingState()
    steps = [step(i, loss=2.3 + (0.05 if i % 2 else -0.05)) for i in range(1, 60)]
    ingest(state, *steps)
    assert state.series[KEY].anomalies["loss_spike"] == 0
    ingest(state, step(60, loss=25.0), step(61, loss=2.3))
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
        ingest(state, step(1, loss=1.0, named={"a_loss": 1.0, "b_loss": 2.0}), key=("r", "n", rank))
    assert len(state.series) == 2
    assert state.series[("r", "n", "0")].aux_losses == {"a_loss": 1.0}
    assert state.stats.series_dropped_total == 1 + 2  # one series, one extra aux loss on each kept series


def test_a_second_record_for_the_current_step_completes_it():
    # DeepSpeed prints the lr and the throughput of a step on two lines.
    state = TrainingState()
    ingest(state, step(200, learning_rate=2.4e-4), step(200, throughput=59.7),
           step(201, learning_rate=2.3e-4))
    rank = state.series[KEY]
    assert (rank.steps_total, rank.step, rank.learning_rate, rank.throughput) == (2, 201, 2.3e-4, 59.7)


def test_records_without_a_step_count_and_keep_the_last_known_step():
    state = TrainingState()
    ingest(state, step(None, loss=2.0), step(40, loss=1.9), step(None, loss=math.nan))
    rank = state.series[KEY]
    assert (rank.steps_total, rank.step) == (3, 40)
    assert rank.last_anomaly_step == {"loss_nonfinite": 40}


def test_nan_iterations_of_an_interval_are_nonfinite_losses_counted_once():
    state = TrainingState()
    ingest(state, step(200, loss=2.2, unprinted_nonfinite_losses=2), step(300, loss=math.nan,
                                                                                     unprinted_nonfinite_losses=1))
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



def test_a_line_without_a_step_at_the_start_of_a_batch_is_at_the_rank_step_before_it():
    state = TrainingState()
    ingest(state, step(40, loss=1.9))
    ingest(state, step(None, loss=math.nan), step(None, loss=2.0))
    rank = state.series[KEY]
    assert (rank.steps_total, rank.step, rank.last_anomaly_step) == (3, 40, {"loss_nonfinite": 40})


def _random_line(rng: random.Random) -> StepLine:
    values = {name: rng.choice([1.5, 2.5, math.nan, math.inf, 30.0]) for name in ("loss", "grad_norm", "learning_rate",
                                                                                    "throughput", "total_steps",
                                                                                    "step_time_seconds")
              if rng.random() < 0.6}
    line = StepLine(rng.choice([None, 1, 2, 2, 3, 7, 7, 8]), values,
                    units={"throughput": rng.choice(["T", "samples/s"])} if rng.random() < 0.5 else {},
                    named={name: rng.random() for name in rng.sample(["a_loss", "b", "c_loss", "d", "e", "f_loss"],
                                                                    rng.randint(0, 3))},
                    unprinted_nonfinite_losses=rng.choice([0, 0, 0, 0, 2]))
    return line


@pytest.mark.parametrize("seed", range(20))
def test_a_batch_of_lines_does_what_a_batch_per_line_does(seed):
    # The one apply path's promise, on every field at once, named values under a tight
    # cardinality limit (which ones are kept depends on their order) included.
    rng = random.Random(seed)
    lines = [_random_line(rng) for _ in range(rng.randint(1, 60))]
    states = [TrainingState(limits=Limits(max_named_values_per_series=4)) for _ in range(2)]
    with states[0].lock:
        states[0].ingest(KEY, len(lines), in_batches(*lines), None, 1.0)
    with states[1].lock:
        for line in lines:
            states[1].ingest(KEY, 1, in_batches(line), None, 1.0)
    dumps = [json.dumps(batching_free_dump(state), sort_keys=True) for state in states]
    assert dumps[0] == dumps[1]
    assert [list(state.series[KEY].extra) for state in states] == [list(states[1].series[KEY].extra)] * 2



def test_steps_counted_in_order_is_each_change_of_step():
    # Steps in order are counted by their distinct values: the same as one count a change of step, line by line.
    from exporter.state.store import _steps_counted

    def changes(step_before, steps):
        counted, known = 0, step_before
        for step in steps:
            counted += step != known
            known = step
        return counted

    rng = random.Random(4)
    for _ in range(3000):
        steps = [rng.randrange(6) for _ in range(rng.randrange(8))]
        if rng.random() < 0.6:
            steps.sort()
        step_before = rng.choice([None, 0, 2, 5])
        assert _steps_counted(step_before, steps) == changes(step_before, steps), (step_before, steps)


def test_anomalies_counted_alike_with_a_listener_and_without():
    # Without a listener, a spike is counted and no event made of it: the counts and last steps are the listener's.
    rng = random.Random(7)
    heard: list = []
    quiet, listened = TrainingState(), TrainingState(listener=heard.extend)
    for batch in range(40):
        lines = []
        for number in range(batch * 25, batch * 25 + 25):
            loss = rng.choice([2.3, 2.31, 2.29, 40.0, math.nan]) if rng.random() < 0.2 else 2.3 + rng.random() / 50
            lines.append(step(number, loss=loss, grad_norm=rng.choice([1.0, 1.01, 30.0, math.inf])))
        for state in (quiet, listened):
            ingest(state, *lines)
    spikes = [event for event in heard if event.kind.endswith("_spike")]
    assert spikes and any(event.kind.endswith("_nonfinite") for event in heard)
    quiet_rank, listened_rank = quiet.series[KEY], listened.series[KEY]
    assert quiet_rank.anomalies == listened_rank.anomalies
    assert quiet_rank.last_anomaly_step == listened_rank.last_anomaly_step
    assert quiet_rank.anomalies["loss_spike"] + quiet_rank.anomalies["grad_norm_spike"] == len(spikes)
