"""Lightning's progress bar read a block at a time (parse/redraws.py, native.bar_records) gives exactly what reading
each carriage-return segment as a line gives: records, line counts, state, offsets and CSV rows, however the console
is cut into blocks (at lines, and inside its line of redraws as the tailer cuts one)."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from exporter import native
from exporter.native import _scan
from exporter.native import scan as scan_twin
from exporter.parse import LineParser, StepBatch
from exporter.parse.formats.lightning import bar_shape
from exporter.parse.line_parser import LineParser as Parser
from tests.support.records import record_as_dict
from tests.test_block_parse import _blocks, _comparable, _line_boundaries
from tests.test_carriage import _tailer_cuts, block_passes_of

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
# A real run's bar: 3 epochs of 10 steps, NaN from step 14 (``nan.0``), its fit ended by a print glued to the last
# redraw; the same run with rank 1 raising at step 14, its traceback glued to rank 0's redraw; a healthy run of 20
# epochs of 15 steps, each epoch's start a count of 0 (tests/fixtures/SOURCES.md).
NAN = (REAL / "lightning_bar_nan.log").read_bytes()
RAISE = (REAL / "lightning_bar_raise.log").read_bytes()
LONG = (REAL / "lightning_bar_long.log").read_bytes()
_BUS_ERROR = (REAL / "dataloader_bus_error.log").read_bytes()
TRACEBACK = _BUS_ERROR[_BUS_ERROR.index(b"Traceback"):_BUS_ERROR.index(b"\n", _BUS_ERROR.index(b"RuntimeError")) + 1]
SHAPE = bar_shape("Epoch 0:  10%|\u2588         | 1/10 [00:00<00:01,  5.03it/s, train_loss=17.40, lr=0.050, "
                  "grad_norm=7.710]".encode())


def _consoles() -> list[tuple[str, bytes]]:
    """The real consoles, one fit after another; the long run's line of redraws continued by its later epochs; a
    validation bar's redraw (no anchor) and a NaN between them; CRLF lines; each epoch on a line of its own; a bar
    without the values (its first step)."""
    head, _, training = LONG.partition(b"\rEpoch 1:")
    training, end, tail = training.rpartition(b"\n")
    later = b"\rEpoch 1:" + training
    # Between each epoch's two redraws of its third step: the first is taken (the second draws the step taken).
    validating = later
    for epoch in range(1, 20):
        third = b"\rEpoch %d:  20%%" % epoch
        second = validating.index(third, validating.index(third) + 1)
        validating = (validating[:second] + b"\rValidation DataLoader 0:  50%|xx | 1/2 [00:00<00:00]\r            "
                      + validating[second:])
    return [
        ("nan", NAN * 60),
        ("raise", RAISE * 30 + NAN * 30),
        ("long", LONG * 6),
        ("long_continued", head + later * 8 + end + tail),
        ("validating", head + later * 3 + validating * 3 + later + end + tail),
        ("nan_in_between", head + later * 3 + later.replace(b"train_loss=0.", b"train_loss=nan.0", 40) + later
         + end + tail),
        # A DataLoader worker's traceback (the main process's) between two redraws: its failure block takes the
        # segments after it until a redraw ends it.
        ("traceback_between", head + later * 3
         + later.replace(b"\rEpoch 9:  40%", b"\n" + TRACEBACK + b"\rEpoch 9:  40%", 1) + later * 2 + end + tail),
        # A value named with a failure's word (an anchor): its redraws are the bar's records all the same.
        ("error_named", head + later.replace(b", grad_norm=", b", grad_error=") * 5 + end + tail),
        ("crlf_lines", LONG * 3 + LONG.replace(b"\n", b"\r\n") + LONG),
        # Each epoch's bar a line of its own (tqdm's ``leave``): a line of redraws ends without ``\r``.
        ("epoch_lines", head + re.sub(rb"\]( +)\rEpoch", rb"]\1\nEpoch", later) * 5 + end + tail),
        ("no_values", head + later.replace(b"it/s, train_loss", b"it/s] train_loss", 3) * 4 + end + tail),
    ]


def _cuttings(name: str, data: bytes) -> list[list[bytes]]:
    rng = random.Random(name)
    return [_blocks(data, _line_boundaries(data, rng, 30)), _tailer_cuts(data, rng, 60), _tailer_cuts(data, rng, 600)]


@pytest.fixture(params=["native", "twin"])
def bar_kernel(request, monkeypatch):
    """The kernel and its twin must give the same records (run as the parser runs them: block passes)."""
    return block_passes_of(request.param, ("bar_records", "line_prefixes"), monkeypatch)


def _segment_by_segment(blocks: list[bytes], **options) -> list:
    """The definition: every redraw read by the segment reader (the block path declines every block)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Parser, "_parse_redraws", lambda self, data, parsed: False)
        parser = LineParser(**options)
        return [parser.parse_block(block) for block in blocks]


