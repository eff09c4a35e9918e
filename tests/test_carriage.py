"""A Hugging Face Trainer's console read a block at a time (parse/carriage.py) gives exactly what reading each
carriage-return segment as a line gives: records, line counts, state, offsets and CSV rows, however the
console is cut into blocks (at lines, and inside a line of redraws as the tailer cuts one)."""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest

from exporter import native
from exporter.native import scan as scan_twin
from exporter.parse import LineParser, StepBatch, line_parser
from exporter.parse.formats.hf_trainer import segment_shape
from tests.support.records import record_as_dict
from tests.test_block_parse import _blocks, _comparable, _every_line_alone, _line_boundaries

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
HEALTHY = (REAL / "hf_trainer_tqdm.log").read_bytes()
NAN = (REAL / "hf_trainer_nan.log").read_bytes()
# The Trainer without tqdm (``disable_tqdm``): its dicts on lines of their own, no step.
NO_BAR = (REAL / "hf_trainer_no_bar.log").read_bytes()
# LLaMA-Factory's logger before each dict (``[INFO|2024-11-26 22:09:01] logging.py:157 >> {'loss': 2.2818, ...}``),
# unquoted values, among its other lines.
LOGGED = (REAL / "healthy" / "llamafactory_finetuneLLM_running_log.log").read_bytes()
# PaddleNLP's Trainer: its dicts name their step (``'global_step': 150``), padded to the terminal's width.
PADDLE = (REAL / "hf_paddlenlp_global_step.log").read_bytes()
# Real consoles of other programs between the Trainer's: a torchrun traceback behind rank prefixes with a line
# glued to another rank's, a DataLoader's bus error, a torchelastic failure (tests/fixtures/SOURCES.md).
GLUED_RAISE = (REAL / "torchrun_ddp_raise_glued.log").read_bytes()
BUS_ERROR = (REAL / "dataloader_bus_error.log").read_bytes()
ELASTIC = (REAL / "errors_torchelastic.log").read_bytes()

# Past the discovery of formats (DISCOVERY_STEP_LINES: 12 step lines a copy), so the block path runs.
COPIES = 150


