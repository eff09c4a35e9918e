"""A real MMEngine ``Runner`` (iteration-based) under torchrun with gloo, 2 ranks, the console redirected to a file.

The console (``> train.log 2>&1``) is followed live; the work dir (outside the followed directory) holds MMEngine's
own ``<timestamp>/<timestamp>.log`` and ``vis_data/scalars.json``, each read alone by ``analyze`` after: every one
an unranked single file, so its series has the empty rank (DESIGN 3.2). Every printed smoothed value (``loss``,
``time``) is the mean of the last 10 iterations: the ground truth is that mean, as LogProcessor prints it.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest

from tests.real.harness import RealRun, check_steps, keep_fixture, matrix, require, run_job, torchrun
from tests.support.exporter_process import exporter_command, exporter_environment

pytestmark = pytest.mark.real

ITERS, AT = 30, 12
# --by-epoch: the program's 256 pairs a rank, shared over 2 ranks in batches of 8: 16 iterations an epoch.
EPOCHS, PER_EPOCH = 3, 16
PRINTED = ("loss", "learning_rate", "step_time_seconds")


@pytest.fixture(scope="module", autouse=True)
def _mmengine():
    require("mmengine")


def _runner(tmp_path, name: str, *args: str) -> RealRun:
    result = run_job(tmp_path, torchrun("mmengine_train.py", "--truth", str(tmp_path / "truth"), "--work-dir",
                                        str(tmp_path / "work"), "--iters", str(ITERS), *args, nproc=2),
                     capture="file")
    keep_fixture(result, f"mmengine_{name}")
    return result


def _analyze(path) -> dict:
    analyzed = subprocess.run(exporter_command("analyze", str(path), "--format", "json"), capture_output=True,
                              text=True, env=exporter_environment(), timeout=120, check=True)
    (run,) = json.loads(analyzed.stdout)["runs"]
    return run


def test_healthy_runner_console_and_work_dir_every_step_on_the_empty_rank(tmp_path):
    result = _runner(tmp_path, "healthy")
    assert result.returncode == 0
    assert sorted(result.truth()[0]) == list(range(1, ITERS + 1))
    check_steps(result, {0: ""}, PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []
    # The step time is marked as the window's mean (the slowdown rule then needs a longer slow run).
    info = [dict(labels) for (name, labels) in result.after if name == "training_info"]
    assert [labels.get("step_time_seconds_unit") for labels in info if labels["rank"] == ""] == ["s, mean of 10 steps"]
    (log,) = (tmp_path / "work").glob("*/*.log")
    (scalars,) = (tmp_path / "work").glob("*/vis_data/scalars.json")
    truth = result.truth()[0]
    for path in (log, scalars):
        run = _analyze(path)
        assert [(rank["rank"], rank["last_step"]) for rank in run["ranks"]] == [("", ITERS)], path.name
        assert run["findings"] == [], path.name
        assert math.isclose(run["loss"]["last"], truth[ITERS]["loss"], abs_tol=5e-5), path.name


def test_epoch_based_runner_every_global_iteration_on_the_empty_rank(tmp_path):
    # EpochBasedTrainLoop: ``Epoch(train) [E][ I/16]``, I counted within epoch E; the step read is the global
    # iteration (E - 1) * 16 + I, as the program's ground truth counts it.
    result = _runner(tmp_path, "epoch", "--by-epoch", str(EPOCHS))
    assert result.returncode == 0
    assert sorted(result.truth()[0]) == list(range(1, EPOCHS * PER_EPOCH + 1))
    check_steps(result, {0: ""}, PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []
    (log,) = (tmp_path / "work").glob("*/*.log")
    run = _analyze(log)
    assert [(rank["rank"], rank["last_step"]) for rank in run["ranks"]] == [("", EPOCHS * PER_EPOCH)]
    assert run["findings"] == []
    assert math.isclose(run["loss"]["last"], result.truth()[0][EPOCHS * PER_EPOCH]["loss"], abs_tol=5e-5)


@matrix
def test_nan_from_a_step(tmp_path):
    result = _runner(tmp_path, "nan", "--incident", "nan", "--rank", "0", "--at", str(AT))
    check_steps(result, {0: ""}, PRINTED)
    first = min(step for step, record in result.truth()[0].items() if math.isnan(record["loss"]))
    assert first == AT
    found = min(result.findings("loss_nonfinite"), key=lambda finding: finding["step"])
    assert (found["rank"], found["step"]) == ("", AT)
    assert result.counters("training_errors_total") == {}


@matrix
def test_exception_on_rank_one(tmp_path):
    result = _runner(tmp_path, "raise", "--incident", "raise", "--rank", "1", "--at", str(AT))
    assert result.returncode != 0
    check_steps(result, {0: ""}, PRINTED)
    errors = result.counters("training_errors_total")
    assert errors.get(("traceback", "1")) == 1, errors
    causes = [finding for finding in result.report["findings"] if finding["root_cause"]]
    assert [finding["rank"] for finding in causes] == ["1"]
