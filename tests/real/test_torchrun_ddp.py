"""A real DDP loop under ``torchrun --standalone --nproc-per-node 4`` with gloo on the CPU, followed live.

Each incident's root cause (the cause model, exporter/state/cause.py) is asserted live, as the sidecar serves it
(``training_incident_info``), and in analyze (the ``root_cause`` finding and what it ``explains``): the culprit's
rank and kind, never one of the others' gloo failures, which come as tracebacks too and carry no timestamp.

Each run is its own job (tests/real/programs/ddp_train.py); the incidents are caused for real: a NaN,
a rank SIGKILLed, a rank raising, a rank hanging past gloo's timeout, an absurd allocation.
"""

from __future__ import annotations

import math
import shlex

import pytest

from tests.real.harness import (
    RealRun,
    check_crash_resume_report,
    check_every_record,
    check_steps,
    keep_fixture,
    matrix,
    require,
    run_job,
    torchrun,
)

pytestmark = pytest.mark.real

STEPS, AT, CULPRIT = 30, 12, 1


@pytest.fixture(scope="module", autouse=True)
def _torch():
    require("torch")


def _ddp(tmp_path, capture: str, *args: str, steps: int = STEPS, settled=None) -> RealRun:
    # Captured to one file or a pipe: torchrun --tee 3 puts [defaultN]: before each line, as people run it.
    launcher = ("--tee", "3") if capture != "redirects" else ()
    result = run_job(tmp_path, torchrun("ddp_train.py", "--truth", str(tmp_path / "truth"), "--steps", str(steps),
                                        *args, launcher=launcher), capture=capture, settled=settled)
    keep_fixture(result, f"ddp_{args[1] if args else 'healthy'}")
    return result


def _error_ranks(result: RealRun, kind: str, samples=None) -> set[str]:
    return {rank for (named, rank) in result.counters("training_errors_total", samples) if named == kind}


def _no_alarm(result: RealRun) -> None:
    assert result.counters("training_anomalies_total") == {}
    assert result.counters("training_errors_total") == {}
    assert result.report["findings"] == []


def test_healthy_run_every_step_exact_and_nothing_raised(tmp_path):
    result = _ddp(tmp_path, "redirects")
    assert result.returncode == 0
    check_steps(result)
    _no_alarm(result)


def test_nan_from_a_step_on_one_rank(tmp_path):
    result = _ddp(tmp_path, "file", "--incident", "nan", "--rank", str(CULPRIT), "--at", str(AT))
    check_steps(result)
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"], incident["step"]) == ("loss_nonfinite", CULPRIT, AT)
    truth = result.truth()
    last_nan = {str(rank): max(step for step, record in steps.items() if math.isnan(record["loss"]))
                for rank, steps in truth.items()}
    nan_steps = {str(rank): sum(math.isnan(record["loss"]) for record in steps.values())
                 for rank, steps in truth.items()}
    nan_norms = {str(rank): sum(math.isnan(record["grad_norm"]) for record in steps.values())
                 for rank, steps in truth.items()}
    # Live: each non-finite step counted on its rank, the latest at that rank's last NaN step.
    assert result.counters("training_anomalies_total") == {
        **{("loss_nonfinite", rank): count for rank, count in nan_steps.items()},
        **{("grad_norm_nonfinite", rank): count for rank, count in nan_norms.items()}}
    served = {dict(labels)["rank"]: value for (name, labels), value in result.after.items()
              if name == "training_last_anomaly_step" and dict(labels).get("kind") == "loss_nonfinite"}
    assert served == last_nan
    # analyze: where each run began, the culprit's at its step, the others' one step later (the all-reduced
    # NaN gradients reach their weights at the end of step AT).
    found = {finding["rank"]: finding["step"] for finding in result.findings("loss_nonfinite")}
    assert found == {rank: AT if rank == str(CULPRIT) else AT + 1 for rank in last_nan}
    assert result.counters("training_errors_total") == {}
    # The origin: the one rank whose loss went NaN a step before the others (their grad norms NaN at its step,
    # after the all-reduce), live and in analyze.
    assert result.incidents_live() == {("loss_nonfinite", str(CULPRIT), str(AT))}
    cause = result.root_cause()
    assert (cause["kind"], cause["rank"], cause["step"]) == ("loss_nonfinite", str(CULPRIT), AT)
    others = {str(rank) for rank in range(4)} - {str(CULPRIT)}
    assert {follower["rank"] for follower in cause["explains"] if follower["kind"] == "loss_nonfinite"} == others


