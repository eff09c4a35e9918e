"""`simulate`: the --inject grammar, the msrun layout, and what each incident writes."""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import threading
import time
from datetime import datetime

import pytest

from exporter.cli import main
from exporter.parse import ErrorEvent, StepBatch
from exporter.simulate import (
    SCHEDULER_LOG,
    Incident,
    SpecError,
    parse_incident,
    plan_run,
    simulate,
    worker_log,
    write_run,
)
from exporter.simulate.texts import step_line
from tests.support.exporter_process import REPO, exporter_command
from tests.support.net import eventually
from tests.support.simulated import lines_by_file, records_by_file, run_config

REFERENCE_RECORD = ("_print_log: { step:[  100/ 1000], loss:   2.345678, per_step_time:    850ms, lr: 1.000000e-04, "
                    "grad_norm:   1.234000, throughput:  12.34T }")


class StepRow:
    """What one step line printed (a StepBatch of one line, as records_by_file makes them)."""

    def __init__(self, batch: StepBatch) -> None:
        assert len(batch.steps) == 1
        self.step: int | None = batch.steps[0]
        self.loss = batch.latest.get("loss")
        self.grad_norm = batch.latest.get("grad_norm")
        self.learning_rate = batch.latest.get("learning_rate")
        self.step_time_seconds = batch.latest.get("step_time_seconds")


def steps_of(records) -> list[StepRow]:
    return [StepRow(record) for record in records if isinstance(record, StepBatch)]


def error_kinds(records) -> set[str]:
    return {record.kind for record in records if isinstance(record, ErrorEvent)}


# --- the --inject grammar -------------------------------------------------------------

@pytest.mark.parametrize(("spec", "incident"), [
    ("nan@120", Incident("nan", None, 120)),
    ("nan:3@120", Incident("nan", 3, 120)),
    ("spike@7", Incident("spike", None, 7)),
    ("hang:2@50", Incident("hang", 2, 50)),
    ("oom:3@200", Incident("oom", 3, 200)),
    ("node_timeout:1@9", Incident("node_timeout", 1, 9)),
    ("straggler:5", Incident("straggler", 5, 1)),
    ("straggler:5@30", Incident("straggler", 5, 30)),
    ("slowdown@40", Incident("slowdown", None, 40)),
    ("checkpoint@30", Incident("checkpoint", None, 30)),
    ("restart@50", Incident("restart", None, 50)),
    ("restart-loop", Incident("restart-loop", None, 20)),
    ("restart-loop@35", Incident("restart-loop", None, 35)),
])
def test_valid_specs(spec, incident):
    assert parse_incident(spec) == incident
    assert parse_incident(incident.spec) == incident  # the normal form reads back


@pytest.mark.parametrize(("spec", "complaint"), [
    ("", "expected KIND[:RANK][@STEP]"),
    ("nan@", "expected KIND[:RANK][@STEP]"),
    ("nan@-3", "expected KIND[:RANK][@STEP]"),
    ("oom:x@3", "expected KIND[:RANK][@STEP]"),
    ("oom:3@5@6", "expected KIND[:RANK][@STEP]"),
    ("NaN@3", "expected KIND[:RANK][@STEP]"),
    ("fire@3", "unknown incident 'fire'"),
    ("oom@5", "oom needs a rank"),
    ("node_timeout@5", "node_timeout needs a rank"),
    ("nan", "nan needs a step"),
    ("crash:1", "crash needs a step"),
    ("restart:2@50", "restart happens to the whole job, not to a rank"),
    ("slowdown", "slowdown needs a step"),
])
def test_bad_specs_name_the_spec(spec, complaint):
    with pytest.raises(SpecError) as error:
        parse_incident(spec)
    assert complaint in str(error.value)
    assert repr(spec) in str(error.value)