def _read(blocks: list[bytes], ran: list[bool], **options) -> list:
    original = Parser._parse_redraws

    def recording(self, data, parsed):
        ran.append(original(self, data, parsed))
        return ran[-1]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Parser, "_parse_redraws", recording)
        parser = LineParser(**options)
        return [parser.parse_block(block) for block in blocks]


@pytest.mark.parametrize(("name", "data"), _consoles(), ids=[name for name, _ in _consoles()])
def test_blocks_of_redraws_give_what_every_segment_gives(name, data, bar_kernel):
    ran: list[bool] = []
    for blocks in _cuttings(name, data):
        for rows_per_batch in (None, 7):
            expected = _comparable(_segment_by_segment(blocks, rows_per_batch=rows_per_batch))
            assert _comparable(_read(blocks, ran, rows_per_batch=rows_per_batch)) == expected
    assert sum(ran) >= 20, "the block path hardly ran: the comparison would prove little"


@pytest.mark.parametrize("name", ["nan", "long_continued", "validating"])
def test_blocks_of_redraws_give_the_offsets_and_rows_every_segment_gives(name):
    # analyze reads its step lines again at their offsets and writes a CSV row per step.
    data = dict(_consoles())[name]

    def steps_and_others(parsed_blocks: list, blocks: list[bytes]) -> tuple[list, list]:
        steps: list[tuple] = []
        others: list[tuple] = []
        base = 0
        for block, parsed in zip(blocks, parsed_blocks, strict=True):
            for record, offset in zip(parsed.records, parsed.offsets, strict=True):
                if isinstance(record, StepBatch):
                    assert record.line_starts is not None and record.rows is not None
                    steps += [(record.rank, step, base + start, values, aux) for step, start, (values, aux)
                              in zip(record.steps, record.line_starts, record.rows, strict=True)]
                else:
                    others.append((record_as_dict(record), base + offset))
            base += len(block)
        return steps, others

    ran: list[bool] = []
    for blocks in _cuttings(name, data)[1:]:
        expected = steps_and_others(_segment_by_segment(blocks, line_offsets=True, step_rows=True), blocks)
        assert len(expected[0]) > 100
        got = steps_and_others(_read(blocks, ran, line_offsets=True, step_rows=True), blocks)
        assert repr(got) == repr(expected)  # NaN != NaN
    assert sum(ran) >= 10


def test_a_torchrun_tee_console_reads_its_redraws_for_the_rank_of_the_line():
    # torchrun --tee prefixes the physical line once: the redraws after it, on the lines the tailer hands out, are
    # that rank's.
    bar = LONG.index(b"\rTraining:")
    lines = LONG[LONG.rindex(b"\n", 0, bar) + 1:].split(b"\n")[:-1]
    data = b"".join(b"[default0]:%s\n" % line for line in lines)
    ran: list[bool] = []
    for blocks in (_tailer_cuts(data * 8, random.Random(5), 400),):
        expected = _comparable(_segment_by_segment(blocks))
        parsed = _read(blocks, ran)
        assert _comparable(parsed) == expected
        assert {rank for block in parsed for rank in block.lines_by_rank} == {0}
    assert sum(ran) >= 20


