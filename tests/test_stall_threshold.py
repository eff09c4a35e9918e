"""Which series have a stall threshold, and which allowance holds: through the real follow -> parse -> state path.

A run starting now gets the start-up allowance until its pace is known; a log read late (its file last written
longer ago than the floor: a catch-up of a finished or silent run) is not starting, so it gets its pace, learned
from the printed step times, or the floor. A scheduler's series prints no steps: no threshold at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.runs import FIXED_TIME, copy_example, exposition, read_once


def write_worker(log_dir: Path, step_seconds: float | None, written: float) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    timing = "" if step_seconds is None else f" step_time={step_seconds}"
    path = log_dir / "rank_0.log"
    path.write_text("".join(f"step={step}/100 loss={3.0 - step / 100}{timing}\n" for step in range(1, 41)))
    os.utime(path, (written, written))


def threshold(log_dir: Path, rank: str = "0") -> float | None:
    state = read_once(log_dir, clock=lambda: FIXED_TIME)
    rank_state = next(value for key, value in state.series.items() if key[2] == rank)
    return rank_state.stall_threshold_seconds


def test_a_run_starting_now_keeps_the_start_up_allowance(tmp_path):
    write_worker(tmp_path / "job" / "logs", 1.0, FIXED_TIME - 5)
    assert threshold(tmp_path / "job" / "logs") == 1800.0


def test_a_log_read_late_is_not_starting_its_pace_is_its_printed_step_times(tmp_path):
    write_worker(tmp_path / "job" / "logs", 30.0, FIXED_TIME - 3600)
    assert threshold(tmp_path / "job" / "logs") == 300.0  # 10 x 30 s


def test_a_log_read_late_without_step_times_gets_the_floor(tmp_path):
    write_worker(tmp_path / "job" / "logs", None, FIXED_TIME - 3600)
    assert threshold(tmp_path / "job" / "logs") == 120.0


def test_a_fast_log_read_late_gets_the_floor_not_ten_times_its_pace(tmp_path):
    write_worker(tmp_path / "job" / "logs", 1.0, FIXED_TIME - 3600)
    assert threshold(tmp_path / "job" / "logs") == 120.0


def test_the_scheduler_series_has_no_stall_threshold(tmp_path):
    log_dir = copy_example(tmp_path)
    text = exposition(read_once(log_dir))
    thresholds = [line for line in text.splitlines() if line.startswith("training_stall_threshold_seconds{")]
    assert len(thresholds) == 8  # the eight workers
    assert not any('rank=""' in line for line in thresholds)
