"""A real PyTorch Lightning run (DDP with gloo, 2 ranks under torchrun) with its tqdm bar redirected to a file.

``> train.log 2>&1`` as people run it: the main process's bar, one line of redraws joined by carriage returns per
epoch, the metrics in its postfix; rank 1 prints no bar. The file's name holds no rank: its series has the empty
rank (DESIGN 3.2), and rank 1's own traceback (``[rank1]: ...``, written right after a redraw) goes to rank 1.
"""

from __future__ import annotations

import math
import struct

import pytest

from tests.real.harness import RealRun, check_steps, keep_fixture, matrix, require, run_job, torchrun

pytestmark = pytest.mark.real

EPOCHS, BATCHES, AT = 3, 10, 14
PRINTED = ("loss", "learning_rate", "grad_norm")  # the bar's rate is tqdm's smoothed it/s, no step time


@pytest.fixture(scope="module", autouse=True)
def _lightning():
    require("lightning")


def _lightning_run(tmp_path, name: str, *args: str) -> RealRun:
    result = run_job(tmp_path, torchrun("lightning_train.py", "--truth", str(tmp_path / "truth"), "--out",
                                        str(tmp_path / "out"), "--epochs", str(EPOCHS), "--batches", str(BATCHES),
                                        *args, nproc=2), capture="file")
    keep_fixture(result, f"lightning_{name}")
    return result


def test_healthy_bar_every_step_exact_across_epochs(tmp_path):
    result = _lightning_run(tmp_path, "healthy")
    assert result.returncode == 0
    assert sorted(result.truth()[0]) == list(range(1, EPOCHS * BATCHES + 1))  # the global step across epochs
    check_steps(result, {0: ""}, PRINTED)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


def test_nan_on_one_rank_reaches_the_bar(tmp_path):
    result = _lightning_run(tmp_path, "nan", "--incident", "nan", "--rank", "1", "--at", str(AT))
    check_steps(result, {0: ""}, PRINTED)
    truth = result.truth()[0]
    # Rank 1's NaN gradients, all-reduced, show in rank 0's grad norm at AT and in its loss from the step after.
    first_norm = min(step for step, record in truth.items() if math.isnan(record["grad_norm"]))
    first_loss = min(step for step, record in truth.items() if math.isnan(record["loss"]))
    assert (first_norm, first_loss) == (AT, AT + 1)
    found = {finding["kind"]: finding for finding in result.report["findings"]}
    assert (found["grad_norm_nonfinite"]["rank"], found["grad_norm_nonfinite"]["step"]) == ("", first_norm)
    assert (found["loss_nonfinite"]["rank"], found["loss_nonfinite"]["step"]) == ("", first_loss)
    nan_losses = sum(math.isnan(record["loss"]) for record in truth.values())
    assert result.counters("training_anomalies_total")[("loss_nonfinite", "")] == nan_losses  # each step once
    assert result.counters("training_errors_total") == {}


@matrix
def test_exception_on_rank_one_after_a_redraw(tmp_path):
    result = _lightning_run(tmp_path, "raise", "--incident", "raise", "--rank", "1", "--at", str(AT))
    assert result.returncode != 0
    check_steps(result, {0: ""}, PRINTED)
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"]) == ("traceback", 1)
    errors = result.counters("training_errors_total")
    assert errors.get(("traceback", "1")) == 1, errors
    # The cause on rank 1 (its traceback, or torchrun's report of the same exit: issue 28's cause model picks).
    causes = [finding for finding in result.report["findings"] if finding["root_cause"]]
    assert [finding["rank"] for finding in causes] == ["1"]


CSV_RUN = "job/csv/lightning_logs/version_0/metrics.csv"  # a further unranked file: its own series (docs/formats.md)


@matrix
def test_logged_metrics_printed_by_a_callback_and_the_csv_logger_beside_it(tmp_path):
    # self.log("train/loss", on_step=True, on_epoch=True) to a CSVLogger in the log directory, nothing in the bar's
    # postfix; a callback prints ``step=N train_loss=... lr=... grad_norm=...`` (after the bar's redraw, on its line):
    # no format names it. The logger writes metrics.csv again under a wider header at the end of epoch 0.
    result = run_job(tmp_path, torchrun("lightning_train.py", "--truth", str(tmp_path / "truth"), "--out",
                                        str(tmp_path / "out"), "--epochs", str(EPOCHS), "--batches", str(BATCHES),
                                        "--variant", "logged", "--csv-dir", str(tmp_path / "logs" / "csv"), nproc=2),
                     capture="file", other_runs=(CSV_RUN,))
    keep_fixture(result, "lightning_logged")
    assert result.returncode == 0
    check_steps(result, {0: ""}, PRINTED)
    info = [dict(labels) for (name, labels) in result.after if name == "training_info"]
    assert [labels.get("reading") for labels in info if labels["rank"] == "" and labels["run"] == "job"] == [
        "read as generic: step=step, loss=train_loss, learning_rate=lr, grad_norm=grad_norm"]
    assert result.report["findings"] == []
    # metrics.csv: every row once (its step is Lightning's count of optimizer steps before the batch: the global
    # step less one), the logged float32 values, live and in analyze, no restart at the logger's rewrite.
    truth = {step - 1: record for step, record in result.truth()[0].items()}
    rows = {int(row["step"]): row for row in result.other_rows if row["run"] == CSV_RUN}
    assert sorted(rows) == sorted(truth)
    for step, record in truth.items():
        assert {name: float(rows[step][name]) for name in PRINTED} == _logged(record), f"metrics.csv step {step}"
    last = max(truth)
    assert result.gauge("training_step", "", run=CSV_RUN) == last
    assert result.gauge("training_loss", "", run=CSV_RUN) == _logged(truth[last])["loss"]
    assert result.other_reports[CSV_RUN]["findings"] == []
    assert result.counters("training_anomalies_total") == result.counters("training_errors_total") == {}
    restarts = {dict(labels)["run"]: value for (name, labels), value in result.after.items()
                if name == "training_restarts_total"}
    assert restarts == {"job": 0, CSV_RUN: 0}


def _logged(record: dict) -> dict[str, float]:
    """What the CSVLogger writes of a step: the values as logged, the learning rate as a float32 tensor holds it."""
    (learning_rate,) = struct.unpack("f", struct.pack("f", record["raw_learning_rate"]))
    return {"loss": record["raw_loss"], "learning_rate": learning_rate, "grad_norm": record["raw_grad_norm"]}
