"""A real MindSpore 2.10.0 data-parallel job under ``msrun`` (4 CPU workers), printed by MindFormers 2.1.0's own
callbacks (``MFLossMonitor``, ``TrainingStateMonitor``), followed live on msrun's log directory
(``worker_<R>.log``, ``scheduler.log``, and in the healthy and SIGKILL runs msrun's own console kept there as
``msrun.log``), then ``analyze`` on the same files.

The program is tests/real/programs/ms_train.py, run from MindSpore's own venv (.venv-ms, make setup-real). One
run in every CI run (healthy); the incidents in the matrix (TRAINLOG_REAL_MATRIX=1, make test-real).
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.real.harness import (
    VALUES,
    RealRun,
    check_crash_resume_report,
    check_every_record,
    check_steps,
    keep_fixture,
    matrix,
    msrun,
    msrun_environment,
    require_msrun,
    run_job,
)
from tests.support.drills import SHIPPED_RULES
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually
from tests.support.prometheus import PrometheusServer

pytestmark = pytest.mark.real

STEPS, AT, CULPRIT = 16, 8, 1
RANKS = {str(rank) for rank in range(4)}


@pytest.fixture(scope="module", autouse=True)
def _mindspore():
    require_msrun()


def _job(tmp_path, *args: str, name: str, steps: int = STEPS, timeout: float = 300, watch=None,
         capture: str = "msrun") -> RealRun:
    result = run_job(tmp_path, msrun(tmp_path / "logs", "ms_train.py", "--truth", str(tmp_path / "truth"),
                                     "--steps", str(steps), *args),
                     capture=capture, env=msrun_environment(), timeout=timeout, watch=watch)
    keep_fixture(result, f"msrun_{name}")
    return result


def _alerts_of(directory: Path, fired: dict[str, set[str]], *, waiting_for: str):
    """A ``watch`` for run_job: a real Prometheus scraping the sidecar every second with the shipped rules (not
    shortened: the alerts here need no window), and after the job, the alerts firing once ``waiting_for`` is."""

    @contextlib.contextmanager
    def watch(sidecar: ExporterProcess) -> Iterator[None]:
        with PrometheusServer(directory, [f"127.0.0.1:{sidecar.port}"], rule_files=[SHIPPED_RULES]) as prometheus:
            # Counters must be scraped before the incident, or increase() sees nothing.
            eventually(lambda: prometheus.query('up{job="trainlog-exporter"} == 1'), 30, interval=0.2,
                       what="a first scrape")
            yield

            def firing() -> bool:
                fired.clear()
                for alert in prometheus.api("alerts")["alerts"]:
                    fired.setdefault(alert["labels"]["alertname"], set()).add(
                        f"{alert['state']}:{alert['labels'].get('rank', '')}")
                return waiting_for in fired

            eventually(firing, 60, interval=0.5, what=lambda: f"{waiting_for} among the alerts: {fired}")

    return watch


def _error_ranks(result: RealRun, kind: str, samples=None) -> set[str]:
    return {rank for (named, rank) in result.counters("training_errors_total", samples) if named == kind}


def test_healthy_run_every_step_exact_and_nothing_raised(tmp_path):
    # msrun's console kept beside its logs (LOG_DIR/msrun.log): its copies of every worker's lines count nothing.
    result = _job(tmp_path, name="healthy", capture="msrun_console")
    assert result.returncode == 0
    assert (result.log_dir / "msrun.log").stat().st_size > 0
    check_steps(result)
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


@matrix
def test_nan_from_a_step_on_one_rank(tmp_path):
    fired: dict[str, set[str]] = {}
    result = _job(tmp_path, "--incident", "nan", "--rank", str(CULPRIT), "--at", str(AT), name="nan",
                  watch=_alerts_of(tmp_path / "prometheus", fired, waiting_for="TrainingLossNonFinite"))
    assert result.returncode == 0
    # Live through a real Prometheus with the shipped rules: the NaN alert on every rank, and no other alert firing.
    # (TrainingStepTimeJitter may be pending, its `for` is 30 minutes: MindSpore's first step takes five times
    # the others, and 16 steps of 0.5 s are a short window to take a spread over.)
    assert {name: ranks for name, ranks in fired.items() if any(rank.startswith("firing") for rank in ranks)} == \
        {"TrainingLossNonFinite": {f"firing:{rank}" for rank in RANKS}}
    assert set(fired) <= {"TrainingLossNonFinite", "TrainingStepTimeJitter"}
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


@matrix
def test_one_rank_hanging_until_the_others_ring_all_reduce_fails(tmp_path):
    result = _job(tmp_path, "--incident", "hang", "--rank", str(CULPRIT), "--at", str(AT), name="hang")
    assert result.returncode != 0
    check_steps(result)
    others = RANKS - {str(CULPRIT)}
    # Every other rank's ring all-reduce wait failed: a collective timeout on that rank (MindSpore's CPU ring
    # names the request of the rank it waited for: its ring predecessor), the AllReduce kernel failing with it.
    assert _error_ranks(result, "collective_timeout") == others
    assert _error_ranks(result, "collective") == others
    timeouts = result.findings("collective_timeout")
    assert {finding["rank"] for finding in timeouts} == others
    assert {finding["step"] for finding in timeouts} == {AT - 1}
    # The culprit printed no failure of its own.
    assert str(CULPRIT) not in _error_ranks(result, "traceback") | _error_ranks(result, "collective_timeout")
    # The root cause is the hung rank: the one the others' ring waits name (peer_rank), though it printed
    # MindSpore's TCP warnings after its peers died and so did not stop writing first.
    cause = result.root_cause()
    assert (cause["kind"], cause["rank"]) == ("hang", str(CULPRIT))


@matrix
def test_absurd_allocation_is_out_of_memory(tmp_path):
    result = _job(tmp_path, "--incident", "oom", "--rank", str(CULPRIT), "--at", str(AT), name="oom")
    assert result.returncode != 0
    check_steps(result)
    assert _error_ranks(result, "oom") == {str(CULPRIT)}
    (oom,) = result.findings("oom")
    assert (oom["rank"], oom["step"], oom["root_cause"]) == (str(CULPRIT), AT - 1, True)


@matrix
def test_one_rank_raising(tmp_path):
    result = _job(tmp_path, "--incident", "raise", "--rank", str(CULPRIT), "--at", str(AT), name="raise")
    assert result.returncode != 0
    check_steps(result)
    assert _error_ranks(result, "traceback") >= {str(CULPRIT)}
    crash = next(finding for finding in result.findings("traceback") if finding["rank"] == str(CULPRIT))
    assert (crash["step"], crash["root_cause"]) == (AT - 1, True)
    # msrun kills the other workers as soon as one exits: they print nothing; its scheduler times out the culprit.
    assert {finding["rank"] for finding in result.findings("node_timeout")} == {str(CULPRIT)}


@matrix
def test_one_rank_sigkilled_leaves_no_word_in_the_worker_logs(tmp_path):
    """Rank 1 SIGKILLs itself at step AT, msrun's console kept as LOG_DIR/msrun.log (docs/formats.md).

    What the worker logs and scheduler.log hold: the killed rank's last step, and nothing printed by it or about it.
    msrun kills the other workers at once; then its scheduler times out whichever node it misses first, not
    necessarily the killed one. Only msrun's console says "Worker process PID exit with exception. Error code: -9.",
    by pid, which rank 1's own MindSpore records (``DISTRIBUTED(PID,...)``) name: ``killed`` on rank 1, the cause.
    """
    result = _job(tmp_path, "--incident", "kill", "--rank", str(CULPRIT), "--at", str(AT), name="kill",
                  capture="msrun_console")
    assert result.returncode != 0
    check_steps(result)  # the console's copies of the workers' step lines make no rows and no series of their own
    assert max(result.truth()[CULPRIT]) == AT - 1
    assert result.counters("training_anomalies_total") == {}
    # Live (the last scrape and every scrape after the kill was read) and in analyze: killed on rank 1 only.
    assert _error_ranks(result, "killed") == {str(CULPRIT)}
    assert any(_error_ranks(result, "killed", samples) == {str(CULPRIT)} for samples in result.during)
    assert result.incidents_live() == {("killed", str(CULPRIT), str(AT - 1))}
    (killed,) = result.findings("killed")
    assert (killed["rank"], killed["step"], killed["root_cause"]) == (str(CULPRIT), AT - 1, True)
    # The console counts no copy of a worker's failure: the only other failures are the scheduler's own.
    console = {kind for (kind, rank) in result.counters("training_errors_total") if rank == ""}
    assert console <= {"traceback"}, console
    assert {finding["kind"] for finding in result.root_cause()["explains"]} <= {"node_timeout", "traceback"}


@matrix
def test_crash_and_resume_from_a_checkpoint(tmp_path):
    """Rank 1 raises at step AT; msrun is started again and every rank resumes from its step-5 checkpoint.

    msrun opens the worker logs with "w": the second attempt erases the first's lines. Live, the sidecar read them
    before they were erased; analyze reads only what is left.
    """
    args = ("--truth", str(tmp_path / "truth"), "--steps", str(STEPS), "--incident", "crash", "--rank", str(CULPRIT),
            "--at", str(AT), "--checkpoints", str(tmp_path / "ckpt"), "--save-every", "5")
    attempts = [shlex.join(msrun(tmp_path / "logs", "ms_train.py", *args)) for _ in range(2)]
    script = "; ".join(attempts)
    result = run_job(tmp_path, ["sh", "-c", script], capture="msrun", env=msrun_environment(), timeout=400)
    keep_fixture(result, "msrun_crash_resume")
    assert result.returncode == 0  # the second attempt finished
    truth = result.truth()
    assert all(min(steps) == 1 and max(steps) == STEPS for steps in truth.values())
    # The files hold the second attempt only: steps 6 to STEPS, each exactly as the resumed run computed it.
    for row in result.rows:
        record = truth[int(row["rank"])][int(row["step"])]
        assert all(float(row[name]) == record[name] for name in VALUES), (row, record)
    assert {(row["rank"], int(row["step"])) for row in result.rows} == \
        {(rank, step) for rank in RANKS for step in range(6, STEPS + 1)}
    # Live, the sidecar saw the first attempt's steps up to AT - 1 before the files were truncated.
    assert max(result.gauge("training_step", str(CULPRIT), samples) or 0 for samples in result.during) >= AT - 1
    # Live, the crash was the incident, on its rank, until the resume (its own failure, not the others' follow-ups);
    # the resume (every worker log truncated and written again) is a restart of every rank, which ends it.
    incidents = {incident for samples in result.during for incident in result.incidents_live(samples)}
    assert incidents and {rank for _kind, rank, _step in incidents} == {str(CULPRIT)}, incidents
    assert all((result.gauge("training_restarts_total", rank) or 0) >= 1 for rank in RANKS)
    assert result.incidents_live() == set()  # the resumed run finished: no current incident


RESUME_DIRS = ("run", "resume")  # named so that their name order is not the order they were written in


@matrix
def test_crash_and_resume_into_a_new_log_dir_keeps_both_attempts(tmp_path):
    """Rank 1 raises at step AT; msrun is started again with a new ``--log_dir`` beside the first (both under the
    followed directory) and every rank resumes from its step-5 checkpoint. Both attempts stay readable: analyze
    orders them by their files' first line's time (the name ``resume`` sorts before ``run``), names the first
    attempt's crash as its incident's cause and counts the resume as a restart of every rank."""
    args = ("--truth", str(tmp_path / "truth"), "--steps", str(STEPS), "--incident", "crash", "--rank", str(CULPRIT),
            "--at", str(AT), "--checkpoints", str(tmp_path / "ckpt"), "--save-every", "5")
    script = "; ".join(shlex.join(msrun(tmp_path / "logs" / name, "ms_train.py", *args)) for name in RESUME_DIRS)
    result = run_job(tmp_path, ["sh", "-c", script], capture="msrun", env=msrun_environment(), timeout=400)
    keep_fixture(result, "msrun_crash_resume_new_log_dir")
    assert result.returncode == 0  # the second attempt finished
    check_every_record(result)
    check_crash_resume_report(result.report, ("traceback", str(CULPRIT), AT - 1), restarts=dict.fromkeys(RANKS, 1))
    # Live: the crash was the incident, on its rank, until the resume; the resume a restart of every rank.
    incidents = {incident for samples in result.during for incident in result.incidents_live(samples)}
    assert {(kind, rank) for kind, rank, _step in incidents} == {("traceback", str(CULPRIT))}, incidents
    assert all((result.gauge("training_restarts_total", rank) or 0) >= 1 for rank in RANKS)
    assert result.incidents_live() == set()
