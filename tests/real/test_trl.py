"""A real TRL ``SFTTrainer`` (a tiny GPT-2 from a config object, a word-level tokenizer made here, no hub) under
torchrun with gloo, 2 ranks, its output redirected to one file (``> train.log 2>&1``).

SFTTrainer is a Trainer: the main process prints the log dicts on tqdm's lines. With the Trainer's NaN filter on
(its default), a NaN step prints a finite loss (``'loss': '0'`` here) and ``'grad_norm': 'nan'``: that grad norm
is the NaN incident. The file's name holds no rank: its series has the empty rank (DESIGN 3.2).
"""

from __future__ import annotations

import math

import pytest

from tests.real.harness import RealRun, check_steps, keep_fixture, matrix, require, run_job, torchrun

pytestmark = pytest.mark.real

STEPS, EVERY, AT = 30, 3, 12
PRINTED = ("loss", "learning_rate", "grad_norm")


@pytest.fixture(scope="module", autouse=True)
def _trl():
    require("trl")


def _sft(tmp_path, name: str, *args: str) -> RealRun:
    result = run_job(tmp_path, torchrun("trl_sft_train.py", "--truth", str(tmp_path / "truth"), "--out",
                                        str(tmp_path / "out"), "--steps", str(STEPS), "--logging-steps", str(EVERY),
                                        *args, nproc=2), capture="file")
    keep_fixture(result, f"trl_{name}")
    return result


def test_nan_filtered_out_of_the_loss_is_the_nan_incident(tmp_path):
    result = _sft(tmp_path, "nan", "--nan-at", str(AT), "--nan-rank", "0")
    check_steps(result, {0: ""}, PRINTED)
    truth = result.truth()[0]
    first = min(step for step, record in truth.items() if math.isnan(record["grad_norm"]))
    assert first == AT and all(math.isfinite(record["loss"]) for record in truth.values())  # the filter at work
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"], incident["step"]) == ("loss_nonfinite", 0, AT)
    first_found = min(result.findings("loss_nonfinite"), key=lambda finding: finding["step"])
    assert (first_found["rank"], first_found["step"]) == ("", AT)
    nan_steps = sum(math.isnan(record["grad_norm"]) for record in truth.values())
    assert result.counters("training_anomalies_total")[("loss_nonfinite", "")] == nan_steps
    assert result.counters("training_errors_total") == {}


@matrix
def test_healthy_sft_every_logged_step_exact(tmp_path):
    result = _sft(tmp_path, "healthy")
    assert result.returncode == 0
    assert sorted(result.truth()[0]) == list(range(EVERY, STEPS + 1, EVERY))
    check_steps(result, {0: ""}, PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


@matrix
def test_exception_on_rank_one(tmp_path):
    result = _sft(tmp_path, "raise", "--raise-at", str(AT))
    assert result.returncode != 0
    check_steps(result, {0: ""}, PRINTED)
    errors = result.counters("training_errors_total")
    assert errors.get(("traceback", "1")) == 1, errors
    causes = [finding for finding in result.report["findings"] if finding["root_cause"]]
    assert [finding["rank"] for finding in causes] == ["1"]
