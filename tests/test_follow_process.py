"""The exporter as a real process: restarts, damaged state files, polling, many files."""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import signal
import subprocess

import pytest

from exporter.app import Exporter, _report_slow_stop
from exporter.settings import load_settings
from tests.support.exporter_process import ExporterProcess, exporter_command
from tests.support.net import eventually


def write_steps(path, first: int, last: int) -> None:
    with open(path, "a") as handle:
        handle.writelines(f"step={step} loss=2.5\n" for step in range(first, last + 1))


def lines_counted(exporter: ExporterProcess, **labels: str) -> float:
    return exporter.total("training_log_lines_total", **labels)


def wait_for_lines(exporter: ExporterProcess, expected: int, within: float = 10, **labels: str) -> None:
    eventually(lambda: lines_counted(exporter, **labels) >= expected, within,
               what=lambda: f"counted {lines_counted(exporter, **labels)} of {expected}\n{exporter.output()}")


def serve(tmp_path, log_dir, *extra: str, **options) -> ExporterProcess:
    state = ["--state-file", str(tmp_path / "state.json")] if "--state-file" not in extra else []
    return ExporterProcess("--log-dir", str(log_dir), "--node", "n", *state, *extra, wait_for="/-/ready", **options)


@pytest.mark.parametrize("rotation", ["rename", "copytruncate", "delete"])
def test_a_file_replaced_while_the_exporter_is_down(tmp_path, log_dir, rotation):
    log = log_dir / "worker_0.log"
    write_steps(log, 1, 10)
    exporter = serve(tmp_path, log_dir).start()
    try:
        wait_for_lines(exporter, 10)
        assert exporter.kill(signal.SIGTERM) == 0  # writes the last checkpoint
        write_steps(log, 11, 15)  # appended while down, before the rotation
        if rotation == "rename":
            os.rename(log, log_dir / "worker_0.log.1")
        elif rotation == "copytruncate":
            shutil.copyfile(log, log_dir / "worker_0.log.1")
            os.truncate(log, 0)
        else:
            log.unlink()
        write_steps(log, 16, 20)
        exporter.start()
        expected = 15 if rotation == "delete" else 20  # lines 11-15 died with the deleted file
        wait_for_lines(exporter, expected)
        assert lines_counted(exporter) == expected
        assert exporter.total("training_step") == 20
    finally:
        exporter.stop()


def test_sigkill_then_restart_counts_lines_appended_while_down_once(tmp_path, log_dir):
    log = log_dir / "worker_0.log"
    write_steps(log, 1, 100)
    exporter = serve(tmp_path, log_dir, "--checkpoint-interval", "0.1").start()
    try:
        wait_for_lines(exporter, 100)
        eventually(lambda: (tmp_path / "state.json").exists(), 5, what="no checkpoint written")
        exporter.kill(signal.SIGKILL)
        write_steps(log, 101, 150)
        exporter.start()
        wait_for_lines(exporter, 150)
        assert lines_counted(exporter) == 150
        assert exporter.total("training_steps_total") == 150
    finally:
        exporter.stop()


@pytest.mark.parametrize("content", [b"", b'{"version": 1, "positi', b"\x00\x01garbage\xff"])
def test_a_corrupt_state_file_gives_a_warning_and_a_fresh_start(tmp_path, log_dir, content):
    (tmp_path / "state.json").write_bytes(content)
    write_steps(log_dir / "worker_0.log", 1, 5)
    exporter = serve(tmp_path, log_dir).start()
    try:
        wait_for_lines(exporter, 5)
        assert "unusable" in exporter.output()
        assert (tmp_path / "state.json.corrupt").read_bytes() == content
    finally:
        exporter.stop()


def test_an_unwritable_state_location_runs_without_checkpoints(tmp_path, log_dir):
    (tmp_path / "blocker").write_text("")
    write_steps(log_dir / "worker_0.log", 1, 3)
    exporter = serve(tmp_path, log_dir, "--state-file", str(tmp_path / "blocker" / "state.json")).start()
    try:
        wait_for_lines(exporter, 3)
        assert "running without them" in exporter.output()
    finally:
        exporter.stop()


def inotify_descriptors(pid: int) -> int:
    fds = f"/proc/{pid}/fd"
    return sum(_target(os.path.join(fds, fd)) == "anon_inode:inotify" for fd in os.listdir(fds))