@matrix
def test_one_rank_sigkilled(tmp_path):
    result = _ddp(tmp_path, "file", "--incident", "kill", "--rank", str(CULPRIT), "--at", str(AT))
    assert result.returncode != 0
    check_steps(result)
    assert _error_ranks(result, "killed") == {str(CULPRIT)}
    (killed,) = result.findings("killed")
    assert killed["rank"] == str(CULPRIT) and killed["step"] == AT - 1  # it died in step AT, after AT - 1
    # The others lost their peer in the all-reduce (gloo's "Connection reset/closed by peer"): a collective failure
    # beside its traceback, never a traceback alone. (Or torchrun's SIGTERM came first and they printed nothing.)
    assert _error_ranks(result, "traceback") <= _error_ranks(result, "collective")
    assert str(CULPRIT) not in _error_ranks(result, "collective")
    _culprit_is_the_cause(result, "killed", AT - 1)


def test_one_rank_raising(tmp_path):
    result = _ddp(tmp_path, "pipe", "--incident", "raise", "--rank", str(CULPRIT), "--at", str(AT))
    assert result.returncode != 0
    check_steps(result)
    others = {str(rank) for rank in range(4)} - {str(CULPRIT)}
    # The culprit's exception, a plain traceback; the others lost it in the all-reduce: gloo's "Connection
    # closed by peer", a collective failure, or, a rank still waiting for the culprit's data when its 5 s ran out
    # before the connection closed, gloo's "Timed out waiting 5000ms for recv", a collective timeout (seen in a CI
    # run under load); their own traceback too: their processes died of it.
    assert str(CULPRIT) in _error_ranks(result, "traceback")
    lost = _error_ranks(result, "collective") | _error_ranks(result, "collective_timeout")
    # (Unless torchrun's SIGTERM reached them first: then they printed nothing.)
    assert _error_ranks(result, "traceback") - {str(CULPRIT)} <= lost <= others
    crash = next(finding for finding in result.findings("traceback") if finding["rank"] == str(CULPRIT))
    assert crash["step"] == AT - 1
    # torchrun's agent names one failed rank in its ChildFailedError summary, counted there: the culprit, or a rank
    # that died of the broken all-reduce before the agent looked (its "first observed failure" is the earliest
    # timestamp, and a child without an error file gets the second the agent collected it: seen in a CI run under
    # load). The cause model names the culprit either way (below, and a copy of this run's log with rank 0 named).
    (named,) = _error_ranks(result, "elastic")
    assert named == str(CULPRIT) or named in lost, named
    _culprit_is_the_cause(result, "traceback", AT - 1)


SAVE_EVERY = 4  # the last checkpoint before the crash: after step 8; steps 9 to AT - 1 are done twice


@matrix
def test_one_rank_raising_then_the_job_resumed_from_its_checkpoint_into_the_same_file(tmp_path):
    """Rank 1 raises at step AT; the job is started again with ``--resume`` and every rank trains on from its
    step-8 checkpoint, both written the way people capture a job they restart by hand: ``torchrun ... > train.log
    2>&1``, then ``torchrun ... --resume >> train.log 2>&1``. The sidecar follows the one file throughout."""
    log = tmp_path / "logs" / "train.log"
    common = ("--truth", str(tmp_path / "truth"), "--steps", str(STEPS), "--checkpoints", str(tmp_path / "ckpt"),
              "--save-every", str(SAVE_EVERY))
    first = torchrun("ddp_train.py", *common, "--incident", "raise", "--rank", str(CULPRIT), "--at", str(AT),
                     launcher=("--tee", "3"))
    again = torchrun("ddp_train.py", *common, "--resume", launcher=("--tee", "3"))
    script = f"{shlex.join(first)} > {shlex.quote(str(log))} 2>&1; {shlex.join(again)} >> {shlex.quote(str(log))} 2>&1"
    result = run_job(tmp_path, ["sh", "-c", script], capture="own")
    keep_fixture(result, "ddp_crash_resume")
    assert result.returncode == 0  # the resumed job finished
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"], incident["step"]) == ("traceback", CULPRIT, AT)
    _crashed_then_resumed(result)
    assert max(result.gauge("training_step", str(CULPRIT), samples) or 0 for samples in result.during) > AT


