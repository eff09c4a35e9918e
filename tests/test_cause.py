"""The cause model (exporter/state/cause.py): which event of which rank broke a run.

Events here are built by hand (kinds, ranks, steps, times): the model's reasoning, not any log's wording.
The real runs that show it live and in analyze are in tests/real/test_torchrun_ddp.py, the simulated
cascades through Prometheus and Alertmanager in tests/test_e2e_alerts.py.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path

from exporter import kinds
from exporter.analyze.command import run_analyze
from exporter.analyze.engine import Analysis
from exporter.analyze.sources import resolve
from exporter.export.families import walk
from exporter.export.metrics_table import INCIDENT_INFO
from exporter.parse import LineParser
from exporter.state import TrainingState
from exporter.state.cause import CauseModel
from exporter.state.events import Event
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, sample, scrape

REAL = Path(__file__).resolve().parent / "fixtures" / "real"


def key(rank: int, node: str = "n0") -> tuple[str, str, str]:
    return ("job", node, str(rank))


def stepped(model: CauseModel, ranks: range, step: int, time: float | None) -> None:
    for rank in ranks:
        model.stepped(key(rank), step, time)


def summary(model: CauseModel) -> tuple[str, str, int | None, list[tuple[str, str]]]:
    cause = model.cause("job")
    assert cause is not None
    return (cause.event.kind, cause.event.rank, cause.event.step,
            sorted((follower.kind, follower.rank) for follower in cause.followers))


def test_the_out_of_memory_is_the_cause_of_the_others_timeouts_read_before_it():
    model = CauseModel()
    stepped(model, range(4), 99, 100.0)
    # Ranks 0 and 3 are read first (another file), their timeouts came later in time.
    model.heard(Event("collective_timeout", key(0), 99, 130.0))
    model.heard(Event("traceback", key(0), 99, 130.0))
    model.heard(Event("collective_timeout", key(3), 99, 131.0))
    model.heard(Event("oom", key(2), 99, 101.0))
    model.heard(Event("traceback", key(2), 99, 101.0))
    assert summary(model) == ("oom", "2", 99, [("collective_timeout", "0"), ("collective_timeout", "3"),
                                               ("traceback", "0")])


def test_untimed_lines_go_by_step_then_the_order_read():
    """No line has a time (stderr): the culprit's exception, read after the others' peer-closed failures."""
    model = CauseModel()
    stepped(model, range(4), 11, None)
    for rank in (0, 2, 3):
        model.heard(Event("collective", key(rank), 11, None))
        model.heard(Event("traceback", key(rank), 11, None))
    model.heard(Event("traceback", key(1), 11, None))
    model.heard(Event("elastic", key(1), 11, None))  # torchrun's summary, naming rank 1
    assert summary(model)[:3] == ("traceback", "1", 11)


def test_the_rank_whose_loss_went_nan_a_step_before_the_others_is_the_origin():
    model = CauseModel()
    for rank in (0, 1, 3):  # read first: their grad norm NaN after the all-reduce, their loss a step later
        model.heard(Event("grad_norm_nonfinite", key(rank), 12, None))
        model.heard(Event("loss_nonfinite", key(rank), 13, None))
    model.heard(Event("loss_nonfinite", key(2), 12, None))
    model.heard(Event("grad_norm_nonfinite", key(2), 12, None))
    kind, rank, step, followers = summary(model)
    assert (kind, rank, step) == ("loss_nonfinite", "2", 12)
    assert ("loss_nonfinite", "0") in followers and ("grad_norm_nonfinite", "3") in followers


def test_a_grad_norm_alone_is_the_cause_where_no_loss_went_nan():
    model = CauseModel()
    model.heard(Event("grad_norm_nonfinite", key(1), 40, 10.0))
    assert summary(model)[:2] == ("grad_norm_nonfinite", "1")


def test_a_named_failure_is_the_cause_rather_than_the_traceback_that_carried_it():
    model = CauseModel()
    model.heard(Event("traceback", key(2), 50, 10.0))
    model.heard(Event("oom", key(2), 50, 10.0))
    assert summary(model)[:2] == ("oom", "2")


def test_the_rank_silent_inside_a_step_is_the_hang_the_others_timeouts_follow():
    model = CauseModel()
    stepped(model, range(4), 69, 100.0)
    for rank in (0, 2, 3):
        model.stepped(key(rank), 69, 101.0)  # they printed on; rank 1 stopped inside step 70
        model.heard(Event("collective_timeout", key(rank), 69, 160.0))
        model.line(key(rank), 160.0)
    assert model.hang("job", now=162.0) is None  # the followers are too fresh: a primary may still be read
    hang = model.hang("job", now=200.0)
    assert hang is not None and (hang.kind, hang.rank, hang.step) == ("hang", "1", 69)
    model.heard(hang)
    assert summary(model) == ("hang", "1", 69, [("collective_timeout", rank) for rank in "023"])
    assert model.hang("job", now=300.0) is None  # named once


def test_the_rank_the_others_collectives_waited_for_is_the_hang_though_it_printed_last():
    """MindSpore's CPU ring (the real msrun hang, tests/real/test_msrun.py): each rank's wait names its ring
    predecessor; the hung rank 1 prints TCP warnings after its peers died, so its last line is the latest."""
    model = CauseModel()
    stepped(model, range(4), 7, 100.0)
    for rank, peer in ((2, 1), (3, 2), (0, 3)):
        model.heard(Event("collective_timeout", key(rank), 7, 130.0, detail={"peer_rank": peer}))
        model.line(key(rank), 130.0)
    model.line(key(1), 140.0)
    # msrun's scheduler then times out the node of a rank whose wait had failed: that follows its failure too.
    scheduler = ("job", "n0", "")  # scheduler.log's series
    model.heard(Event("node_timeout", scheduler, None, 150.0, detail={"node_rank": 2}))
    model.heard(Event("traceback", scheduler, None, 152.0))  # and the scheduler raises: the workers died
    hang = model.hang("job", now=None)
    assert hang is not None and (hang.kind, hang.rank, hang.step) == ("hang", "1", 7)
    assert "waited for" in str(hang.detail["evidence"])
    model.heard(hang)
    assert summary(model)[:2] == ("hang", "1")


def test_a_rank_named_hung_whose_own_failure_is_read_late_is_the_cause_of_that_failure():
    model = CauseModel()
    stepped(model, range(3), 30, 100.0)
    for rank in (0, 2):
        model.heard(Event("collective_timeout", key(rank), 30, 110.0))
        model.line(key(rank), 110.0)
    hang = model.hang("job", now=120.0)
    assert hang is not None and hang.rank == "1"
    model.heard(hang)
    model.heard(Event("oom", key(1), 30, 121.0))  # its file was read late
    assert summary(model) == ("oom", "1", 30, [("collective_timeout", "0"), ("collective_timeout", "2")])


def test_followers_alone_without_a_rank_behind_name_the_earliest_of_them():
    model = CauseModel()
    stepped(model, range(2), 10, 100.0)
    model.heard(Event("collective_timeout", key(0), 10, 150.0))
    model.line(key(0), 150.0)
    model.heard(Event("collective_timeout", key(1), 10, 151.0))
    model.line(key(1), 151.0)
    assert model.hang("job", now=None) is None
    assert summary(model)[:2] == ("collective_timeout", "0")  # analyze's answer, which sees every node
    cause = model.cause("job")
    assert cause is not None and not cause.primary
    # Live, a node whose ranks only waited for another node's names none: that node's exporter names the cause.
    assert model.causes() == {}


def test_a_silent_run_names_the_rank_that_stopped_first_before_its_stall_threshold():
    model = CauseModel()
    stepped(model, range(3), 20, 100.0)
    model.stepped(key(0), 21, 101.0)
    model.stepped(key(2), 21, 101.0)
    threshold = {key(rank): 10.0 for rank in range(3)}.__getitem__
    assert model.hang("job", now=105.0, threshold=threshold) is None  # rank 0 and 2 silent only 4 s
    hang = model.hang("job", now=107.0, threshold=threshold)  # the lead: named at half of a 10 s threshold
    assert hang is not None and (hang.rank, hang.step) == ("1", 20)


def test_ranks_that_stopped_together_have_no_culprit():
    model = CauseModel()
    stepped(model, range(3), 20, 100.0)
    model.stepped(key(1), 20, 100.5)  # half a second apart: the same moment
    assert model.hang("job", now=500.0, threshold=lambda _key: 10.0) is None


def test_the_incident_is_gone_when_the_run_trains_on_and_kept_for_analyze():
    model = CauseModel()
    model.heard(Event("loss_nonfinite", key(0), 12, 10.0))
    model.heard(Event("loss_nonfinite", key(0), 13, 11.0, continued=True))
    stepped(model, range(1), 14, 12.0)
    assert model.cause("job") is not None  # one step past: ranks in lock step differ by one
    stepped(model, range(1), 15, 13.0)
    assert model.cause("job") is None
    assert [cause.event.kind for cause in model.history("job")] == ["loss_nonfinite"]
    model.heard(Event("loss_nonfinite", key(0), 16, 14.0, continued=True))
    assert model.cause("job") is None  # more of what the run trained past: no new incident


def test_a_failure_on_another_rank_after_a_nan_is_an_incident_of_its_own():
    model = CauseModel()
    model.heard(Event("loss_nonfinite", key(1), 150, 10.0))
    model.heard(Event("oom", key(3), 199, 60.0))
    assert summary(model)[:2] == ("oom", "3")
    assert [cause.event.kind for cause in model.history("job")] == ["loss_nonfinite", "oom"]


def test_follower_and_incident_kinds_come_from_the_table():
    assert {"collective", "collective_timeout", "nccl_timeout", "elastic", "terminated",
            "grad_norm_nonfinite"} <= kinds.FOLLOWER_KINDS
    assert {"oom", "segfault", "hardware", "loss_nonfinite", "hang", "node_timeout"} <= kinds.INCIDENT_KINDS
    assert not {"oom", "segfault", "hardware", "loss_nonfinite", "hang"} & kinds.FOLLOWER_KINDS


def test_the_state_exposes_the_cause_as_training_incident_info_and_counts_the_hang():
    state = TrainingState()
    lines = {rank: [f"step={step} loss=2.0" for step in range(1, 11 if rank != 1 else 9)] for rank in range(3)}
    parser = LineParser()
    with state.lock:
        for rank, text in lines.items():
            parsed = parser.parse_block("".join(f"{line}\n" for line in text).encode())
            state.ingest(key(rank), len(text), parsed.records, None, 100.0)
        state.settle(100.0)
        assert state.causes.cause("job") is None  # nobody silent yet
        state.settle(100.0 + 1900.0)  # past every rank's start-up allowance (1800 s: no pace learned)
    (family,) = walk(state, lambda names, values: dict(zip(names, values, strict=True)), specs=[INCIDENT_INFO])
    assert family.series == [{"run": "job", "node": "n0", "rank": "1", "kind": "hang", "step": "8"}]
    assert state.series[key(1)].anomalies["hang"] == 1


def test_analyze_names_the_failure_that_made_torchelastic_restart_the_first_incident(tmp_path):
    """The real ``--max-restarts 2`` run (tests/fixtures/SOURCES.md): attempt 0 ended with rank 1's RuntimeError;
    attempts 1 and 2 failed on both ranks before a step. Each attempt's files are read before the next attempt's,
    whatever the rank, and one restart of the attempt (on any rank) ends the incident before it: the first incident is
    rank 1's."""
    log_dir = tmp_path / "logs"
    shutil.copytree(REAL / "torchelastic_restarts", log_dir)
    for path in log_dir.rglob("attempt_*/*/*.log"):  # as the run wrote them: one attempt after the other (git keeps
        attempt = int(path.parent.parent.name.removeprefix("attempt_"))  # no modification times)
        os.utime(path, (1_796_299_800 + 2 * attempt, 1_796_299_800 + 2 * attempt))
    analysis = Analysis()
    for source in resolve([str(log_dir)], "job").sources:
        analysis.add(source)
    (run,) = analysis.report().runs
    assert run.root_cause is not None and (run.root_cause.kind, run.root_cause.rank) == ("traceback", "1")
    roots = {(finding.kind, finding.rank) for finding in run.findings if finding.root_cause}
    assert roots == {("traceback", "1"), ("traceback", "0")}  # attempt 0's, and attempts 1 and 2's (one finding)


