from __future__ import annotations

import pytest

from exporter.follow import classify, is_followed
from exporter.follow.discover import RanklessFiles


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
