"""Restarts, replayed steps, goodput and the slowdown detector, through the real line parser and state.

The log lines here are synthetic MindFormers PyNative records and banners (the layout of
tests/fixtures/formats/mindformers_pynative.log), not lines a real program printed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.follow import Follower
from exporter.parse import LineParser
from exporter.parse.formats import BUILTIN_FORMATS
from exporter.parse.formats.msrun_scheduler import FORMAT as SCHEDULER_FORMAT
from exporter.pipeline import Pipeline
from exporter.state import TrainingState
from exporter.state.detectors import DetectorConfig
from exporter.state.snapshot import dump_state, restore_state

KEY = ("run", "node-0", "0")
BANNER = "[INFO] 2026-06-09 10:20:30 [mindformers/tools/logger.py:52] Running MindFormers in PYNATIVE_MODE."
NOISE = "[WARNING] DEVICE(2810,ffff,python):2026-06-09-10:20:30.000.000 [ascend_memory_adapter.cc:134] Initialize] x"


def record(step: int, loss: float = 2.0, step_ms: int = 1000, total: int = 1000) -> str:
    return (f"[INFO] 2026-06-09 10:20:40 [mindformers/pynative/callback/loss_callback.py:231] _print_log: "
            f"{{ step:[{step:5d}/{total:5d}], loss: {loss:10.6f}, per_step_time: {step_ms:6d}ms, lr: 1.000000e-04, "
            f"grad_norm:   1.000000, throughput:  12.34T }}")


class Rank:
    """One rank's log read block by block, each block applied at a given wall time."""

    def __init__(self, config: DetectorConfig | None = None, scheduler: bool = False) -> None:
        self.state = TrainingState(config)
        self.parser = LineParser(BUILTIN_FORMATS, forced=SCHEDULER_FORMAT if scheduler else None)

    def read(self, lines: list[str], now: float = 1.0) -> None:
        parsed = self.parser.parse_block("".join(f"{line}\n" for line in lines).encode())
        with self.state.lock:
            self.state.ingest(KEY, len(lines), parsed.records, None, now)

    @property
    def rank(self):
        return self.state.series[KEY]


def losses(first: int, last: int) -> list[float]:
    """A loss falling with the step: a replay from an early checkpoint starts well above the latest loss."""
    return [10.0 / (1 + step / 10) for step in range(first, last + 1)]


def run(first: int, last: int, step_ms: int = 1000) -> list[str]:
    return [record(step, loss, step_ms) for step, loss in zip(range(first, last + 1), losses(first, last), strict=True)]


def test_a_healthy_run_is_all_productive():
    rank = Rank()
    rank.read([BANNER, NOISE, *run(1, 100, step_ms=850)])
    state = rank.rank
    assert state.restarts_total == 0
    assert state.productive_seconds_total == pytest.approx(85.0)
    assert state.lost_seconds_total == {"replayed": 0.0, "startup": 0.0, "checkpoint": 0.0, "stall": 0.0}
    assert state.anomalies["slowdown"] == 0


@pytest.mark.parametrize("blocks", ["one block", "banner alone", "line by line"])
def test_a_resume_from_a_checkpoint_is_one_restart_and_its_replay_is_lost_time(blocks):
    rank = Rank()
    before = [BANNER, *run(1, 100)]
    after = [NOISE, BANNER, NOISE, *run(51, 130)]
    if blocks == "one block":
        rank.read(before + after)
    elif blocks == "banner alone":
        rank.read(before)
        rank.read(after[:3])
        rank.read(after[3:])
    else:
        for line in before + after:
            rank.read([line])
    state = rank.rank
    assert state.restarts_total == 1
    assert state.lost_seconds_total["replayed"] == pytest.approx(50.0)  # steps 51..100 again
    assert state.productive_seconds_total == pytest.approx(130.0)
    assert (state.step, state.highest_step, state.replay_until) == (130, 130, None)
    # The replayed losses are several times the latest one: a spike, were they not left out.
    assert state.anomalies == dict.fromkeys(state.anomalies, 0)
    # ... and no detector saw them: each saw every step once.
    assert state.detectors["loss"].spikes[2] == 130
    assert state.detectors["slowdown"].seen == 130


