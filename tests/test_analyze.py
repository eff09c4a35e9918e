"""`analyze`: the post-mortem over finished logs, from simulated runs and logs written here by hand.

The hand-written lines are synthetic (not claimed to be real): they carry their own
timestamps so that each finding's step, rank and time can be checked exactly.
"""

from __future__ import annotations

import csv
import decimal
import errno
import gzip
import io
import json
import os
import random
import re
import subprocess
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from exporter.analyze.command import run_analyze
from exporter.analyze.timestamps import PREFIX_BYTES, LineClock
from exporter.simulate.texts import nccl_watchdog_lines
from tests.support.exporter_process import REPO, exporter_command, exporter_environment
from tests.support.simulated import run_config, write_simulated

START = datetime(2026, 6, 9, 10, 20, 30)


def analyze_json(*paths: Path | str, **options: Any) -> dict:
    out, err = io.StringIO(), io.StringIO()
    status = run_analyze([str(path) for path in paths], "json", stdout=out, stderr=err, **options)
    assert status == 0, err.getvalue()
    return json.loads(out.getvalue())


def only_run(report: dict) -> dict:
    (run,) = report["runs"]
    return run


def findings(run: dict, kind: str) -> list[dict]:
    return [finding for finding in run["findings"] if finding["kind"] == kind]


def line_time(log: Path, marker: str) -> float:
    """The timestamp a simulated line prints (``[INFO] 2026-06-09 10:20:40 [...``), read here independently."""
    line = next(line for line in log.read_text().splitlines() if marker in line)
    assert line.startswith("[INFO] ")
    return datetime.strptime(line[7:26], "%Y-%m-%d %H:%M:%S").timestamp()


def keyvalue_lines(rank: int, steps: range, start: datetime, seconds_per_step: float = 1.0,
                   loss: float = 2.5) -> list[str]:
    lines = []
    for step in steps:
        when = start.timestamp() + (step - steps.start) * seconds_per_step
        stamp = datetime.fromtimestamp(when)
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S},{stamp.microsecond // 1000:03d} INFO rank {rank} "
                     f"step={step} loss={loss - step * 1e-4:.4f} lr=0.0001 grad_norm=1.5 step_time=1.0")
    return lines


def write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_simulated_incidents_each_at_its_step_rank_and_time(tmp_path):
    log_dir = write_simulated(tmp_path, run_config("spike@80", "nan:1@150", "oom:3@200", ranks=4, steps=300))
    run = only_run(analyze_json(log_dir))
    assert run["run"] == "drill"
    assert run["steps"] == {"first": 1, "last": 199, "total": 300, "lines": 4 * 199}  # total: as planned
    spikes = findings(run, "loss_spike")
    assert sorted(finding["rank"] for finding in spikes) == ["0", "1", "2", "3"]
    assert {finding["step"] for finding in spikes} == {80}
    spike_time = line_time(log_dir / "worker_2.log", "step:[   80/")
    assert next(f for f in spikes if f["rank"] == "2")["time"] == spike_time
    context = spikes[0]["context"]
    assert context["grad_norm"][1] > 4 * context["grad_norm"][0]  # the grad norm jumped with the loss
    assert context["learning_rate"][0] == pytest.approx(context["learning_rate"][1], rel=0.01)
    (nan,) = findings(run, "loss_nonfinite")
    assert (nan["rank"], nan["step"], nan["count"], nan["last_step"]) == ("1", 150, 50, 199)
    assert nan["time"] == line_time(log_dir / "worker_1.log", "step:[  150/")
    (oom,) = findings(run, "oom")
    assert (oom["rank"], oom["step"], oom["root_cause"]) == ("3", 199, True)
    assert run["loss"]["last_nonfinite_ranks"] == ["1"]
    assert run["findings"][0]["kind"] in ("loss_spike", "grad_norm_spike")  # ordered by time: the spike first


def test_healthy_run_has_no_findings(tmp_path):
    log_dir = write_simulated(tmp_path, run_config(ranks=4, steps=400))
    run = only_run(analyze_json(log_dir))
    assert run["findings"] == []
    assert run["steps"]["last"] == 400
    low, high = run["loss"]["normal_range"]
    assert low <= run["loss"]["last"] <= high * 1.05
    assert run["loss"]["last_nonfinite_ranks"] == run["loss"]["outside_normal_range_ranks"] == []
    text = io.StringIO()
    assert run_analyze([str(log_dir)], "text", stdout=text) == 0
    assert "1. Is the loss in a normal range?\n   Yes." in text.getvalue()
    assert "Nothing went wrong that the log shows" in text.getvalue()


def test_nccl_error_is_the_root_cause_of_the_watchdog_timeouts(tmp_path):
    log_dir = write_simulated(tmp_path, run_config("nccl:2@100", ranks=4, steps=200))
    run = only_run(analyze_json(log_dir))
    (cause,) = [finding for finding in run["findings"] if finding["root_cause"]]
    assert (cause["kind"], cause["rank"]) == ("nccl", "2")
    timeouts = findings(run, "nccl_timeout")
    assert sorted(finding["rank"] for finding in timeouts) == ["0", "1", "3"]
    assert all(finding["time"] > cause["time"] for finding in timeouts)
    # DESIGN 3.6: the root cause lists the findings it accounts for.
    assert sorted((follower["kind"], follower["rank"]) for follower in cause["explains"]) == [
        ("nccl_timeout", "0"), ("nccl_timeout", "1"), ("nccl_timeout", "3")]
    assert not any("explains" in finding for finding in run["findings"] if not finding["root_cause"])
    text = io.StringIO()
    assert run_analyze([str(log_dir)], "text", stdout=text) == 0
    assert "It explains nccl_timeout on ranks 0, 1, 3." in text.getvalue()