@pytest.mark.parametrize(("spec", "complaint"), [
    ("oom:8@5", "rank 8 does not exist with --ranks 8"),
    ("nan@0", "step 0 is outside the run (steps 1-100)"),
    ("spike@101", "step 101 is outside the run"),
])
def test_specs_must_fit_the_run(spec, complaint):
    with pytest.raises(SpecError, match=re.escape(complaint)):
        run_config(spec, ranks=8, steps=100)


@pytest.mark.parametrize(("specs", "complaint"), [
    (("restart@50", "oom:1@60"), "restart cannot be combined with oom"),
    (("restart-loop", "hang@30"), "restart-loop cannot be combined with hang"),
    (("restart-loop", "restart@40"), "restart-loop is the only restart of its run"),
])
def test_restarts_do_not_combine_with_incidents_that_stop_ranks(specs, complaint):
    with pytest.raises(ValueError, match=re.escape(complaint)):
        run_config(*specs, ranks=4, steps=100)


@pytest.mark.parametrize("argv", [
    ["--inject", "oom@5"],
    ["--inject", "nan@3", "bogus"],
    ["--inject", "oom:8@5"],
    ["--ranks", "6", "--pp-stages", "4"],
    ["--ranks", "0"],
    ["--steps", "0"],
    ["--step-interval", "-1"],
])
def test_command_rejects_bad_options_with_status_2(argv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["simulate", "--out", str(out), "--steps", "100", *argv]) == 2
    message = capsys.readouterr().err
    assert message.startswith("trainlog-exporter simulate: ") and message.count("\n") == 1
    assert not out.exists()  # nothing half-written


# --- layout and format ----------------------------------------------------------------

def test_step_record_has_the_reference_layout():
    line = step_line(datetime(2026, 6, 9, 10, 20, 30), 100, 1000, 2.345678, 850, 1e-4, 1.234, 12.34)
    assert line == "[INFO] 2026-06-09 10:20:30 [mindformers/pynative/callback/loss_callback.py:231] " + REFERENCE_RECORD
    not_obtained = step_line(datetime(2026, 6, 9), 1, 1000, math.nan, 850, 1e-4, None, 12.34)
    assert "loss:        nan," in not_obtained and "grad_norm: NaN," in not_obtained


def test_msrun_layout_with_banner_and_scheduler_lines():
    files = lines_by_file(run_config(ranks=4, steps=60))
    assert set(files) == {"worker_0.log", "worker_1.log", "worker_2.log", "worker_3.log", "scheduler.log"}
    for rank in range(4):
        lines = files[worker_log(rank)]
        assert lines[0].endswith("Running MindFormers in PYNATIVE_MODE.")
        assert sum("_print_log: { step:[" in line for line in lines) == 60
        assert any("Saving checkpoint at step 50" in line for line in lines)  # framework chatter too
    scheduler = files[SCHEDULER_LOG]
    assert sum("is registered successfully" in line for line in scheduler) == 4
    assert any("Cluster is successfully initialized." in line for line in scheduler)
    assert sum("has unregistered" in line for line in scheduler) == 4  # a clean end


@pytest.mark.parametrize(("mode", "banner", "records"), [
    (None, "GRAPH_MODE", "{ Epoch:["),  # the default with TrainingStateMonitor values, as the golden runs hold
    ("graph", "GRAPH_MODE", "{ Epoch:["),
    ("pynative", "PYNATIVE_MODE", "_print_log: { step:["),  # LossCallback records beside the values
])
def test_mode_chooses_the_record_layout_beside_the_state_monitor_values(mode, banner, records):
    files = lines_by_file(run_config("diverge:1@20", ranks=2, steps=30, mode=mode))
    for rank in range(2):
        lines = files[worker_log(rank)]
        assert lines[0].endswith(f"Running MindFormers in {banner}.")
        assert sum(records in line for line in lines) == 30
        values = [line for line in lines if "] device_local_norm: " in line]
        assert len(values) == 30 and all(line.count("Epoch:[  1/  1], step:[") == 1 for line in values)
    without_values = lines_by_file(run_config(ranks=1, steps=5, mode=mode))["worker_0.log"]
    assert sum("_print_log: { step:[" in line for line in without_values) == (0 if mode == "graph" else 5)