def test_the_step_going_back_without_a_banner_is_a_restart():
    rank = Rank()
    rank.read(run(1, 60))
    rank.read(run(41, 70))  # a torchrun attempt_1 or a re-created worker log, no banner in this format
    assert rank.rank.restarts_total == 1
    assert rank.rank.lost_seconds_total["replayed"] == pytest.approx(20.0)


def test_restarts_that_never_pass_the_old_step_keep_replaying():
    rank = Rank()
    rank.read(run(1, 30))
    for _ in range(3):
        rank.read([BANNER, *run(1, 25)])
    state = rank.rank
    assert state.restarts_total == 3
    assert (state.highest_step, state.replay_until) == (30, 30)
    assert state.productive_seconds_total == pytest.approx(30.0)
    assert state.lost_seconds_total["replayed"] == pytest.approx(75.0)


def test_the_same_step_printed_again_is_not_a_restart():
    rank = Rank()
    rank.read(run(1, 10) + [record(10)] + run(11, 12))
    assert rank.rank.restarts_total == 0


def test_a_sustained_slowdown_is_one_anomaly_a_long_checkpoint_step_none():
    config = DetectorConfig()
    rank = Rank(config)
    rank.read(run(1, 60))
    rank.read([record(61, step_ms=30_000)])  # a save: one step 30x longer
    rank.read(run(62, 80))
    assert rank.rank.anomalies["slowdown"] == 0
    assert rank.rank.lost_seconds_total["checkpoint"] == pytest.approx(29.0)
    assert rank.rank.productive_seconds_total == pytest.approx(80.0)
    slow_from = 81
    rank.read(run(slow_from, 130, step_ms=1800))
    state = rank.rank
    assert state.anomalies["slowdown"] == 1
    assert state.last_anomaly_step["slowdown"] == slow_from  # counted once the run lasted, at its first step
    assert state.lost_seconds_total["checkpoint"] == pytest.approx(29.0)  # a slowdown is slow training, not lost


def test_a_slowdown_shorter_than_the_sustained_run_is_none():
    config = DetectorConfig()
    rank = Rank(config)
    rank.read(run(1, 40) + run(41, 40 + config.slowdown_steps - 1, step_ms=2000) + run(40 + config.slowdown_steps, 90))
    assert rank.rank.anomalies["slowdown"] == 0


def test_a_slow_first_step_does_not_hide_a_slowdown():
    """The baseline is the median of the warm-up steps: graph compilation's long first step does not set it."""
    rank = Rank()
    rank.read([record(1, step_ms=120_000), *run(2, 40), *run(41, 70, step_ms=1600)])
    assert rank.rank.anomalies["slowdown"] == 1


def test_a_line_every_hundred_steps_stands_for_all_of_them():
    # Megatron-LM, DeepSpeed and torchtitan log every log_interval steps with the time of one:
    # 100 s between lines of a 1 s step are 100 steps of training, not 99 s of stall.
    rank = Rank(DetectorConfig(stall_gap_seconds=60))
    rank.read([BANNER, record(100)], now=1100.0)
    for number, step in enumerate(range(200, 1100, 100), start=1):
        rank.read([record(step)], now=1100.0 + 100 * number)
    state = rank.rank
    assert state.lost_seconds_total["stall"] == 0.0
    assert state.productive_seconds_total == pytest.approx(1 + 9 * 100)  # the first line stands for itself


def test_startup_and_stall_are_wall_time_beyond_the_printed_step_time():
    rank = Rank(DetectorConfig(stall_gap_seconds=60))
    rank.read([BANNER, NOISE], now=1000.0)
    rank.read([record(1)], now=1090.0)  # 90 s from the first line to the end of the first (1 s) step
    rank.read([record(2)], now=1091.0)
    rank.read([record(3)], now=1121.0)  # 30 s: below the stall threshold
    rank.read([record(4)], now=1322.0)  # 201 s for a 1 s step
    lost = rank.rank.lost_seconds_total
    assert (lost["startup"], lost["stall"]) == (pytest.approx(89.0), pytest.approx(200.0))
    rank.read([BANNER], now=2000.0)
    rank.read([record(3)], now=2031.0)
    assert rank.rank.lost_seconds_total["startup"] == pytest.approx(89.0 + 30.0)
    assert rank.rank.restarts_total == 1


