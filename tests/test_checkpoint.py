"""Checkpoints: consistent snapshots, atomic files, restored state, damaged files."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest

from exporter import checkpoint
from exporter.cli import main
from exporter.follow import Follower
from exporter.parse.records import ErrorEvent, StepLine
from exporter.pipeline import Pipeline
from exporter.settings import ConfigError, load_settings
from exporter.state import TrainingState
from exporter.state.snapshot import dump_state, restore_state
from tests.support.records import in_batches

KEY = ("run", "node", "0")


def follow(log_dir: Path, state: TrainingState, positions=None) -> tuple[Pipeline, Follower]:
    pipeline = Pipeline(state, "node", lambda directory: "run", positions=positions)
    return pipeline, Follower([str(log_dir)], pipeline, poll_interval=0.05)


def write_steps(path: Path, first: int, last: int, loss=lambda step: 2.0 + (step % 3) * 0.01) -> None:
    with open(path, "a") as handle:
        for step in range(first, last + 1):
            handle.write(f"step={step} loss={loss(step)} grad_norm=1.5\n")


def ingest_steps(state: TrainingState, steps) -> None:
    with state.lock:
        for step, loss in steps:
            state.ingest(KEY, 1, in_batches(StepLine(step, {"loss": loss, "grad_norm": 1.0})), None, 1000.0 + step)


def test_saved_offsets_always_match_the_lines_counted(tmp_path):
    """The property restarts rely on, checked on snapshots taken while lines stream in."""
    log = tmp_path / "logs" / "worker_0.log"
    log.parent.mkdir()
    log.touch()
    state = TrainingState()
    pipeline, follower = follow(log.parent, state)
    stop = threading.Event()

    def writer() -> None:
        step = 0
        while not stop.is_set() and step < 20000:
            write_steps(log, step, step + 49)
            step += 50

    thread = threading.Thread(target=writer)
    follower.start()
    thread.start()
    checked = 0
    try:
        while thread.is_alive() or checked < 50:
            _, snapshot = pipeline.checkpoint()
            position = snapshot.positions.get(str(log))
            if position is None:
                continue
            with open(log, "rb") as handle:
                newlines = handle.read(position.offset).count(b"\n")
            (series,) = snapshot.state["series"]
            assert series["values"]["lines_total"] == newlines
            checked += 1
    finally:
        stop.set()
        thread.join()
        follower.stop()
    assert checked >= 50


def test_state_round_trips_through_a_checkpoint_file(tmp_path):
    state = TrainingState()
    ingest_steps(state, [(step, 2.0 + step * 0.001) for step in range(1, 40)] + [(40, float("nan"))])
    facts = {"exception": "ChildFailedError", "exitcode": -6, "elapsed_seconds": 600.5}
    with state.lock:
        state.ingest(KEY, 1, [ErrorEvent("elastic", facts)], None, 1050.0)
        state.stats.bytes_read_total = 12345
        state.stats.files_followed = 7
    path = tmp_path / "state.json"
    checkpoint.save(path, checkpoint.Checkpoint({}, dump_state(state)))
    restored = TrainingState()
    assert checkpoint.resume(path, restored) == {}
    assert json.dumps(dump_state(restored)) == json.dumps(dump_state(state))
    assert restored.series[KEY].anomalies["loss_nonfinite"] == 1
    assert repr(restored.series[KEY].last_error_facts["elastic"]) == repr(facts)  # -6 stays an int
    assert restored.stats.files_followed == 0  # a gauge the follower recomputes


def test_restored_detectors_continue_without_a_new_warm_up():
    history = [(step, 2.0 + 0.01 * (step % 5)) for step in range(1, 31)]
    spike = [(31, 30.0), (32, 2.02)]
    uninterrupted, original = TrainingState(), TrainingState()
    ingest_steps(uninterrupted, history + spike)
    ingest_steps(original, history)
    restarted = TrainingState()
    restore_state(restarted, json.loads(json.dumps(dump_state(original))))
    ingest_steps(restarted, spike)
    assert restarted.series[KEY].anomalies["loss_spike"] == 1
    assert json.dumps(dump_state(restarted)) == json.dumps(dump_state(uninterrupted))


def valid_document() -> dict:
    state = TrainingState()
    ingest_steps(state, [(1, 2.0)])
    return {"version": 1, "written_at": 0.0, "positions": {}, "state": dump_state(state)}


def damaged(change) -> bytes:
    document = valid_document()
    change(document)
    return json.dumps(document).encode()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b'{"version": 1, "written_at": 0, "posi',
        b"\x00\xff\xfe garbage",
        b"[]",
        damaged(lambda document: document.update(version=99)),
        damaged(lambda document: document["state"]["series"][0]["values"].update(lines_total="many")),
        damaged(lambda document: document["state"]["series"][0]["values"].update(detectors={"loss": {"spikes": [1]}})),
        damaged(lambda document: document["state"]["series"][0].update(key=["only", "two"])),
        damaged(lambda document: document["positions"].update({"/x.log": {"inode": "?"}})),
        damaged(lambda document: document["state"].pop("stats")),
    ],
    ids=["empty", "truncated", "binary", "not-an-object", "version", "type", "detector", "key", "position", "missing"],
)
def test_a_damaged_checkpoint_is_set_aside_with_a_warning_and_a_fresh_start(tmp_path, caplog, content):
    path = tmp_path / "state.json"
    path.write_bytes(content)
    state = TrainingState()
    with caplog.at_level(logging.WARNING, logger="exporter.checkpoint"):
        assert checkpoint.resume(path, state) == {}
    assert state.series == {}
    assert "unusable" in caplog.text
    assert not path.exists()
    assert (tmp_path / "state.json.corrupt").read_bytes() == content


def test_the_valid_document_used_above_is_accepted(tmp_path):
    path = tmp_path / "state.json"
    path.write_text(json.dumps(valid_document()))
    state = TrainingState()
    checkpoint.resume(path, state)
    assert state.series[KEY].steps_total == 1


def test_save_replaces_the_file_atomically_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("old")
    checkpoint.save(path, checkpoint.Checkpoint({}, dump_state(TrainingState())))
    assert json.loads(path.read_text())["version"] == checkpoint.VERSION
    assert os.listdir(tmp_path) == ["state.json"]


def test_an_unwritable_state_location_means_no_checkpoints_not_a_crash(tmp_path, caplog):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="exporter.checkpoint"):
        assert checkpoint.usable_state_file(blocker / "state" / "state.json") is None
    assert "running without them" in caplog.text


def test_checkpointer_writes_when_something_changed_and_at_stop(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    write_steps(log_dir / "worker_0.log", 1, 3)
    state = TrainingState()
    pipeline, follower = follow(log_dir, state)
    path = tmp_path / "state.json"
    writer = checkpoint.Checkpointer(path, pipeline, interval=3600)
    writer.save_if_changed()
    assert not path.exists() or json.loads(path.read_text())["state"]["series"] == []
    follower.run_once()
    writer.start()
    writer.stop()
    saved = json.loads(path.read_text())
    assert saved["state"]["series"][0]["values"]["lines_total"] == 3
    assert saved["positions"][str(log_dir / "worker_0.log")]["offset"] == (log_dir / "worker_0.log").stat().st_size
    mtime = path.stat().st_mtime_ns
    writer.save_if_changed()  # nothing new: not written again
    assert path.stat().st_mtime_ns == mtime
    follower.stop()


def test_restart_resumes_at_the_saved_offsets_across_a_rotation(tmp_path):
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    log = log_dir / "worker_0.log"
    write_steps(log, 1, 10)
    state = TrainingState()
    pipeline, follower = follow(log_dir, state)
    follower.run_once()
    path = tmp_path / "state.json"
    checkpoint.save(path, pipeline.checkpoint()[1])
    follower.stop()
    # While stopped: more lines, a rename rotation, a new file.
    write_steps(log, 11, 15)
    os.rename(log, log_dir / "worker_0.log.1")
    write_steps(log, 16, 20)
    restarted = TrainingState()
    positions = checkpoint.resume(path, restarted)
    _, follower = follow(log_dir, restarted, positions)
    follower.run_once()
    follower.stop()
    rank = restarted.series[("run", "node", "0")]
    assert (rank.lines_total, rank.steps_total, rank.step) == (20, 20, 20)
    assert restarted.stats.rotations_total == 1


def test_state_file_inside_a_log_directory_is_refused(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    with pytest.raises(ConfigError, match="state_file.*inside the log directory"):
        load_settings(log_dir=[str(tmp_path / "logs")], state_file=str(tmp_path / "logs" / "sub" / "state.json"))
    assert main(["--log-dir", str(tmp_path / "logs"), "--state-file", str(tmp_path / "logs" / "s.json")]) == 2
    assert "inside the log directory" in capsys.readouterr().err


def test_default_state_file_lives_in_the_state_directory_one_per_set_of_log_dirs(tmp_path):
    home = tmp_path / "state-home"
    first = checkpoint.default_state_file([tmp_path / "a"], home)
    second = checkpoint.default_state_file([tmp_path / "b"], home)
    assert first.parent == home / "trainlog-exporter"
    assert first != second
    assert checkpoint.default_state_file([tmp_path / "b", tmp_path / "a"], home) == checkpoint.default_state_file(
        [tmp_path / "a", tmp_path / "b"], home)
    assert checkpoint.default_state_file([tmp_path], home) is None  # would be inside the log dir


def test_the_state_home_comes_from_xdg_state_home_else_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state-home"))
    assert load_settings().state_home == tmp_path / "state-home"
    monkeypatch.setenv("XDG_STATE_HOME", "")  # empty means unset (specification)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert load_settings().state_home == tmp_path / "home" / ".local" / "state"


def test_a_checkpoint_that_kept_each_printed_value_as_a_field_restores_them():
    # Written before RankState.printed: loss, lr, ... were fields of their own.
    state = TrainingState()
    restore_state(state, {"series": [{"key": ["run", "node", "0"],
                                      "values": {"step": 12, "total_steps": 100, "loss": 2.5, "learning_rate": 1e-4,
                                                 "grad_norm": None, "steps_total": 12}}],
                          "stats": {}})
    rank = state.series[("run", "node", "0")]
    assert (rank.step, rank.total_steps, rank.loss, rank.learning_rate, rank.grad_norm) == (12, 100, 2.5, 1e-4, None)
    assert rank.steps_total == 12
