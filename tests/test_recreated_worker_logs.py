"""Restarts in worker logs the launcher writes again (issue 26, "One engine").

msrun opens ``worker_{i}.log`` with ``"w"`` at each (re)start (a shell's ``>``): the file is
truncated, or deleted and created again, and starts over with the start banner, then steps
resumed from the last checkpoint (251 ...) below the highest step reached before (306), then
the crash. Here real files are rewritten in place under a live exporter process, and each
rewrite must count one restart per rank.

The lines are synthetic MindFormers PyNative lines (the layout of
tests/fixtures/formats/mindformers_pynative.log), not lines a real program printed.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.support.drill_rules import write_shortened_rules
from tests.support.drills import INCIDENT_RULES
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually
from tests.support.prometheus import PrometheusServer, require_binary
from tests.test_e2e_alerts import INCIDENT_TEST_VALUES

RANKS = ("0", "1")
START = datetime(2026, 6, 9, 10, 18, 2)


def banner(when: datetime) -> str:
    return (f"{when:%Y-%m-%d %H:%M:%S},114 - mindformers./output/log[mindformers/run_mindformer.py:71] - INFO - "
            "Running MindFormers in PYNATIVE_MODE.")


def step_line(when: datetime, step: int) -> str:
    return (f"[INFO] {when:%Y-%m-%d %H:%M:%S} [mindformers/pynative/callback/loss_callback.py:231] _print_log: "
            f"{{ step:[{step:5d}/ 1000], loss: {10.0 / (1 + step / 10):10.6f}, per_step_time:    850ms, "
            f"lr: 1.000000e-04, grad_norm:   1.000000, throughput:  12.34T }}")


def crash(rank: str) -> list[str]:
    return ["Traceback (most recent call last):",
            '  File "/home/ma-user/mindformers/run_mindformer.py", line 280, in <module>',
            "    main(config)",
            f"RuntimeError: rank {rank}: simulated crash after step 280"]


def attempt_lines(attempt: int, first: int, last: int, rank: str) -> list[str]:
    """What one start of the job writes into a rank's log: banner, steps, and (after a restart) the crash."""
    when = START + timedelta(minutes=10 * attempt)
    steps = (step_line(when + timedelta(seconds=step - first), step) for step in range(first, last + 1))
    lines = [banner(when), *steps]
    return lines + (crash(rank) if attempt else [])


def rewrite(path: Path, lines: list[str], how: str) -> None:
    """The launcher starting a worker again: the file starts over (``>``, or removed and created anew).

    Each attempt's lines have the length of the one before (only the timestamps differ): written
    at once, the file is back at the size the exporter had read, and only its first bytes changed.
    """
    if how == "recreate":
        path.unlink()
    with path.open("w") as handle:  # open(..., "w") truncates: msrun's and the shell's ``>``
        if how != "truncate at once":
            handle.write(lines[0] + "\n")
            handle.flush()
            time.sleep(0.3)  # the banner first, as a starting worker prints it, then the steps
            lines = lines[1:]
        handle.write("".join(f"{line}\n" for line in lines))


def samples(exporter: ExporterProcess, name: str) -> dict[str, float]:
    return {rank: exporter.total(name, rank=rank) for rank in RANKS}


def first_run(log_dir: Path) -> dict[str, Path]:
    """Each rank's log as the first start left it: banner and steps 1 to 306."""
    logs = {rank: log_dir / f"worker_{rank}.log" for rank in RANKS}
    for rank, path in logs.items():
        path.write_text("".join(f"{line}\n" for line in attempt_lines(0, 1, 306, rank)))
    return logs


def serve(tmp_path: Path, log_dir: Path) -> ExporterProcess:
    return ExporterProcess("--log-dir", str(log_dir), "--node", "n", "--state-file", str(tmp_path / "state.json"),
                           wait_for="/-/ready").start()