def test_msrun_workers_registering_again_restart_the_job_once():
    lines = [f"[INFO] DISTRIBUTED(1,f,python):2026-06-09-10:20:30.000.000 [meta_server_node.cc:1] x] The new node: "
             f"{node}(role: MS_WORKER), rank id: {node}, device id: {node}, hostname: h, ip: 10.0.0.1 is registered "
             f"successfully. Currently registered node number: {node + 1}, expected node number: 2" for node in (0, 1)]
    initialized = ("[INFO] DISTRIBUTED(1,f,python):2026-06-09-10:20:30.000.000 [meta_server_node.cc:2] x] The cluster "
                   "topology has been constructed successfully.")
    rank = Rank(scheduler=True)
    rank.read([*lines, initialized])
    assert rank.rank.restarts_total == 0
    rank.read([*lines, initialized])
    assert rank.rank.restarts_total == 1


def test_a_checkpoint_keeps_restarts_goodput_and_the_slowdown_baseline():
    rank = Rank()
    rank.read([BANNER, *run(1, 60), record(61, step_ms=9000), *run(62, 70), BANNER, *run(50, 75)])
    restored = TrainingState()
    assert restore_state(restored, dump_state(rank.state)) == []
    assert dump_state(restored) == dump_state(rank.state)
    again = restored.series[KEY]
    assert (again.restarts_total, again.replay_until, again.detectors["slowdown"].kernel) == (
        1, None, rank.rank.detectors["slowdown"].kernel)
    assert again.lost_seconds_total == rank.rank.lost_seconds_total


# --- through the real follower: how restarts reach a rank's log --------------------------


class Followed:
    """A log directory followed by the real follow -> parse -> state path, read again on demand."""

    def __init__(self, log_dir: Path, rank_offset: int = 0) -> None:
        self.state = TrainingState()
        pipeline = Pipeline(self.state, "node-0", lambda _: "job", rank_offset=rank_offset)
        self.follower = Follower([str(log_dir)], pipeline)

    def read(self) -> None:
        self.follower.run_once()

    def rank(self, rank: str):
        return self.state.series[("job", "node-0", rank)]


def write(path: Path, lines: list[str], mode: str = "w") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open(mode) as file:
        file.write("".join(f"{line}\n" for line in lines))


def test_a_new_torchrun_attempt_resuming_from_a_checkpoint_is_a_restart(tmp_path):
    """torchrun --log-dir: attempt_1's files feed the same global rank as attempt_0's."""
    log_dir = tmp_path / "logs"
    write(log_dir / "run-7" / "attempt_0" / "1" / "stdout.log", run(1, 60))
    followed = Followed(log_dir, rank_offset=8)
    try:
        followed.read()
        write(log_dir / "run-7" / "attempt_1" / "1" / "stdout.log", run(41, 70))
        followed.read()
        rank = followed.rank("9")
    finally:
        followed.follower.stop()
    assert (rank.restarts_total, rank.step) == (1, 70)
    assert rank.lost_seconds_total["replayed"] == pytest.approx(20.0)


def test_a_worker_log_the_launcher_recreates_is_a_restart(tmp_path):
    """msrun's `>`: the same file starts over, from the banner, with steps from the checkpoint on."""
    log = tmp_path / "msrun_log" / "worker_0.log"
    write(log, [BANNER, *run(1, 60)])
    followed = Followed(log.parent)
    try:
        followed.read()
        write(log, [BANNER, NOISE, *run(51, 65)])  # shorter than before: read from its start again
        followed.read()
        rank = followed.rank("0")
    finally:
        followed.follower.stop()
    assert (rank.restarts_total, rank.step, rank.highest_step) == (1, 65, 65)
    assert rank.lost_seconds_total["replayed"] == pytest.approx(10.0)
    assert followed.state.stats.truncations_total == 1