def test_one_launcher_attempt_is_one_incident_whichever_rank_restarts_first():
    model = CauseModel()
    model.heard(Event("restart", key(0), None, 10.0, detail={"attempt": 1}))
    model.heard(Event("traceback", key(0), 5, 11.0))
    model.heard(Event("restart", key(1), None, 10.5, detail={"attempt": 1}))  # the same attempt, read after
    model.heard(Event("traceback", key(1), 5, 11.5))
    assert summary(model)[:2] == ("traceback", "0")
    model.heard(Event("restart", key(1), None, 20.0, detail={"attempt": 2}))  # the next attempt: a new incident
    assert model.cause("job") is None
    assert [cause.event.rank for cause in model.history("job")] == ["0"]


def test_at_one_step_the_rank_that_did_not_print_the_step_s_first_line_is_the_hang():
    # Every rank printed step 7 at the same moment; the others then printed a line of step 8 (a data loader's, a
    # step's start) and blocked in the all-reduce; rank 1 printed nothing more. Its last line is the evidence.
    model = CauseModel()
    stepped(model, range(4), 7, 100.0)
    for rank in (0, 2, 3):
        model.line(key(rank), 101.5)
    threshold = {key(rank): 10.0 for rank in range(4)}.__getitem__
    hang = model.hang("job", now=107.0, threshold=threshold)
    assert hang is not None and (hang.rank, hang.step) == ("1", 7)
    # Without such a line nothing tells the ranks apart before the others' collective timeout: no rank is named.
    together = CauseModel()
    stepped(together, range(4), 7, 100.0)
    assert together.hang("job", now=500.0, threshold=threshold) is None


