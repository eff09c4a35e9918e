"""``analyze`` at its limits, as a user runs it: a generation cut short, more ranks than one analysis holds."""

from __future__ import annotations

import gzip
import json
import subprocess
import zlib

from tests.support.exporter_process import exporter_command, exporter_environment

STEPS = 10_000
SERIES_CAP = 4096  # exporter.state.Limits().max_series


def _analyze(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(exporter_command("analyze", *args), capture_output=True, text=True, timeout=timeout,
                          env=exporter_environment(), check=False)


def _step(step: int) -> str:
    return (f"2025-01-01 00:00:00 - mindformers - INFO - {{ Epoch:[  1/  1], step:[{step:5d}/{STEPS}], "
            f"loss: {2 + (step % 97) / 100:.2f}, per_step_time: 850ms, lr: 0.0001, overflow cond: False, "
            "loss_scale: 1.0, global_norm: [1.1], train_throughput_per_npu: 100.0T\n")


def test_a_gz_generation_cut_short_gives_every_whole_line_before_the_cut_and_a_warning_naming_it(tmp_path):
    log_dir = tmp_path / "run" / "msrun_log"
    log_dir.mkdir(parents=True)
    compressed = gzip.compress("".join(_step(step) for step in range(1, STEPS + 1)).encode())
    cut = compressed[: len(compressed) * 9 // 10]
    (log_dir / "worker_0.log.1.gz").write_bytes(cut)
    (log_dir / "worker_0.log").write_text("")
    readable = zlib.decompressobj(wbits=31).decompress(cut)
    whole_lines = readable.count(b"\n")  # the step of the last whole line before the cut
    assert 8000 < whole_lines < STEPS
    result = _analyze(str(log_dir), "--format", "json")
    assert result.returncode == 0, result.stderr
    steps = json.loads(result.stdout)["runs"][0]["steps"]
    assert steps == {"first": 1, "last": whole_lines, "total": 10_000, "lines": whole_lines}  # c431fb3: last 4,766
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "worker_0.log.1.gz" in warnings[0] and "cut short" in warnings[0]


def test_more_ranks_than_one_analysis_holds_is_a_report_that_says_so(tmp_path):
    log_dir = tmp_path / "run" / "msrun_log"
    log_dir.mkdir(parents=True)
    ranks = SERIES_CAP + 10
    for rank in range(ranks):
        (log_dir / f"worker_{rank}.log").write_text(_step(1))
    result = _analyze(str(log_dir), "--format", "markdown", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]  # c431fb3: KeyError after the series cap
    assert "Traceback" not in result.stderr
    message = f"{ranks} series (run, node, rank) found, more than the {SERIES_CAP} one analysis holds"
    assert message in result.stdout and message in result.stderr
    assert f"leaves out 10 (from rank {SERIES_CAP})" in result.stdout


def test_more_ranks_in_one_file_than_one_analysis_holds_are_left_out_and_counted(tmp_path):
    """One console with torchrun's [rankN]: prefixes of 5,000 ranks: the ranks past the cap are left out, said."""
    log_dir = tmp_path / "run" / "logs"
    log_dir.mkdir(parents=True)
    ranks = SERIES_CAP + 904
    (log_dir / "console.log").write_text("".join(f"[rank{rank}]: step=1 loss=2.5 lr=0.0001\n" for rank in range(ranks)))
    result = _analyze(str(log_dir), "--format", "json", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    assert len(report["runs"][0]["ranks"]) == SERIES_CAP
    # The console's own series (its unprefixed lines) and 4,095 prefixed ranks fit; 905 are left out.
    assert report["warnings"] == [f"905 ranks left out: one analysis holds at most {SERIES_CAP} (run, node, rank) "
                                  "series, as the exporter's cardinality limit"]
