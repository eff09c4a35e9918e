"""Follower with the real pipeline: which files are ranks, junk, deleted files, events."""

from __future__ import annotations

import gzip
import os
import time

import pytest

from exporter.follow import Follower
from exporter.pipeline import Pipeline
from exporter.state import TrainingState
from tests.support.net import eventually


@pytest.fixture
def following():
    """Builds followers on the real pipeline; stops them (and their inotify instance) after the test."""
    followers = []

    def build(log_dir, **options) -> tuple[TrainingState, Pipeline, Follower]:
        state = TrainingState()
        pipeline = Pipeline(state, "node", lambda directory: "run")
        followers.append(Follower([str(log_dir)], pipeline, **options))
        return state, pipeline, followers[-1]

    yield build
    for follower in followers:
        follower.stop()


def test_rotated_and_compressed_siblings_are_never_followed_as_ranks(tmp_path, following):
    (tmp_path / "worker_0.log").write_text("step=3 loss=2.1\n")
    (tmp_path / "worker_0.log.1").write_text("step=2 loss=2.2\n")
    (tmp_path / "worker_0.log-20240101").write_text("step=1 loss=2.3\n")
    with gzip.open(tmp_path / "worker_0.log.2.gz", "wt") as handle:
        handle.write("step=0 loss=2.4\n")
    state, _, follower = following(tmp_path)
    follower.run_once()
    assert list(state.series) == [("run", "node", "0")]
    assert state.series[("run", "node", "0")].lines_total == 1
    assert state.stats.files_followed == 1


def test_binary_junk_and_invalid_utf8_are_counted_not_raised(tmp_path, following):
    junk = os.urandom(4096) + b"\n\xff\xfe step=\xff loss=\x00\nstep=1 loss=2.0\n"
    (tmp_path / "worker_0.log").write_bytes(junk)
    state, _, follower = following(tmp_path)
    follower.run_once()
    rank = state.series[("run", "node", "0")]
    assert rank.lines_total == junk.count(b"\n")
    assert rank.steps_total == 1
    assert state.stats.lines_unparsed_total >= 1


def test_a_deleted_file_is_no_longer_followed_nor_checkpointed(tmp_path, following):
    log = tmp_path / "worker_0.log"
    log.write_text("step=1 loss=2.0\n")
    state, pipeline, follower = following(tmp_path)
    follower.run_once()
    assert str(log) in pipeline.checkpoint()[1].positions
    log.unlink()
    follower.run_once()
    follower.run_once()
    assert state.stats.files_followed == 0
    assert pipeline.checkpoint()[1].positions == {}
    assert state.series[("run", "node", "0")].lines_total == 1  # its counters stay


def test_writes_to_a_just_rotated_file_are_read_on_its_event(tmp_path, following):
    """logrotate renamed the log and the writer has not reopened yet: its writes land in .1."""
    log = tmp_path / "worker_0.log"
    log.write_text("step=1 loss=2.0\n")
    # No rescan during the test: only inotify events can make the follower read.
    state, _, follower = following(tmp_path, rescan_interval=3600)
    follower.start()
    key = ("run", "node", "0")
    eventually(lambda: key in state.series and state.series[key].lines_total == 1, 5, what="first line not read")
    with open(log, "a") as writer:
        os.rename(log, tmp_path / "worker_0.log.1")
        log.touch()
        time.sleep(0.5)  # let the follower handle the rename first: then only the write's event is left
        writer.write("step=2 loss=2.0\n")
    eventually(lambda: state.series[key].lines_total == 2, 5, what="the write to the rotated file was not read")


def test_catch_up_reads_every_append_made_before_it_without_waiting_for_the_batch(tmp_path, following):
    """A scrape's catch_up: the lines are read when it returns, though appends gather for 30 s."""
    logs = [tmp_path / f"worker_{rank}.log" for rank in range(3)]
    for log in logs:
        log.write_text("step=1 loss=2.0\n")
    # No rescan and a batch window longer than the test: only catch_up can make the follower read.
    state, _, follower = following(tmp_path, rescan_interval=3600, append_batch_seconds=30)
    assert follower.catch_up(1) is False  # not started: nothing watches for appends yet
    follower.start()
    keys = [("run", "node", str(rank)) for rank in range(3)]
    eventually(lambda: all(key in state.series and state.series[key].lines_total == 1 for key in keys), 5,
               what="first lines not read")
    assert follower.catch_up(5)  # nothing appended: answers at once
    for step in range(2, 6):
        for log in logs:
            with open(log, "a") as writer:
                writer.write(f"step={step} loss=2.0\n")
        started = time.monotonic()
        assert follower.catch_up(5)
        assert time.monotonic() - started < 5
        assert [state.series[key].lines_total for key in keys] == [step] * 3
        assert [state.series[key].step for key in keys] == [step] * 3
    time.sleep(0.5)
    assert [state.series[key].lines_total for key in keys] == [5] * 3  # each line read once
    follower.stop()
    assert follower.catch_up(1) is False
