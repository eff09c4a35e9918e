"""Real training jobs followed by the exporter as a live sidecar, then ``analyze`` on the same files.

The sidecar starts first, on a log directory that does not exist yet (DESIGN 3.1: waited for, not
a crash). The job runs under ``nice -n 19`` with its output captured the way people capture it;
/metrics is scraped every half second while it runs and once more after every line is read;
``analyze --format json --csv`` reads the same files after. The training program wrote its ground
truth (every rank's every step, and each incident with its rank and step) outside the log, in
``truth/rank_<R>.jsonl``: ``check_steps`` compares every CSV row and every scrape with it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter.kinds import ANOMALY_KINDS
from tests.support.exporter_process import ExporterProcess, exporter_command, exporter_environment
from tests.support.net import Samples, eventually, scrape

PROGRAMS = Path(__file__).parent / "programs"
BIN = Path(sys.executable).parent
VALUES = ("loss", "learning_rate", "grad_norm", "step_time_seconds")
GAUGES = {"loss": "training_loss", "learning_rate": "training_learning_rate", "grad_norm": "training_grad_norm",
          "step_time_seconds": "training_step_duration_seconds"}
# Where a job's output goes, as people capture it:
#   file       ``cmd > LOG_DIR/train.log 2>&1`` (with torchrun --tee 3: every line behind [defaultN]:)
#   redirects  ``torchrun --log-dir LOG_DIR/torchrun --redirects 3 ... > LOG_DIR/console.log 2>&1``: a file per
#              rank in torchrun's attempt_K/<local_rank>/ layout, the agent's own lines in the console file
#   pipe       ``cmd 2>&1 | tee LOG | trainlog-exporter --log-file -``
#   msrun      ``msrun --log_dir LOG_DIR ... > console.log 2>&1``: msrun's own worker_<R>.log and scheduler.log;
#              its console (which tails every worker's lines, unranked) kept outside LOG_DIR
#   msrun_console  the same with the console kept beside them: ``> LOG_DIR/msrun.log 2>&1`` (docs/formats.md)
#   own        the command writes its own files under LOG_DIR (a script of attempts: ``a > LOG 2>&1; b >> LOG 2>&1``);
#              what it prints besides them kept outside LOG_DIR
CAPTURES = ("file", "redirects", "pipe", "msrun", "msrun_console", "own")
# The runs CI leaves to `make test-real` (TRAINLOG_REAL_MATRIX=1): CI keeps a healthy run and a few incidents of each
# trainer within its 30 minutes.
matrix = pytest.mark.skipif(not os.environ.get("TRAINLOG_REAL_MATRIX"), reason="the whole matrix only: make test-real")
# MindSpore's venv (make setup-real): MindSpore 2.10.0 needs NumPy 1.x, this one holds NumPy 2.
MS_BIN = Path(__file__).parents[2] / ".venv-ms" / "bin"


def require(module: str) -> None:
    """Skip without the trainer installed, except in CI, where a missing trainer is a broken install."""
    try:
        __import__(module)
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"{module} is not installed: make setup-real (or .ci/run) installs the real trainers")


@dataclass
class RealRun:
    """What one job printed, what the sidecar served while and after it ran, and what analyze said."""

    root: Path
    log_dir: Path
    returncode: int
    during: list[Samples] = field(default_factory=list)
    after: Samples = field(default_factory=dict)
    run: str = "job"  # the run label of the job's series (--run), live and in analyze
    report: dict = field(default_factory=dict)  # analyze --format json, the run's
    # analyze's other runs by name: a further unranked file's own series (``job/<its path>``, docs/formats.md)
    other_reports: dict[str, dict] = field(default_factory=dict)
    rows: list[dict[str, str]] = field(default_factory=list)  # analyze --csv, the run's rows
    other_rows: list[dict[str, str]] = field(default_factory=list)  # analyze --csv, the other runs' rows
    seconds: float = 0.0

    @property
    def truth_dir(self) -> Path:
        return self.root / "truth"

    def truth(self) -> dict[int, dict[int, dict[str, float]]]:
        """rank -> step -> the values the program computed (its last record of a step, after a restart)."""
        steps: dict[int, dict[int, dict[str, float]]] = {}
        for path in sorted(self.truth_dir.glob("rank_*.jsonl")):
            for line in path.read_text().splitlines():
                record = json.loads(line)
                if "incident" not in record:
                    steps.setdefault(record["rank"], {})[record["step"]] = record
        return steps

    def incidents(self) -> list[dict]:
        return [record for path in sorted(self.truth_dir.glob("rank_*.jsonl"))
                for record in map(json.loads, path.read_text().splitlines()) if "incident" in record]

    def findings(self, kind: str) -> list[dict]:
        return [finding for finding in self.report["findings"] if finding["kind"] == kind]

    def counters(self, metric: str, samples: Samples | None = None) -> dict[tuple[str, str], float]:
        """(kind, rank) -> value of every non-zero sample of a per-kind counter."""
        found = {}
        for (name, labels), value in (self.after if samples is None else samples).items():
            named = dict(labels)
            if name == metric and value:
                found[named["kind"], named["rank"]] = value
        return found

    def incidents_live(self, samples: Samples | None = None) -> set[tuple[str, str, str]]:
        """(kind, rank, step) of every training_incident_info the sidecar served: the root cause it named."""
        served = self.after if samples is None else samples
        return {(labels["kind"], labels["rank"], labels["step"])
                for labels in (dict(labels) for (name, labels) in served if name == "training_incident_info")}

    def root_cause(self) -> dict:
        """analyze's one root-cause finding."""
        (cause,) = [finding for finding in self.report["findings"] if finding["root_cause"]]
        return cause

    def gauge(self, metric: str, rank: str, samples: Samples | None = None, run: str | None = None) -> float | None:
        """The value of a gauge of a rank of the run (``run``: another run label, a further unranked file's)."""
        for (name, labels), value in (self.after if samples is None else samples).items():
            named = dict(labels)
            if (name == metric and named.get("rank") == rank and named.get("run") == (run or self.run)
                    and "kind" not in named):
                return value
        return None