def test_mode_must_be_known():
    with pytest.raises(ValueError, match="--mode must be one of pynative, graph"):
        run_config(ranks=1, steps=5, mode="eager")


def test_healthy_curve_warmup_and_decay():
    steps = steps_of(records_by_file(run_config(ranks=1, steps=1000))["worker_0.log"])
    assert [record.step for record in steps] == list(range(1, 1001))
    losses = [record.loss for record in steps]
    assert losses[0] > 7 and 1.5 < losses[-1] < 2.5
    assert statistics.mean(losses[900:]) < statistics.mean(losses[400:500]) < statistics.mean(losses[:100])
    lrs = [record.learning_rate for record in steps]
    peak = lrs.index(max(lrs))
    assert 20 <= peak <= 80 and lrs[-1] < lrs[peak] / 5
    assert all(0.6 < record.step_time_seconds < 1.1 for record in steps)
    assert steps[0].grad_norm is None  # step 1 prints "grad_norm: NaN", "not obtained"


def test_same_seed_same_run_and_incidents_stay_on_their_rank():
    config = run_config("oom:3@40", ranks=8, steps=100, seed=7)
    run = lines_by_file(config)
    assert run == lines_by_file(config)
    assert lines_by_file(run_config("oom:3@40", ranks=8, steps=100, seed=8))["worker_5.log"] != run["worker_5.log"]
    healthy = lines_by_file(run_config(ranks=8, steps=100, seed=7))
    # The OOM silences rank 5 at step 40, but every number it printed before is unchanged.
    assert run["worker_5.log"] == healthy["worker_5.log"][:len(run["worker_5.log"])]


# --- incidents --------------------------------------------------------------------------

def test_nan_from_step_on_all_ranks_or_one():
    records = records_by_file(run_config("nan@30", ranks=4, steps=50))
    for rank in range(4):
        steps = steps_of(records[worker_log(rank)])
        assert all(math.isfinite(record.loss) for record in steps[:29])
        assert all(math.isnan(record.loss) and math.isnan(record.grad_norm) for record in steps[29:])
    records = records_by_file(run_config("nan:2@30", ranks=4, steps=50))
    assert [rank for rank in range(4) if math.isnan(steps_of(records[worker_log(rank)])[-1].loss)] == [2]


def test_spike_is_one_step_about_ten_times():
    steps = steps_of(records_by_file(run_config("spike@40", ranks=2, steps=60))["worker_1.log"])
    losses = {record.step: record.loss for record in steps}
    assert 7 < losses[40] / losses[39] < 13
    assert 0.9 < losses[41] / losses[39] < 1.1
    assert steps[39].grad_norm > 5 * steps[38].grad_norm


def test_plateau_keeps_the_loss_flat():
    steps = steps_of(records_by_file(run_config("plateau@200", ranks=1, steps=1000))["worker_0.log"])
    flat = [record.loss for record in steps[199:]]
    assert abs(statistics.mean(flat[:100]) - statistics.mean(flat[-100:])) < 0.01 * statistics.mean(flat)
    assert statistics.mean(flat[-100:]) > 1.2 * statistics.mean(
        [r.loss for r in steps_of(records_by_file(run_config(ranks=1, steps=1000))["worker_0.log"])][-100:])


def test_hang_stops_every_rank_and_the_culprit_first():
    config = run_config("hang:2@30", ranks=4, steps=50)
    records = records_by_file(config)
    last = {rank: steps_of(records[worker_log(rank)])[-1].step for rank in range(4)}
    assert last == {0: 29, 1: 29, 2: 26, 3: 29}
    assert not any(error_kinds(found) for found in records.values())
    assert plan_run(config).hung
    default_culprit = records_by_file(run_config("hang@30", ranks=4, steps=50))
    assert steps_of(default_culprit["worker_3.log"])[-1].step == 26


