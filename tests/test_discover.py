from __future__ import annotations

from pathlib import Path

import pytest

from exporter.follow import classify, is_followed
from exporter.follow.discover import PidRanks, RanklessFiles, plog_pid, record_pids

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
        ("train.log", "train.log", "worker"),  # no rank in the name: the name itself tells files apart
        ("node1/train.log", "node1/train.log", "worker"),
    ],
)
def test_rank_from_file_name(path, rank, role):
    assert classify(path).rank == rank
    assert classify(path).role == role
    assert not classify(path).local_rank
    assert classify(path).rankless == (rank == path)


def test_the_first_rankless_file_of_a_directory_has_the_empty_rank_a_second_one_its_path():
    # DESIGN 3.2: `cmd > train.log 2>&1`, a --tee console: no rank in the name, none in the label.
    files = RanklessFiles()
    assert files.role("/job/a", "train.log").rank == ""
    assert files.role("/job/a", "train.log").rank == ""  # the same file asked again
    assert files.role("/job/a", "console.log").rank == "console.log"  # two rank-less files stay two series
    assert files.role("/job/b", "console.log").rank == ""  # another directory
    assert files.role("/job/a", "worker_3.log").rank == "3"
    assert files.role("/job/a", "scheduler.log").role == "scheduler"


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
