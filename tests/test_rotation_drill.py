"""Rotation without a window: rename rotation every 100 ms, the exporter SIGKILLed three times.

A writer process appends about 1,000 lines a second to two ranks' logs; every 100 ms each
log is renamed to a dated generation (``worker_0.log-0000000042``, nothing ever deleted)
and the writer reopens its files, as logrotate's ``create`` with ``postrotate`` SIGHUP does.
Generations come faster than a rescan, often several between two reads of one file, and
some while the exporter is down. At the end every line written is counted once: the
lines counter and the steps counter both equal the lines the writer wrote.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually

RANKS = 2
DRILL_SECONDS = 30.0
ROTATE_EVERY = 0.1
KILLS = 3


class Rotator(threading.Thread):
    """Renames every log to its next generation every ``ROTATE_EVERY`` seconds, then asks the writer to reopen."""

    def __init__(self, logs: list[Path], writer: subprocess.Popen[str]) -> None:
        super().__init__(daemon=True)
        self._logs, self._writer = logs, writer
        self._stopping = threading.Event()
        self.generations = 0

    def run(self) -> None:
        while not self._stopping.wait(ROTATE_EVERY):
            self.generations += 1
            for log in self._logs:
                # Not there when the writer has not reopened since the last rotation (a loaded machine).
                with contextlib.suppress(FileNotFoundError):
                    os.rename(log, f"{log}-{self.generations:010d}")
            self._writer.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def test_rename_rotation_every_100ms_with_three_sigkills_counts_every_line_once(tmp_path):
    log_dir = tmp_path / "drill-run" / "logs"
    log_dir.mkdir(parents=True)
    logs = [log_dir / f"worker_{rank}.log" for rank in range(RANKS)]
    writer = subprocess.Popen([sys.executable, str(Path(__file__).parent / "support" / "log_writer.py"),
                               "--pause", "0.002", *map(str, logs)], stdout=subprocess.PIPE, text=True)
    eventually(lambda: all(log.exists() for log in logs), 10, what="the writer created no log")
    exporter = ExporterProcess("--log-dir", str(log_dir), "--node", "n", "--state-file", str(tmp_path / "state.json"),
                               "--checkpoint-interval", "0.2", env={"TRAINLOG_RESCAN_INTERVAL": "0.5"},
                               wait_for="/-/ready")
    rotator = Rotator(logs, writer)
    try:
        exporter.start()
        rotator.start()
        ends = time.monotonic() + DRILL_SECONDS
        for kill in range(1, KILLS + 1):
            time.sleep(max(0.0, ends - DRILL_SECONDS * (KILLS + 1 - kill) / (KILLS + 1) - time.monotonic()))
            assert exporter.kill(signal.SIGKILL) == -signal.SIGKILL
            time.sleep(0.5)  # generations rotated while the exporter is down
            exporter.start()
        time.sleep(max(0.0, ends - time.monotonic()))
        rotator.stop()
        writer.terminate()
        written = RANKS * int(writer.communicate(timeout=10)[0])
        assert rotator.generations >= DRILL_SECONDS / ROTATE_EVERY / 2, "the machine rotated too slowly for a drill"

        def counted() -> float:
            return exporter.total("training_log_lines_total", run="drill-run")

        eventually(lambda: counted() >= written, 30,
                   what=lambda: f"counted {counted()} of {written} lines\n{exporter.output()[-3000:]}")
        time.sleep(1.5)  # a few rescans: anything counted twice would show now
        assert counted() == written
        assert exporter.total("training_steps_total", run="drill-run") == written
        assert exporter.total("trainlog_rotations_total") >= 1
        assert exporter.total("trainlog_bytes_lost_total") == 0
    finally:
        if rotator.is_alive():
            rotator.stop()
        writer.kill()
        writer.wait()
        exporter.stop()