@pytest.mark.parametrize(("spec", "own_kind"), [
    ("crash:1@20", "traceback"),
    ("oom:1@20", "oom"),
    ("segfault:1@20", "segfault"),
    ("nccl:1@20", "nccl"),
    # Its own RDMA link fails (not a timeout waiting for a peer, which the fault knowledge counts a follower).
    ("hccl:1@20", "hccl"),
    ("ecc:1@20", "hardware"),
])
def test_rank_dies_with_its_error_and_the_others_stop(spec, own_kind):
    config = run_config(spec, ranks=4, steps=50)
    records = records_by_file(config)
    for rank in range(4):
        assert steps_of(records[worker_log(rank)])[-1].step == 19
    assert own_kind in error_kinds(records["worker_1.log"])
    others = set().union(*(error_kinds(records[worker_log(rank)]) for rank in (0, 2, 3)))
    # Survivors of an NCCL failure time out in the watchdog, of a device fault in HCCL; otherwise they are silent.
    assert others == {"nccl": {"nccl_timeout"}, "hardware": {"hccl_timeout"}}.get(own_kind, set())
    assert not plan_run(config).hung


def test_oom_text_is_the_npu_out_of_memory_traceback():
    worker = lines_by_file(run_config("oom:1@20", ranks=2, steps=50))["worker_1.log"]
    start = worker.index("Traceback (most recent call last):")
    assert any(line.startswith("Out of Memory!!! Request memory size: ") for line in worker[start:])


def test_hccl_text_carries_the_cann_error_code():
    worker = lines_by_file(run_config("hccl:1@20", ranks=2, steps=50))["worker_1.log"]
    assert any(line.startswith("EI9999: ") for line in worker)


def test_node_timeout_is_reported_by_the_scheduler():
    files = lines_by_file(run_config("node_timeout:2@20", ranks=4, steps=50))
    timed_out = [line for line in files[SCHEDULER_LOG] if "is timed out" in line]
    assert len(timed_out) == 1 and "The node: 2 is timed out" in timed_out[0]
    assert "please check this node's log" in timed_out[0]
    assert not any("has unregistered" in line for line in files[SCHEDULER_LOG])


def test_a_silent_rank_cannot_fail_again():
    records = records_by_file(run_config("hccl:3@10", "nccl:1@20", ranks=4, steps=40))
    assert "hccl" in error_kinds(records["worker_3.log"])
    assert not error_kinds(records["worker_1.log"])


def _median_time(records, rank: int, steps: slice) -> float:
    return statistics.median(row.step_time_seconds or 0.0 for row in steps_of(records[worker_log(rank)])[steps])


@pytest.mark.parametrize(("spec", "factor"), [("straggler:5@10", 2.5), ("slowdown@10", 1.8)])
def test_a_straggler_or_a_slowdown_slows_every_rank_alike(spec, factor):
    """Synchronous training: every rank waits for the slowest at each collective."""
    records = records_by_file(run_config(spec, ranks=8, steps=40))
    for rank in (0, 4, 5):
        ratio = _median_time(records, rank, slice(10, None)) / _median_time(records, rank, slice(0, 9))
        assert ratio == pytest.approx(factor, rel=0.05)
    assert _median_time(records, 5, slice(10, None)) == pytest.approx(_median_time(records, 4, slice(10, None)),
                                                                    rel=0.05)


def test_a_checkpoint_save_is_one_long_step_with_its_save_line():
    config = run_config("checkpoint@30", ranks=2, steps=40)
    records = records_by_file(config)
    times = [row.step_time_seconds for row in steps_of(records[worker_log(0)])]
    assert times[29] > 20 * statistics.median(times)
    assert sum(time > 2 * statistics.median(times) for time in times) == 1
    assert any("Saving checkpoint at step 30" in line for line in lines_by_file(config)[worker_log(1)])
    # ... which takes wall time when written live: slots without lines before step 30's.
    slots = list(simulate(config))
    assert [slot.lines for slot in slots[30:33]] == [{}, {}, {}]