@matrix
def test_one_rank_raising_then_the_job_resumed_into_a_new_log_dir(tmp_path):
    """The same crash and resume, each launch with its own ``--log-dir`` under the followed directory (``logs/run``,
    then ``logs/resume``, which sorts before it) and ``--redirects 3``: torchrun writes a run directory per launch,
    each with ``attempt_0/<R>/stdout.log`` and ``stderr.log``; the consoles beside the followed directory."""
    common = ("--truth", str(tmp_path / "truth"), "--steps", str(STEPS), "--checkpoints", str(tmp_path / "ckpt"),
              "--save-every", str(SAVE_EVERY))
    launches = []
    for name, args in (("run", ("--incident", "raise", "--rank", str(CULPRIT), "--at", str(AT))),
                       ("resume", ("--resume",))):
        command = torchrun("ddp_train.py", *common, *args,
                           launcher=("--log-dir", str(tmp_path / "logs" / name), "--redirects", "3"))
        launches.append(f"{shlex.join(command)} > {shlex.quote(str(tmp_path / f'console_{name}.log'))} 2>&1")
    result = run_job(tmp_path, ["sh", "-c", "; ".join(launches)], capture="own")
    keep_fixture(result, "ddp_crash_resume_new_log_dir")
    assert result.returncode == 0
    # analyze: the launches in the order written (their files' modification times: no line of theirs has a time).
    _crashed_then_resumed(result)


def _crashed_then_resumed(result: RealRun) -> None:
    """Both attempts' steps exact (the ones done again too). Live: while the first attempt was down, rank 1's
    exception was the incident; the resume (the step going back on every rank) is a restart of each rank and ends
    it; the resumed run raises nothing. analyze: the same crash, one restart of each rank."""
    check_every_record(result)
    ranks = {str(rank) for rank in range(4)}
    during = {incident for samples in result.during for incident in result.incidents_live(samples)}
    assert during == {("traceback", str(CULPRIT), str(AT - 1))}, during
    assert result.incidents_live() == set()
    assert {rank: result.gauge("training_restarts_total", rank) for rank in ranks} == dict.fromkeys(ranks, 1.0)
    assert result.counters("training_anomalies_total") == {}
    check_crash_resume_report(result.report, ("traceback", str(CULPRIT), AT - 1), restarts=dict.fromkeys(ranks, 1))


def _culprit_is_the_cause(result: RealRun, kind: str, step: int) -> None:
    """Live and in analyze, the culprit's failure is the root cause, and it explains the others' failures."""
    assert result.incidents_live() == {(kind, str(CULPRIT), str(step))}, result.incidents_live()
    cause = result.root_cause()
    assert (cause["kind"], cause["rank"], cause["step"]) == (kind, str(CULPRIT), step), cause
    failed = {rank for (named, rank) in result.counters("training_errors_total")} - {str(CULPRIT), ""}
    assert {follower["rank"] for follower in cause["explains"]} >= failed


def _names_the_hang(samples) -> bool:
    return any(name == "training_incident_info" and dict(labels)["kind"] == "hang" for (name, labels) in samples)


