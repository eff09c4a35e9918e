"""The step-resolution detectors on simulated runs, through the real follow -> parse -> state path."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.app import Exporter
from exporter.cli import main
from exporter.settings import load_settings
from exporter.state import ANOMALY_KINDS, DetectorConfig, RankState
from exporter.state.detectors import SeriesState, check_series
from tests.support.net import eventually
from tests.support.runs import read_once
from tests.support.simulated import run_config, write_simulated

STEPS = 1000


def ranks_of(state) -> dict[str, RankState]:
    """Worker ranks by rank label (the scheduler's series has an empty rank)."""
    return {rank: value for (_run, _node, rank), value in state.series.items() if rank}


def read_simulated(tmp_path, *specs: str, until_slot: int | None = None, **options):
    config = run_config(*specs, **{"ranks": 8, "steps": STEPS, **options})
    return ranks_of(read_once(write_simulated(tmp_path, config, until_slot=until_slot)))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_healthy_run_has_no_anomaly_on_any_rank(tmp_path, seed):
    ranks = read_simulated(tmp_path, seed=seed)
    assert len(ranks) == 8
    for rank in ranks.values():
        assert rank.steps_total == STEPS
        assert rank.anomalies == dict.fromkeys(ANOMALY_KINDS, 0), "step-to-step noise must never count"
        assert not any(rank.errors.values())
        # The loss keeps improving until the end: no plateau in a healthy run.
        assert rank.loss_best_step >= STEPS - 100


def test_grad_norm_not_obtained_is_no_anomaly(tmp_path):
    log_dir = write_simulated(tmp_path, run_config(ranks=2, steps=STEPS))
    assert (log_dir / "worker_0.log").read_text().count("grad_norm: NaN,") >= 2  # step 1, then ~1 %
    for rank in ranks_of(read_once(log_dir)).values():
        assert rank.anomalies["grad_norm_nonfinite"] == 0
        assert rank.grad_norm is not None


def test_nan_counts_every_non_finite_step_and_names_the_step(tmp_path):
    ranks = read_simulated(tmp_path / "whole", "nan@600")
    for rank in ranks.values():
        assert rank.anomalies["loss_nonfinite"] == STEPS - 600 + 1
        assert rank.anomalies["grad_norm_nonfinite"] == STEPS - 600 + 1
        assert rank.anomalies["loss_spike"] == 0
    # Seen while it happens (the run read up to step 600): the latest anomaly is step 600.
    for rank in read_simulated(tmp_path / "live", "nan@600", until_slot=600).values():
        assert rank.last_anomaly_step["loss_nonfinite"] == 600
        assert rank.anomalies["loss_nonfinite"] == 1


def test_nan_on_one_rank_only(tmp_path):
    ranks = read_simulated(tmp_path, "nan:6@300")
    assert [label for label, rank in ranks.items() if rank.anomalies["loss_nonfinite"]] == ["6"]


@pytest.mark.parametrize(("step", "seed"), [(25, 0), (150, 1), (500, 2), (990, 3)])
def test_spike_counts_exactly_once_at_its_step(tmp_path, step, seed):
    ranks = read_simulated(tmp_path, f"spike@{step}", seed=seed)
    for rank in ranks.values():
        assert rank.anomalies["loss_spike"] == 1
        assert rank.last_anomaly_step["loss_spike"] == step
        assert rank.anomalies["grad_norm_spike"] == 1
        assert rank.last_anomaly_step["grad_norm_spike"] == step
        assert rank.anomalies["loss_nonfinite"] == 0


def test_spike_on_one_rank_only(tmp_path):
    ranks = read_simulated(tmp_path, "spike:3@400")
    spikes = {label: rank.anomalies["loss_spike"] for label, rank in ranks.items()}
    assert spikes == {str(r): int(r == 3) for r in range(8)}


def test_two_spikes_count_twice(tmp_path):
    ranks = read_simulated(tmp_path, "spike@300", "spike@310")
    assert all(rank.anomalies["loss_spike"] == 2 and rank.last_anomaly_step["loss_spike"] == 310
               for rank in ranks.values())


@pytest.mark.parametrize(("step", "seed"), [(300, 0), (300, 1), (600, 2), (600, 3)])
def test_plateau_stops_the_best_step_near_its_start(tmp_path, step, seed):
    # "Near": the window (100 steps) plus the smoothing's lag; never hundreds of steps later.
    for rank in read_simulated(tmp_path, f"plateau@{step}", seed=seed).values():
        assert step <= rank.loss_best_step <= step + 200
        assert rank.anomalies["loss_spike"] == 0


def test_a_spike_does_not_move_the_best_step(tmp_path):
    flat = read_simulated(tmp_path / "flat", "plateau@300")
    spiked = read_simulated(tmp_path / "spiked", "plateau@300", "spike@700")
    assert {label: rank.loss_best_step for label, rank in spiked.items()} == \
           {label: rank.loss_best_step for label, rank in flat.items()}


def test_pipeline_stages_without_loss_have_no_step_series(tmp_path):
    ranks = read_simulated(tmp_path, "nan@500", pp_stages=2)
    assert {label for label, rank in ranks.items() if rank.steps_total} == {"4", "5", "6", "7"}
    assert all(rank.loss_best_step is None and not any(rank.anomalies.values())
               for label, rank in ranks.items() if label in {"0", "1", "2", "3"})


def test_errors_land_on_the_failing_rank(tmp_path):
    ranks = read_simulated(tmp_path, "oom:5@400")
    assert {label for label, rank in ranks.items() if rank.errors["oom"]} == {"5"}
    assert all(rank.step == 399 for rank in ranks.values())


@pytest.mark.parametrize("spec", ["straggler:2@300", "slowdown@300"])
def test_a_run_slowing_down_together_is_one_slowdown_per_rank(tmp_path, spec):
    """Every rank waits for the slowest: each counts the slowdown against its own baseline, after the
    configured run of slow steps, at the step the run began."""
    ranks = read_simulated(tmp_path, spec)
    for rank in ranks.values():
        assert rank.anomalies["slowdown"] == 1
        assert rank.last_anomaly_step["slowdown"] == 300
        assert rank.anomalies["loss_spike"] == 0
    times = [rank.step_time_seconds for rank in ranks.values()]
    assert max(times) < 1.15 * min(times)  # no rank stands out: only the step-to-step noise


def test_a_long_checkpoint_step_is_no_slowdown_and_its_time_is_lost(tmp_path):
    ranks = read_simulated(tmp_path, "checkpoint@400")
    for rank in ranks.values():
        assert rank.anomalies["slowdown"] == 0
        # ~30x a 0.85 s step, less the step's own time
        assert rank.lost_seconds_total["checkpoint"] == pytest.approx(29 * 0.85, rel=0.1)


def test_a_resume_replays_its_steps_without_anomalies(tmp_path):
    ranks = read_simulated(tmp_path, "restart@350")
    for rank in ranks.values():
        assert rank.restarts_total == 1
        assert rank.lost_seconds_total["replayed"] == pytest.approx(49 * 0.85, rel=0.05)  # steps 301..349 again
        assert rank.productive_seconds_total == pytest.approx(STEPS * 0.85, rel=0.05)
        assert rank.anomalies == dict.fromkeys(ANOMALY_KINDS, 0)
        assert rank.loss_best_step >= STEPS - 100


def test_spike_detector_ignores_a_doubling_but_not_a_tenfold_jump():
    # The documented defaults: +50 % over the baseline and 6 mean deviations.
    state = SeriesState()

    def spikes(value: float) -> int:
        return check_series(DetectorConfig(), state, [None], [value], plateau=False)[2]

    for step in range(40):
        assert not spikes(2.0 + 0.02 * (-1) ** step)
    assert not spikes(2.9)
    assert spikes(25.0)


def test_thresholds_come_from_settings(monkeypatch):
    assert load_settings().detector_config == DetectorConfig()
    monkeypatch.setenv("TRAINLOG_PLATEAU_WINDOW_STEPS", "250")
    config = load_settings(spike_min_relative_jump=20.0).detector_config
    assert (config.plateau_window_steps, config.spike_min_relative_jump) == (250, 20.0)


def test_bad_threshold_exits_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TRAINLOG_SPIKE_BASELINE_ALPHA", "2")
    assert main(["--log-dir", str(tmp_path)]) == 2
    assert "spike_baseline_alpha" in capsys.readouterr().err


def spikes_served(log_dir: Path, state_file: Path, jump: float) -> int:
    """The loss spikes an exporter serving ``log_dir`` counts with ``--spike-min-relative-jump jump``."""
    exporter = Exporter(load_settings(log_dir=[log_dir], web_listen_address="127.0.0.1:0",
                                      spike_min_relative_jump=jump, state_file=state_file))
    exporter.start()
    try:
        eventually(lambda: [rank.steps_total for rank in ranks_of(exporter.state).values()] == [400, 400], 10,
                   what="the run to be read")
        with exporter.state.lock:
            return sum(rank.anomalies["loss_spike"] for rank in ranks_of(exporter.state).values())
    finally:
        exporter.stop()


def test_serve_applies_the_thresholds(tmp_path):
    log_dir = write_simulated(tmp_path, run_config("spike@300", ranks=2, steps=400))
    # A tenfold jump is a spike by default, not when +2000 % is required.
    spikes = {jump: spikes_served(log_dir, tmp_path / f"state-{jump}.json", jump) for jump in (0.5, 20.0)}
    assert spikes == {0.5: 2, 20.0: 0}