def test_a_failure_read_after_another_rank_started_again_is_the_ended_attempt_s():
    """One console of two attempts (``>> train.log``): rank 0's traceback ends at its next line, the resumed
    attempt's, read after rank 1's resumed step went back (a restart). Rank 0 has not started again: its failure
    at the ended incident's step is that incident's follower, not an incident of its own."""
    model = CauseModel()
    stepped(model, range(4), 11, None)
    model.heard(Event("traceback", key(1), 11, None))
    model.heard(Event("restart", key(1), None, None, detail={"after_step": 11}))
    model.heard(Event("collective", key(0), 11, None))
    assert model.cause("job") is None
    (ended,) = model.history("job")
    assert (ended.event.kind, ended.event.rank) == ("traceback", "1")
    assert [(follower.kind, follower.rank) for follower in ended.followers] == [("collective", "0")]
    # Once rank 0 started again too, its failure is the new attempt's.
    model.heard(Event("restart", key(0), None, None, detail={"after_step": 11}))
    model.heard(Event("oom", key(0), 11, None))
    assert summary(model)[:2] == ("oom", "0")
    assert len(model.history("job")) == 2


def test_the_killed_rank_is_the_cause_of_the_scheduler_s_timeout_of_another_node():
    """msrun SIGKILLs the others once one worker is SIGKILLed; its scheduler then times out whichever node it misses
    first, not necessarily the killed one (node 3 in one real run): msrun's report of the kill, read from its console
    and put on rank 1 by pid, is the cause; the timeout and the scheduler's traceback follow it."""
    model = CauseModel()
    stepped(model, range(4), 7, 100.0)
    scheduler = ("job", "n0", "")
    model.heard(Event("node_timeout", scheduler, None, 127.0, detail={"node_rank": 3}))  # scheduler.log, read first
    model.heard(Event("traceback", scheduler, None, 132.0))
    model.heard(Event("killed", key(1), 7, 101.0, detail={"signal": "SIGKILL", "pid": 29960, "launcher": "msrun"}))
    assert summary(model) == ("killed", "1", 7, [("node_timeout", ""), ("traceback", "")])


