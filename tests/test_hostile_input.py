"""Hostile values, names and checkpoints, through the real serving path.

Each test writes the hostile line, file name or checkpoint value into a log directory the
exporter (a real process) follows, then reads /metrics: it answers, and every other step
is counted. The hostile lines here are synthetic, made to break a parser (none claims to
be a line a framework printed).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get

MEGATRON_LINE = (" [2025-03-02 10:15:31.123456] iteration {step:8d}/   50000 | consumed samples:          512 | "
                 "elapsed time per iteration (ms): 48211.7 | learning rate: 1.500000E-07 | global batch size:   512 | "
                 "lm loss: 1.091532E+01 | loss scale: 1.0 | grad norm: 12.118 | number of skipped iterations:   0 | "
                 "number of nan iterations: {nan} |\n")


def steps(first: int, last: int) -> str:
    return "".join(f"step={step} loss=2.5\n" for step in range(first, last + 1))


def serve(tmp_path: Path, *log_dirs: Path | bytes, extra: tuple[str, ...] = (), **options) -> ExporterProcess:
    directories = [arg for directory in log_dirs for arg in ("--log-dir", os.fsdecode(directory))]
    return ExporterProcess(*directories, "--node", "n", "--state-file", str(tmp_path / "state.json"), *extra,
                           wait_for="/-/ready", **options)


def wait_for(exporter: ExporterProcess, name: str, expected: float, **labels: str) -> None:
    eventually(lambda: exporter.total(name, **labels) >= expected, 15,
               what=lambda: f"{name}: {exporter.total(name, **labels)} of {expected}\n{exporter.output()[-3000:]}")


def test_a_line_a_parser_cannot_read_is_rejected_alone_and_the_rest_of_its_read_is_counted(tmp_path, log_dir):
    # One read holds them all: before, the first raising line lost every step of the read.
    (log_dir / "worker_0.log").write_text(
        steps(1, 50) + f"step={'9' * 400} loss=2.5\n"  # valid to a regex, no float holds it
        + steps(51, 100) + f"step={'7' * 5000} loss=2.5\n"  # beyond Python's 4,300-digit int() limit
        + steps(101, 150))
    (log_dir / "worker_1.log").write_text("".join(MEGATRON_LINE.format(step=step, nan="nan" if step == 2 else "  0")
                                                  for step in range(1, 4)))
    with serve(tmp_path, log_dir) as exporter:
        wait_for(exporter, "training_steps_total", 150, rank="0")
        wait_for(exporter, "training_steps_total", 3, rank="1")  # "nan iterations: nan" is no count, not an error
        assert exporter.total("training_step", rank="0") == 150
        assert exporter.total("trainlog_lines_rejected_total", reason="number_out_of_range") == 1
        assert exporter.total("trainlog_lines_rejected_total", reason="parse_error") == 1
        assert exporter.total("trainlog_lines_unparsed_total") == 0
        assert exporter.total("training_log_lines_total", rank="0") == 152
        exporter.kill(signal.SIGTERM)
        exporter.start()  # from the checkpoint: nothing in it breaks a render
        assert exporter.total("training_steps_total", rank="0") == 150
        assert "Traceback" not in exporter.output()


def test_file_and_directory_names_that_are_not_utf8_become_valid_labels_and_round_trip_the_checkpoint(tmp_path):
    log_dir = os.path.join(os.fsencode(tmp_path), b"run-\xfe\xff", b"logs")
    os.makedirs(log_dir)
    log = os.path.join(log_dir, b"rank3_\xff\xfename.log")
    with open(log, "w") as handle:
        handle.write(steps(1, 20))
    with serve(tmp_path, log_dir) as exporter:
        wait_for(exporter, "training_steps_total", 20)
        assert exporter.total("training_steps_total", run="run-\ufffd\ufffd", rank="3") == 20
        assert exporter.total("training_info", file="rank3_\ufffd\ufffdname.log") == 1
        assert http_get(exporter.url + "/")[0] == 200
        assert exporter.kill(signal.SIGTERM) == 0
        with open(log, "a") as handle:
            handle.write(steps(21, 30))
        exporter.start()
        wait_for(exporter, "training_steps_total", 30)
        assert exporter.total("training_steps_total") == 30  # resumed at the saved name's offset: nothing twice
        assert "unusable" not in exporter.output()


def edit_checkpoint(path: Path, edit) -> None:
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def test_a_checkpoint_holding_values_no_render_can_print_is_repaired_on_load(tmp_path, log_dir):
    (log_dir / "worker_0.log").write_text(steps(1, 10))
    exporter = serve(tmp_path, log_dir).start()
    try:
        wait_for(exporter, "training_steps_total", 10)
        assert exporter.kill(signal.SIGTERM) == 0

        def hostile(document):  # what a checkpoint written before the range checks could hold
            values = document["state"]["series"][0]["values"]
            values["step"] = 10**400
            values["printed"]["total_steps"] = 10**400
            values["lines_total"] = -5
            document["state"]["stats"]["bytes_read_total"] = -1

        edit_checkpoint(tmp_path / "state.json", hostile)
        exporter.start()
        assert exporter.total("training_steps_total") == 10
        assert exporter.total("trainlog_bytes_read_total") == 0
        assert "repaired" in exporter.output()
        (log_dir / "worker_0.log").open("a").write(steps(11, 12))
        eventually(lambda: exporter.total("training_step") == 12, 10, what="the repaired series does not go on")
    finally:
        exporter.stop()


@pytest.mark.parametrize("offset", [-5, 2**70])
def test_an_impossible_checkpoint_offset_rereads_the_file_from_its_start_once(tmp_path, log_dir, offset):
    (log_dir / "worker_0.log").write_text(steps(1, 10))
    (log_dir / "worker_1.log").write_text(steps(1, 10))
    exporter = serve(tmp_path, log_dir).start()
    try:
        wait_for(exporter, "training_steps_total", 20)
        assert exporter.kill(signal.SIGTERM) == 0
        edit_checkpoint(tmp_path / "state.json", lambda document: document["positions"][
            str(log_dir / "worker_0.log")].update(offset=offset))
        for rank in (0, 1):
            (log_dir / f"worker_{rank}.log").open("a").write(steps(11, 15))
        exporter.start()
        wait_for(exporter, "training_steps_total", 15, rank="0")
        wait_for(exporter, "training_steps_total", 15, rank="1")
        output = exporter.output()
        assert exporter.total("training_steps_total") == 30
        assert output.count("makes no sense") == 1
        assert "Traceback" not in output
    finally:
        exporter.stop()


def test_more_restored_series_than_the_limit_leave_room_for_new_ranks(tmp_path, log_dir):
    (log_dir / "worker_0.log").write_text(steps(1, 10))
    exporter = serve(tmp_path, log_dir, ready_within=60).start()  # restoring 5,001 series, with the suite running
    try:
        wait_for(exporter, "training_steps_total", 10)
        assert exporter.kill(signal.SIGTERM) == 0

        def crowded(document):  # a checkpoint of an exporter with a larger limit, or a hand-made one
            series = document["state"]["series"]
            old = {**series[0]["values"], "last_log_timestamp": 1.0}
            series += [{"key": ["old-run", "n", str(rank)], "values": old} for rank in range(5000)]

        edit_checkpoint(tmp_path / "state.json", crowded)
        (log_dir / "worker_7.log").write_text(steps(1, 5))
        exporter.start()
        wait_for(exporter, "training_steps_total", 5, rank="7")
        assert exporter.total("training_steps_total", run="run", rank="0") == 10
        assert "over the limit" in exporter.output()
    finally:
        exporter.stop()


def test_a_file_that_shrinks_by_one_byte_is_read_on_not_again(tmp_path, log_dir):
    log = log_dir / "worker_0.log"
    log.write_text(steps(1, 100))
    with serve(tmp_path, log_dir) as exporter:
        wait_for(exporter, "training_steps_total", 100)
        os.truncate(log, log.stat().st_size - 1)  # the last newline goes
        wait_for(exporter, "trainlog_truncations_total", 1)
        with log.open("a") as handle:
            handle.write("\n" + steps(101, 110))
        wait_for(exporter, "training_step", 110)
        assert exporter.total("training_steps_total") == 110  # before: 210, the file read twice
        assert exporter.total("trainlog_truncations_total") == 1


CHART_MEMORY_LIMIT_KB = 256 * 1024


def test_distinct_rank_prefixes_by_the_hundred_thousand_stay_far_below_the_charts_memory_limit(tmp_path, log_dir):
    # Each prefix opens a traceback and prints a step: before, each held a batch builder, an open
    # block and a series key for good (230 MB at 200,000 prefixes, 750 MB at a million).
    prefixes = 200_000  # enough to prove the caps: the memory no longer grows with them
    with (log_dir / "tee.log").open("w") as handle:
        for rank in range(0, prefixes, 2):
            handle.write(f"[rank{rank}]: step=1 loss=2.5\n[rank{rank + 1}]: Traceback (most recent call last):\n")
    with serve(tmp_path, log_dir, ready_within=120) as exporter:
        # Polled every 2 s: a scrape of 4,096 series costs the exporter (and this process) CPU the reading needs.
        eventually(lambda: exporter.total("trainlog_bytes_read_total") >= (log_dir / "tee.log").stat().st_size, 120,
                   interval=2.0,
                   what=lambda: f"read {exporter.total('trainlog_bytes_read_total')}\n{exporter.output()[-2000:]}")
        peak = exporter.memory_kb("VmHWM")
        assert exporter.total("trainlog_series_dropped_total") == prefixes + 1 - 4096  # each series once
        # Their lines are counted as dropped: with the lines counted in the kept series, every line read.
        dropped = exporter.total("trainlog_lines_dropped_total", reason="series_limit")
        assert dropped == prefixes + 1 - 4096
        assert dropped + exporter.total("training_log_lines_total") == prefixes
        # Under the chart's limit with room to spare: about 115-140 MB here, half of it the interpreter, its
        # libraries and the read buffers, whatever the load of the machine does to the allocator's peak.
        assert peak < CHART_MEMORY_LIMIT_KB * 3 / 4, f"peak RSS {peak} kB"


def test_symlinks_out_of_the_log_directory_and_unreadable_directories_are_skipped_with_a_word(tmp_path, log_dir):
    outside = tmp_path / "elsewhere.log"
    outside.write_text(steps(1, 5))
    (log_dir / "worker_1.log").symlink_to(outside)
    (log_dir / "worker_0.log").write_text(steps(1, 10))
    (log_dir / "worker_2.log").symlink_to(log_dir / "worker_0.log")  # inside: followed
    locked = log_dir / "locked"
    locked.mkdir()
    (locked / "worker_3.log").write_text(steps(1, 5))
    locked.chmod(0)
    try:
        with serve(tmp_path, log_dir) as exporter:
            wait_for(exporter, "training_steps_total", 10, rank="2")
            assert exporter.total("training_steps_total", rank="0") == 10
            assert exporter.total("training_steps_total", rank="1") == 0
            output = exporter.output()
            if os.geteuid() != 0:  # root reads any directory
                assert f"cannot read directory {locked}" in output
            assert f"not following {log_dir / 'worker_1.log'}: a symbolic link out of the log directory" in output
        with serve(tmp_path, log_dir, extra=("--follow-symlinks-outside",)) as exporter:
            wait_for(exporter, "training_steps_total", 5, rank="1")
    finally:
        locked.chmod(0o755)


def test_two_rank_less_files_of_one_directory_are_two_series(tmp_path, log_dir):
    # Before, both went to rank "": their losses alternated in one series, a false spike each time.
    (log_dir / "train.log").write_text("".join(f"step={step} loss=2.5\n" for step in range(1, 41)))
    (log_dir / "eval.log").write_text("".join(f"step={step} loss=50.0\n" for step in range(1, 41)))
    with serve(tmp_path, log_dir) as exporter:
        def losses() -> dict[str, float]:
            return {dict(labels)["run"]: value for (name, labels), value in exporter.samples().items()
                    if name == "training_loss" and dict(labels)["rank"] == ""}

        # Both on the empty rank (DESIGN 3.2); the first in name order keeps the run label, the second has its own.
        wait_for(exporter, "training_steps_total", 80, rank="")
        assert losses() == {"run": 50.0, "run/train.log": 2.5}, exporter.output()[-3000:]
        assert exporter.total("training_anomalies_total", kind="loss_spike") == 0


def test_a_value_with_thousands_separators_is_read_whole(tmp_path, log_dir):
    # Synthetic lines in MindFormers' record layout (the numbers made large on purpose).
    (log_dir / "worker_0.log").write_text("".join(
        "[INFO] 2026-06-09 10:20:40 [mindformers/core/callback/callback.py:231] _print_log: "
        f"{{ step:[{step:5d}/60001], "
        f"loss: 1,234.5, per_step_time: 851ms, lr: 4.000000e-05, throughput: 1,012.5T }}\n" for step in range(1, 11)))
    with serve(tmp_path, log_dir) as exporter:
        wait_for(exporter, "training_steps_total", 10, rank="0")
        assert exporter.total("training_loss", rank="0") == 1234.5
        assert exporter.total("training_step_duration_seconds", rank="0") == 0.851
        assert exporter.total("training_throughput", rank="0") == 1012.5


def test_bytes_not_read_yet_show_per_file_and_dropped_lines_by_reason(tmp_path, log_dir):
    (log_dir / "worker_0.log").write_text(steps(1, 10))
    (log_dir / "worker_1.log").write_text(steps(1, 10) + "x" * 3000 + "\n" + f"step={'9' * 40} loss=2.5\n")
    # Polling every 60 s: what is appended after the first read waits, and shows as lag.
    with serve(tmp_path, log_dir, extra=("--poll-interval", "60", "--max-line-bytes", "1024")) as exporter:
        wait_for(exporter, "training_steps_total", 10, rank="1")
        worker_0 = str(log_dir / "worker_0.log")
        assert exporter.total("trainlog_file_lag_bytes", file=worker_0) == 0
        appended = steps(11, 20)
        with open(worker_0, "a") as handle:
            handle.write(appended)
        assert exporter.total("trainlog_file_lag_bytes", file=worker_0) == len(appended)
        assert exporter.total("trainlog_file_lag_bytes", file=str(log_dir / "worker_1.log")) == 0
        assert exporter.total("trainlog_lines_dropped_total", reason="truncated") == 1
        assert exporter.total("trainlog_lines_dropped_total", reason="number_out_of_range") == 1
        assert exporter.total("trainlog_lines_dropped_total", reason="series_limit") == 0
