"""Nothing lost, nothing counted twice: real writers, real logrotate, an exporter killed twice.

Two runs are written at once by writer processes. logrotate rotates one by rename
(``create`` + ``postrotate`` SIGHUP, the writer reopens) and the other by ``copytruncate``,
over and over. Meanwhile the exporter is SIGKILLed twice and restarted from its
checkpoint, with rotations happening while it is down. At the end:

- rename rotation and restarts: the lines counted equal the lines written, exactly;
- copytruncate: the lines counted lie between the lines found on disk (current file and
  every copy) and the lines written. What is written between logrotate's copy and its
  truncate exists nowhere: no tailer can count it, the test measures it as
  written - on disk.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually

RANKS = 2
ROTATING_PHASES = (1.5, 1.0, 1.0)  # seconds of writing and rotating: before, between and after the two kills
LOGROTATE = shutil.which("logrotate") or ("/usr/sbin/logrotate" if os.path.exists("/usr/sbin/logrotate") else None)

pytestmark = pytest.mark.skipif(
    LOGROTATE is None and not os.environ.get("CI"), reason="needs logrotate (apt-get install logrotate)"
)


def logrotate_config(path: Path, log_dir: Path, directives: str) -> Path:
    path.write_text(f"{log_dir}/*.log {{\n    rotate 1000\n    nocompress\n    missingok\n{directives}}}\n")
    return path


def rotate(config: Path, status: Path) -> None:
    assert LOGROTATE, "logrotate is not installed: apt-get install logrotate"
    done = subprocess.run([LOGROTATE, "--force", "--state", str(status), str(config)], capture_output=True, text=True)
    assert done.returncode == 0, f"logrotate failed: {done.stderr}"


def lines_on_disk(log_dir: Path) -> set[tuple[str, int]]:
    """(file generation base name, seq) of every complete line in the current files and all copies."""
    found = set()
    for path in log_dir.iterdir():
        base = re.sub(r"\.\d+$", "", path.name)
        for line in path.read_bytes().split(b"\n")[:-1]:
            match = re.search(rb"seq=(\d+)$", line)
            if match:
                found.add((base, int(match.group(1))))
    return found


def test_rotations_and_kill_restarts_lose_nothing_and_count_nothing_twice(tmp_path):
    rename_dir = tmp_path / "rename-run" / "msrun_log"
    copy_dir = tmp_path / "copytruncate-run" / "msrun_log"
    for directory in (rename_dir, copy_dir):
        directory.mkdir(parents=True)
    writer_script = str(Path(__file__).parent / "support" / "log_writer.py")
    writers = [
        subprocess.Popen([sys.executable, writer_script, "--pause", "0.002",
                          *(str(directory / f"worker_{rank}.log") for rank in range(RANKS))],
                         stdout=subprocess.PIPE, text=True)
        for directory in (rename_dir, copy_dir)
    ]
    rename_config = logrotate_config(tmp_path / "rename.conf", rename_dir,
                                     f"    create\n    sharedscripts\n    postrotate\n"
                                     f"        kill -HUP {writers[0].pid} || true\n    endscript\n")
    copy_config = logrotate_config(tmp_path / "copytruncate.conf", copy_dir, "    copytruncate\n")
    exporter = ExporterProcess(
        "--log-dir", str(rename_dir), "--log-dir", str(copy_dir), "--node", "n",
        "--state-file", str(tmp_path / "state" / "state.json"), "--checkpoint-interval", "0.2",
        env={"TRAINLOG_RESCAN_INTERVAL": "0.5"}, wait_for="/-/ready",
    )
    def rotate_both() -> None:
        rotate(rename_config, tmp_path / "rename.status")
        time.sleep(0.1)
        rotate(copy_config, tmp_path / "copytruncate.status")
        time.sleep(0.1)

    rotations = 0
    try:
        exporter.start()
        # The writers run until the end, so the kills happen while they write however slow a
        # loaded machine makes the restarts: every phase after the first begins with one.
        for phase, seconds in enumerate(ROTATING_PHASES):
            if phase:
                assert exporter.kill(signal.SIGKILL) == -signal.SIGKILL
                for _ in range(2):  # rotated while the exporter is down
                    rotate_both()
                exporter.start()
            phase_ends = time.monotonic() + seconds
            while time.monotonic() < phase_ends:
                rotate_both()
                rotations += 1
        for writer in writers:
            writer.terminate()
        rename_lines, copy_lines = (RANKS * int(writer.communicate(timeout=10)[0]) for writer in writers)

        def counted(run: str) -> float:
            return exporter.total("training_log_lines_total", run=run)

        eventually(lambda: counted("rename-run") >= rename_lines, 20,
                   what=lambda: f"rename: counted {counted('rename-run')} of {rename_lines}\n"
                                f"{exporter.output()[-3000:]}")
        on_disk = len(lines_on_disk(copy_dir))
        eventually(lambda: counted("copytruncate-run") >= on_disk, 20,
                   what=lambda: f"copytruncate: counted {counted('copytruncate-run')}, on disk {on_disk}\n"
                                f"{exporter.output()[-3000:]}")
        time.sleep(1.5)  # a few rescans: anything counted twice would show now
        assert counted("rename-run") == rename_lines
        assert exporter.total("training_steps_total", run="rename-run") == rename_lines
        copy_counted = counted("copytruncate-run")
        assert copy_counted <= copy_lines
        assert exporter.total("trainlog_rotations_total") >= rotations
        assert exporter.total("trainlog_truncations_total") >= 1
        assert exporter.total("training_anomalies_total") == 0
        assert exporter.total("trainlog_files_followed") == 2 * RANKS
        assert exporter.kill(signal.SIGTERM) == 0
        assert '"version":1' in (tmp_path / "state" / "state.json").read_text()
    finally:
        for writer in writers:
            writer.kill()
            writer.wait()
        exporter.stop()
