"""Real runs' logs through a real Prometheus and Alertmanager with the shipped rules: one active page per incident.

The kept real fixtures (tests/fixtures/real/, each with its source in tests/fixtures/SOURCES.md: torch 2.13.0
torchrun jobs on the CPU) are written into live log directories line by line, their timing compressed, while one
exporter follows them all; one Prometheus evaluates the drills' shortened copy of the rules
(tests/test_e2e_alerts.py) and sends to one Alertmanager running deploy/alertmanager/alertmanager.yml. Each run
then goes silent (the job died), so the stall alerts fire as well: Alertmanager must leave active only the
cause's page. The torchelastic run (``--max-restarts 2``) pages its first attempt's failure before the restart,
and the last attempt's after it. A real msrun hang (its whole log directory, in its lines' order) pages the stall
naming the hung rank; a real msrun SIGKILL (its log directory with msrun's console in it) pages the killed rank.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.alertmanager import AlertmanagerServer
from tests.support.drill_rules import write_shortened_rules
from tests.support.drills import AlertPoller, seen_alert
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, sample, scrape
from tests.support.prometheus import PrometheusServer, require_binary
from tests.support.replay import replay_directory
from tests.test_e2e_alerts import EXPORTER_OPTIONS, RULE_TEST_VALUES

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
RESTARTS = REAL / "torchelastic_restarts"
LINE_SECONDS = 0.02  # between two lines written: a 146-line run in 3 s
SCRAPES_SECONDS = 3.0  # a few scrapes (one a second)
ATTEMPT_PAUSE = 8.0  # between two torchelastic attempts: long enough for the attempt's page to reach Alertmanager
# From the start of the replays until every page is where it belongs: the longest replay, its stall, the alerts.
BUDGET = 90.0

# Per run: the console fixture replayed as console.log, and the one page Alertmanager leaves active (alert, rank).
CONSOLE_RUNS = {
    "oom": ("torchrun_ddp_oom.log", ("TrainingOutOfMemory", "1")),
    "exception": ("torchrun_ddp_raise.log", ("TrainingProcessCrashed", "1")),
    "sigkill": ("torchrun_ddp_kill.log", ("TrainingProcessCrashed", "1")),
    "nan": ("torchrun_ddp_nan.log", ("TrainingLossNonFinite", "1")),
}
# msrun's whole log directory of a real hang (tests/fixtures/real/msrun_hang/), its lines in their printed order at
# 20x their pace: rank 1 silent inside step 8, the others' ring all-reduce waits naming it; the stall names rank 1.
# 4x: its 1 s steps come 0.25 s apart, read in several batches, so each rank learns its pace (steps all read in one
# batch would leave the start-up allowance).
HANG_RUN, HANG_PAGE, HANG_SPEEDUP = "msrun-hang", ("TrainingStalled", "1"), 4.0
# msrun's log directory of a real SIGKILL of rank 1 with msrun's console kept in it (tests/fixtures/real/msrun_kill/):
# only the console's "Worker process PID exit with exception. Error code: -9." names it, by pid; the scheduler's node
# timeout follows. The same pace as the hang.
KILL_RUN, KILL_PAGE = "msrun-kill", ("TrainingProcessCrashed", "1")
# torchelastic: attempt 0's rank 1 raised, the agent restarted both ranks; attempts 1 and 2 failed on every rank
# before their first step (rank 0 first, as the agent's "Root Cause (first observed failure)" says).
ELASTIC_PAGES = {0: ("TrainingProcessCrashed", "1"), 2: ("TrainingProcessCrashed", "0")}
# A crash and a resume from the checkpoint into the same console (tests/fixtures/real/ddp_crash_resume/): rank 1 raised
# in step 12, the others' gloo errors followed; the job started again from step 9 and ran to its end, 30/30.
RESUME_RUN, RESUME_PAGE = "crash-resume", ("TrainingProcessCrashed", "1")
RESUME_CONSOLE = REAL / "ddp_crash_resume" / "logs" / "train.log"


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _write(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as log:
        for line in lines:
            log.write(line)
            log.flush()
            time.sleep(LINE_SECONDS)


def _console(target: Path, fixture: Path) -> None:
    _console_lines(target, _lines(fixture))


def _console_lines(target: Path, lines: list[bytes]) -> None:
    """A torchrun console: up to every rank's first step line, a few scrapes' pause (Prometheus sees the ranks'
    counters at 0 before the failure: increase() sees nothing of a counter born at 1), then the rest."""
    first_steps = max(index for index, line in enumerate(lines) if b"step=1/" in line) + 1
    _write(target, lines[:first_steps])
    time.sleep(SCRAPES_SECONDS)
    _write(target, lines[first_steps:])


@dataclass
class Replays:
    """The runs' log directories, and the threads writing them."""

    root: Path
    threads: list[threading.Thread] = field(default_factory=list)
    # What was seen of the torchelastic run after each attempt's files were written: the active pages.
    elastic_pages: dict[int, set[tuple[str, str]]] = field(default_factory=dict)
    # The crash-and-resume run's active pages after the crash, and after the resumed job's end.
    resume_pages: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)

    def log_dir(self, run: str) -> Path:
        return self.root / run / "logs"

    def start(self, observe: Callable[[str], set[tuple[str, str]]]) -> None:
        jobs: list[Callable[[], None]] = [functools.partial(_console, self.log_dir(run) / "console.log", REAL / fixture)
                                          for run, (fixture, _page) in CONSOLE_RUNS.items()]
        jobs.append(functools.partial(self._elastic, observe))
        jobs.append(functools.partial(self._crash_resume, observe))
        jobs.append(functools.partial(replay_directory, REAL / "msrun_hang", self.log_dir(HANG_RUN), HANG_SPEEDUP))
        jobs.append(functools.partial(replay_directory, REAL / "msrun_kill", self.log_dir(KILL_RUN), HANG_SPEEDUP))
        for job in jobs:
            thread = threading.Thread(target=self._guarded, args=(job,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _guarded(self, job: Callable[[], None]) -> None:
        try:
            job()
        except BaseException as error:  # reported by the tests, not lost in a thread
            self.errors.append(error)

    def _elastic(self, observe: Callable[[str], set[tuple[str, str]]]) -> None:
        """Attempt by attempt, as torchrun wrote them: each rank's stdout.log, then its stderr.log; the agent's
        console lines up to its report of the attempt's failure; then a pause to see what pages."""
        (job,) = (RESTARTS / "torchrun").iterdir()
        target = self.log_dir("elastic")
        console = _lines(RESTARTS / "console.log")
        failures = [index for index, line in enumerate(console) if b"failed (exitcode" in line]
        written = 0
        for attempt in sorted(path.name for path in job.iterdir()):
            number = int(attempt.removeprefix("attempt_"))
            for name in ("stdout.log", "stderr.log"):
                for rank in sorted(path.name for path in (job / attempt).iterdir()):
                    _write(target / "torchrun" / job.name / attempt / rank / name, _lines(job / attempt / rank / name))
                if name == "stdout.log":
                    # The steps took their time: Prometheus scrapes the new ranks' counters at 0 before the failure
                    # (increase() sees nothing of a counter born at 1).
                    time.sleep(SCRAPES_SECONDS)
            upto = failures[number] + 1 if number < len(failures) - 1 else len(console)
            _write(target / "console.log", console[written:upto])
            written = upto
            if number in ELASTIC_PAGES:
                wanted = {ELASTIC_PAGES[number]}
                try:
                    self.elastic_pages[number] = eventually(functools.partial(_exactly, observe, wanted),
                                                            BUDGET / 2, interval=0.5, what=f"the page {wanted}")
                except AssertionError:
                    self.elastic_pages[number] = observe("elastic")
            else:
                time.sleep(ATTEMPT_PAUSE / 4)  # an attempt that failed at once: the agent restarts at once

    def _crash_resume(self, observe: Callable[[str], set[tuple[str, str]]]) -> None:
        """The first launch's lines to its agent's failure report, the page it leaves, then the resumed launch's
        (from its own torchrun banner on) to the job's end, and what pages a few scrapes later."""
        lines = _lines(RESUME_CONSOLE)
        resumed = next(index for index, line in enumerate(lines) if index > 4 and b"run.py:874]" in line)
        target = self.log_dir(RESUME_RUN) / "train.log"
        _console_lines(target, lines[:resumed])
        wanted = {RESUME_PAGE}
        try:
            self.resume_pages["crash"] = eventually(functools.partial(_exactly, observe, wanted, RESUME_RUN),
                                                    BUDGET / 2, interval=0.5, what=f"the page {wanted}")
        except AssertionError:
            self.resume_pages["crash"] = observe(RESUME_RUN)
        _write(target, lines[resumed:])
        time.sleep(ATTEMPT_PAUSE)
        self.resume_pages["resumed"] = observe(RESUME_RUN)

    def join(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.1, deadline - time.monotonic()))
        assert not any(thread.is_alive() for thread in self.threads), "a replay did not end"
        assert not self.errors, self.errors


def _exactly(observe: Callable[[str], set[tuple[str, str]]], wanted: set[tuple[str, str]],
             run: str = "elastic") -> set[tuple[str, str]] | None:
    seen = observe(run)
    return seen if seen == wanted else None


@dataclass
class Stack:
    exporter: ExporterProcess
    prometheus: PrometheusServer
    alertmanager: AlertmanagerServer
    poller: AlertPoller
    replays: Replays
    started: float

    def active(self, run: str) -> set[tuple[str, str]]:
        """The run's pages Alertmanager holds active (not inhibited), as (alert, rank)."""
        return {(alert["labels"]["alertname"], alert["labels"].get("rank", ""))
                for alert in self.alertmanager.alerts(run=run) if alert["status"]["state"] == "active"}

    def firing(self, run: str) -> set[tuple[str, str]]:
        return {(alert.name, alert.rank) for alert in map(seen_alert, self.prometheus.api("alerts")["alerts"])
                if alert.run == run and alert.state == "firing"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[Stack]:
    require_binary("prometheus")
    root = tmp_path_factory.mktemp("replays")
    rules = [write_shortened_rules(path, root / "rules" / path.name, values)
             for path, values in RULE_TEST_VALUES.items()]
    replays = Replays(root)
    runs = [*CONSOLE_RUNS, "elastic", HANG_RUN, KILL_RUN, RESUME_RUN]
    for run in runs:
        replays.log_dir(run).mkdir(parents=True)
    with ExitStack() as running:
        exporter = running.enter_context(ExporterProcess(
            *(argument for run in runs for argument in ("--log-dir", str(replays.log_dir(run)))),
            "--node", "replay-node", "--rescan-interval", "0.5", "--state-file", str(root / "state.json"),
            *EXPORTER_OPTIONS))
        alertmanager = running.enter_context(AlertmanagerServer(root / "alertmanager"))
        prometheus = running.enter_context(PrometheusServer(
            root / "prometheus", [f"127.0.0.1:{exporter.port}"], rule_files=rules,
            alertmanagers=[alertmanager.address]))
        # Counters must be scraped at 0 before the incidents, or increase() sees nothing.
        eventually(lambda: prometheus.query('up{job="trainlog-exporter"} == 1'), 30, interval=0.2,
                   what="a first scrape")
        poller = AlertPoller(prometheus)
        running.callback(poller.stop)
        stack = Stack(exporter, prometheus, alertmanager, poller, replays, time.monotonic())
        replays.start(stack.active)
        replays.join(BUDGET)
        yield stack


PAGES = {**{run: page for run, (_fixture, page) in CONSOLE_RUNS.items()}, HANG_RUN: HANG_PAGE, KILL_RUN: KILL_PAGE}


@pytest.mark.parametrize("run", sorted(PAGES))
def test_a_real_incident_pages_once_the_cause(stack, run):
    page = PAGES[run]
    # The run went silent past its stall threshold: the stall fires too, held back by the cause.
    stall = page if page[0] == "TrainingStalled" else ("TrainingStalled", "")
    eventually(lambda: stack.firing(run) >= {page, stall} or None, BUDGET,
               interval=0.5, what=f"{page} and the stall firing for run {run}; firing: {stack.firing(run)}")
    fired = stack.firing(run)

    def all_arrived() -> set[tuple[str, str]] | None:
        held = {(alert["labels"]["alertname"], alert["labels"].get("rank", ""))
                for alert in stack.alertmanager.alerts(run=run)}
        return held if held >= fired else None

    eventually(all_arrived, 20, interval=0.5, what=f"Alertmanager to hold {sorted(fired)}")
    assert stack.active(run) == {page}, f"run {run}: Prometheus fires {sorted(fired)}"
    (incident,) = stack.prometheus.query(f'training_incident_info{{run="{run}"}}')
    assert incident["metric"]["rank"] == page[1]


def test_a_torchelastic_restart_pages_the_failure_that_caused_it_then_the_last_attempt_s(stack):
    assert stack.replays.elastic_pages[0] == {ELASTIC_PAGES[0]}, "before the restart: rank 1's traceback"
    assert stack.replays.elastic_pages[2] == {ELASTIC_PAGES[2]}, "after the last attempt: its first failure"
    samples = scrape(stack.exporter.url)
    assert {rank: sample(samples, "training_restarts_total", run="elastic", rank=rank) for rank in "01"} == \
        {"0": 2, "1": 2}


def test_a_crash_and_resume_pages_the_crash_once_and_the_resume_nothing_more(stack):
    # The crash: rank 1's exception is the incident's cause, the others' gloo errors are held back. The resumed job
    # re-ran steps 9-11 and finished: the same one page (the crash's ten minutes are not over), no stall (finished).
    assert stack.replays.resume_pages["crash"] == {RESUME_PAGE}
    assert stack.replays.resume_pages["resumed"] == {RESUME_PAGE}
    samples = scrape(stack.exporter.url)
    assert {rank: sample(samples, "training_restarts_total", run=RESUME_RUN, rank=rank) for rank in "0123"} == \
        dict.fromkeys("0123", 1)
    assert sample(samples, "training_step", run=RESUME_RUN, rank="1") == 30
    # The exporter names no cause once the run trained on; the rules keep the one it named while its alerts fire.
    assert stack.prometheus.query(f'training_incident_info{{run="{RESUME_RUN}"}}') == []
    (cause,) = stack.prometheus.query(f'trainlog:incident:root_cause{{run="{RESUME_RUN}"}}')
    assert {name: cause["metric"][name] for name in ("kind", "rank", "incident")} == \
        {"kind": "traceback", "rank": "1", "incident": "ended"}