def test_a_restart_resumes_from_the_latest_checkpoint_and_replays_the_steps_after_it():
    config = run_config("restart@80", ranks=2, steps=100)
    for records in records_by_file(config).values():
        steps = [row.step for row in steps_of(records)]
        if steps:
            assert steps == [*range(1, 80), *range(51, 101)]
    lines = lines_by_file(config)
    assert sum("Running MindFormers in PYNATIVE_MODE" in line for line in lines[worker_log(1)]) == 2
    # msrun's workers register again: the scheduler initialises the cluster a second time.
    assert sum("Cluster is successfully initialized" in line for line in lines[SCHEDULER_LOG]) == 2


def test_a_restart_loop_never_passes_the_step_it_dies_at():
    config = run_config("restart-loop@30", ranks=2, steps=100)
    steps = [row.step for row in steps_of(records_by_file(config)[worker_log(0)])]
    assert steps == [*range(1, 30)] * 4  # the first start and three restarts, then the launcher gives up
    assert not plan_run(config).hung


def test_pipeline_stages_only_the_last_prints_step_records():
    records = records_by_file(run_config(ranks=8, steps=30, pp_stages=4))
    printing = [rank for rank in range(8) if steps_of(records[worker_log(rank)])]
    assert printing == [6, 7]
    assert "pp=4" in lines_by_file(run_config(ranks=8, steps=30, pp_stages=4))["worker_0.log"][4]


# --- writing ----------------------------------------------------------------------------

def test_live_writing_appends_step_by_step(tmp_path):
    out = tmp_path / "live"
    writer = threading.Thread(target=write_run, args=(simulate(run_config(ranks=2, steps=20)), out, 0.05))
    writer.start()
    sizes = set()
    while writer.is_alive():
        if (out / "worker_0.log").exists():
            sizes.add((out / "worker_0.log").stat().st_size)
        time.sleep(0.005)
    writer.join()
    assert len(sizes) >= 5  # the file grew in many steps, not at once
    assert (out / "worker_0.log").read_text().count("_print_log") == 20


def test_stop_ends_live_writing(tmp_path):
    stop = threading.Event()
    result = []
    writer = threading.Thread(target=lambda: result.append(
        write_run(simulate(run_config(ranks=1, steps=1000)), tmp_path, 0.05, stop)))
    writer.start()
    eventually(lambda: (tmp_path / "worker_0.log").exists(), 5, what="first slot")
    stop.set()
    writer.join(5)
    assert result == [False]
    assert (tmp_path / "worker_0.log").read_text().count("_print_log") < 1000


def _simulate_process(tmp_path, *inject: str) -> subprocess.Popen:
    with open(tmp_path / "stderr.txt", "w") as messages:  # the child keeps its own descriptor
        return subprocess.Popen(exporter_command("simulate", "--out", str(tmp_path / "run"), "--ranks", "2",
                                                 "--steps", "10", "--step-interval", "0.05", "--inject", *inject),
                                cwd=REPO, stderr=messages)


def test_hung_run_stays_alive_until_signalled(tmp_path):
    process = _simulate_process(tmp_path, "hang@6")
    try:
        eventually(lambda: "staying alive" in (tmp_path / "stderr.txt").read_text(), 10, what="the end of writing")
        assert process.poll() is None
        worker = (tmp_path / "run" / "worker_0.log").read_text()
        assert "step:[    5/" in worker and "step:[    6/" not in worker
    finally:
        process.terminate()
    assert process.wait(5) == 0


def test_crashed_run_ends_by_itself(tmp_path):
    process = _simulate_process(tmp_path, "oom:1@6")
    assert process.wait(10) == 0
    assert "Out of Memory!!!" in (tmp_path / "run" / "worker_1.log").read_text()
