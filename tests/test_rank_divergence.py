"""Rank divergence: a value a rank prints for itself departs from that rank's own history.

The exporter counts each rank's departure (``training_anomalies_total{kind="rank_divergence"}``);
whether the other ranks stayed is the alert's part (TrainingRankDivergence, tests/rules/ and
the fire drills in tests/test_e2e_alerts.py). Runs here are written by ``simulate`` and read
by the real pipeline.
"""

from __future__ import annotations

import math
import subprocess

import pytest

from exporter.parse.records import StepLine
from exporter.simulate import RunConfig, parse_incident, simulate, write_run
from exporter.state import DetectorConfig, Limits, TrainingState
from exporter.state.detectors import NEW_DEPARTURE, check_departures
from tests.support.exporter_process import ExporterProcess, exporter_command
from tests.support.net import eventually
from tests.support.records import in_batches
from tests.support.runs import exposition, read_once

CONFIG = DetectorConfig()


def divergences(tmp_path, *specs: str, ranks: int = 4, steps: int = 60, mode: str | None = None) -> dict[str, int]:
    """rank -> rank_divergence count after following a simulated run with these incidents."""
    log_dir = tmp_path / "msrun_log"
    write_run(simulate(RunConfig(ranks=ranks, steps=steps, incidents=tuple(map(parse_incident, specs)), mode=mode)),
              log_dir)
    state = read_once(log_dir)
    return {rank: values.anomalies["rank_divergence"] for (_, _, rank), values in state.series.items() if rank}


def test_one_rank_jumping_12x_departs_on_that_rank_only(tmp_path):
    assert divergences(tmp_path, "diverge:1@40") == {"0": 0, "1": 1, "2": 0, "3": 0}


def test_a_pynative_log_with_state_monitor_values_departs_on_that_rank_only(tmp_path):
    """LossCallback records and TrainingStateMonitor values in one PyNative worker log (issue 26): the
    values used to be dropped once the file's format was settled on LossCallback."""
    assert divergences(tmp_path, "diverge:1@40", mode="pynative") == {"0": 0, "1": 1, "2": 0, "3": 0}


def test_every_rank_tripling_departs_on_every_rank(tmp_path):
    """Each rank compared with itself: every one departed. The alert then sees no divergence."""
    assert divergences(tmp_path, "norm_shift@40") == {"0": 1, "1": 1, "2": 1, "3": 1}


def test_the_rank_values_are_exposed_per_rank(tmp_path):
    log_dir = tmp_path / "msrun_log"
    write_run(simulate(RunConfig(ranks=2, steps=30, incidents=(parse_incident("norm_shift@30"),))), log_dir)
    text = exposition(read_once(log_dir))
    values = [line for line in text.splitlines() if line.startswith("training_rank_value{")]
    assert len(values) == 2 and all('name="device_local_norm"' in line for line in values), values
    assert "device_local_norm" not in "".join(line for line in text.splitlines() if line.startswith("training_metric"))


