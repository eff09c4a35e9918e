"""Carriage-return segments, Lightning's tqdm bar and the generic reader, on real output (tests/fixtures/SOURCES.md).

Real lines only: the Lightning runs are tests/real/test_lightning.py's, kept; the generic reader's lines are
trainers' that no format names, printed in public issue threads (llm.c, prime-rl, modded-nanogpt).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from exporter.follow.tailer import _LineCutter
from exporter.parse import LineParser
from exporter.parse.formats import BUILTIN_FORMATS, custom_format, generic
from exporter.state import TrainingState
from exporter.state.detectors import DetectorConfig
from tests.support.exporter_process import ExporterProcess
from tests.support.net import eventually, http_get, sample, scrape
from tests.support.records import by_rank, fixture_lines, parse_fixture, record_as_dict

REAL = Path(__file__).parent / "fixtures" / "real"
FIXTURES = sorted(Path(__file__).parent.glob("fixtures/*/*.log"))


def _steps(records: list[dict]) -> dict[int, dict]:
    return {record["step"]: record for record in records if record["type"] == "step"}


def _same(read: float | str | None, truth: float) -> bool:
    return (math.isnan(truth) and read == "nan") or read == truth


@pytest.mark.parametrize(("name", "count"), [("lightning_bar_nan", 30), ("lightning_bar_long", 300)])
def test_lightning_bar_every_step_once_with_its_own_values(name, count):
    # Lightning 2.6.6's TQDMProgressBar redirected to a file: each step drawn twice (first with the postfix of
    # the step before), epochs of 10 (15) on a line of \r-joined redraws, NaN from step 14 (rank 1's gradients);
    # a healthy run of 20 epochs.
    records = parse_fixture(REAL / f"{name}.log")
    truth = [json.loads(line) for line in (REAL / f"{name}.truth.jsonl").read_text().splitlines()]
    steps = _steps(records)
    assert len([record for record in records if record["type"] == "step"]) == len(truth) == count
    for record in truth:
        read = steps[record["step"]]
        for name, key in (("loss", "loss"), ("learning_rate", "lr"), ("grad_norm", "grad_norm")):
            assert _same(read[key], record[name]), (record["step"], name, read[key], record[name])


def _records_cut_at(data: bytes, sizes: list[int]) -> list:
    """The records of ``data`` read as the tailer hands it out when the writer's appends end at ``sizes``."""
    cutter, parser, records, offset = _LineCutter(1 << 20), LineParser(rows_per_batch=1), [], 0
    for size in [*sizes, len(data)]:
        block = cutter.cut(data[offset:offset + size]).data
        offset += size
        records += parser.parse_block(block).records
    records += parser.parse_block(cutter.take_partial() + b"\n").records
    read = by_rank([record_as_dict(record) for record in records])
    # A traceback's event comes when its failure block ends, which a cut may move, and torchrun's agent line
    # stands for its summary when the summary comes in a later read (docs/formats.md): failures by kind and rank.
    return [*(record for record in read if record["type"] == "step"),
            *sorted({(record["kind"], record["rank"]) for record in read if record["type"] != "step"})]


def test_a_bar_read_while_it_is_drawn_gives_the_records_of_the_finished_file():
    # Live, the tailer hands a bar's redraws out as they come (the line ends only when the epoch does): every
    # cut, between two redraws or inside one, gives the same records as the file read at once.
    data = b"\n".join(fixture_lines(REAL / "lightning_bar_raise.log")) + b"\n"
    whole = _records_cut_at(data, [])
    generator = random.Random(32)
    for _ in range(20):
        sizes = [generator.randint(1, 400) for _ in range(200)]
        assert _records_cut_at(data, sizes) == whole


def test_a_trainer_console_read_while_its_bar_is_drawn_gives_every_dict_its_step():
    # A Trainer's dict takes its step from the bar drawn before it: live, that bar may come in the read before
    # the dict's (the tailer hands a bar's redraws out at its last \r), and the dict still gets it.
    data = b"\n".join(fixture_lines(REAL / "hf_trainer_tqdm.log")) + b"\n"
    whole = _records_cut_at(data, [])
    assert [record["step"] for record in whole if isinstance(record, dict)] == list(range(5, 61, 5))
    generator = random.Random(28)
    for _ in range(20):
        assert _records_cut_at(data, [generator.randint(1, 300) for _ in range(400)]) == whole


