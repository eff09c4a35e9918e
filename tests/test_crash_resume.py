"""A job that crashed and was started again from its checkpoint, read by ``analyze`` from the real runs' files.

Two capture styles, each a real run kept whole with its ground truth (tests/fixtures/SOURCES.md; the live runs are
tests/real/test_torchrun_ddp.py and tests/real/test_msrun.py):

- torchrun, ``torchrun ... > train.log 2>&1`` then ``torchrun ... --resume >> train.log 2>&1``: one console of both
  attempts (``ddp_crash_resume/``);
- msrun into a new ``--log_dir`` beside the first (``msrun_crash_resume_new_log_dir/``: ``run/``, then ``resume/``,
  which sorts before it by name): both attempts' ``worker_<R>.log`` and ``scheduler.log``.

In both, every step of both attempts is read as the program computed it (the steps after the checkpoint twice),
the first attempt's crash (rank 1's RuntimeError) is the one incident's root cause, and the resume is one restart
of each rank with no anomaly.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path

from exporter.analyze.sources import resolve
from exporter.follow import Follower
from exporter.pipeline import Pipeline
from exporter.state import TrainingState
from tests.real.harness import check_crash_resume_report, check_rows_are_every_record
from tests.support.exporter_process import exporter_command, exporter_environment

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
TORCHRUN = REAL / "ddp_crash_resume"  # rank 1 raised in step 12 (after step 11); checkpoints after steps 4, 8, ...
TORCHRUN_LOG_DIRS = REAL / "ddp_crash_resume_new_log_dir"  # the same job, each launch with its own --log-dir
MSRUN = REAL / "msrun_crash_resume_new_log_dir"  # rank 1 raised in step 8 (after step 7); checkpoints every 5 steps
RANKS = ("0", "1", "2", "3")


def _analyze(log_dir: Path, tmp_path: Path) -> tuple[dict, list[dict[str, str]]]:
    steps_csv = tmp_path / "steps.csv"
    analyzed = subprocess.run(exporter_command("analyze", str(log_dir), "--format", "json", "--csv", str(steps_csv),
                                               "--run", "job"),
                              capture_output=True, text=True, env=exporter_environment(), timeout=120, check=False)
    assert analyzed.returncode == 0, analyzed.stderr
    (report,) = json.loads(analyzed.stdout)["runs"]
    with open(steps_csv, newline="") as handle:
        return report, list(csv.DictReader(handle))


def test_torchrun_console_appended_by_the_resume(tmp_path):
    report, rows = _analyze(TORCHRUN / "logs", tmp_path)
    check_rows_are_every_record(rows, TORCHRUN / "truth")
    # Ranks 0 and 2's tracebacks (gloo's "Connection closed by peer") end only at their next lines, the resumed
    # attempt's, read after rank 1 started again: still the first attempt's, explained by rank 1's exception.
    check_crash_resume_report(report, ("traceback", "1", 11), restarts=dict.fromkeys(RANKS, 1))
    (cause,) = [finding for finding in report["findings"] if finding["root_cause"]]
    assert {(follower["kind"], follower["rank"]) for follower in cause["explains"]} >= \
        {("collective", "0"), ("collective", "2")}


def test_torchrun_resumed_into_a_new_log_dir_launches_in_the_order_written(tmp_path):
    """torchrun ``--log-dir logs/run``, then ``--log-dir logs/resume --resume`` (``--redirects 3``): each launch its
    own run directory with ``attempt_0/<R>/stdout.log``, whose lines carry no time: the launches go by their files'
    modification times, set here as the run wrote them (git keeps none; ``resume/`` sorts before ``run/``)."""
    log_dir = tmp_path / "logs"
    shutil.copytree(TORCHRUN_LOG_DIRS / "logs", log_dir)
    for launch, seconds in (("run", 1_796_311_060), ("resume", 1_796_311_090)):
        for path in (log_dir / launch).rglob("*.log"):
            os.utime(path, (seconds, seconds))
    report, rows = _analyze(log_dir, tmp_path)
    check_rows_are_every_record(rows, TORCHRUN_LOG_DIRS / "truth")
    check_crash_resume_report(report, ("traceback", "1", 11), restarts=dict.fromkeys(RANKS, 1))


def test_msrun_resumed_into_a_new_log_dir_attempts_in_the_order_written(tmp_path):
    report, rows = _analyze(MSRUN / "logs", tmp_path)
    check_rows_are_every_record(rows, MSRUN / "truth")
    check_crash_resume_report(report, ("traceback", "1", 7), restarts=dict.fromkeys(RANKS, 1))
    by_rank = {rank["rank"]: rank for rank in report["ranks"]}
    assert by_rank["1"]["files"] == ["run/worker_1.log", "resume/worker_1.log"]
    assert by_rank[""]["restarts"] == 1  # the scheduler's: the workers registered again, counted once


def test_msrun_attempts_go_by_their_lines_times_not_by_name_or_modification_time(tmp_path):
    """Copied with the modification times the other way round (a copy does not keep them): the same order."""
    log_dir = tmp_path / "logs"
    shutil.copytree(MSRUN / "logs", log_dir)
    for attempt, seconds in (("run", 2_000_000_000), ("resume", 1_000_000_000)):
        for path in (log_dir / attempt).iterdir():
            os.utime(path, (seconds, seconds))
    sources = [(source.name, source.role.attempt) for source in resolve([str(log_dir)], "job").sources
               if source.role.rank == "1"]
    assert sources == [("run/worker_1.log", 0), ("resume/worker_1.log", 1)]


def test_attempt_directories_without_a_timed_line_go_by_modification_time(tmp_path):
    for attempt, loss, seconds in (("a", 2.0, 2_000_000_000), ("b", 1.0, 1_000_000_000)):
        (tmp_path / attempt).mkdir()
        for rank in (0, 1):
            path = tmp_path / attempt / f"worker_{rank}.log"
            path.write_text(f"step=1 loss={loss}\nstep=2 loss={loss}\n")
            os.utime(path, (seconds, seconds))
    (tmp_path / "train.log").write_text("step=1 loss=1.0\n")  # rank-less: a series of its own, no attempt
    roles = {source.name: source.role.attempt for source in resolve([str(tmp_path)], "job").sources}
    assert roles == {"b/worker_0.log": 0, "b/worker_1.log": 0, "a/worker_0.log": 1, "a/worker_1.log": 1,
                     "train.log": None}


def test_a_rank_in_one_directory_only_is_no_attempt(tmp_path):
    """Ranks spread over directories (one per node under one PATH) are no attempts: each rank in one of them."""
    for node, ranks in (("node0", (0, 1)), ("node1", (2, 3))):
        (tmp_path / node).mkdir()
        for rank in ranks:
            (tmp_path / node / f"worker_{rank}.log").write_text("step=1 loss=1.0\n")
    assert {source.role.attempt for source in resolve([str(tmp_path)], "job").sources} == {None}


def test_a_rank_s_logs_of_other_names_in_other_directories_are_no_attempt(tmp_path):
    """msrun's worker log beside CANN's device log of the same rank (``device-0/``): two logs of rank 0, no attempt."""
    (tmp_path / "msrun_log").mkdir()
    (tmp_path / "msrun_log" / "worker_0.log").write_text("step=1 loss=1.0\n")
    (tmp_path / "ascend" / "device-0").mkdir(parents=True)
    (tmp_path / "ascend" / "device-0" / "device-4242_20261203150000.log").write_text("[ERROR] RUNTIME(4242,python)\n")
    sources = resolve([str(tmp_path)], "job").sources
    assert {source.role.rank for source in sources} == {"0"}
    assert {source.role.attempt for source in sources} == {None}


def test_a_sidecar_reads_a_rank_s_stderr_after_its_stdout(tmp_path):
    """torchrun ``--redirects 3``: rank 1's step lines in stdout.log, its traceback in stderr.log (which sorts
    first). Read in one pass, the traceback comes after the step lines printed before it: the crash is at step 11,
    the rank's last, not at the step before (the matrix's live check saw 10 when the set of grown files put stderr
    first)."""
    log_dir = tmp_path / "logs"
    shutil.copytree(TORCHRUN_LOG_DIRS / "logs" / "run", log_dir)
    state = TrainingState()
    Follower([str(log_dir)], Pipeline(state, node="n", run_for_directory=lambda _: "job")).run_once()
    cause = state.causes.cause("job")
    assert cause is not None
    assert (cause.event.kind, cause.event.key[2], cause.event.step) == ("traceback", "1", 11)