def test_mindformers_2_1_loss_names_are_rank_values_not_aux_losses(tmp_path):
    """MindFormers 2.1's TrainingStateMonitor names a rank's losses by the loss's tag (``micro_local_{tag}_loss``,
    ``device_accum_local_{tag}_loss``, callback.py) and prints numpy's text of the value (``[1.5600818]``); these
    lines are written here from its ``_to_log`` format string. Each value of each name is the rank's, at its step;
    none is an aux loss. The norm jumps 12x at step 50 and stays: the detector sees each value (the kernel keeps every
    value of these names, where of other named values a block's latest) and counts one departure."""
    log_dir = tmp_path / "msrun_log"
    log_dir.mkdir()
    prefix = "2026-12-07 02:27:31,032 - mindformers/output/log[mindformers/core/callback/callback.py:1496] - INFO - "
    lines = []
    for step in range(1, 61):
        lines.append(f"{prefix}{{ Epoch:[  1/  1], step:[{step:5d}/   60], loss:[1.5/1.5], per_step_time: 110ms, "
                     f"lr: 0.01, overflow cond: False, loss_scale: 1.0, global_norm: [0.79]")
        norm = (1 + step % 3 / 100) * (12 if step >= 50 else 1)
        for name, value in (("device_local_norm", norm), ("micro_local_lm_loss", f"[{1 + step / 10}]"),
                            ("micro_local_lm_loss", f"[{2 + step / 10}]"), ("device_accum_local_lm_loss", 1.25)):
            lines.append(f"{prefix}Epoch:[  1/  1], step:[{step:5d}/   60] {name}: {value}")
    (log_dir / "worker_0.log").write_text("\n".join(lines) + "\n")
    state = read_once(log_dir)
    text = exposition(state)
    assert 'training_aux_loss' not in text or "local" not in "".join(
        line for line in text.splitlines() if line.startswith("training_aux_loss"))
    values = {line.split('name="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
              for line in text.splitlines() if line.startswith("training_rank_value{")}
    assert values == {"device_local_norm": 12.0, "micro_local_lm_loss": 8.0, "device_accum_local_lm_loss": 1.25}
    (rank_series,) = state.series.values()
    assert rank_series.steps_total == 60 and rank_series.anomalies["rank_divergence"] == 1


def series(values, start: int = 1):
    return list(range(start, start + len(values))), values


def test_levels_of_different_ranks_do_not_matter_and_noise_never_departs():
    for level in (0.001, 1.0, 5000.0):
        noisy = [level * (1 + 0.05 * math.sin(step * 1.7)) for step in range(200)]
        assert check_departures(CONFIG, NEW_DEPARTURE, *series(noisy))[0] == 0


@pytest.mark.parametrize("factor", [12.0, 1 / 12.0])
def test_a_departure_up_or_down_counts_once_at_its_step(factor):
    values = [1.0 + 0.01 * (step % 3) for step in range(30)] + [factor] * 5 + [1.0] * 10
    departures, step, _ = check_departures(CONFIG, NEW_DEPARTURE, *series(values))
    assert (departures, step) == (1, 31)


def test_a_held_level_becomes_the_new_normal():
    values = [1.0] * 30 + [3.0] * 40
    departures, _, state = check_departures(CONFIG, NEW_DEPARTURE, *series(values))
    assert departures == 1 and math.isclose(math.exp(state[0]), 3.0) and state[3] == 0


def test_no_departure_before_the_warm_up():
    assert check_departures(CONFIG, NEW_DEPARTURE, *series([1.0] * 5 + [12.0]))[0] == 0


def test_values_that_cannot_be_a_norm_are_skipped():
    values = [1.0] * 25 + [math.nan, 0.0, -1.0, math.inf, 1.0]
    departures, _, state = check_departures(CONFIG, NEW_DEPARTURE, *series(values))
    assert departures == 0 and state[2] == 26


def test_rank_values_have_their_own_cap():
    state = TrainingState(limits=Limits(max_rank_values_per_series=2))
    line = StepLine(1, {}, named={"device_local_norm": 1.0, "local_norm_a": 2.0, "local_norm_b": 3.0, "mfu": 0.4})
    key = ("run", "node", "0")
    with state.lock:
        state.ingest(key, 1, in_batches(line), None, 0.0)
    rank = state.series[key]
    assert rank.rank_values == {"device_local_norm": 1.0, "local_norm_a": 2.0}
    assert rank.extra == {"mfu": 0.4} and state.stats.series_dropped_total == 1


def test_a_live_exporter_reads_rank_values_from_pynative_worker_logs(tmp_path):
    """The real process on files ``simulate --mode pynative`` writes live: device_local_norm per rank,
    one rank_divergence on the rank whose value jumps 12x, and the TrainingStateMonitor lines neither
    counted as steps nor taken for restarts."""
    log_dir = tmp_path / "job" / "msrun_log"
    log_dir.mkdir(parents=True)
    ranks = ("0", "1", "2", "3")
    with ExporterProcess("--log-dir", str(log_dir), "--node", "n") as exporter:
        writer = subprocess.Popen(exporter_command("simulate", "--out", str(log_dir), "--ranks", "4", "--steps", "60",
                                                   "--step-interval", "0.02", "--mode", "pynative",
                                                   "--inject", "diverge:1@40"),
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            assert writer.wait(timeout=60) == 0, writer.stderr.read() if writer.stderr else ""
        finally:
            if writer.poll() is None:
                writer.kill()
        eventually(lambda: all(exporter.total("training_step", rank=rank) == 60 for rank in ranks), 15,
                   what=lambda: f"step 60 on every rank\n{exporter.output()}")
        samples = exporter.samples()
        norms = {dict(labels)["rank"]: value for (name, labels), value in samples.items()
                 if name == "training_rank_value" and dict(labels).get("name") == "device_local_norm"}
        assert sorted(norms) == list(ranks) and all(value > 0 for value in norms.values())
        assert norms["1"] > 5 * max(norms[rank] for rank in ("0", "2", "3"))  # still 12x its own level
        divergence = {rank: exporter.total("training_anomalies_total", rank=rank, kind="rank_divergence")
                      for rank in ranks}
        assert divergence == {"0": 0, "1": 1, "2": 0, "3": 0}
        for rank in ranks:
            assert exporter.total("training_steps_total", rank=rank) == 60
            assert exporter.total("training_restarts_total", rank=rank) == 0
            assert exporter.total("training_loss", rank=rank) > 0
