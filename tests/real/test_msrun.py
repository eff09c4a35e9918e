"""A real MindSpore 2.10.0 data-parallel job under ``msrun`` (4 CPU workers), printed by MindFormers 2.1.0's own
callbacks (``MFLossMonitor``, ``TrainingStateMonitor``), followed live on msrun's log directory
(``worker_<R>.log``, ``scheduler.log``), then ``analyze`` on the same files.

The program is tests/real/programs/ms_train.py, run from MindSpore's own venv (.venv-ms, make setup-real). Two
runs in every CI run (healthy, NaN); the incidents that take longer in the matrix (TRAINLOG_REAL_MATRIX=1).
"""

from __future__ import annotations

import math
import os

import pytest

from tests.real.harness import RealRun, check_steps, keep_fixture, msrun, msrun_environment, require_msrun, run_job

pytestmark = pytest.mark.real

STEPS, AT, CULPRIT = 16, 8, 1
RANKS = {str(rank) for rank in range(4)}
matrix = pytest.mark.skipif(not os.environ.get("TRAINLOG_REAL_MATRIX"),
                            reason="the whole matrix only: make test-real")


@pytest.fixture(scope="module", autouse=True)
def _mindspore():
    require_msrun()


def _job(tmp_path, *args: str, name: str, steps: int = STEPS, timeout: float = 300) -> RealRun:
    result = run_job(tmp_path, msrun(tmp_path / "logs", "ms_train.py", "--truth", str(tmp_path / "truth"),
                                     "--steps", str(steps), *args),
                     capture="msrun", env=msrun_environment(), timeout=timeout)
    keep_fixture(result, f"msrun_{name}")
    return result


def _error_ranks(result: RealRun, kind: str, samples=None) -> set[str]:
    return {rank for (named, rank) in result.counters("training_errors_total", samples) if named == kind}


def test_healthy_run_every_step_exact_and_nothing_raised(tmp_path):
    result = _job(tmp_path, name="healthy")
    assert result.returncode == 0
    check_steps(result)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


def test_nan_from_a_step_on_one_rank(tmp_path):
    result = _job(tmp_path, "--incident", "nan", "--rank", str(CULPRIT), "--at", str(AT), name="nan")
    assert result.returncode == 0
    check_steps(result)
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"], incident["step"]) == ("loss_nonfinite", CULPRIT, AT)
    truth = result.truth()
    nan_steps = {str(rank): sum(math.isnan(record["loss"]) for record in steps.values())
                 for rank, steps in truth.items()}
    anomalies = result.counters("training_anomalies_total")
    assert {rank: count for (kind, rank), count in anomalies.items() if kind == "loss_nonfinite"} == nan_steps
    # The culprit's loss at its step; the others' one step later (the all-reduced NaN gradients reach their
    # weights at the end of step AT). MFLossMonitor's global_norm is the reduced one: NaN on every rank at AT.
    found = {finding["rank"]: finding["step"] for finding in result.findings("loss_nonfinite")}
    assert found == {rank: AT if rank == str(CULPRIT) else AT + 1 for rank in RANKS}
    assert {finding["rank"]: finding["step"] for finding in result.findings("grad_norm_nonfinite")} == \
        dict.fromkeys(RANKS, AT)
    assert result.counters("training_errors_total") == {}
