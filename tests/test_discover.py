from __future__ import annotations

from pathlib import Path

import pytest

from exporter.follow import classify, is_followed
from exporter.follow.discover import LogFileRole, PidRanks, RanklessFiles, discovery_order, plog_pid, record_pids

REAL = Path(__file__).parent / "fixtures" / "real"


@pytest.mark.parametrize(
    ("path", "followed"),
    [
        ("worker_0.log", True),
        ("scheduler.log", True),
        ("attempt_0/3/stdout.log", True),
        ("worker_3.log.1", False),
        ("worker_3.log.2.gz", False),
        ("worker_3.log.gz", False),
        ("worker_3.log-20261129", False),
        ("model.ckpt", False),
    ],
)
def test_rotated_siblings_are_never_new_ranks(path, followed):
    assert is_followed(path) is followed


@pytest.mark.parametrize(
    ("path", "rank", "role"),
    [
        ("worker_0.log", "0", "worker"),
        ("worker_12.log", "12", "worker"),
        ("scheduler.log", "", "scheduler"),
        ("logs/rank_5.log", "5", "worker"),
        ("train-rank3.log", "3", "worker"),
        ("train.log", "", "worker"),  # no rank in the name: none in the label (DESIGN 3.2)
        ("node1/train.log", "", "worker"),
        ("csv/lightning_logs/version_0/metrics.csv", "", "worker"),
    ],
)
def test_rank_from_file_name(path, rank, role):
    assert classify(path).rank == rank
    assert classify(path).role == role
    assert not classify(path).local_rank
    assert classify(path).rankless == (rank == "" and role == "worker")


def test_rankless_files_are_each_a_series_of_their_own_on_the_empty_rank():
    # DESIGN 3.2: `cmd > train.log 2>&1`, a --tee console: no rank in the name, none in the label. The first one of
    # a run and node has the run's own label; a further one its own series, told apart by its run label.
    files = RanklessFiles()
    assert files.run_label("job", "n0", "/job/a/train.log", "train.log") == "job"
    assert files.run_label("job", "n0", "/job/a/train.log", "train.log") == "job"  # the same file asked again
    assert files.run_label("job", "n0", "/job/a/v/metrics.csv", "v/metrics.csv") == "job/v/metrics.csv"
    assert files.run_label("job", "n1", "/job/b/console.log", "console.log") == "job"  # another node
    assert files.run_label("other", "n0", "/other/train.log", "train.log") == "other"  # another run
    # Two --log-files of one name in two directories beside the first: the second path is the full one.
    assert files.run_label("job", "n0", "/x/1/t.log", "t.log") == "job/t.log"
    assert files.run_label("job", "n0", "/x/2/t.log", "t.log") == "job/x/2/t.log"


def test_discovery_order_takes_the_top_of_a_directory_first_then_names_with_numbers_as_numbers():
    paths = ["csv/lightning_logs/version_0/metrics.csv", "train.log", "attempt_10/0/stdout.log",
             "attempt_2/0/stdout.log", "a.log"]
    assert sorted(paths, key=discovery_order) == [
        "a.log", "train.log", "attempt_2/0/stdout.log", "attempt_10/0/stdout.log",
        "csv/lightning_logs/version_0/metrics.csv"]
    assert is_followed("csv/lightning_logs/version_0/metrics.csv")  # Lightning's CSVLogger
    assert not is_followed("report.csv")


@pytest.mark.parametrize("path", ["run-1/attempt_0/3/stdout.log", "attempt_2/3/stderr.log",
                                  # CANN's device-side process log of device 3, the layout of MindCluster's fixtures
                                  # (process_log/debug/device-0/device-10972_20230131024824126.log)
                                  "process_log/debug/device-3/device-10972_20230131024824126.log"])
def test_torchrun_log_dir_layout_gives_the_local_rank(path):
    role = classify(path)
    assert (role.rank, role.role, role.local_rank) == ("3", "worker", True)


def test_a_cann_process_log_is_named_by_its_pid():
    # MindCluster's fixtures: process_log/debug/plog/plog-10972_20230131024824126.log
    assert plog_pid("process_log/debug/plog/plog-10972_20230131024824126.log") == 10972
    assert plog_pid("plog-10972_20230131024824126.log") == 10972
    assert plog_pid("process_log/debug/device-0/device-10972_20230131024824126.log") is None
    assert plog_pid("worker_1.log") is None


def test_the_pids_of_mindspore_and_cann_records_in_a_worker_log():
    # A real msrun worker log (MindSpore 2.10.0, tests/fixtures/SOURCES.md): its process's pid is 953.
    block = (REAL / "msrun_nan_worker_1.log").read_bytes()
    assert record_pids(block) == {953}
    # A CANN record printed to the console (ASCEND_SLOG_PRINT_TO_STDOUT=1) names its process too.
    assert record_pids((REAL / "errors_ascend_faults.log").read_bytes().splitlines()[4]) == {10972}
    assert record_pids(b"step 1 loss 2.0 (953, 12)\n  [WARNING] DEVICE(1,2,python) indented\n") == set()


def test_pid_ranks_finds_the_worker_of_a_pid_and_waits_while_none_names_it(tmp_path):
    worker = tmp_path / "worker_1.log"
    worker.write_bytes(b"no record yet\n")
    ranks, role = PidRanks(), classify("worker_1.log")
    assert ranks.role_of(953, [(str(worker), role)]) is None
    worker.write_bytes(b"no record yet\n" + (REAL / "msrun_nan_worker_1.log").read_bytes())
    assert ranks.role_of(953, [(str(worker), role)]) == role
    assert ranks.role_of(954, [(str(worker), role)]) is None


def test_msrun_s_console_kept_beside_its_logs_is_a_launcher_read_after_the_workers():
    """``msrun ... > LOG_DIR/msrun.log 2>&1`` (docs/formats.md): its own series, rank "", role launcher; taken after
    the worker logs, so that its report of a worker's exit comes after the worker's last step."""
    assert classify("msrun.log") == LogFileRole("", "launcher")
    assert classify("output/msrun_console.log") == LogFileRole("", "launcher")
    assert classify("msrun_log/worker_3.log") == LogFileRole("3", "worker")  # msrun's default --log_dir name
    names = ["worker_10.log", "msrun.log", "scheduler.log", "worker_2.log", "train.log"]
    assert sorted(names, key=discovery_order) == ["scheduler.log", "train.log", "worker_2.log", "worker_10.log",
                                                  "msrun.log"]