def _line_count(log_dir: Path) -> int:
    return sum(path.read_bytes().count(b"\n") for path in log_dir.rglob("*") if path.is_file())


def run_job(root: Path, command: Sequence[str], *, capture: str, run: str = "job", timeout: float = 300,
            env: dict[str, str] | None = None, cwd: Path | None = None,
            settled: Callable[[Samples], bool] | None = None, exporter_args: Sequence[str] = (),
            watch: Callable[[ExporterProcess], contextlib.AbstractContextManager] | None = None,
            other_runs: Sequence[str] = ()) -> RealRun:
    """Start the sidecar on ROOT/logs (not there yet), run COMMAND under nice, scrape, then analyze.

    ``settled``: the last scrape is taken once it holds for one (within 30 s): what the sidecar tells only a
    while after the last line (the cause model names a hang once the others' timeouts are a few seconds old).
    ``watch(sidecar)``: a context entered once the sidecar answers, before the job, and left after the last
    scrape, while the sidecar still runs (a Prometheus scraping it, say). ``other_runs``: the run labels, besides
    RUN's, of the further unranked files the job writes (``job/csv/.../metrics.csv``); analyze must find no other.
    """
    assert capture in CAPTURES
    log_dir = root / "logs"
    assert not log_dir.exists()
    command = ["nice", "-n", "19", *command]
    environment = {**exporter_environment(), "PYTHONUNBUFFERED": "1", **(env or {})}
    if capture == "redirects":
        command = [*command[:4], "--log-dir", str(log_dir / "torchrun"), "--redirects", "3", *command[4:]]
    if capture == "pipe":
        exporter = ExporterProcess("--log-file", "-", "--run", run, *exporter_args, stdin=subprocess.PIPE)
    else:
        exporter = ExporterProcess("--log-dir", str(log_dir), "--run", run, *exporter_args)
    result = RealRun(root, log_dir, returncode=-1, run=run)
    with exporter, (watch(exporter) if watch else contextlib.nullcontext()):
        assert scrape(exporter.url) is not None  # answers before the job has written anything
        stop = threading.Event()

        def scrape_while_running() -> None:
            while not stop.wait(0.5):
                with contextlib.suppress(OSError, AssertionError):  # a scrape that failed is no sample
                    result.during.append(scrape(exporter.url))

        scraper = threading.Thread(target=scrape_while_running, daemon=True)
        scraper.start()
        started = time.monotonic()
        log_dir.mkdir(parents=True)
        target = log_dir / ("console.log" if capture == "redirects" else "train.log")
        if capture in ("msrun", "own"):
            target = root / "console.log"
        if capture == "msrun_console":
            target = log_dir / "msrun.log"
        with open(target, "wb") as out:
            job = subprocess.Popen(command, stdout=subprocess.PIPE if capture == "pipe" else out,
                                   stderr=subprocess.STDOUT, env=environment, cwd=cwd or root)
            if capture == "pipe":
                _tee(job, out, exporter._running().stdin)
            try:
                result.returncode = job.wait(timeout)
            except subprocess.TimeoutExpired:
                job.kill()
                job.wait()
                raise
        result.seconds = time.monotonic() - started
        lines = _line_count(log_dir)
        eventually(lambda: _total(scrape(exporter.url), "training_log_lines_total") >= lines, 30, interval=0.25,
                   what=lambda: f"the sidecar to read {lines} lines:\n{exporter.output()[-3000:]}")
        stop.set()
        scraper.join()
        result.after = scrape(exporter.url)
        if settled is not None:
            done = settled

            def settled_scrape() -> Samples | None:
                samples = scrape(exporter.url)
                return samples if done(samples) else None

            result.after = eventually(settled_scrape, 30, interval=0.5, what="the sidecar's last scrape to settle")
    steps_csv = root / "steps.csv"
    analyzed = subprocess.run(exporter_command("analyze", str(log_dir), "--format", "json", "--csv", str(steps_csv),
                                               "--run", run),
                              capture_output=True, text=True, env=exporter_environment(), timeout=120, check=False)
    assert analyzed.returncode == 0, analyzed.stderr
    runs = {report["run"]: report for report in json.loads(analyzed.stdout)["runs"]}
    assert set(runs) == {run, *other_runs}, f"analyze's runs: {sorted(runs)}"
    result.report = runs.pop(run)
    result.other_reports = runs
    with open(steps_csv, newline="") as handle:
        for row in csv.DictReader(handle):
            (result.rows if row["run"] == run else result.other_rows).append(row)
    return result