def _consoles() -> list[tuple[str, bytes]]:
    """The real consoles, whole, again and again; with other real logs between copies; with CRLF lines."""
    return [
        ("healthy", HEALTHY * COPIES),
        ("nan", NAN * COPIES),
        ("traceback_between", HEALTHY * (COPIES - 10) + GLUED_RAISE + HEALTHY * 5 + BUS_ERROR + HEALTHY * 5),
        ("elastic_between", HEALTHY * (COPIES - 4) + ELASTIC + HEALTHY * 4),
        ("crlf_lines", HEALTHY * (COPIES - 2) + HEALTHY.replace(b"\n", b"\r\n") + HEALTHY),
        # A dict naming its step among them (as PaddleNLP's do): the records after it are at that step.
        ("no_bar", NO_BAR * (COPIES // 10) + NO_BAR.replace(b"'epoch': '0.0625'}", b"'epoch': '0.0625', 'step': '2'}")
         + NO_BAR * (COPIES // 10 - 1)),
        ("logged", LOGGED * 8),
        # Each copy's steps start again (a restart each); a step that is no number, one printed besides a bar.
        ("own_steps", PADDLE * 200 + PADDLE.replace(b"'global_step': 160", b"'global_step': nan") + PADDLE * 20
         + HEALTHY.replace(b"'epoch': '0.1562'}", b"'epoch': '0.1562', 'step': '7'}") * 30),
        # A run started again with its bar, then without: blocks of records after a bar, of records alone, of both.
        ("no_bar_between", HEALTHY * (COPIES // 2) + NO_BAR * (COPIES // 10) + HEALTHY * (COPIES // 2)),
    ]


def _tailer_cuts(data: bytes, rng: random.Random, count: int) -> list[bytes]:
    """Blocks as the tailer hands them out when its reads end inside lines of redraws: a line's segments up to a
    carriage return, with a newline added, and its rest in the next block; other reads end at lines."""
    returns = [index for index, byte in enumerate(data) if byte == 0x0D and data[index + 1:index + 2] != b"\n"]
    blocks, begin = [], 0
    for cut in sorted(rng.sample(returns, min(count, len(returns)))):
        if cut < begin:
            continue
        blocks.append(data[begin:cut + 1] + b"\n")
        begin = cut + 1
    blocks.append(data[begin:])
    return blocks


def _cuttings(name: str, data: bytes) -> list[list[bytes]]:
    rng = random.Random(name)
    return [[data], _blocks(data, _line_boundaries(data, rng, 5)), _blocks(data, _line_boundaries(data, rng, 60)),
            _tailer_cuts(data, rng, 40)]


def block_passes_of(kernel: str, names: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> str:
    """The block passes ``names`` run by ``kernel``: "native" (skipped where it is not built) or "twin"."""
    if kernel == "twin":
        # The parser runs them as block passes (native.run_pass, or ahead on the second core): those too.
        for name in names:
            monkeypatch.setattr(native, name, getattr(scan_twin, name))
            monkeypatch.setitem(native._PASSES, name, getattr(scan_twin, name))
        monkeypatch.setattr(native, "ahead", native._Later)
    elif not native.available()["scan"]:
        pytest.skip("the scan kernel is not built here")
    return kernel


@pytest.fixture(params=["native", "twin"])
def segment_kernel(request, monkeypatch):
    """The kernels and their twins must give the same records."""
    return block_passes_of(request.param, ("segment_records", "line_prefixes"), monkeypatch)


@pytest.fixture
def block_path_runs(monkeypatch):
    """How many blocks the carriage-return path read (a test that only fell back would prove nothing)."""
    read: list[bool] = []
    original = LineParser._parse_carriage

    def recording(self, data, parsed, bare=False):
        read.append(original(self, data, parsed, bare))
        return read[-1]

    monkeypatch.setattr(LineParser, "_parse_carriage", recording)
    return read


@functools.cache
def _expected(name: str, cutting: int) -> tuple:
    """What reading every segment alone gives (the segment kernel plays no part in it: computed once)."""
    return _comparable(_every_line_alone(_cuttings(name, dict(_consoles())[name])[cutting], scheduler=False))


@pytest.mark.parametrize(("name", "data"), _consoles(), ids=[name for name, _ in _consoles()])
def test_blocks_give_what_every_segment_gives(name, data, segment_kernel, block_path_runs):
    for cutting, blocks in enumerate(_cuttings(name, data)):
        expected = _expected(name, cutting)
        for rows_per_batch in (None, 7):
            parser = LineParser(rows_per_batch=rows_per_batch)
            assert _comparable(parser.parse_block(block) for block in blocks) == expected
    assert sum(block_path_runs) >= 10, "the block path hardly ran: the comparison would prove little"


@pytest.mark.parametrize(("name", "records"), [("healthy", 12 * COPIES), ("nan", 12 * COPIES),
                                               ("traceback_between", 12 * COPIES), ("no_bar", 60 * (COPIES // 5))])
def test_blocks_give_the_offsets_and_rows_every_segment_gives(name, records, block_path_runs):
    # analyze reads its step lines again at their offsets (timestamps) and writes a CSV row per step line.
    data = dict(_consoles())[name]

    def read(parser: LineParser, blocks: list[bytes]) -> tuple[list, list]:
        steps: list[tuple] = []
        others: list[tuple] = []
        base = 0
        for block in blocks:
            parsed = parser.parse_block(block)
            assert parsed.offsets is not None
            for record, offset in zip(parsed.records, parsed.offsets, strict=True):
                if isinstance(record, StepBatch):
                    assert record.line_starts is not None and record.rows is not None
                    steps += [(record.rank, step, base + start, values, aux) for step, start, (values, aux)
                              in zip(record.steps, record.line_starts, record.rows, strict=True)]
                else:
                    others.append((record_as_dict(record), base + offset))
            base += len(block)
        return steps, others

    for blocks in _cuttings(name, data)[1:]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(line_parser, "scanner_for", lambda formats, prefixes=True: None)
            expected = read(LineParser(rows_per_batch=1, line_offsets=True, step_rows=True), blocks)
        assert len(expected[0]) == records
        assert repr(read(LineParser(line_offsets=True, step_rows=True), blocks)) == repr(expected)  # NaN != NaN
    assert sum(block_path_runs) >= 5


def test_the_block_path_reads_while_formats_are_discovered(block_path_runs):
    # The real console's DDP warnings say "iteration" (Megatron-LM's byte test, a format routed before the
    # Trainer's) on lines of their own: while every format is still looked for, a block after the Trainer's first
    # record goes the block path all the same, those lines read one by one. On a record line (a bar's description)
    # the word sends its block to the segment reader. Either way: what every segment gives.
    marked = HEALTHY.replace(b"\r  2%|", b"\riteration  2%|", 1)
    assert marked != HEALTHY
    for data in (HEALTHY * 40, HEALTHY * 20 + marked + HEALTHY * 19):
        blocks = _blocks(data, _line_boundaries(data, random.Random(7), 60))
        parser = LineParser()
        block_path_runs.clear()
        parsed = [parser.parse_block(block) for block in blocks]
        assert parser._discovering, "past the discovery of formats: the test would prove little"
        assert sum(b"iteration" in block for block in blocks) > len(blocks) // 2
        assert sum(block_path_runs) > len(blocks) // 2  # 16 of 61 blocks when the word anywhere sent a block away
        assert _comparable(parsed) == _comparable(_every_line_alone(blocks, scheduler=False))


def test_a_dict_of_another_shape_or_value_is_read_by_the_trainers_parser():
    # A value the kernel does not read as a number, a dict of other keys: their lines go segment by segment.
    shape = segment_shape(b"{'loss': '4.036', 'grad_norm': '0.3374', 'learning_rate': '0.004667', 'epoch': '0.1562'}")
    assert shape is not None and shape.pieces[0] == b"{'loss': '" and len(shape.pieces) == 5
    assert segment_shape(b"{'loss': '4.0', 'step': '5'}").step == 1  # names its step: the record's own
    assert segment_shape(b"{'loss': '4.0', 'step': '5', 'global_step': '5'}") is None  # two: the parser reads it
    # Unquoted values (older transformers, LLaMA-Factory's logger), or some quoted: pieces of their own.
    assert segment_shape(b"{'loss': 4.0, 'grad_norm': 0.5}").pieces == (b"{'loss': ", b", 'grad_norm': ", b"}")
    assert segment_shape(b"{'loss': 4.0, 'x': '1'}").pieces == (b"{'loss': ", b", 'x': '", b"'}")
    assert segment_shape(b"{'loss': 4.0, 'x': '1}") is None  # a quote not closed
    assert segment_shape(b"{'loss': 4.0, 'x': [1]}") is None  # a list
    assert segment_shape(b"{'loss': 4.0,  'x': 1}") is None  # two spaces: not the dict's own printing
    odd = (HEALTHY.replace(b"'grad_norm': '0.246'", b"'grad_norm': 'n/a'")
           .replace(b"'loss': '4.04',", b"'loss': '4.04', 'x': '1',"))
    data = HEALTHY * COPIES + odd * 3 + HEALTHY * 3
    blocks = _blocks(data, _line_boundaries(data, random.Random(3), 20))
    assert _comparable(LineParser().parse_block(block) for block in blocks) == _comparable(
        _every_line_alone(blocks, scheduler=False))


def test_an_open_traceback_reads_the_segments_after_it_as_lines():
    # The segments of a carriage-return line are read as lines; a segment holding no anchor is skipped (it gives no
    # record), unless a failure block is open: then it is the traceback's, as the same text on lines of its own.
    traceback = [b"Traceback (most recent call last):", b'  File "train.py", line 7, in <module>', b"    step()",
                 b"KeyboardInterrupt"]  # no anchor on the exception's line: read as the open block's
    bar = b"  3%|\xe2\x96\x8e         | 3/90 [00:01<00:30,  2.90it/s]"
    as_segments = b"\r".join([bar, *traceback]) + b"\n"
    as_lines = b"\n".join([bar, *traceback]) + b"\n"

    def errors(data: bytes) -> list[dict]:
        parsed = LineParser().parse_block(data)
        return [record_as_dict(record) for record in parsed.records if not isinstance(record, StepBatch)]

    expected = errors(as_lines)
    assert any("KeyboardInterrupt" in str(record) for record in expected)
    assert errors(as_segments) == expected
