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

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually

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


@pytest.mark.parametrize("how", ["truncate", "truncate at once", "recreate"])
def test_three_restarts_in_rewritten_worker_logs_count_three_per_rank(tmp_path, log_dir, how):
    logs = {rank: log_dir / f"worker_{rank}.log" for rank in RANKS}
    for rank, path in logs.items():
        path.write_text("".join(f"{line}\n" for line in attempt_lines(0, 1, 306, rank)))
    exporter = ExporterProcess("--log-dir", str(log_dir), "--node", "n", "--state-file", str(tmp_path / "state.json"),
                               wait_for="/-/ready").start()
    try:
        eventually(lambda: samples(exporter, "training_step") == dict.fromkeys(RANKS, 306.0), 15,
                   what=lambda: f"{samples(exporter, 'training_step')}\n{exporter.output()}")
        for attempt in (1, 2, 3):
            for rank, path in logs.items():
                rewrite(path, attempt_lines(attempt, 251, 280, rank), how)
            counted = dict.fromkeys(RANKS, float(attempt))
            eventually(lambda counted=counted: samples(exporter, "training_restarts_total") == counted
                       and samples(exporter, "training_errors_total") == counted, 15,
                       what=lambda attempt=attempt: (
                           f"attempt {attempt}: restarts {samples(exporter, 'training_restarts_total')}, errors "
                           f"{samples(exporter, 'training_errors_total')}, step {samples(exporter, 'training_step')}"
                           f"\n{exporter.output()}"))
        assert samples(exporter, "training_step") == dict.fromkeys(RANKS, 280.0)
        # Every rewrite replays 251-280, all below the 306 reached before: nothing productive after the first start.
        replayed = {rank: exporter.total("training_lost_seconds_total", rank=rank, kind="replayed") for rank in RANKS}
        assert replayed == pytest.approx(dict.fromkeys(RANKS, 3 * 30 * 0.85))
    finally:
        exporter.stop()