def _tee(job: subprocess.Popen[bytes], out, stdin) -> None:
    """``cmd | tee LOG | trainlog-exporter --log-file -``: every byte to the file and the exporter, then EOF."""
    assert job.stdout is not None and stdin is not None
    for line in iter(job.stdout.readline, b""):
        out.write(line)
        out.flush()
        stdin.write(line)
        stdin.flush()
    stdin.close()


def _total(samples: Samples, metric: str) -> float:
    return sum(value for (name, _), value in samples.items() if name == metric)


def same(printed: str | float | None, truth: float) -> bool:
    """The value printed (a CSV cell, a gauge) is the truth's, NaN equal to NaN; a missing one is not."""
    if printed in (None, ""):
        return False
    value = float(printed)
    return (math.isnan(value) and math.isnan(truth)) or value == truth


def check_steps(result: RealRun, rank_labels: dict[int, str] | None = None,
                values: Sequence[str] = VALUES) -> None:
    """Every step of every rank in analyze's CSV, and the sidecar's last gauges, equal the ground truth."""
    truth = result.truth()
    assert truth, "the program wrote no ground truth"
    labels = rank_labels or {rank: str(rank) for rank in truth}
    rows: dict[str, dict[int, dict[str, str]]] = {}
    for row in result.rows:
        rows.setdefault(row["rank"], {})[int(row["step"])] = row
    assert set(rows) == set(labels.values()), f"CSV ranks {sorted(rows)} != {sorted(labels.values())}"
    for rank, steps in truth.items():
        read = rows[labels[rank]]
        assert sorted(read) == sorted(steps), f"rank {rank}: steps read {sorted(read)} != {sorted(steps)}"
        for step, record in steps.items():
            for name in values:
                assert same(read[step][name], record[name]), \
                    f"rank {rank} step {step} {name}: read {read[step][name]!r}, truth {record[name]!r}"
        last = max(steps)
        assert result.gauge("training_step", labels[rank]) == last, f"rank {rank}: training_step"
        for name in values:
            served = result.gauge(GAUGES[name], labels[rank])
            assert served is not None and same(served, steps[last][name]), \
                f"rank {rank}: {GAUGES[name]} {served!r} != {steps[last][name]!r} at step {last}"
    check_live(result, labels, values)


def every_record(truth_dir: Path) -> dict[int, list[dict]]:
    """rank -> every step record the program wrote, in the order it wrote them (a step done again after a resume
    twice)."""
    records: dict[int, list[dict]] = {}
    for path in sorted(truth_dir.glob("rank_*.jsonl")):
        for record in map(json.loads, path.read_text().splitlines()):
            if "incident" not in record:
                records.setdefault(record["rank"], []).append(record)
    assert records, "the program wrote no ground truth"
    return records


def check_rows_are_every_record(rows: list[dict[str, str]], truth_dir: Path) -> None:
    """Each rank's CSV rows (analyze --csv) are every step record the program wrote, in its order, value for value."""
    records = every_record(truth_dir)
    read: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        read.setdefault(row["rank"], []).append(row)
    assert set(read) == {str(rank) for rank in records}, f"CSV ranks {sorted(read)}"
    for rank, steps in records.items():
        assert [int(row["step"]) for row in read[str(rank)]] == [record["step"] for record in steps], \
            f"rank {rank}: steps read"
        for row, record in zip(read[str(rank)], steps, strict=True):
            for name in VALUES:
                assert same(row[name], record[name]), f"rank {rank} step {record['step']} {name}: {row[name]!r}"