def caught_up(exporter: ExporterProcess) -> None:
    eventually(lambda: samples(exporter, "training_step") == dict.fromkeys(RANKS, 306.0), 15,
               what=lambda: f"{samples(exporter, 'training_step')}\n{exporter.output()}")


def restart(exporter: ExporterProcess, logs: dict[str, Path], how: str, attempt: int) -> None:
    """Every rank started again, and the exporter has counted it (a restart and a crash more)."""
    for rank, path in logs.items():
        rewrite(path, attempt_lines(attempt, 251, 280, rank), how)
    counted = dict.fromkeys(RANKS, float(attempt))
    eventually(lambda: samples(exporter, "training_restarts_total") == counted
               and samples(exporter, "training_errors_total") == counted, 15,
               what=lambda: (f"attempt {attempt}: restarts {samples(exporter, 'training_restarts_total')}, errors "
                             f"{samples(exporter, 'training_errors_total')}, step {samples(exporter, 'training_step')}"
                             f"\n{exporter.output()}"))


@pytest.mark.parametrize("how", ["truncate", "truncate at once", "recreate"])
def test_three_restarts_in_rewritten_worker_logs_count_three_per_rank(tmp_path, log_dir, how):
    logs = first_run(log_dir)
    exporter = serve(tmp_path, log_dir)
    try:
        caught_up(exporter)
        for attempt in (1, 2, 3):
            restart(exporter, logs, how, attempt)
        assert samples(exporter, "training_step") == dict.fromkeys(RANKS, 280.0)
        # Every rewrite replays 251-280, all below the 306 reached before: nothing productive after the first start.
        replayed = {rank: exporter.total("training_lost_seconds_total", rank=rank, kind="replayed") for rank in RANKS}
        assert replayed == pytest.approx(dict.fromkeys(RANKS, 3 * 30 * 0.85))
    finally:
        exporter.stop()


def test_three_rewrites_raise_training_restart_loop_in_prometheus(tmp_path, log_dir):
    """A real Prometheus with the shipped incident rules (windows shortened as in the fire drills:
    1h -> 2m, 2m -> 2s) scrapes the exporter while the logs are rewritten three times."""
    require_binary("prometheus")
    rules = write_shortened_rules(INCIDENT_RULES, tmp_path / "rules" / INCIDENT_RULES.name, INCIDENT_TEST_VALUES)
    logs = first_run(log_dir)
    exporter = serve(tmp_path, log_dir)
    try:
        target = f"127.0.0.1:{exporter.port}"
        with PrometheusServer(tmp_path / "prometheus", [target], rule_files=[rules]) as prometheus:
            # The counters at 0 and the step at 306 scraped first: increase() and the old highest step need them.
            caught_up(exporter)
            eventually(lambda: len(prometheus.query("training_restarts_total == 0 and on (rank) training_step == 306"))
                       == len(RANKS), 30, interval=0.2, what="a scrape of the first start")

            def loop() -> list[dict]:
                return [alert for alert in prometheus.api("alerts")["alerts"]
                        if alert["labels"]["alertname"] == "TrainingRestartLoop"]

            for attempt in (1, 2):
                restart(exporter, logs, "truncate at once", attempt)
            time.sleep(3)  # three scrapes and evaluations: two restarts are no loop
            assert loop() == []
            restart(exporter, logs, "truncate at once", 3)
            (alert,) = eventually(lambda: [alert for alert in loop() if alert["state"] == "firing"], 30, interval=0.2,
                                  what=lambda: f"TrainingRestartLoop firing; alerts: {prometheus.api('alerts')}")
            assert alert["labels"]["node"] == "n" and float(alert["value"]) == len(RANKS)  # the ranks in the loop
            restarts = {item["metric"]["rank"]: float(item["value"][1])
                        for item in prometheus.query("increase(training_restarts_total[2m])")}
            assert restarts.keys() == set(RANKS) and all(value >= 2.9 for value in restarts.values()), restarts
    finally:
        exporter.stop()