def test_one_rank_hanging_until_the_others_time_out(tmp_path):
    result = _ddp(tmp_path, "redirects", "--incident", "hang", "--rank", str(CULPRIT), "--at", str(AT),
                  "--timeout", "5", settled=_names_the_hang)
    assert result.returncode != 0
    check_steps(result)
    others = {str(rank) for rank in range(4)} - {str(CULPRIT)}
    # What holds: every other rank's wait ended in gloo's timeout, a collective timeout on that rank.
    assert _error_ranks(result, "collective_timeout") == others
    assert {finding["rank"] for finding in result.findings("collective_timeout")} == others
    assert {finding["step"] for finding in result.findings("collective_timeout")} == {AT - 1}
    # The culprit printed nothing more: no failure of its own, and it stopped writing first.
    assert str(CULPRIT) not in _error_ranks(result, "traceback")
    (stopped,) = result.findings("first_stopped_rank")
    assert (stopped["rank"], stopped["step"]) == (str(CULPRIT), AT - 1)
    last_line = {rank: result.gauge("training_last_log_timestamp_seconds", rank) for rank in map(str, range(4))}
    assert min(last_line, key=lambda rank: last_line[rank] or 0.0) == str(CULPRIT)  # live too
    # The silent rank is the root cause, a hang at its last step, live and in analyze; it explains the others'
    # timeouts (and tracebacks).
    assert result.incidents_live() == {("hang", str(CULPRIT), str(AT - 1))}
    assert result.gauge("training_anomalies_total", str(CULPRIT)) is None  # (a per-kind counter: see below)
    assert result.counters("training_anomalies_total") == {("hang", str(CULPRIT)): 1.0}
    cause = result.root_cause()
    assert (cause["kind"], cause["rank"], cause["step"]) == ("hang", str(CULPRIT), AT - 1), cause
    assert {follower["rank"] for follower in cause["explains"] if follower["kind"] == "collective_timeout"} == others


@matrix
def test_absurd_allocation_is_out_of_memory(tmp_path):
    result = _ddp(tmp_path, "file", "--incident", "oom", "--rank", str(CULPRIT), "--at", str(AT))
    assert result.returncode != 0
    check_steps(result)
    assert _error_ranks(result, "oom") == {str(CULPRIT)}
    (oom,) = result.findings("oom")
    assert oom["rank"] == str(CULPRIT) and oom["step"] == AT - 1
    _culprit_is_the_cause(result, "oom", AT - 1)


@matrix
def test_a_long_run_with_a_small_batch_that_stops_learning_raises_no_spike_and_a_true_plateau(tmp_path):
    """3,500 steps of a small-batch cross entropy (heavy-tailed noise: one hard batch in fifty doubles the loss) whose
    learning rate is 0 from step 300: the loss goes flat there, noise only. No hard batch is a spike; the plateau
    tracker's last progress comes within about a thousand steps of step 300 (the smoothed loss's last approach to the
    flat level, below the window's margin, counts once the noise takes it clearly below its value at the last
    progress: docs/detectors.md), and 2,000 steps later the plateau is analyze's finding on every rank (live,
    TrainingLossPlateau, info). Nothing else (a slowdown here would be the machine's: the steps take 10 ms)."""
    result = run_job(tmp_path, torchrun("ddp_train.py", "--truth", str(tmp_path / "truth"), "--steps", "3500",
                                        "--batch", "8", "--step-seconds", "0", "--task", "classify", "--lr", "0.02",
                                        "--stop-learning-at", "300", launcher=("--tee", "3")),
                     capture="file", timeout=600)
    assert result.returncode == 0
    check_steps(result)
    assert result.counters("training_errors_total") == {}
    # Live: no spike (a plateau is no counter there). A slowdown only where the truth shows one (the machine's load).
    assert set(result.counters("training_anomalies_total")) <= {("slowdown", str(rank)) for rank in range(4)}
    _slowdowns_are_in_the_truth(result)
    assert {finding["kind"] for finding in result.report["findings"]} - {"slowdown"} == {"loss_plateau"}
    plateaus = result.findings("loss_plateau")
    assert {finding["rank"] for finding in plateaus} == {str(rank) for rank in range(4)}
    assert all(150 <= finding["step"] <= 1500 for finding in plateaus), plateaus
    for steps in result.truth().values():  # the truth: no learning from step 300 on
        assert all(steps[step]["learning_rate"] == 0.0 for step in range(300, 3501))