def _target(link: str) -> str | None:
    """What a descriptor names; None for one closed since the directory was listed (a file read and closed)."""
    try:
        return os.readlink(link)
    except FileNotFoundError:
        return None


def test_polling_mode_reads_appends_and_rotations_without_inotify(tmp_path, log_dir):
    log = log_dir / "worker_0.log"
    write_steps(log, 1, 5)
    exporter = serve(tmp_path, log_dir, "--poll-interval", "0.2").start()
    try:
        wait_for_lines(exporter, 5)
        # No inotify instance at all: what is read below can only have been found by polling,
        # as on NFS or Lustre where writes from other hosts raise no inotify event.
        assert inotify_descriptors(exporter.pid) == 0
        write_steps(log, 6, 10)
        wait_for_lines(exporter, 10)
        os.rename(log, log_dir / "worker_0.log.1")
        write_steps(log, 11, 12)
        wait_for_lines(exporter, 12)
        assert lines_counted(exporter) == 12
        assert exporter.total("trainlog_rotations_total") == 1
    finally:
        exporter.stop()


def test_native_watching_uses_inotify(tmp_path, log_dir):
    """The other half of the test above: without --poll-interval inotify instances exist."""
    write_steps(log_dir / "worker_0.log", 1, 1)
    exporter = serve(tmp_path, log_dir).start()
    try:
        # watchdog's (files appearing, moving, going) and the AppendWatcher's (files growing).
        assert inotify_descriptors(exporter.pid) == 2
    finally:
        exporter.stop()


def no_inotify_prefix() -> list[str]:
    """Run in a user namespace whose inotify instance limit is 0 (a full node's situation)."""
    unshare = shutil.which("unshare")
    prefix = [unshare, "--user", "--map-root-user", "sh", "-c",
              'echo 0 > /proc/sys/user/max_inotify_instances && exec "$@"', "sh"] if unshare else []
    if not prefix or subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("user namespaces are not available here")
    return prefix


def test_falls_back_to_polling_when_inotify_cannot_be_set_up(tmp_path, log_dir):
    log = log_dir / "worker_0.log"
    write_steps(log, 1, 5)
    exporter = serve(tmp_path, log_dir, program=[*no_inotify_prefix(), *exporter_command()],
                     env={"TRAINLOG_RESCAN_INTERVAL": "0.2"}).start()
    try:
        wait_for_lines(exporter, 5)
        assert "falling back to polling" in exporter.output()
        write_steps(log, 6, 10)
        wait_for_lines(exporter, 10)
    finally:
        exporter.stop()


def test_hundreds_of_files_under_a_low_open_file_limit(tmp_path, log_dir):
    files = 400
    for rank in range(files):
        write_steps(log_dir / f"worker_{rank}.log", 1, 2)
    soft_limit = 256  # below the number of files: the exporter raises it up to the hard limit

    def lower_the_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft_limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    exporter = serve(tmp_path, log_dir, preexec_fn=lower_the_limit).start()
    try:
        wait_for_lines(exporter, 2 * files, within=20)
        assert exporter.total("trainlog_files_followed") == files
        write_steps(log_dir / "worker_399.log", 3, 3)
        wait_for_lines(exporter, 2 * files + 1)
        assert "cannot open" not in exporter.output()
    finally:
        exporter.stop()


def test_stop_ends_the_follower_before_the_last_checkpoint_and_says_so_when_slow(tmp_path, log_dir, caplog):
    write_steps(log_dir / "worker_0.log", 1, 10)
    exporter = Exporter(load_settings(log_dir=[log_dir], web_listen_address="127.0.0.1:0", node="n",
                                      state_file=tmp_path / "state.json"))
    exporter.start()
    eventually(lambda: exporter.follower.ready, 10, what="the first pass")
    took = exporter.stop()
    assert list(took) == ["follower", "checkpoint", "http"]
    assert all(0 <= seconds < 30 for seconds in took.values())
    log = log_dir / "worker_0.log"
    positions = json.loads((tmp_path / "state.json").read_text())["positions"]
    assert positions[str(log)]["offset"] == log.stat().st_size  # the last checkpoint has every line read

    with caplog.at_level(logging.WARNING, logger="exporter.app"):
        _report_slow_stop(took)
        assert not caplog.records
        _report_slow_stop({"follower": 5.02, "checkpoint": 9.5, "http": 0.01})
    assert [record.getMessage() for record in caplog.records] == [
        "shutting down took 14.5 s: follower 5.0 s, checkpoint 9.5 s, http 0.0 s"]