@pytest.mark.parametrize("with_csv", [False, True])  # --csv reads a batch per line: same findings
def test_straggler_is_a_slowdown_at_its_first_slow_step(tmp_path, with_csv):
    # Rank 2 turns slow at step 100; every rank waits for it at each collective (synchronous training).
    log_dir = write_simulated(tmp_path, run_config("straggler:2@100", ranks=3, steps=200))
    run = only_run(analyze_json(log_dir, csv=str(tmp_path / "steps.csv") if with_csv else None))
    slow = findings(run, "slowdown")
    assert sorted((finding["rank"], finding["step"]) for finding in slow) == [("0", 100), ("1", 100), ("2", 100)]
    assert all(f["context"]["step_time_seconds"][1] > 2 * f["context"]["step_time_seconds"][0] for f in slow)


def test_two_nodes_first_stopped_rank_on_the_second(tmp_path):
    job = tmp_path / "job-42"
    for node, ranks in (("node1", (0, 1)), ("node2", (2, 3))):
        for rank in ranks:
            steps = range(1, 201) if rank != 3 else range(1, 121)  # rank 3 stops 80 s before the others
            write(job / node / "msrun_log" / f"worker_{rank}.log", keyvalue_lines(rank, steps, START))
    report = analyze_json(job / "node1" / "msrun_log", job / "node2" / "msrun_log")
    run = only_run(report)
    assert run["run"] == "job-42"
    assert {(rank["node"], rank["rank"]) for rank in run["ranks"]} == {
        ("node1", "0"), ("node1", "1"), ("node2", "2"), ("node2", "3")}
    (stopped,) = findings(run, "first_stopped_rank")
    assert (stopped["node"], stopped["rank"], stopped["step"]) == ("node2", "3", 120)
    assert stopped["time"] == START.timestamp() + 119
    rank_0 = next(rank for rank in run["ranks"] if rank["rank"] == "0")
    assert rank_0["first_line_time"] == START.timestamp() and rank_0["last_line_time"] == START.timestamp() + 199


def test_oom_on_one_rank_is_the_root_cause_of_the_others_collective_timeouts(tmp_path):
    log_dir = tmp_path / "job" / "logs"
    oom_at = datetime(2026, 6, 9, 10, 22, 10, 500000)
    for rank in range(4):
        lines = keyvalue_lines(rank, range(1, 101), START)
        if rank == 1:
            lines += [f"{oom_at:%Y-%m-%d %H:%M:%S},500 ERROR rank 1 torch.OutOfMemoryError: CUDA out of memory. "
                      "Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.15 GiB"]
        else:
            lines += nccl_watchdog_lines(datetime(2026, 6, 9, 10, 32, 10, 271503 + rank), rank, 4711)
        write(log_dir / f"worker_{rank}.log", lines)
    run = only_run(analyze_json(log_dir))
    (oom,) = findings(run, "oom")
    assert (oom["rank"], oom["step"], oom["root_cause"]) == ("1", 100, True)
    assert oom["time"] == oom_at.timestamp()
    timeouts = findings(run, "nccl_timeout")
    assert sorted(finding["rank"] for finding in timeouts) == ["0", "2", "3"]
    assert not any(finding["root_cause"] for finding in timeouts)
    # glog's [E0609 10:32:10.271503 ...] carries no year: the file's year is taken.
    assert {finding["time"] for finding in timeouts if finding["rank"] == "2"} == {
        datetime(2026, 6, 9, 10, 32, 10, 271505).timestamp()}
    markdown = io.StringIO()
    assert run_analyze([str(log_dir)], "markdown", stdout=markdown) == 0
    assert "Root cause: oom on rank 1 at 2026-06-09 10:22:10.500" in markdown.getvalue()
    assert "| oom (root cause) | 100 | - | 1 |" in markdown.getvalue()


def test_restart_after_steps_is_found_with_its_cost(tmp_path):
    before = keyvalue_lines(0, range(1, 501), START)
    resumed_at = datetime(2026, 6, 9, 10, 40, 0)
    after = keyvalue_lines(0, range(401, 601), resumed_at)
    log = write(tmp_path / "run" / "logs" / "worker_0.log", before + after)
    run = only_run(analyze_json(log))
    (restart,) = findings(run, "restart")
    assert (restart["step"], restart["time"]) == (401, resumed_at.timestamp())
    assert "100 steps done again" in restart["message"]
    assert f"{(resumed_at.timestamp() - START.timestamp() - 499) / 60:.0f} min without a step" in restart["message"]


def test_rotated_generations_are_read_oldest_first_gz_included(tmp_path):
    log_dir = tmp_path / "run" / "logs"
    lines = keyvalue_lines(0, range(1, 301), START)
    log_dir.mkdir(parents=True)
    with gzip.open(log_dir / "worker_0.log.2.gz", "wt") as oldest:
        oldest.write("".join(line + "\n" for line in lines[:100]))
    write(log_dir / "worker_0.log.1", lines[100:200])
    write(log_dir / "worker_0.log", lines[200:])
    steps_csv = tmp_path / "steps.csv"
    out = io.StringIO()
    assert run_analyze([str(log_dir / "worker_0.log")], "json", csv=str(steps_csv), stdout=out) == 0
    run = only_run(json.loads(out.getvalue()))
    assert run["findings"] == []  # in order: no step went back, so no restart
    (rank,) = run["ranks"]
    assert rank["files"] == ["worker_0.log"] and rank["steps_total"] == 300 and rank["lines"] == 300
    rows = list(csv.DictReader(steps_csv.open()))
    assert [int(row["step"]) for row in rows] == list(range(1, 301))
    assert float(rows[0]["time"]) == START.timestamp()
    assert list(rows[0])[:10] == ["run", "node", "rank", "step", "time", "loss", "learning_rate", "grad_norm",
                                  "step_time_seconds", "throughput"]