def _kill_run(log_dir: Path) -> dict:
    """analyze --format json of a copy of the real msrun SIGKILL run (tests/fixtures/real/msrun_kill/)."""
    out = io.StringIO()
    assert run_analyze([str(log_dir)], format="json", run="job", stdout=out) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    return run


def test_msrun_s_console_beside_its_logs_names_the_sigkilled_rank_in_analyze(tmp_path):
    """The real run (SOURCES.md): rank 1 SIGKILLed itself at step 8; nothing in the worker logs or scheduler.log says
    so; msrun's console kept as LOG_DIR/msrun.log does, by pid, which rank 1's own DISTRIBUTED(29960,...) records
    name. The console's copies of every worker line count nothing twice."""
    log_dir = tmp_path / "logs"
    shutil.copytree(REAL / "msrun_kill", log_dir)
    run = _kill_run(log_dir)
    errors = {rank["rank"]: rank["errors"] for rank in run["ranks"]}
    assert errors == {"0": {}, "1": {"killed": 1}, "2": {}, "3": {}, "": {"traceback": 1}}  # the scheduler's own
    assert run["steps"]["lines"] == 28  # each worker's 7 step lines once
    (cause,) = [finding for finding in run["findings"] if finding["root_cause"]]
    assert (cause["kind"], cause["rank"], cause["step"]) == ("killed", "1", 7)
    # The rank's last line is its own, not msrun's report of its death a second later.
    (killed_rank,) = [rank for rank in run["ranks"] if rank["rank"] == "1"]
    assert killed_rank["last_line_time"] < cause["time"]
    assert {(followed["kind"], followed["rank"]) for followed in cause["explains"]} == \
        {("node_timeout", "0"), ("traceback", "")}
    # Without the console, no file names the kill: the scheduler's timeout of a node is all there is, and it is
    # about node 0, not the killed rank 1.
    (log_dir / "msrun.log").unlink()
    alone = _kill_run(log_dir)
    assert [(finding["kind"], finding["rank"]) for finding in alone["findings"] if finding["root_cause"]] == \
        [("node_timeout", "0")]
    assert not any(rank["errors"].get("killed") for rank in alone["ranks"])