def _slowdowns_are_in_the_truth(result: RealRun) -> None:
    """Steps of 10 ms on a 2-core machine shared with other jobs: another process taking the cores slows the run for
    real. A slowdown finding must be one the program's own step times show: the 20 steps from it (the detector's
    ``slowdown_steps``) took at least 1.3 times the rank's usual step before it, from the end of the detector's
    20-step warm-up (its factor is 1.5 over a baseline that slow steps do not move; 1.3 leaves room for the
    smoothing, a detector's false alarm on a steady run stays far below). The usual step is the lower quartile of
    all the steps before: the baseline follows the unloaded steps, and a load that came and went earlier (a CI
    rehearsal: steps before at a median of 8.6 ms, the usual 6 ms, the 20 after at 10.8 ms) lifts the median, as a
    load that comes slowly lifts the last 100 steps."""
    truth = result.truth()
    for finding in result.findings("slowdown"):
        times = truth[int(finding["rank"])]
        step = finding["step"]
        before = sorted(times[at]["step_time_seconds"] for at in range(21, step) if at in times)
        after = [times[at]["step_time_seconds"] for at in range(step, step + 20) if at in times]
        assert before and after, finding
        usual = before[len(before) // 4]
        assert sum(after) / len(after) >= 1.3 * usual, \
            f"a slowdown the truth does not show: {finding}, usual {usual}, after {after}"


@matrix
def test_a_long_healthy_run_with_a_small_batch_raises_nothing(tmp_path):
    """3,000 steps of a small-batch cross entropy (one hard batch in fifty doubles the loss) that keeps learning: block
    means of 250 steps from about 2.0 to 0.75, by 0.3 from steps 750-999 to 1750-1999, every 100-step stretch within
    the noise of a batch of 8. A healthy run: no spike (the spike detector's spread is an envelope of the recent
    noise), no plateau (the tracker's progress is also the smoothed loss clearly below its value at the last
    progress: docs/detectors.md), no error, no finding; live, no anomaly counted."""
    result = run_job(tmp_path, torchrun("ddp_train.py", "--truth", str(tmp_path / "truth"), "--steps", "3000",
                                        "--batch", "8", "--step-seconds", "0", "--task", "classify", "--lr", "0.002",
                                        launcher=("--tee", "3")), capture="file", timeout=600)
    assert result.returncode == 0
    check_steps(result)
    for steps in result.truth().values():  # it keeps learning: the truth says so
        middle = [steps[step]["loss"] for step in range(750, 1000)]
        late = [steps[step]["loss"] for step in range(1750, 2000)]
        assert sum(middle) / 250 - sum(late) / 250 > 0.15
    assert result.counters("training_errors_total") == {}
    # A slowdown only where the truth shows one (the machine's load slows 10 ms steps for real).
    assert set(result.counters("training_anomalies_total")) <= {("slowdown", str(rank)) for rank in range(4)}
    _slowdowns_are_in_the_truth(result)
    assert [finding for finding in result.report["findings"] if finding["kind"] != "slowdown"] == []


@matrix
def test_one_rank_slowed_slows_every_rank(tmp_path):
    """Rank 1 sleeps 0.4 s more in every step from step 26 (after the slowdown detector's 20 steps of warm-up): DDP's
    all-reduce makes every rank wait for it, so every rank's step time grows alike. A slowdown of the run, on every
    rank from that step, not a straggler. (Slowed from step 12, inside the warm-up, it was found at step 21.)"""
    slow_at = 26
    result = _ddp(tmp_path, "file", "--incident", "slow", "--rank", str(CULPRIT), "--at", str(slow_at),
                  "--slow-seconds", "0.4", steps=45)
    assert result.returncode == 0
    check_steps(result)
    (incident,) = result.incidents()
    assert (incident["incident"], incident["rank"], incident["step"]) == ("slowdown", CULPRIT, slow_at)
    slowdowns = result.findings("slowdown")
    assert {finding["rank"]: finding["step"] for finding in slowdowns} == dict.fromkeys(map(str, range(4)), slow_at)
    assert result.counters("training_errors_total") == {}
    assert not result.findings("straggler")