def check_every_record(result: RealRun) -> None:
    """A job started again from a checkpoint: analyze's rows are every step record the program wrote, in its order
    (the steps done again read twice, each with its own values); every scrape during the job shows a record of the
    step it shows; the last gauges are the last record's."""
    check_rows_are_every_record(result.rows, result.truth_dir)
    records = every_record(result.truth_dir)
    for rank, steps in records.items():
        assert result.gauge("training_step", str(rank)) == steps[-1]["step"], f"rank {rank}: training_step"
        for name in VALUES:
            served = result.gauge(GAUGES[name], str(rank))
            assert served is not None and same(served, steps[-1][name]), f"rank {rank}: {GAUGES[name]} {served!r}"
    seen = 0
    for samples in result.during:
        for rank, steps in records.items():
            step = result.gauge("training_step", str(rank), samples)
            if step is None:
                continue
            seen += 1
            assert any(all(same(result.gauge(GAUGES[name], str(rank), samples), record[name]) for name in VALUES)
                       for record in steps if record["step"] == int(step)), f"live, rank {rank} at step {int(step)}"
    assert seen, "no scrape during the job saw a step: the sidecar was not live"


def check_crash_resume_report(report: dict, cause: tuple[str, str, int], restarts: dict[str, int]) -> None:
    """analyze on a job that crashed and was started again from a checkpoint: one incident, its root cause the
    crash (kind, rank, step); the resume one restart of each rank (``restarts``, the ranks' own series); no anomaly
    (the steps done again are replayed: no detector sees them)."""
    causes = [(finding["kind"], finding["rank"], finding["step"]) for finding in report["findings"]
              if finding["root_cause"]]
    assert causes == [cause], report["findings"]
    assert {rank["rank"]: rank["restarts"] for rank in report["ranks"] if rank["rank"]} == restarts, report["ranks"]
    assert not [finding for finding in report["findings"] if finding["kind"] in ANOMALY_KINDS], report["findings"]


def check_live(result: RealRun, labels: dict[int, str], values: Sequence[str]) -> None:
    """Every scrape taken while the job ran shows, for each rank, the values of the step it shows."""
    truth = result.truth()
    seen = 0
    for samples in result.during:
        for rank, label in labels.items():
            step = result.gauge("training_step", label, samples)
            if step is None:
                continue
            seen += 1
            record = truth[rank][int(step)]
            for name in values:
                served = result.gauge(GAUGES[name], label, samples)
                assert served is not None and same(served, record[name]), \
                    f"live, rank {rank} at step {int(step)}: {GAUGES[name]} {served!r} != {record[name]!r}"
    assert seen, "no scrape during the job saw a step: the sidecar was not live"


def torchrun(program: str, *args: str, nproc: int = 4, launcher: Sequence[str] = ()) -> list[str]:
    """``torchrun --standalone --nproc-per-node N LAUNCHER PROGRAM ARGS`` from this interpreter's environment."""
    return [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", str(nproc), *launcher, str(PROGRAMS / program),
            *args]


def require_msrun() -> None:
    """Skip without MindSpore's venv, except in CI, where a missing venv is a broken install."""
    if not (MS_BIN / "msrun").exists():
        if os.environ.get("CI"):
            raise AssertionError(f"{MS_BIN / 'msrun'} is missing: make setup-real installs it")
        pytest.skip("MindSpore is not installed: make setup-real (or .ci/run) makes .venv-ms")


def msrun(log_dir: Path, program: str, *args: str, workers: int = 4, port: int = 0) -> list[str]:
    """``msrun --worker_num N --local_worker_num N --log_dir LOG_DIR PROGRAM ARGS`` from MindSpore's venv.

    msrun starts its workers as ``python`` from PATH: ``msrun_environment()`` puts the venv's first.
    """
    return [str(MS_BIN / "msrun"), "--worker_num", str(workers), "--local_worker_num", str(workers),
            "--master_port", str(port or _free_port()), "--log_dir", str(log_dir), "--join", "True",
            "--cluster_time_out", "120", str(PROGRAMS / program), *args]


def msrun_environment() -> dict[str, str]:
    return {"PATH": f"{MS_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _free_port() -> int:
    with contextlib.closing(socket.socket()) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def keep_fixture(result: RealRun, name: str) -> None:
    """With TRAINLOG_KEEP_REAL=DIR, copy what the job printed to DIR/NAME (to refresh tests/fixtures/real/)."""
    keep = os.environ.get("TRAINLOG_KEEP_REAL")
    if keep:
        target = Path(keep) / name
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(result.log_dir, target / "logs")
        shutil.copytree(result.truth_dir, target / "truth")
