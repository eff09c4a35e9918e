"""A real ``transformers.Trainer`` (a tiny GPT-2 from a config object, no hub) under torchrun with gloo, 4 ranks.

Its output goes to one file as people redirect it (``> train.log 2>&1``): the log dicts share their lines with
tqdm's bars joined by carriage returns. Only the main process prints them; the file's name holds no rank, so
its series has the empty rank (DESIGN 3.2).
"""

from __future__ import annotations

import math

import pytest

from tests.real.harness import (
    GAUGES,
    RealRun,
    check_steps,
    keep_fixture,
    matrix,
    require,
    run_job,
    same,
    torchrun,
)

pytestmark = pytest.mark.real

STEPS, EVERY, NAN_AT = 60, 5, 30
PRINTED = ("loss", "learning_rate", "grad_norm")  # the Trainer prints no step time per step


@pytest.fixture(scope="module", autouse=True)
def _transformers():
    require("transformers")


def _trainer(tmp_path, *args: str, fixture: str = "hf_trainer") -> RealRun:
    result = run_job(tmp_path, torchrun("hf_trainer_train.py", "--truth", str(tmp_path / "truth"), "--out",
                                        str(tmp_path / "out"), "--steps", str(STEPS), "--logging-steps", str(EVERY),
                                        *args), capture="file")
    keep_fixture(result, fixture)
    return result


def test_healthy_trainer_every_logged_step_exact_on_the_empty_rank(tmp_path):
    result = _trainer(tmp_path)
    assert result.returncode == 0
    # Every dict at its own step (the bar tqdm showed when the dict was written), the last one at 60.
    assert sorted(result.truth()[0]) == list(range(EVERY, STEPS + 1, EVERY))
    check_steps(result, {0: ""}, PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


def test_without_a_bar_every_dict_is_read_in_its_order_with_no_step(tmp_path):
    # disable_tqdm: the Trainer's PrinterCallback prints each dict on a line of its own, no bar and so no step
    # (tests/fixtures/real/hf_trainer_no_bar.log); its lines are read a block at a time (parse/carriage.py).
    result = _trainer(tmp_path, "--no-bar", fixture="hf_trainer_no_bar")
    assert result.returncode == 0
    records = [record for _, record in sorted(result.truth()[0].items())]
    assert len(records) == STEPS // EVERY
    rows = [row for row in result.rows if row["rank"] == ""]
    assert [row["step"] for row in rows] == [""] * len(records)
    for row, record in zip(rows, records, strict=True):
        assert all(same(row[name], record[name]) for name in PRINTED), (row, record)
    assert all(same(result.gauge(GAUGES[name], ""), records[-1][name]) for name in PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


@matrix
def test_nan_from_a_step_the_trainer_filters_out_of_its_loss(tmp_path):
    result = _trainer(tmp_path, "--nan-at", str(NAN_AT), fixture="hf_trainer_nan")
    check_steps(result, {0: ""}, PRINTED)
    truth = result.truth()[0]
    # The Trainer's logging_nan_inf_filter keeps NaN out of the printed loss; the grad norm says it.
    first_nan = min(step for step, record in truth.items() if math.isnan(record["grad_norm"]))
    assert first_nan == NAN_AT
    found = {finding["kind"]: finding for finding in result.report["findings"]}
    assert found["grad_norm_nonfinite"]["rank"] == "" and found["grad_norm_nonfinite"]["step"] == first_nan
    assert result.counters("training_anomalies_total").get(("grad_norm_nonfinite", ""), 0) >= 1
    # That NaN grad norm is the NaN incident, though the loss printed finite (issue 32).
    first_found = min(result.findings("loss_nonfinite"), key=lambda finding: finding["step"])
    assert (first_found["rank"], first_found["step"]) == ("", first_nan)
