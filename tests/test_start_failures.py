"""A start that cannot succeed ends at once: status 2, one line naming the cause, no thread left serving."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.support.exporter_process import exporter_command, exporter_environment
from tests.support.net import free_port

START_WITHIN = 20  # seconds; /dev/zero kept c431fb3 neither serving nor exiting until killed


def _run(*args: str, stdin: int | None = subprocess.DEVNULL, tmp_path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(exporter_command(*args), stdin=stdin, capture_output=True, text=True,
                          timeout=START_WITHIN, cwd=tmp_path,
                          env=exporter_environment(XDG_STATE_HOME=str(tmp_path / "state")), check=False)


def _closed_stdin_run(*args: str, tmp_path) -> subprocess.CompletedProcess[str]:
    # Descriptor 0 closed in the child, as `exporter <&-` or a daemon without standard input has it.
    return subprocess.run(exporter_command(*args), capture_output=True,
                          text=True, timeout=START_WITHIN, cwd=tmp_path,
                          env=exporter_environment(XDG_STATE_HOME=str(tmp_path / "state")), check=False,
                          preexec_fn=lambda: os.close(0))


def _special(tmp_path, kind: str) -> str:
    if kind == "a FIFO":
        os.mkfifo(tmp_path / "fifo")
        return str(tmp_path / "fifo")
    if kind == "a directory":
        os.mkdir(tmp_path / "dir")
        return str(tmp_path / "dir")
    return "/dev/zero"


@pytest.mark.parametrize("kind", ["a character device", "a FIFO", "a directory"])
def test_a_state_file_that_is_not_a_regular_file_is_refused_by_name(tmp_path, kind):
    path = _special(tmp_path, kind)
    (tmp_path / "logs").mkdir()
    result = _run("--log-dir", str(tmp_path / "logs"), "--state-file", path,
                  "--web.listen-address", f"127.0.0.1:{free_port()}", tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("trainlog-exporter: ")]
    assert lines == [f"trainlog-exporter: state file {path}: is {kind}, not a regular file: give a file path "
                     "(--state-file, TRAINLOG_STATE_FILE)"]
    assert "Traceback" not in result.stderr


def test_serve_reading_a_closed_standard_input_is_a_clear_error(tmp_path):
    result = _closed_stdin_run("--log-file", "-", "--web.listen-address", f"127.0.0.1:{free_port()}",
                               tmp_path=tmp_path)
    assert result.returncode == 2
    assert "trainlog-exporter: -: standard input is closed" in result.stderr
    assert "Traceback" not in result.stderr


def test_analyze_reading_a_closed_standard_input_is_a_clear_error(tmp_path):
    result = _closed_stdin_run("analyze", "-", tmp_path=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("trainlog-exporter: analyze: -: standard input is closed")
    assert result.stderr.count("\n") == 1


# The start made to fail after the listener, the follower and a library's own (non-daemon) thread run: the
# checkpointer, started last, finds the disk full. The real program, with that one fault injected.
_FAILING_LATE = """
import errno, sys, threading
from exporter import checkpoint, cli
def full_disk(self):
    threading.Thread(target=threading.Event().wait, name="a library's worker").start()  # never ends by itself
    raise OSError(errno.ENOSPC, "No space left on device")
checkpoint.Checkpointer.start = full_disk
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_start_that_fails_after_threads_run_stops_them_and_exits_with_one_line(tmp_path):
    (tmp_path / "logs").mkdir()
    port = free_port()
    result = subprocess.run([sys.executable, "-c", _FAILING_LATE, "--log-dir", str(tmp_path / "logs"),
                             "--web.listen-address", f"127.0.0.1:{port}"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=START_WITHIN, cwd=tmp_path,
                            env=exporter_environment(XDG_STATE_HOME=str(tmp_path / "state")), check=False)
    assert result.returncode == 1, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("trainlog-exporter: ")]
    assert lines == ["trainlog-exporter: cannot start: OSError: [Errno 28] No space left on device"]
    assert "Traceback" not in result.stderr
    with socket.socket() as probe:  # nothing listens any more
        assert probe.connect_ex(("127.0.0.1", port)) != 0
