"""Lightning's CSVLogger ``metrics.csv`` read as a source beside the console (issue 32).

The files are what a real run printed (tests/fixtures/real/lightning_csv/, SOURCES.md): the logger's file before
and after it wrote itself again under a wider header (the epoch's mean became a column at the end of epoch 0),
the console beside it, and the program's ground truth. The logger's ``step`` is its count of optimizer steps
before the row's batch: the global step (the truth's, the bar's) less one.
"""

from __future__ import annotations

import csv
import json
import shutil
import struct
import subprocess
from pathlib import Path

from exporter.parse.csv_rows import CsvRows
from tests.support.exporter_process import ExporterProcess, exporter_command, exporter_environment
from tests.support.net import eventually

REAL = Path(__file__).parent / "fixtures" / "real" / "lightning_csv"
CSV_PATH = "csv/lightning_logs/version_0/metrics.csv"


def truth() -> dict[int, dict]:
    """The logger's step -> rank 0's values of that batch."""
    records = (json.loads(line) for line in (REAL / "truth_rank_0.jsonl").read_text().splitlines())
    return {record["step"] - 1: record for record in records}


def float32(value: float) -> float:
    """What a float32 tensor of the value holds: the logger writes the learning rate logged as one."""
    return struct.unpack("f", struct.pack("f", value))[0]


def expected(record: dict) -> dict[str, float]:
    return {"loss": record["raw_loss"], "learning_rate": float32(record["raw_learning_rate"]),
            "grad_norm": record["raw_grad_norm"]}


def test_rows_become_named_values_and_a_rewrite_skips_the_rows_read():
    before = (REAL / "metrics_before_rewrite.csv").read_bytes()
    after = (REAL / "metrics.csv").read_bytes()
    rows = CsvRows()
    first = rows.lines(before).split(b"\n")
    assert first[0] == b""  # the header names the columns, it is no line to parse
    assert first[1] == (b"epoch=0 step=0 train/grad_norm=7.706175804138184 train/loss_step=17.431169509887695 "
                        b"train/lr=0.05000000074505806")
    again = [line for line in rows.lines(after).split(b"\n") if line]
    # The rewrite: steps 0-8 were read, the rest follows once; the epoch's mean row keeps its empty cells out.
    assert again[0].startswith(b"epoch=0 step=9 train/grad_norm=13.746421813964844 train/loss_step=")
    assert b"epoch=0 step=9 train/loss_epoch=5.143572807312012" in again
    assert len(again) == len(after.splitlines()) - 1 - 9


def test_another_header_is_another_file_read_from_its_first_row():
    rows = CsvRows()
    rows.lines((REAL / "metrics.csv").read_bytes())
    assert rows.lines(b"step,loss\r\n0,1.5\r\n") == b"\nstep=0 loss=1.5\n"  # step 0 again: read


def test_rows_read_from_the_middle_take_the_header_from_the_first_line():
    header, *body = (REAL / "metrics.csv").read_bytes().splitlines(keepends=True)
    rows = CsvRows(lambda: header)  # reading resumed at a checkpoint's offset: no header in what is read
    assert rows.lines(body[5]).startswith(b"epoch=0 step=5 train/grad_norm=")


def test_analyze_reads_every_row_beside_the_console_each_its_own_series_on_the_empty_rank(tmp_path):
    logs = tmp_path / "logs"
    (logs / CSV_PATH).parent.mkdir(parents=True)
    shutil.copy(REAL / "train.log", logs / "train.log")
    shutil.copy(REAL / "metrics.csv", logs / CSV_PATH)
    steps_csv = tmp_path / "steps.csv"
    analyzed = subprocess.run(exporter_command("analyze", str(logs), "--format", "json", "--csv", str(steps_csv),
                                               "--run", "job"),
                              capture_output=True, text=True, env=exporter_environment(), timeout=120, check=True)
    runs = {run["run"]: run for run in json.loads(analyzed.stdout)["runs"]}
    assert set(runs) == {"job", f"job/{CSV_PATH}"}  # two copies of rank 0's values: two series, never one
    assert [(rank["rank"], rank["files"]) for rank in runs[f"job/{CSV_PATH}"]["ranks"]] == [("", [CSV_PATH])]
    assert [(rank["rank"], rank["files"]) for rank in runs["job"]["ranks"]] == [("", ["train.log"])]
    assert runs[f"job/{CSV_PATH}"]["findings"] == runs["job"]["findings"] == []
    with open(steps_csv, newline="") as handle:
        read = {int(row["step"]): row for row in csv.DictReader(handle) if row["run"] == f"job/{CSV_PATH}"}
    assert sorted(read) == sorted(truth())
    for step, record in truth().items():
        assert {name: float(read[step][name]) for name in ("loss", "learning_rate", "grad_norm")} == expected(record)


def test_serve_follows_the_file_through_its_rewrite_without_a_restart_or_a_second_copy(tmp_path):
    logs = tmp_path / "logs"
    path = logs / CSV_PATH
    path.parent.mkdir(parents=True)
    shutil.copy(REAL / "train.log", logs / "train.log")
    path.write_bytes((REAL / "metrics_before_rewrite.csv").read_bytes())
    exporter = ExporterProcess("--log-dir", str(logs), "--run", "job", "--node", "n", wait_for="/-/ready").start()
    run = f"job/{CSV_PATH}"
    try:
        eventually(lambda: exporter.total("training_step", run=run) == 8, 15, what=exporter.output)
        with path.open("wb") as handle:  # the logger's rewrite: the file opened with "w", every row under the header
            handle.write((REAL / "metrics.csv").read_bytes())
        last = max(truth())
        eventually(lambda: exporter.total("training_step", run=run) == last, 15, what=exporter.output)
        assert exporter.total("training_step", run="job", rank="") == last + 1  # the console's bar beside it
        assert exporter.total("training_restarts_total", run=run) == 0
        assert exporter.total("training_anomalies_total", run=run) == 0
        assert exporter.total("training_loss", run=run) == expected(truth()[last])["loss"]
        assert exporter.total("training_learning_rate", run=run) == expected(truth()[last])["learning_rate"]
    finally:
        exporter.stop()