def test_the_tailer_hands_out_redraws_and_keeps_a_crlf_line_whole():
    cutter = _LineCutter(1 << 20)
    assert cutter.cut(b"\rEpoch 0: 1/10 [a]\rEpoch 0: 2/10 [b").data == b"\rEpoch 0: 1/10 [a]\r\n"
    assert cutter.partial == b"Epoch 0: 2/10 [b"
    # A line of a CRLF file read up to its \r: the \n may follow, no line is cut there.
    assert cutter.cut(b"]\nstep=1 loss=2\r").data == b"Epoch 0: 2/10 [b]\n"
    assert cutter.cut(b"\nnext").data == b"step=1 loss=2\r\n"


def test_a_rank_traceback_written_right_after_a_redraw_counts_on_its_rank():
    # Rank 1 raised at step 14; its excepthook's first line came glued to rank 0's last redraw (tqdm writes its
    # \r before a redraw, none after): `...grad_norm=7.900][rank1]: Traceback (most recent call last):`.
    glued = next(line for line in fixture_lines(REAL / "lightning_bar_raise.log") if b"[rank1]: Traceback" in line)
    assert b"\r" in glued and not glued.startswith(b"[rank1]")
    records = parse_fixture(REAL / "lightning_bar_raise.log")
    errors = [(record["kind"], record["rank"], record["detail"].get("exception")) for record in records
              if record["type"] == "error"]
    assert ("traceback", 1, "RuntimeError") in errors
    assert max(_steps(records)) == 13  # every step rank 0 finished before the failure reached it


# Lines of trainers no format names, as their public issue threads show them (SOURCES.md).
LLM_C = (b"step   61/74 | loss 3.208939 (+nanz)| norm 1.4800 (+nanz)| lr 3.00e-04 | 44.57 ms | -100.0% bf16 MFU "
         b"| 91886 tok/s")


def test_generic_reader_reads_a_trainer_no_format_names():
    steps = _steps(parse_fixture(REAL / "generic_unnamed_trainers.log"))
    assert sorted(steps) == [19, 20, 61, 62, 63, 289]  # modded-nanogpt's val_loss lines and llm.c's `val loss` not
    llm_c = steps[61]
    assert (llm_c["total_steps"], llm_c["loss"], llm_c["grad_norm"], llm_c["lr"]) == (74, 3.208939, 1.48, 3e-4)
    assert math.isclose(llm_c["step_time_seconds"], 0.04457) and llm_c["throughput"] == 91886
    assert (steps[19]["loss"], steps[19]["grad_norm"]) == ("nan", "nan")
    assert (steps[289]["loss"], steps[289]["throughput"]) == (0.431, 76477.73)
    assert generic.describe(LLM_C.decode()) == "step=step, loss=loss, grad_norm=norm, learning_rate=lr"


def test_generic_reader_shapes_and_names_through_the_synonyms():
    cases = {
        "step=1 train_loss=4.1813 lr=3.0000e-04 grad_norm=0.7752": (1, 4.1813, 3e-4, 0.7752, None),
        "Iteration: 12 | Train Loss: 2.5 | learning rate: 0.1 | grad norm: 3 | step time: 812ms":
            (12, 2.5, 0.1, 3, .812),
        "global step 7, train/loss 1.5, gnorm 2, ms/step 250": (7, 1.5, None, 2, 0.25),
        "it 3 loss_train 0.5 time/iter 0.2": (3, 0.5, None, None, 0.2),
    }
    for text, (step, loss, lr, grad_norm, seconds) in cases.items():
        line = generic.parse(text)
        assert line is not None, text
        assert (line.step, line.values.get("loss"), line.values.get("learning_rate"), line.values.get("grad_norm"),
                line.values.get("step_time_seconds")) == (step, loss, lr, grad_norm, seconds), text
    for evaluation in ("step 3000: train loss 4.0390, val loss 4.0427", "eval_loss: 2.1 step: 100",
                       "validation loss at iteration 100 | lm loss value: 2.3 |", "step 5 loss/val 2.0"):
        assert generic.parse(evaluation) is None, evaluation