def test_the_bar_shape_is_the_postfix_the_bar_parser_reads():
    assert SHAPE is not None and SHAPE.lead == b"Epoch "
    assert SHAPE.pieces == (b", train_loss=", b", lr=", b", grad_norm=", b"]")
    assert SHAPE.targets == ((True, "loss"), (True, "learning_rate"), (True, "grad_norm"))
    shape = bar_shape(b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, v_num=0, train/loss=2.0, loss_2=1.0]   ")
    assert shape is not None and shape.targets == ((False, ""), (True, "loss"), (False, "loss_2"))
    for line in (b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s]",  # no values
                 b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, lr=1.0]",  # no loss
                 b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, loss=1.0, epoch=2.0]",  # the epoch twice
                 b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, loss=1.0, x=2.0, x=3.0]",  # a value twice
                 b"Epoch 2: 50%|x| 5/10 [00:01<00:01, a=b 5.0it/s, loss=1.0]",  # a pair before the postfix
                 b"Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, loss=1.0] x",  # text after the bar
                 b"Validation: Epoch 2: 50%|x| 5/10 [00:01<00:01, 5.0it/s, loss=1.0]"):  # not the bar's start
        assert bar_shape(line) is None, line


@pytest.mark.parametrize("kernel", ["native", "twin"])
def test_bar_records_read_a_bar_only_where_tqdm_drew_it(kernel):
    if kernel == "native" and not native.available()["scan"]:
        pytest.skip("the scan kernel is not built here")
    read = _scan.bar_records if kernel == "native" else scan_twin.bar_records
    assert SHAPE is not None
    pieces = SHAPE.pieces
    template = b"Epoch 3:  20%|xx  | 2/10 [00:00<00:01,  5.0it/s, train_loss={}, lr=0.5, grad_norm=1.0]"

    def bar(loss: bytes) -> bytes:
        return template.replace(b"{}", loss)

    data = (b"\r" + bar(b"1.5")  # the first segment of a line
            + b"\r" + bar(b"nan.0") + b"   "  # Lightning's padding of NaN; a terminal's after the bar
            + b"\r" + bar(b"-inf.") + b"\r\n"  # the line continues
            + bar(b"x1") + b"\r"  # not a number
            + b"x" + bar(b"1") + b"\r"  # not the segment's start
            + bar(b"1").replace(b": ", b":  ", 1) + b"\r"  # blanks after the colon
            + bar(b"1").replace(b"5.0it/s", b"5.0=it/s") + b"\r"  # a pair before the record
            + bar(b"1").replace(b"5.0it/s", b"5.0]it/s") + b"\r"  # the bracket closed before the record
            + bar(b"1").replace(b"2/10", b"2 / 10") + b"\r"  # no fraction
            + bar(b"1").replace(b"|xx  |", b"|xx  ") + b"\r"  # one bar's edge
            + bar(b"1").replace(b"Epoch 3", b"Epoch 1234567890123456789") + b"\r"  # a count of 19 digits
            + bar(b"2.5") + b" x\n"  # text after it
            + bar(b"3.5") + b"\n")
    newlines, continued, *offsets, columns = read(data, b"Epoch ", pieces)
    assert [type(numbers).__name__ for numbers in (*offsets, *columns)] == ["array"] * 9
    starts, ends, lines, leads, steps, totals = map(list, offsets)
    assert newlines == 3 and continued == [0]
    assert [data[start:start + 8] for start in starts] == [b"Epoch 3:"] * 5
    assert [data[end] for end in ends] == [13, 13, 13, 13, 10]
    second = data.index(b"\n") + 1
    third = data.index(b"\n", second) + 1
    assert lines == [0, 0, 0, second, third]
    assert (leads, steps, totals) == ([3] * 5, [2] * 5, [10] * 5)
    assert repr(list(columns[0])) == repr([1.5, float("nan"), float("-inf"), 1.0, 3.5])
    with pytest.raises(ValueError):
        read(data, b"", pieces)


def test_bar_records_match_their_twin_on_cut_and_fuzzed_consoles():
    if not native.available()["scan"]:
        pytest.skip("the scan kernel is not built here")
    assert SHAPE is not None
    rng = random.Random(31)
    data = NAN * 3 + RAISE + LONG[:200_000]
    for _ in range(400):
        sample = bytearray(data[rng.randrange(len(data)):][:rng.randrange(1, 4000)])
        for _ in range(rng.randrange(5)):
            if sample:
                sample[rng.randrange(len(sample))] = rng.choice(b"\r\n/ [0123456789]=|%:.Enai\xe2")
        sample = bytes(sample)
        # repr: NaN is not equal to itself.
        assert repr(_scan.bar_records(sample, b"Epoch ", SHAPE.pieces)) == repr(
            scan_twin.bar_records(sample, b"Epoch ", SHAPE.pieces))