def test_a_worker_exit_whose_pid_no_worker_log_names_counts_for_the_run(tmp_path):
    """The killed rank's log is not there (another node's, say): msrun's report still counts, on its console's series
    (the run's, rank "")."""
    log_dir = tmp_path / "logs"
    shutil.copytree(REAL / "msrun_kill", log_dir)
    (log_dir / "worker_1.log").unlink()
    out = io.StringIO()
    assert run_analyze([str(log_dir)], format="json", run="job", stdout=out) == 0
    report = json.loads(out.getvalue())
    errors = {rank["rank"]: rank["errors"] for rank in report["runs"][0]["ranks"]}
    assert errors[""] == {"killed": 1, "traceback": 1}
    assert [warning for warning in report["warnings"] if "29960" in warning] == [
        'msrun.log: msrun reports worker process 29960 exiting, and no worker log names that pid: counted for the '
        'run, on the console\'s own series (rank "")']
    assert not any(errors[rank] for rank in ("0", "2", "3"))


def test_serve_puts_msrun_s_report_of_a_sigkill_on_the_killed_rank_and_names_it_the_cause(tmp_path):
    log_dir = tmp_path / "logs"
    shutil.copytree(REAL / "msrun_kill", log_dir)
    for path in log_dir.iterdir():  # as the run left them (git keeps no modification times): the console last
        os.utime(path, (1_796_311_710, 1_796_311_710 + (31 if path.name in ("msrun.log", "scheduler.log") else 0)))
    lines = sum(path.read_bytes().count(b"\n") for path in log_dir.iterdir())
    with ExporterProcess("--log-dir", str(log_dir), "--run", "job") as exporter:
        def read_all():
            samples = scrape(exporter.url)
            total = sum(value for (name, _), value in samples.items() if name == "training_log_lines_total")
            return samples if total == lines else None

        samples = eventually(read_all, 30, interval=0.25, what="every line read")
    errors = {(labels["kind"], labels["rank"]): value for labels, value in
              ((dict(labels), value) for (name, labels), value in samples.items() if name == "training_errors_total")
              if value}
    assert errors == {("killed", "1"): 1, ("traceback", ""): 1}
    # The killed rank's log time is its own file's, not the console's.
    worker_1 = (log_dir / "worker_1.log").stat().st_mtime
    assert sample(samples, "training_last_log_timestamp_seconds", run="job", rank="1") == worker_1
    # The console's series (shared with the scheduler's, rank "") prints no steps: no stall threshold of its own.
    assert sample(samples, "training_stall_threshold_seconds", run="job", rank="") is None
    assert sample(samples, "training_stall_threshold_seconds", run="job", rank="1") is not None
    incident = [dict(labels) for (name, labels) in samples if name == "training_incident_info"]
    assert [(labels["kind"], labels["rank"], labels["step"]) for labels in incident] == [("killed", "1", "7")]


def test_a_node_timeout_read_at_the_moment_of_a_kill_follows_it():
    """A finished run read at once (serve started after it): every event has the moment it was read, scheduler.log's
    timeout first. A worker's own failure is there: the scheduler's missing nodes follow it."""
    model = CauseModel()
    stepped(model, range(4), 7, 100.0)
    scheduler = ("job", "n0", "")
    model.heard(Event("node_timeout", scheduler, None, 200.0, detail={"node_rank": 3}))
    model.heard(Event("killed", key(1), 7, 200.001, detail={"signal": "SIGKILL"}))
    assert summary(model) == ("killed", "1", 7, [("node_timeout", "")])
    # Followers alone (the others' collectives timed out): the node the scheduler lost stays the cause.
    lost = CauseModel()
    stepped(lost, range(4), 7, 100.0)
    lost.heard(Event("node_timeout", scheduler, None, 130.0, detail={"node_rank": 3}))
    lost.heard(Event("collective_timeout", key(0), 7, 131.0))
    assert summary(lost)[:2] == ("node_timeout", "")