def test_generic_reader_never_takes_a_line_a_named_format_reads():
    for path in FIXTURES:
        parser = LineParser(rows_per_batch=1)
        parsed = parser.parse_block(b"\n".join(fixture_lines(path)) + b"\n")
        if path.stem != "generic_unnamed_trainers":
            assert "generic" not in parsed.lines_by_format, path.name


def test_a_custom_regex_wins_over_the_generic_reader():
    mine = custom_format("llmc", r"step\s+(?P<step>\d+)/\d+ \| loss (?P<loss>\S+)", "step ")
    parser = LineParser((mine, *BUILTIN_FORMATS))
    parsed = parser.parse_block(LLM_C + b"\n")
    assert parsed.lines_by_format == {"llmc": 1} and parser.reading is None


def test_read_as_generic_is_said_once_in_the_log_and_on_the_status_page(tmp_path):
    log_dir = tmp_path / "job" / "logs"
    log_dir.mkdir(parents=True)
    (log_dir / "train.log").write_bytes(b"\n".join(fixture_lines(REAL / "generic_unnamed_trainers.log")) + b"\n")
    with ExporterProcess("--log-dir", str(log_dir)) as exporter:
        eventually(lambda: sample(scrape(exporter.url), "training_step", rank="") == 289, 10, what="the last step")
        status, page = http_get(exporter.url + "/")
        assert status == 200
        assert "train.log (read as generic: step=step, loss=loss, grad_norm=norm, learning_rate=lr)" in page
        assert exporter.output().count("read as generic") == 1


def _slowdowns(lines: list[str]) -> int:
    state = TrainingState(DetectorConfig())
    parsed = LineParser(BUILTIN_FORMATS).parse_block("".join(f"{line}\n" for line in lines).encode())
    with state.lock:
        state.ingest(("run", "node", ""), len(lines), parsed.records, None, 1.0)
    return state.series[("run", "node", "")].anomalies["slowdown"]


def test_a_window_mean_step_time_needs_a_slow_run_longer_by_the_window():
    # Written in the layout of MMEngine's real lines (tests/fixtures/real/mmengine_iter.log), not printed by it:
    # `time` is the mean of the last 10 iterations, so one slow iteration is slow in 10 lines.
    def mmengine(step: int, seconds: float) -> str:
        return (f"12/03 08:53:34 - mmengine - INFO - Iter(train) [{step}/200]  lr: 1.0000e-02  eta: 0:00:10  "
                f"time: {seconds:.4f}  data_time: 0.0017  loss: 0.9115")

    def keyvalue(step: int, seconds: float) -> str:
        return f"step={step} loss=0.9115 step_time={seconds}"

    needed = DetectorConfig().slowdown_steps
    for slow, line, expected in ((needed + 5, mmengine, 0), (needed + 5, keyvalue, 1), (needed + 9, mmengine, 1)):
        times = [0.1] * 40 + [0.3] * slow + [0.1] * 20
        assert _slowdowns([line(step, seconds) for step, seconds in enumerate(times, 1)]) == expected, (slow, line)


def test_every_reader_sees_each_carriage_return_segment_as_a_line():
    # Written for the test (the shapes of the real lines above): a step line, then a traceback after a redraw
    # with only \r between them; a tee'd line's prefix names the rank of its segments that name none.
    data = (b"[default0]:\rEpoch 0:  10%|#  | 1/10 [00:00<00:01,  6.55it/s, train_loss=17.40]"
            b"\r[rank1]: Traceback (most recent call last):\n"
            b"[rank1]:   File \"train.py\", line 3, in <module>\n"
            b"[rank1]: RuntimeError: injected\n"
            b"[default0]:\rEpoch 0:  20%|## | 2/10 [00:00<00:01,  6.55it/s, train_loss=5.440]\rstep=3 loss=2.5\n")
    parsed = LineParser(rows_per_batch=1).parse_block(data)
    records = [record_as_dict(record) for record in parsed.records]
    assert [(record["kind"], record["rank"], record["detail"]["exception"]) for record in records
            if record["type"] == "error"] == [("traceback", 1, "RuntimeError")]
    assert [(record["step"], record["rank"], record["loss"]) for record in records if record["type"] == "step"] == [
        (1, 0, 17.4), (2, 0, 5.44), (3, 0, 2.5)]
    assert parsed.lines_by_rank == {0: 2, 1: 2}  # a physical line counts once, for the rank its prefix names

