"""More logs than descriptors: the listener and the probes keep theirs, the rest is counted, nothing spins."""

from __future__ import annotations

import resource
import time

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get

LIMIT = 128  # the hard limit the exporter runs under: it cannot raise the soft one above it
LOGS = 300
RESERVE = 64  # exporter.app.FILE_RESERVE


def _limit_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


def test_logs_beyond_the_open_file_limit_are_counted_and_the_probes_still_answer(tmp_path):
    log_dir = tmp_path / "msrun_log"
    log_dir.mkdir()
    for rank in range(LOGS):
        (log_dir / f"worker_{rank}.log").write_text(f"step:[{rank + 1}/1000], loss: 2.5, lr: 0.0001\n")
    with ExporterProcess("--log-dir", str(log_dir), "--node", "node-a", preexec_fn=_limit_files) as exporter:
        samples = eventually(lambda: (s := exporter.samples()).get(("trainlog_files_followed", ())) and s,
                             timeout=15, what="the first scan")
        assert samples[("trainlog_files_followed", ())] == LIMIT - RESERVE
        assert samples[("trainlog_files_unfollowed", ())] == LOGS - (LIMIT - RESERVE)
        cpu_before = exporter.cpu_seconds()
        started = time.monotonic()
        for _ in range(20):  # 20 probes and scrapes over 4 s: each needs a descriptor
            for path in ("/-/healthy", "/-/ready", "/metrics"):
                assert http_get(exporter.url + path, timeout=5)[0] == 200
            time.sleep(0.2)
        busy = (exporter.cpu_seconds() - cpu_before) / (time.monotonic() - started)
        assert busy < 0.5, f"{busy:.0%} of a core"  # c431fb3: one thread at 100 %
    output = exporter.stop()
    warnings = [line for line in output.splitlines() if "open-file limit" in line]
    assert len(warnings) == 1 and f"is {LIMIT}" in warnings[0], warnings
