"""Files that are not one rank each: torchrun --tee files, torchrun's --log-dir layout, overrides."""

from __future__ import annotations

from pathlib import Path

from exporter.export.status_page import error_summary
from exporter.parse.formats import selection
from exporter.parse.ranks import split_glued
from tests.support.records import fixture_lines
from tests.support.runs import exposition, read_once

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


def copy_fixture(name: str, target: Path) -> None:
    """A fixture log without its header comments, as a live log file."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(b"\n".join(fixture_lines(FIXTURES / f"{name}.log")) + b"\n")


def tee_run(tmp_path: Path) -> Path:
    """The 8-rank torchrun --tee fixture as the one log of a run."""
    log_dir = tmp_path / "job" / "logs"
    copy_fixture("torchrun_tee", log_dir / "train.log")
    return log_dir


def test_a_mixed_file_of_eight_ranks_is_split_into_their_series(tmp_path):
    state = read_once(tee_run(tmp_path))
    series = {key[2]: rank for key, rank in state.series.items()}
    # The launcher's unprefixed lines go to the file's own series: its name holds no rank, so the empty rank.
    assert sorted(series) == ["", "0", "1", "2", "3", "4", "5", "6", "7"]
    for rank in "01234567":
        assert series[rank].info == {"file": "train.log", "role": "worker", "format": "keyvalue"}
    assert [(rank, series[rank].step) for rank in "01234567"] == [
        ("0", 12), ("1", 12), ("2", 12), ("3", 12), ("4", 12), ("5", 11), ("6", 12), ("7", 12)]
    assert (series["5"].loss, series["5"].steps_total) == (2.375, 2)
    assert series["3"].step_time_seconds == 0.83
    # Rank 5's out-of-memory traceback went to rank 5, interleaved with the other ranks' steps.
    assert {rank: {kind: n for kind, n in series[rank].errors.items() if n} for rank in series} == {
        "": {}, "5": {"oom": 1, "traceback": 1, "elastic": 1}, **{rank: {} for rank in "0123467"}}
    # The launcher's ChildFailedError summary names the rank that failed: it counts there.
    assert error_summary(series["5"].last_error_facts["elastic"]) == (
        "ChildFailedError (root_cause_rank 5, exitcode 1)")
    assert error_summary(series["5"].last_error_facts["oom"]) == (
        "torch.OutOfMemoryError (device cuda, requested 2.00 GiB)")
    # Lines by rank: rank 4 also printed a warning (two lines); the launcher printed the rest.
    assert series["4"].lines_total == 5 and series["0"].lines_total == 3
    assert sum(rank.lines_total for rank in series.values()) == 66


def test_the_rank_offset_makes_local_prefixes_global(tmp_path):
    state = read_once(tee_run(tmp_path), rank_offset=8)
    ranks = sorted(key[2] for key in state.series)
    # [rank5]: lines are global already
    assert ranks == ["", "10", "11", "12", "13", "14", "15", "5", "8", "9"]
    assert state.series[("job", "node-0", "13")].errors["oom"] == 0
    assert state.series[("job", "node-0", "5")].errors["oom"] == 1


def test_torchrun_log_dir_layout_gives_global_ranks(tmp_path):
    log_dir = tmp_path / "job" / "logs"
    for local_rank in (0, 1):
        attempt = log_dir / "run-7" / "attempt_0" / str(local_rank)
        attempt.mkdir(parents=True)
        (attempt / "stdout.log").write_text(f"step=5 loss={2 + local_rank}\n")
        (attempt / "stderr.log").write_text("RuntimeError: CUDA error: an illegal memory access was encountered\n"
                                            if local_rank else "")
    state = read_once(log_dir, rank_offset=8)
    assert sorted(key[2] for key in state.series) == ["8", "9"]
    assert state.series[("job", "node-0", "9")].loss == 3.0
    assert state.series[("job", "node-0", "9")].errors["cuda"] == 1


def test_configured_formats_win_over_detection(tmp_path):
    log_dir = tmp_path / "job" / "logs"
    log_dir.mkdir(parents=True)
    (log_dir / "worker_0.log").write_text("step=1 loss=9.0\nITER 3 LOSS 1.5\n")
    formats = selection(overrides=[("worker_*.log", "mine")],
                        custom=[("mine", r"ITER (?P<step>\d+) LOSS (?P<loss>\S+)", "")])
    state = read_once(log_dir, formats=formats)
    rank = state.series[("job", "node-0", "0")]
    assert (rank.step, rank.loss, rank.info["format"]) == (3, 1.5, "mine")
    assert state.stats.lines_unparsed_total == 1


def test_exposition_of_other_formats(tmp_path):
    log_dir = tmp_path / "job" / "logs"
    copy_fixture("megatron", log_dir / "worker_0.log")
    copy_fixture("msrun_scheduler", log_dir / "scheduler.log")
    text = exposition(read_once(log_dir))
    worker = 'node="node-0",rank="0",run="job"'
    assert ('training_info{file="worker_0.log",format="megatron",framework="megatron",node="node-0",rank="0",'
            'role="worker",run="job",throughput_unit="TFLOP/s/GPU"} 1.0') in text
    assert f'training_aux_loss{{name="mtp_2_loss",{worker}}} 2.61' in text
    assert f'training_metric{{name="loss_scale",{worker}}} 8192.0' in text
    # Iteration 200 had one NaN iteration, iteration 300 a NaN grad norm.
    assert f'training_anomalies_total{{kind="loss_nonfinite",{worker}}} 1.0' in text
    assert f'training_anomalies_total{{kind="grad_norm_nonfinite",{worker}}} 1.0' in text
    scheduler = 'node="node-0",rank="",run="job"'
    assert f'training_scheduler_events_total{{kind="node_timeout",{scheduler}}} 2.0' in text
    assert 'training_scheduler_node_timeouts_total{node="node-0",node_id="3",rank="",run="job"} 1.0' in text
    assert f'training_errors_total{{kind="traceback",{scheduler}}} 1.0' in text
    assert f'training_last_error_timestamp_seconds{{kind="traceback",{scheduler}}}' in text


def test_a_line_glued_to_another_ranks_by_torchruns_tee_is_two_lines():
    # torch 2.13.0 --tee piped (tests/fixtures/SOURCES.md): rank 2's step 8 glued to the end of rank 0's.
    (glued,) = [line for line in fixture_lines(FIXTURES.parent / "real" / "torchrun_ddp_raise_glued.log")
                if b"[default2]:step=8/30" in line and not line.startswith(b"[default2]")]
    first, second = split_glued(glued)
    assert first.startswith(b"[default0]:step=8/30") and second.startswith(b"[default2]:step=8/30")
    assert split_glued(b"[default1]:[rank1]: Traceback (most recent call last):") == [
        b"[default1]:[rank1]: Traceback (most recent call last):"]  # torch's own prefix is no second line
    assert split_glued(b"[default1]:a [defaultx]:b [worker2]:c") == [b"[default1]:a [defaultx]:b [worker2]:c"]
