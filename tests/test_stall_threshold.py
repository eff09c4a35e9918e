"""Which series have a stall threshold, and which allowance holds: through the real follow -> parse -> state path.

A run starting now gets the start-up allowance until its pace is known; a log read late (its file last written
longer ago than the floor: a catch-up of a finished or silent run) is not starting, so it gets its pace, learned
from the printed step times, or the floor. A scheduler's series prints no steps: no threshold at all.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, sample
from tests.support.runs import FIXED_TIME, copy_example, exposition, read_once

REAL = Path(__file__).resolve().parent / "fixtures" / "real"


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


def test_the_learned_pace_and_the_incident_survive_a_restart_of_the_exporter(tmp_path):
    """A real exporter follows a real run (torchrun_ddp_oom.log written line by line, tests/fixtures/SOURCES.md), is
    killed, and starts again from its checkpoint: each rank's learned threshold and the run's incident are still
    there at its first scrape, not the start-up allowance and no incident until new lines come."""
    log_dir = tmp_path / "job" / "logs"
    log_dir.mkdir(parents=True)
    exporter = ExporterProcess("--log-dir", str(log_dir), "--run", "job", "--rescan-interval", "0.2",
                               "--state-file", str(tmp_path / "state.json"), "--checkpoint-interval", "0.2",
                               "--stall-floor-seconds", "1")
    with exporter:
        with (log_dir / "console.log").open("ab") as console:
            for line in (REAL / "torchrun_ddp_oom.log").read_bytes().splitlines(keepends=True):
                console.write(line)
                console.flush()
                time.sleep(0.03)

        def learned() -> dict[str, float | None] | None:
            samples = exporter.samples()
            found = {rank: sample(samples, "training_stall_threshold_seconds", run="job", rank=rank) for rank in "0123"}
            incident = [labels for (name, labels), _value in samples.items() if name == "training_incident_info"]
            return found if incident and all(value is not None for value in found.values()) else None

        before = eventually(learned, 20, interval=0.2, what="thresholds and the incident")
        assert all(value < 1800 for value in before.values()), before
        incident_before = _incident(exporter.samples())
        assert incident_before == {"kind": "oom", "rank": "1"}
        time.sleep(1.0)  # a few checkpoints after the last line
        exporter.kill()  # SIGKILL: no last checkpoint at shutdown
        exporter.start()
        samples = exporter.samples()  # the first scrape, no line read since
        after = {rank: sample(samples, "training_stall_threshold_seconds", run="job", rank=rank) for rank in "0123"}
        assert after == before
        assert _incident(samples) == incident_before


def _incident(samples) -> dict[str, str]:
    (labels,) = [dict(labels) for (name, labels), _value in samples.items() if name == "training_incident_info"]
    return {name: labels[name] for name in ("kind", "rank")}