def test_spikes_of_one_block_each_with_their_own_values_and_time(tmp_path):
    """Five loss spikes read in one batch: each finding has its step's line time, its loss before and at it, and
    the learning rate and grad norm around it (grad_norm printed on even steps only: its own steps)."""
    spikes = {100, 220, 300, 452, 500}
    lines = []
    for step in range(1, 601):
        stamp = START + timedelta(seconds=step)
        loss = 20.0 if step in spikes else 2.0 + 0.01 * (step * 7 % 5)
        grad_norm = f" grad_norm={1 + step / 1000}" if step % 2 == 0 else ""
        lines.append(f"{stamp:%Y-%m-%d %H:%M:%S},000 INFO rank 0 step={step} loss={loss} lr={step * 1e-6}"
                     f"{grad_norm} step_time=1.0")
    log = write(tmp_path / "train.log", lines)
    run = only_run(analyze_json(log))
    found = findings(run, "loss_spike")
    assert sorted(finding["step"] for finding in found) == sorted(spikes)
    assert [rank["anomalies"] for rank in run["ranks"]] == [{"loss_spike": len(spikes)}]  # counted at once
    for finding in found:
        step = finding["step"]
        assert finding["time"] == (START + timedelta(seconds=step)).timestamp()
        before = 2.0 + 0.01 * ((step - 1) * 7 % 5)
        assert finding["message"] == f"loss jumped from {before:.4g} to 20 at step {step}"
        assert finding["context"]["learning_rate"] == [(step - 1) * 1e-6, step * 1e-6]
        assert finding["context"]["grad_norm"] == [1 + (step - 2) / 1000, 1 + step / 1000]


def test_csv_has_a_column_per_aux_loss(tmp_path):
    record = ("2026-06-09 10:20:{second:02d},000 - mindformers - INFO - {{ step:[{step:5d}/  100], loss: {loss}, "
              "per_step_time: 850ms, lr: 1e-04, grad_norm: 1.5, throughput: 12.3T{aux} }}")
    lines = [record.format(second=step, step=step, loss=2.5, aux="") for step in (1, 2)]
    lines += [record.format(second=3, step=3, loss=2.4, aux=", load_balancing_loss: 0.01, mtp_1_loss: 2.6")]
    log = write(tmp_path / "r" / "logs" / "worker_5.log", lines)
    steps_csv = tmp_path / "steps.csv"
    assert run_analyze([str(log)], "json", csv=str(steps_csv), stdout=io.StringIO()) == 0
    rows = list(csv.DictReader(steps_csv.open()))
    assert [row["rank"] for row in rows] == ["5", "5", "5"]
    assert (rows[0]["load_balancing_loss"], rows[2]["load_balancing_loss"], rows[2]["mtp_1_loss"]) == ("", "0.01",
                                                                                                       "2.6")
    assert (rows[2]["step_time_seconds"], rows[2]["throughput"]) == ("0.85", "12.3")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r", "steps.csv"]  # the scratch file removed


