"""Files that are not one rank each: torchrun --tee files, torchrun's --log-dir layout, overrides."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from exporter.analyze.command import run_analyze
from exporter.export.status_page import error_summary
from exporter.parse import ranks
from exporter.parse.formats import selection
from exporter.parse.ranks import split_glued
from tests.support.records import fixture_lines, fixture_parser, parse_fixture, parse_lines, record_as_dict
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


REAL = FIXTURES.parent / "real"
# tee_printer.py under torchrun 2.13.0 --tee (SOURCES.md, torchrun_tee_cut_lines.log): rank 0's step 250522 line
# ended without its newline before rank 3's line (the newline came 598 lines later, behind ``[default0]:`` alone),
# and its step 250727 line was cut in mid-value: ``step_time=0.22038583320210[default0]:867``.
CUT_LINES = REAL / "torchrun_tee_cut_lines.log"
# The same program's console of another run: rank 0's line cut in mid-value before rank 1's, its rest 16,319 lines
# later (here with one of the lines between).
CUT_BEFORE_ANOTHER = [
    b"[default0]:step=725936/100000 loss=0.34033635119784034 lr=0.04861947874254862 grad_norm=1.0210090"
    b"[default1]:step=740496/100000 loss=0.15324120412892306 lr=0.02189160058984615 grad_norm=0.4597236123867692 "
    b"step_time=0.013931018557174824",
    b"[default1]:step=740497/100000 loss=0.8842997827179229 lr=0.1263285403882747 grad_norm=2.6528993481537686 "
    b"step_time=0.08039088933799299",
    b"[default0]:53593521 step_time=0.03093966829071276",
]


def _printed(rank: int, step: int) -> dict[str, float]:
    """What tee_printer.py printed for a rank's step: its values, recomputed."""
    value = (step * 0.7310585786300049 + rank) % 3.1
    return {"loss": value, "lr": value / 7, "grad_norm": value * 3, "step_time_seconds": value / 11}


def _read(records: list[dict]) -> dict[int, dict[int, dict[str, float]]]:
    """Each rank's steps read, each step's values (every step read once)."""
    read: dict[int, dict[int, dict[str, float]]] = {}
    for record in records:
        assert record["type"] == "step", record
        steps = read.setdefault(record["rank"], {})
        assert record["step"] not in steps, f"rank {record['rank']} step {record['step']} read twice"
        steps[record["step"]] = {name: record[name] for name in ("loss", "lr", "grad_norm", "step_time_seconds")}
    return read


def test_a_line_torchruns_tee_cut_is_read_whole_when_its_rest_comes():
    read = _read(parse_fixture(CUT_LINES))
    assert sorted(read) == [0, 1, 2, 3]
    for rank, steps in read.items():
        assert sorted(steps) == list(range(min(steps), max(steps) + 1)), f"rank {rank}: a step missing"
        for step, values in steps.items():
            assert values == _printed(rank, step), f"rank {rank} step {step}"
    assert 250522 in read[0] and 250727 in read[0]  # the two cut lines, their values above
    other = parse_lines(fixture_parser(CUT_LINES), CUT_BEFORE_ANOTHER).records
    assert _read([record_as_dict(record) for record in other]) == {
        0: {725936: _printed(0, 725936)}, 1: {740496: _printed(1, 740496), 740497: _printed(1, 740497)}}


def test_a_cut_line_is_whole_wherever_the_blocks_end():
    # Three copies: the formats are known by the third (DISCOVERY_STEP_LINES), whose blocks the fast paths read.
    copy = CUT_LINES.read_bytes()
    data = copy * 3
    whole = [record_as_dict(record) for record in parse_lines(fixture_parser(CUT_LINES), data.splitlines()).records]
    ends = [index + 1 for index, byte in enumerate(data) if byte == ord("\n")][:-1]
    rest = data.index(b"\n[default0]:\n", 2 * len(copy)) + len(b"\n[default0]:\n")  # the end of rank 0's rest
    for cut in [end for end in ends if end > 2 * len(copy)][::100]:
        parser = fixture_parser(CUT_LINES)
        blocks = [data[:cut], data[cut:rest], data[rest:]] if cut < rest else [data[:cut], data[cut:]]
        records = [record for block in blocks for record in parser.parse_block(block).records]
        assert parser.finish() is None
        assert [record_as_dict(record) for record in records] == whole, f"blocks cut at byte {cut}"


def test_a_cut_line_whose_rest_never_comes_is_read_as_it_is(tmp_path, monkeypatch):
    # The console up to just before rank 0's newline came: its step 250522 line waits for it, then is read as it is,
    # after MAX_LINES_CUT_WAITS lines (serve), or at the file's end (analyze).
    lines = fixture_lines(CUT_LINES)
    cut = next(index for index, line in enumerate(lines) if line.startswith(b"[default0]:step=250522/"))
    rest = lines.index(b"[default0]:")
    assert rest - cut > 150
    monkeypatch.setattr(ranks, "MAX_LINES_CUT_WAITS", 100)
    parser = fixture_parser(CUT_LINES)
    for begin, read in ((cut - 5, False), (cut + 45, True), (cut + 95, False)):  # held 50 lines, then 50 more
        block = b"".join(line + b"\n" for line in lines[begin:begin + 50])
        rows = map(record_as_dict, parser.parse_block(block).records)
        assert ((0, 250522) in [(row["rank"], row["step"]) for row in rows]) is read, f"lines {begin} to {begin + 50}"
    monkeypatch.undo()
    log = tmp_path / "job" / "train.log"
    log.parent.mkdir()
    log.write_bytes(b"".join(line + b"\n" for line in lines[:rest]))
    steps_csv = tmp_path / "steps.csv"
    assert run_analyze([str(log)], "json", csv=str(steps_csv), stdout=io.StringIO()) == 0
    steps = {int(row["step"]): row for row in csv.DictReader(steps_csv.open()) if row["rank"] == "0"}
    assert float(steps[250522]["loss"]) == _printed(0, 250522)["loss"]
    assert sorted(steps) == list(range(min(steps), max(steps) + 1))


def test_torchs_own_rank_prefix_cuts_a_line_without_holding_it():
    parsed = parse_lines(fixture_parser(CUT_LINES), [b"[rank0]: step=3 loss=1.5[rank1]: step=3 loss=2.5"])
    assert sorted((row["rank"], row["step"]) for row in map(record_as_dict, parsed.records)) == [(0, 3), (1, 3)]
    with pytest.raises(AssertionError, match="role prefixes"):
        ranks.CutLines().hold(b"no prefix")