def test_standard_input_with_rank_prefixes(tmp_path):
    lines = [f"[rank{rank}]:{line}" for rank in (0, 1) for line in keyvalue_lines(rank, range(1, 51), START)]
    result = subprocess.run(exporter_command("analyze", "-", "--format", "json", "--run", "piped"),
                            input="".join(line + "\n" for line in lines), capture_output=True, text=True,
                            env=exporter_environment(), cwd=REPO, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    run = only_run(json.loads(result.stdout))
    assert run["run"] == "piped"
    by_rank = {rank["rank"]: rank for rank in run["ranks"] if rank["rank"]}
    assert {name: (rank["last_step"], rank["last_line_time"]) for name, rank in by_rank.items()} == {
        "0": (50, START.timestamp() + 49), "1": (50, START.timestamp() + 49)}


@pytest.mark.parametrize(("name", "content", "says"), [
    ("missing.log", None, "no such file or directory"),
    ("worker_0.log.1.gz", b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"garbage", "corrupt compressed data"),
    ("worker_0.log", b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, "binary data"),
    ("worker_0.log.gz", b"plain text\n", "not gzip data"),
])
def test_bad_input_exits_2_with_one_line_naming_the_path(tmp_path, name, content, says):
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    result = subprocess.run(exporter_command("analyze", str(path)), capture_output=True, text=True,
                            env=exporter_environment(), cwd=REPO, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert str(path) in line and says in line and "Traceback" not in result.stderr


def test_a_stray_nul_of_a_signal_handler_leaves_a_log_text(tmp_path):
    # torch 2.13.0's DataLoader worker, dead of SIGBUS, ends its message with a NUL (tests/fixtures/SOURCES.md).
    fixture = REPO / "tests" / "fixtures" / "real" / "dataloader_bus_error.log"
    assert fixture.read_bytes().count(b"\0") == 1
    out = io.StringIO()
    assert run_analyze([str(fixture)], "json", stdout=out, stderr=io.StringIO()) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    assert [(finding["kind"], finding["step"]) for finding in run["findings"] if finding["root_cause"]] == \
        [("hardware", 8)]


def test_one_bad_file_among_many_is_a_warning(tmp_path):
    log_dir = tmp_path / "run" / "logs"
    write(log_dir / "worker_0.log", keyvalue_lines(0, range(1, 11), START))
    (log_dir / "worker_1.log").write_bytes(b"\0\1\2 core dump")
    out, err = io.StringIO(), io.StringIO()
    assert run_analyze([str(log_dir), str(tmp_path / "gone")], "json", stdout=out, stderr=err) == 0
    warnings = err.getvalue().splitlines()
    assert len(warnings) == 2 and "worker_1.log: binary data" in warnings[1] and "gone: no such file" in warnings[0]
    assert json.loads(out.getvalue())["warnings"] == [line.split("warning: ", 1)[1] for line in warnings]


def test_plot_without_matplotlib_says_how_to_install(tmp_path):
    log = write(tmp_path / "r" / "l" / "worker_0.log", keyvalue_lines(0, range(1, 5), START))
    code = ("import sys; sys.modules['matplotlib'] = None; from exporter.cli import main; "
            f"sys.exit(main(['analyze', {str(log)!r}, '--plot', {str(tmp_path / 'x.png')!r}]))")
    result = subprocess.run([*exporter_command()[:1], "-c", code], capture_output=True, text=True,
                            env=exporter_environment(), cwd=REPO, timeout=60, check=False)
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "pip install 'trainlog-exporter[plot]'" in line
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("ranks", [4, 20])
def test_plot_is_written_with_findings_marked(tmp_path, ranks):
    from matplotlib import image

    log_dir = write_simulated(tmp_path, run_config("spike@150", "straggler:1@250", "oom:2@400", ranks=ranks,
                                                   steps=500))
    png = tmp_path / f"analyze-{ranks}.png"
    out = io.StringIO()
    assert run_analyze([str(log_dir)], "text", plot_file=str(png), stdout=out) == 0
    pixels = image.imread(str(png))
    assert pixels.shape[0] > 1000 and pixels.shape[1] > 1300
    # Findings are drawn as dashed lines in red (anomalies) and black (the root cause): both colours present.
    rgb = pixels[..., :3]
    red = ((rgb[..., 0] > 0.75) & (rgb[..., 1] < 0.3) & (rgb[..., 2] < 0.3)).sum()
    black = (rgb.max(axis=-1) < 0.05).sum()
    assert red > 500 and black > 500


def test_a_resume_reports_its_restart_and_the_replayed_time_as_serve_counts_them(tmp_path):
    # restart@50: the job dies training step 50 and resumes from step 1 (checkpoints every 50 steps).
    log_dir = write_simulated(tmp_path, run_config("restart@50", ranks=2, steps=80))
    run = only_run(analyze_json(log_dir))
    workers = [rank for rank in run["ranks"] if rank["role"] == "worker"]
    assert [rank["restarts"] for rank in workers] == [1, 1]
    for rank in workers:
        step_time = rank["median_step_time_seconds"]
        assert rank["lost_seconds"]["replayed"] == pytest.approx(49 * step_time, rel=0.1)
        assert rank["productive_seconds"] == pytest.approx(80 * step_time, rel=0.1)
        assert 0.4 < rank["goodput"] < 0.65
    assert not findings(run, "loss_spike") and not findings(run, "loss_nonfinite")
    text = io.StringIO()
    assert run_analyze([str(log_dir)], "text", stdout=text) == 0
    assert "goodput (lost s by kind)" in text.getvalue() and "replayed " in text.getvalue()


def test_step_times_too_large_to_add_up_leave_the_run_read(tmp_path):
    # Two step times near float's limit: math.fsum raised OverflowError from the state, and analyze died on it.
    lines = keyvalue_lines(0, range(1, 31), START)
    lines[10:12] = [line.replace("step_time=1.0", "step_time=1.7e308") for line in lines[10:12]]
    run = only_run(analyze_json(write(tmp_path / "worker_0.log", lines)))
    (rank,) = run["ranks"]
    assert rank["last_step"] == 30 and rank["steps_total"] == 30
    assert rank["productive_seconds"] is None  # more seconds than a float holds: JSON has no infinity


def test_a_directory_of_rotated_generations_only_is_read(tmp_path):
    """Logs archived after the run: worker_0.log.1 and worker_0.log.2.gz, the live file gone."""
    log_dir = tmp_path / "run" / "logs"
    log_dir.mkdir(parents=True)
    lines = keyvalue_lines(0, range(1, 201), START)
    with gzip.open(log_dir / "worker_0.log.2.gz", "wt") as oldest:
        oldest.write("".join(line + "\n" for line in lines[:100]))
    write(log_dir / "worker_0.log.1", lines[100:])
    (rank,) = only_run(analyze_json(log_dir))["ranks"]
    assert (rank["rank"], rank["first_step"], rank["last_step"], rank["steps_total"]) == ("0", 1, 200, 200)



def test_a_rank_silent_inside_a_step_is_the_root_cause_not_the_tracebacks_of_those_that_waited(tmp_path):
    """Rank 3 hangs inside step 100; ranks 0-2 wait in the all-reduce, time out and raise. Their timeouts and
    tracebacks carry no timestamp (stderr), so they sit at their last step line's time, rank 3's too: the
    tracebacks are the timeouts' exceptions, followers, and the silent rank is the cause (issue 28)."""
    log_dir = tmp_path / "job" / "logs"
    for rank in range(4):
        # Rank 3 printed its last step a moment after the others printed theirs: their untimed timeouts sit
        # before it, and still follow it.
        lines = keyvalue_lines(rank, range(1, 100), START + timedelta(seconds=0.5 if rank == 3 else 0))
        if rank != 3:
            lines += [f"[Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=99, "
                      "OpType=ALLREDUCE, Timeout(ms)=10000) ran for 10917 milliseconds before timing out.",
                      "Traceback (most recent call last):", '  File "train.py", line 40, in <module>',
                      "    loss.backward()", "RuntimeError: the process group was aborted"]
        log = write(log_dir / f"worker_{rank}.log", lines)
        written = START.timestamp() + 98 + (0 if rank == 3 else 11)  # the others' last write: after the timeout
        os.utime(log, (written, written))
    run = only_run(analyze_json(log_dir))
    (cause,) = [finding for finding in run["findings"] if finding["root_cause"]]
    assert (cause["kind"], cause["rank"], cause["step"]) == ("hang", "3", 99)
    assert sorted((f["kind"], f["rank"]) for f in cause["explains"]) == sorted(
        [(kind, rank) for kind in ("nccl_timeout", "traceback") for rank in ("0", "1", "2")])
    assert "silent inside step 100" in cause["message"]
    (stopped,) = findings(run, "first_stopped_rank")  # still said, beside the cause
    assert (stopped["rank"], stopped["root_cause"]) == ("3", False)


@pytest.mark.parametrize("run", ["plain", "with, comma", 'with "quote"', "with\nnewline"])
def test_csv_cells_are_the_csv_modules_own(tmp_path, run):
    # Rows are written without the csv module's per-cell work where their cells are numbers, a batch's rows as one
    # text where no two lines make one row: the file is the one csv.writer writes (empty cells for None, nan and
    # inf as printed, quoted keys, padded to every aux column).
    from exporter.analyze.csv_out import COLUMNS, StepCsv
    from exporter.parse.records import StepRows
    nan, inf = float("nan"), float("inf")
    # (key, [(step, time, gauges, aux) of each line])
    batches = [((run, "node-1", "0"), [(1, 1781000440.0, {"loss": 2.5, "grad_norm": nan}, {}),
                                       (2, None, {"loss": inf, "throughput": 12.0}, {}),
                                       (3, 1781000441.5, {"loss": 3.0}, {})]),
               ((run, "node-1", "0"), [(4, None, {"loss": 1.0}, {"mtp_1_loss": 0.25})]),
               ((run, "", None), [(None, 1.5, {"learning_rate": 1e-05},
                                   {"load_balancing_loss": -inf, "mtp_1_loss": 1.0})]),
               ((run, "node-1", "3"), [(4, 2.0, {}, {}), (5, 2.5, {}, {})]),
               # A batch's rows with aux losses, one first printed in it, one in its last (pending) row.
               ((run, "node-1", "5"), [(9, 3.0, {"loss": 1.0}, {"mtp_1_loss": 0.5}),
                                       (10, None, {"loss": 0.9}, {"z_loss": 2.0, "load_balancing_loss": 0.1}),
                                       (11, 3.5, {}, {}), (12, 4.0, {"loss": 0.8}, {"router_loss": nan})]),
               # A number of a type of its own (a parser's Decimal): written as the csv module writes it.
               ((run, "node-1", "4"), [(6, None, {"loss": decimal.Decimal("2.50")}, {}), (7, None, {"loss": 1.5}, {}),
                                       (8, None, {"loss": decimal.Decimal("1E-7")}, {})])]
    path = tmp_path / "steps.csv"
    steps = StepCsv(str(path))
    for key, lines in batches:
        rows = StepRows()
        for _, _, gauges, aux in lines:
            rows.add(gauges, aux)
        steps.add(key, [line[0] for line in lines], [line[1] for line in lines], rows)
    steps.close()
    expected = io.StringIO(newline="")
    writer = csv.writer(expected)
    aux_names = list(dict.fromkeys(name for _, lines in batches for *_, aux in lines for name in aux))
    assert aux_names == ["mtp_1_loss", "load_balancing_loss", "z_loss", "router_loss"]
    writer.writerow([*COLUMNS, *aux_names])
    for key, lines in batches:
        for step, when, gauges, aux in lines:
            writer.writerow([*key, step, when, *(gauges.get(name) for name in COLUMNS[5:]),
                             *(aux.get(name) for name in aux_names)])
    assert path.read_bytes().decode() == expected.getvalue()


def test_a_batchs_spikes_heard_at_once_make_the_report_their_events_alone_make(tmp_path, monkeypatch):
    """Analysis._heard makes a detector's spikes of one batch findings at once: the report is what each of their
    events heard alone gives (the findings, their contexts and values, the loss's normal range, which the earliest
    loss anomaly of a batch bounds). The real torchrun console of the benchmark, its copies' steps going on: three
    spikes a copy and rank."""
    from benchmarks.real_console import CONSOLES, write_console
    from exporter.analyze.command import run_analyze
    from exporter.analyze.engine import Analysis

    log = write_console(tmp_path / "logs", CONSOLES[0], 20_000).path

    def report() -> dict:
        out = io.StringIO()
        assert run_analyze([str(log)], "json", stdout=out, stderr=io.StringIO()) == 0
        return json.loads(out.getvalue())

    at_once = report()
    assert sum(finding["kind"].endswith("_spike") for run in at_once["runs"] for finding in run["findings"]) > 300
    heard: list[int] = []
    hear = Analysis._heard

    def one_at_a_time(self: Analysis, events: list) -> None:
        heard.append(len(events))
        for event in events:
            hear(self, (event,))

    monkeypatch.setattr(Analysis, "_heard", one_at_a_time)
    assert report() == at_once
    assert max(heard) > 10  # the spikes of a batch came at once, and were each heard alone here


def test_spikes_heard_at_once_are_the_findings_of_each_heard_alone():
    """_heard's findings of a detector's spikes heard at once, and the earliest loss anomaly it notes (where the
    losses' normal range ends), are those _event makes of each alone: the first of a run's anomalies may come in a
    batch of several."""
    from exporter.analyze.engine import Analysis
    from exporter.state.events import Event

    key = ("run", "node", "3")
    events = [Event("loss_spike", key, step, 100.0 + step, 1, (1.0, 9.0), {"learning_rate": (0.1, 0.1)}, {})
              for step in (40, 12, 77)]
    made = []
    for hear in (lambda analysis: analysis._heard(events), lambda analysis: [analysis._event(e) for e in events]):
        analysis = Analysis()
        analysis._track(key, "worker")
        hear(analysis)
        made.append((analysis._findings, analysis._tracks[key].first_anomaly_step))
    assert made[0] == made[1]
    assert made[0][1] == 12 and [finding.step for finding in made[0][0]["run"]] == [40, 12, 77]


def test_a_failed_write_of_the_rows_is_raised():
    """A full device's ENOSPC reaches analyze, for a batch's rows (written on the kernel's threads, ROWS_AHEAD at a
    time: told by the flush, or by the put that waits for the oldest) and for single rows' texts (joined, written at
    TEXT_CHUNK characters or at the end)."""
    from exporter.analyze.csv_out import ROWS_AHEAD, TEXT_CHUNK, _RowWriter
    batch = ((list(range(100)), [0.5] * 100), 100, "run,,0,")
    with open("/dev/full", "wb") as full:
        writer = _RowWriter(full.fileno())
        writer.put(batch)
        with pytest.raises(OSError) as failed:
            writer.flush()
        assert failed.value.errno == errno.ENOSPC
        for _ in range(ROWS_AHEAD):
            writer.put(batch)
        with pytest.raises(OSError):
            writer.put(batch)
        writer.stop()  # the writings after the failed one fail too: each waited for
        writer.flush()  # the batch the failed put did not start was not taken: nothing is pending
        writer.put("run,,0,1,,0.5\r\n")
        with pytest.raises(OSError):
            writer.flush()
        for _ in range(TEXT_CHUNK // 10):  # ten characters each: not yet written
            writer.put("run,,0,1\r\n")
        writer.put("run,,0,1\r\n")  # past TEXT_CHUNK: the texts' write begins
        with pytest.raises(OSError):
            writer.flush()


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_of_lines_is_timed_as_each_line_alone(seed):
    """LineClock.times searches only the lines whose prefix holds one of the block's ``:dd:`` (or each line, in a
    block of many): what each line's own search gives, over real lines with and without times, short lines whose
    prefix runs into the next, and lines beginning as the line before them but cut or changed after that (a lead
    alike, its date-time looked for right after it: no other time may come of that)."""
    rng = random.Random(seed)
    real = Path(REPO, "tests/fixtures/real")
    names = ("hf_trainer_nan.log", "msrun_nan_worker_1.log", "mindformers_legacy.log", "torchrun_ddp_healthy.log")
    lines = [line for name in names for line in (real / name).read_bytes().splitlines()] + [b"", b"x", b"9:00:"]
    for line in [line for line in lines if re.search(rb"\d{4}-\d\d-\d\d", line)][:200]:
        at = re.search(rb"\d{4}-\d\d-\d\d", line).start()
        cut = rng.randint(at, min(len(line), at + 32))
        changed = rng.randint(at, min(len(line), at + 30) - 1)
        lines += [line[:cut], line[:changed] + rng.choice((b"x", b":", b"9", b" ")) + line[changed + 1:],
                  line[:at] + b"E1129 10:42:07.271503 " + line[at:], line[:at] + b" " * 120 + line[at:]]
    timed = [line for line in lines if re.search(rb":\d\d:", line)]
    untimed = [line for line in lines if line not in timed]
    clock = LineClock(2026)
    for _ in range(60):
        share = rng.choice((0.0, 0.002, 0.02, 0.5))  # of the block's lines with a time: none, few, many
        block = [rng.choice(timed if rng.random() < share else untimed) for _ in range(rng.randint(1, 600))]
        data = b"\n".join(block) + rng.choice((b"\n", b""))
        offsets = [0]
        for line in block[:-1]:
            offsets.append(offsets[-1] + len(line) + 1)
        starts = sorted(rng.sample(offsets, rng.randint(1, len(offsets))))
        assert clock.times(data, starts) == [LineClock(2026).at(data, start) for start in starts]


def test_a_time_cut_by_the_prefix_is_cut_in_every_line_alike():
    """Lines alike up to their date-time (the lead looked past): the time's fraction beyond PREFIX_BYTES is left out
    of each, as at() leaves it out of one."""
    real = [line for line in Path(REPO, "tests/fixtures/real/msrun_nan_worker_1.log").read_bytes().splitlines()
            if re.match(rb"2026-12-03 08:38:\d\d,\d\d\d ", line)] * 10  # a block of many times: each line read
    lead = b" " * (PREFIX_BYTES - len(b"2026-12-03 08:38:23,8"))  # the prefix ends after the fraction's first digit
    data = b"".join(lead + line + b"\n" for line in real)
    starts = [0]
    for line in real[:-1]:
        starts.append(starts[-1] + len(lead) + len(line) + 1)
    each = [LineClock(2026).at(data, start) for start in starts]
    assert [round(when % 1, 3) for when in each] == [int(line[20:21]) / 10 for line in real]
    assert LineClock(2026).times(data, starts) == each


@pytest.mark.parametrize("seed", range(3))
def test_a_local_time_is_read_alike_whether_its_minute_was_seen_or_not(seed):
    """A local time's minute is read once (LineClock._date_time): each time, read after others of its minute or
    alone by a new clock, is the one datetime makes of it; an impossible one (second 61 to 99, minute 60, day 32,
    month 13) is none, either way."""
    rng = random.Random(seed)
    texts = []
    for _ in range(3000):
        day, hour, minute = rng.choice((3, 4, 32)), rng.choice((0, 9, 23, 24)), rng.choice((0, 38, 59, 60))
        second = rng.choice((0, 1, 30, 59, 60, 61, 99))
        fraction = rng.choice(("", ",5", ".123", ".000001"))
        texts.append(f"2026-{rng.choice((11, 12, 13))}-{day:02d} {hour:02d}:{minute:02d}:{second:02d}{fraction} x")
    clock = LineClock(2026)
    for text in texts:
        data = text.encode() + b"\n"
        when, alone = clock.at(data, 0), LineClock(2026).at(data, 0)
        assert when == alone, text
        try:
            stamp = datetime.strptime(text[:19], "%Y-%m-%d %H:%M:%S")
        except ValueError:
            stamp = None
        if stamp is not None and not text.endswith(":60 x") and ":60" not in text[:19]:
            fraction = text[19:-2]
            assert when == stamp.timestamp() + (float("0" + fraction.replace(",", ".")) if fraction else 0.0), text
        elif text[11:13] == "24" or text[14:16] == "60" or text[17:19] in ("61", "99") or text[8:10] == "32" \
                or text[5:7] == "13":
            assert when is None, text


def test_a_short_line_is_not_given_the_next_lines_time():
    """Only a line's own prefix is searched: msrun's worker banner (42 bytes, no time) is followed by MindFormers'
    timestamped logger line, whose time falls inside the banner's first PREFIX_BYTES of the block."""
    data = Path(REPO, "tests/fixtures/real/msrun_nan_worker_1.log").read_bytes()
    banner = data.index(b"rank 1 of 4: training 16 steps from step 1\n")
    following = banner + len(b"rank 1 of 4: training 16 steps from step 1\n")
    assert LineClock(2026).at(data, following) == datetime(2026, 12, 3, 8, 38, 37, 576000).timestamp()
    assert LineClock(2026).at(data, banner) is None
    assert LineClock(2026).times(data, [banner, following])[0] is None


def test_a_closed_analysis_is_freed_without_the_collector():
    """The state holds the analysis's listener: once closed, the analysis and all it read are freed as their last
    reference goes (a large analysis's objects left to the collector cost a pass over the whole heap at exit)."""
    import gc
    import weakref

    from exporter.analyze.engine import Analysis
    from exporter.analyze.sources import resolve

    def analysed(close: bool) -> weakref.ref:
        analysis = Analysis()
        for source in resolve([str(REPO / "tests/fixtures/real/torchrun_ddp_healthy.log")], "job").sources:
            analysis.add(source)
        assert analysis.report().runs
        if close:
            analysis.close()
        return weakref.ref(analysis)

    gc.disable()
    try:
        assert analysed(close=True)() is None
        assert analysed(close=False)() is not None  # the cycle the close breaks
    finally:
        gc.enable()
        gc.collect()


def test_with_the_collector_off_the_cycles_are_collected_by_the_bytes_read(monkeypatch):
    """analyze_main turns the cyclic collector off (each collection traverses the findings again) and on again after;
    meanwhile a cycle left by the analysis is freed once CYCLES_COLLECTED_EVERY bytes were read since the last
    collection, not before."""
    import gc
    import weakref

    from exporter.analyze import command

    class Cycle:
        pass

    def garbage_cycle() -> weakref.ref:
        cycle = Cycle()
        cycle.itself = cycle  # type: ignore[attr-defined]
        return weakref.ref(cycle)

    every = command.CYCLES_COLLECTED_EVERY
    gc.disable()
    try:
        reading = command._Reading(None)
        cycle = garbage_cycle()
        reading.block_read("a.log", every - 1)
        assert cycle() is not None
        reading.block_read("b.log", every)
        assert cycle() is None
        cycle = garbage_cycle()
        reading.block_read("b.log", 2 * every - 1)  # counted from the last collection
        assert cycle() is not None
        reading.block_read("b.log", 2 * every)
        assert cycle() is None
    finally:
        gc.enable()
    enabled = []
    monkeypatch.setattr(command, "run_analyze", lambda *arguments: enabled.append(gc.isenabled()) or 0)
    assert command.analyze_main([str(REPO / "tests/fixtures/real/torchrun_ddp_healthy.log")]) == 0
    assert enabled == [False] and gc.isenabled()


def test_the_finished_csv_is_its_scratch_file_renamed(tmp_path, monkeypatch):
    """Without aux losses the scratch file (its header first) becomes the CSV by a rename: nothing is left beside it,
    its mode is a new file's, an existing file is replaced; a link is written through (it stays a link); an analysis
    that raises leaves no scratch file."""
    from exporter.analyze.engine import Analysis
    log = write(tmp_path / "r" / "logs" / "worker_0.log", keyvalue_lines(0, range(1, 101), START))
    out = tmp_path / "out"
    out.mkdir()
    fresh, existing, target, link = out / "fresh.csv", out / "existing.csv", out / "target.csv", out / "link.csv"
    existing.write_text("old\n")
    target.write_text("old\n")
    link.symlink_to(target.name)
    for path in (fresh, existing, link):
        assert run_analyze([str(log)], "json", csv=str(path), stdout=io.StringIO()) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert sorted(path.name for path in out.iterdir()) == ["existing.csv", "fresh.csv", "link.csv", "target.csv"]
    assert (fresh.stat().st_mode & 0o777) == 0o666 & ~umask
    assert link.is_symlink() and fresh.read_bytes() == existing.read_bytes() == target.read_bytes()
    rows = list(csv.DictReader(fresh.open()))
    assert [int(row["step"]) for row in rows] == list(range(1, 101))

    def failing(self, *args, **kwargs):
        raise RuntimeError("the analysis broke")

    monkeypatch.setattr(Analysis, "add", failing)
    with pytest.raises(RuntimeError):
        run_analyze([str(log)], "json", csv=str(out / "broken.csv"), stdout=io.StringIO())
    assert sorted(path.name for path in out.iterdir()) == ["existing.csv", "fresh.csv", "link.csv", "target.csv"]


def test_a_discarded_csv_waits_for_the_rows_being_written(tmp_path):
    """An analysis that raises discards its CSV while the kernel's thread may still write a batch to the scratch
    file: the write ends first, so the thread never writes to a descriptor closed and given to another file."""
    import time

    from exporter.analyze.csv_out import StepCsv
    from exporter.parse.records import StepRows
    count = 300_000
    rows = StepRows()
    rows.extend(count, {"loss": [0.5] * count}, {})
    steps = StepCsv(str(tmp_path / "steps.csv"))
    steps.add(("run", "", "0"), list(range(count)), [None] * count, rows)  # the rows but the last, on the thread
    steps.discard()
    with (tmp_path / "next.log").open("wb") as opened_next:  # likely given the descriptor the scratch file had
        time.sleep(0.3)
        assert opened_next.tell() == 0
    assert (tmp_path / "next.log").read_bytes() == b""
    assert sorted(path.name for path in tmp_path.iterdir()) == ["next.log"]


def test_a_csv_that_cannot_be_written_is_told(tmp_path):
    """No such directory, a full disk: one line on stderr naming the file and why, exit code 2, nothing left."""
    log = write(tmp_path / "r" / "logs" / "worker_0.log", keyvalue_lines(0, range(1, 101), START))
    for path, why in ((tmp_path / "missing" / "steps.csv", "No such file or directory"),
                      (Path("/dev/full"), "No space left on device")):
        err = io.StringIO()
        assert run_analyze([str(log)], "json", csv=str(path), stdout=io.StringIO(), stderr=err) == 2
        assert err.getvalue() == f"trainlog-exporter: analyze: cannot write the CSV {path}: {why}\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["r"]


@pytest.mark.parametrize("seed", range(3))
def test_the_json_is_the_standard_librarys_but_for_how_a_float_is_written(seed):
    """--format json is written by orjson: json.dumps(indent=2)'s text for strings (escaped to ASCII as json escapes
    them: control characters, DEL, beyond the BMP), keys of any type, integers of any size, nesting; a float may be
    written otherwise but reads back the same."""
    from exporter.analyze.render import json_text
    rng = random.Random(seed)
    characters = [chr(code) for code in range(0x80)] + ["é", "\x80", "中", "\u2028", "\uffff", "😀", "\U0010ffff"]
    rare = ["\udc80", 2**64 + 1]  # a lone surrogate (a file name's undecodable byte), an integer orjson refuses

    def text() -> str:
        return "".join(rng.choice(characters) for _ in range(rng.randint(0, 8)))

    def value(depth: int, floats: bool) -> object:
        kind = rng.random()
        if depth > 3 or kind < 0.5:
            leaves: list[object] = [None, True, False, rng.randint(-2**63, 2**63 - 1), text()]
            if rng.random() < 0.01:
                leaves.append(rng.choice(rare))
            if floats:
                leaves.append(rng.choice((rng.random(), 10 ** rng.randint(-12, 20) * rng.random(), -0.0, 1e-05)))
            return rng.choice(leaves)
        if kind < 0.75:
            return [value(depth + 1, floats) for _ in range(rng.randint(0, 4))]
        return {rng.choice((text(), rng.randint(-9, 9), None, True)): value(depth + 1, floats)
                for _ in range(rng.randint(0, 4))}

    for _ in range(300):
        document = value(0, floats=False)
        assert json_text(document) == json.dumps(document, indent=2)
        document = value(0, floats=True)
        written = json_text(document)
        assert written.isascii() and json.loads(written) == json.loads(json.dumps(document))


@pytest.mark.parametrize("huge", [None, 2**64 + 1], ids=["orjson", "json"])
def test_a_value_that_is_not_finite_is_null_in_the_json(huge):
    """JSON has no NaN: a finding's context and a rank's last loss go to the renderer as the analysis keeps them (NaN,
    inf, in tuples), and both writers (orjson; json for an integer orjson refuses) write null."""
    from exporter.analyze.render import json_text
    nan, inf = float("nan"), float("inf")
    document = {"context": {"grad_norm": (nan, 2.5), "loss": (1.5, inf)}, "last_loss": -inf, "steps": [1, huge],
                "nested": [{"value": (nan,)}]}
    assert json.loads(json_text(document)) == {"context": {"grad_norm": [None, 2.5], "loss": [1.5, None]},
                                               "last_loss": None, "steps": [1, huge], "nested": [{"value": [None]}]}
