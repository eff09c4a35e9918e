"""Block parsing skips the lines without an anchor and reads runs of step lines with the kernel,
in batches: it must give exactly what parsing every line alone, a batch per step line, gives."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import random
import re
from array import array
from pathlib import Path

import pytest

from benchmarks import formats
from benchmarks.generate import worker_log_lines
from exporter import native
from exporter.native import step_fields as step_fields_twin
from exporter.parse import BUILTIN_FORMATS, LineParser, StepBatch, line_parser, scan
from exporter.parse.formats import FormatSelection, custom_format
from exporter.parse.records import StepLine
from exporter.parse.scan import anchors_for
from exporter.parse.step_batch import StepBatchBuilder
from exporter.state import TrainingState
from tests.support.records import record_as_dict
from tests.support.state_dump import batching_free_dump
from tests.support.tools import require_native_kernels

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SCHEDULER_FORMAT = FormatSelection().forced("scheduler.log", "scheduler")
EXAMPLE = REPO / "examples" / "deepseek-moe-8rank" / "msrun_log"

TRICKY = b"""\
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    { step:[ 1/ 2], loss: 1.0 } appears in a frame line
RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1191, unhandled system error
{ step:[    2/    4], loss: 2.5, per_step_time: 800ms } and Traceback (most recent call last) on one line

noise line with ]: inside, not a rank prefix
  indented Segmentation fault noise
step=3 loss=2.4 lr=0.0001
Traceback (most recent call last):
  File "train.py", line 9, in <module>
"""


@functools.cache
def _logs() -> tuple[tuple[str, bytes, bool], ...]:
    """(name, content, is a scheduler log); made once (the generated log's 60,000 lines take seconds)."""
    generated = "\n".join(worker_log_lines(60_000, seed=5)).encode() + b"\n"
    fixtures = [(path.stem, path.read_bytes(), path.stem == "msrun_scheduler")
                for path in sorted((FIXTURES / "formats").glob("*.log"))]
    examples = [(name, (EXAMPLE / name).read_bytes(), name == "scheduler.log")
                for name in ("worker_0.log", "scheduler.log")]
    return (("generated", generated, False), ("tricky", TRICKY, False), *fixtures, *examples, *_prefixed_logs(),
            *_interleaved_logs(), *((f"{spec.format}_continued", _continued_log(spec, 30), False)
                                    for spec in formats.FORMATS if spec.format in _TABLE_FORMATS),
            ("torchtitan_continued", _continued_log(_TORCHTITAN, 12, whole=True), False),
            ("mmcv_continued", _continued_log(_MMCV, 300), False), ("jsonl_mixed", _jsonl_mixed(), False),
            ("mmengine_epochs_continued", _continued_log(_MMENGINE_EPOCHS, 100), False))


# Formats whose runs of step lines the kernel reads by their table (besides MindFormers' and key=value's).
_TABLE_FORMATS = ("megatron", "nemo", "paddlenlp", "nanogpt", "mmengine", "deepspeed", "jsonl", "mindformers_static",
                  "fairseq")
# mmcv's lines (MMEngine's table: the step in brackets, ``name: value`` pairs after it, dotted names).
_MMCV = formats.FormatLog("mmcv", "mmcv_iter.log", rb"(Iter \[)(\d+)(/)(\d+)", "lr: ")
# MMEngine's epoch-based lines (a real run's three epochs, continued epoch after epoch).
_MMENGINE_EPOCHS = formats.FormatLog("mmengine", "mmengine_epoch_run.log", rb"(Epoch\(train\) \[)(\d+)()()", "lr: ")
# A format without a field table, its real console rank-prefixed (``[rank0]:``, ``[rank0]: `` before an indented
# line) after the launcher's unprefixed lines, a step line a hundred lines or so.
_TORCHTITAN = next(spec for spec in formats.FORMATS if spec.format == "torchtitan")


def _jsonl_mixed() -> bytes:
    """JSON lines the kernel reads (LLaMA-Factory's, continued) among ones it leaves to the per-line parser: MMEngine's
    scalars.json records (``data_time``), an escape, a nested value, two aliases of the loss; and a string step, a
    negative zero, a NaN, a null total, which it reads."""
    spec = next(spec for spec in formats.FORMATS if spec.format == "jsonl")
    read = _continued_log(spec, 40).splitlines(keepends=True)
    scalars = (FIXTURES / "real" / "mmengine_runner_scalars.log").read_bytes().splitlines(keepends=True)
    others = [b'{"step": "20", "loss": 2.5, "tps": 1200}\n', b'{"step": 21, "loss": 2.5, "note": "a\\"b"}\n',
              b'{"step": 22, "loss": 2.5, "lr": {"group": 0.1}}\n', b'{"step": 23, "loss": 2.5, "train_loss": 2.4}\n',
              b'{"step": 24, "loss": -0, "grad_norm": NaN, "total_steps": null}\n']
    return b"".join(scalars + others + read)  # steps going up: 1-12, 20-24, 3200 on


def _continued_log(spec: formats.FormatLog, copies: int, *, whole: bool = False) -> bytes:
    """A format's real log, its steps renumbered copy after copy (benchmarks/formats.py): long runs of its lines;
    ``whole``: the whole log a copy, its start too."""
    return formats.continued((FIXTURES / "real" / spec.fixture).read_bytes(), re.compile(spec.counter), copies,
                             whole=whole)


def _prefixed(prefix: bytes, data: bytes) -> bytes:
    return b"".join(prefix + line for line in data.splitlines(keepends=True))


def _prefixed_logs() -> list[tuple[str, bytes, bool]]:
    """Logs whose lines carry rank prefixes: a rank's own log (torchrun's ``[rank3]: ``, ``srun --label``'s
    ``3: ``, both of torchrun's stacked), one with another rank's lines among them, a launcher's lines between
    two ranks' stretches, a line of another rank glued to one (the prefixes as torchrun 2.13.0 and srun print
    them: tests/fixtures/real/torchrun_ddp_raise_glued.log, srun_label.log)."""
    generated = "\n".join(worker_log_lines(12_000, seed=7)).encode() + b"\n"
    lines = generated.splitlines(keepends=True)
    mixed = b"".join(b"[rank5]: " + line if index % 997 == 0 else b"[rank3]: " + line
                     for index, line in enumerate(lines))
    stretches = b"".join([_prefixed(b"[default1]:", b"".join(lines[:4000])), b"launcher line\n",
                          _prefixed(b"[default2]:", b"".join(lines[4000:8000])), TRICKY,
                          _prefixed(b"[default1]:[rank9]: ", b"".join(lines[8000:]))])
    at = [index for index, line in enumerate(lines) if b"step:[" in line][40]  # rank 3's step line glued on
    glued = b"".join([_prefixed(b"[default0]:", b"".join(lines[:at])).rstrip(b"\n"), b"[default3]:", lines[at],
                      _prefixed(b"[default0]:", b"".join(lines[at + 1:3000]))])
    return [("prefixed_rank", _prefixed(b"[rank3]: ", generated), False),
            ("prefixed_srun", _prefixed(b" 3: ", generated), False),
            ("prefixed_stacked", _prefixed(b"[default1]:[rank5]: ", generated + TRICKY), False),
            ("prefixed_tricky", _prefixed(b"[default0]:", TRICKY), False),
            ("prefixed_other_rank", mixed, False), ("prefixed_stretches", stretches, False),
            ("prefixed_glued", glued, False)]


REAL = FIXTURES / "real"


def _interleaved_logs() -> list[tuple[str, bytes, bool]]:
    """torchrun ``--tee`` consoles: four ranks' ``key=value`` step lines interleaved (real runs, SOURCES.md), the NaN
    run again and again (a restart at each copy), and between its copies the real runs that raise (a traceback on
    ``[default1]:[rank1]: ``), that glue one rank's line to another's, that are killed and that run out of memory, a
    console whose tail threads cut two lines (torchrun_tee_cut_lines.log), and four ranks' NCCL INFO chatter before
    and after step lines (_nccl_chatter)."""
    nan = (REAL / "torchrun_ddp_nan.log").read_bytes()
    failures = [(REAL / f"torchrun_ddp_{name}.log").read_bytes() for name in ("raise", "raise_glued", "kill", "oom")]
    cut = (REAL / "torchrun_tee_cut_lines.log").read_bytes()
    mixed = b"".join(nan * 8 + failure for failure in failures) + nan * 8 + cut
    # A rank's line with a carriage return in it (a bar's redraw written after it): segments, each a line.
    redrawn = nan.replace(b"loss=6.175309658050537", b"loss=6.175309658050537\rstep=4/30 loss=1.0", 1)
    return [("interleaved_tee", nan * 40, False), ("interleaved_failures", mixed, False),
            ("interleaved_redrawn", nan * 30 + redrawn * 3 + nan * 12, False),
            ("interleaved_chatter", _nccl_chatter() * 8 + nan * 4 + _nccl_chatter() * 4, False)]


def _bar_redraws_as_lines() -> bytes:
    """A Lightning bar's redraws each a line of its own (as a bar writes to a file without carriage returns: every
    step drawn twice) under two ranks' prefixes, interleaved: a held redraw is taken at the next line, whichever
    rank's (the real bar of lightning_bar_nan.log, its carriage returns made newlines)."""
    redraws = [segment for segment in (REAL / "lightning_bar_nan.log").read_bytes().replace(b"\r", b"\n").splitlines()
               if segment.startswith(b"Epoch ")]
    return b"".join(b"[default%d]:%s\n" % (index % 2, segment) for copy in range(3)
                    for index, segment in enumerate(redraws * 2))


def _nccl_chatter() -> bytes:
    """Four ranks' NCCL_DEBUG=INFO lines as a torchrun ``--tee`` console interleaves them: the NCCL INFO lines of a
    real nccl-tests run (healthy/nccl_awsefaeks_nccltests.log, on hosts whose names hold "nccl"), without mpirun's
    ``[1,N]<stdout>:`` tag, each given a rank's ``[defaultN]:`` in turn, and torchrun's own launcher lines."""
    lines = (REAL / "healthy" / "nccl_awsefaeks_nccltests.log").read_bytes().splitlines(keepends=True)
    info = [line.split(b"<stdout>:", 1)[1] for line in lines if b" NCCL INFO " in line]
    launcher = [line for line in (REAL / "torchrun_ddp_nan.log").read_bytes().splitlines(keepends=True)
                if not line.startswith(b"[")][:4]
    return b"".join(launcher) + b"".join(b"[default%d]:" % (index % 4) + line for index, line in enumerate(info))


def _comparable(blocks) -> tuple[list, str]:
    """What a file's blocks hold: the records of other kinds, the line counts, and the state
    all of them produce (step batches are compared by what they do)."""
    state = TrainingState()
    other = []
    for batch in blocks:
        other.append(([record_as_dict(record) for record in batch.records if not isinstance(record, StepBatch)],
                      batch.lines_by_rank, batch.unparsed, batch.lines_by_format))
        groups: dict[int | None, list] = {rank: [] for rank in batch.lines_by_rank}
        for record in batch.records:
            groups.setdefault(record.rank, []).append(record)
        for rank, records in groups.items():
            state.ingest(("run", "node", str(rank)), batch.lines_by_rank.get(rank, 0), records, None, 0.0)
    return other, json.dumps(batching_free_dump(state), sort_keys=True)


def _blocks(data: bytes, cuts: list[int]) -> list[bytes]:
    return [data[start:end] for start, end in zip([0, *cuts], [*cuts, len(data)], strict=True)]


def _line_boundaries(data: bytes, rng: random.Random, count: int) -> list[int]:
    ends = [index + 1 for index, byte in enumerate(data) if byte == ord("\n")][:-1]
    return sorted(rng.sample(ends, min(count, len(ends))))


def _parser(scheduler: bool, **options) -> LineParser:
    return LineParser(forced=SCHEDULER_FORMAT if scheduler else None, **options)


class _Recording(LineParser):
    """A line parser that notes in ``seen`` each line reaching the line-by-line reader (_parse_line)."""

    def __init__(self, seen: list[bytes], **options) -> None:
        super().__init__(**options)
        self.seen = seen

    def _parse_line(self, line, parsed):
        self.seen.append(line)
        return super()._parse_line(line, parsed)


def _every_line_alone(blocks: list[bytes], scheduler: bool) -> list:
    """The reference: no scan (every line looked at), no kernel, a batch per step line."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_parser, "scanner_for", lambda formats: None)
        parser = _parser(scheduler, rows_per_batch=1)
        return [parser.parse_block(block) for block in blocks]


@pytest.fixture(params=native.SCANNERS)
def scanner_implementation(request, monkeypatch):
    """Every scanner this machine can run: each must give what parsing every line gives."""
    if request.param == "native" and not native.available()["scan"]:
        require_native_kernels()
    if request.param == "ahocorasick" and not native.scan.has_aho_corasick():
        pytest.skip("ahocorasick_rs is not installed")
    monkeypatch.setattr(native, "best_scanner", lambda: request.param)
    scan.scanner_of.cache_clear()
    yield request.param
    scan.scanner_of.cache_clear()


@pytest.mark.parametrize("step_kernel", ["native", "twin"])
@pytest.mark.parametrize(("name", "data", "scheduler"), _logs(), ids=[name for name, _, _ in _logs()])
def test_blocks_give_what_every_line_gives(name, data, scheduler, scanner_implementation, step_kernel, monkeypatch):
    if step_kernel == "twin":
        if scanner_implementation != native.SCANNERS[0]:
            pytest.skip("the kernel's twin with the native scanner: the scanners are each tested with the kernel")
        monkeypatch.setattr(native, "step_reader", step_fields_twin.StepReader)
    elif not native.available()["step_fields"]:
        require_native_kernels()
    for blocks, expected in _references(name):
        for rows_per_batch in (None, 7):
            in_blocks = _parser(scheduler, rows_per_batch=rows_per_batch)
            assert _comparable(in_blocks.parse_block(block) for block in blocks) == expected


@functools.cache
def _references(name: str) -> tuple[tuple[list[bytes], tuple[list, str]], ...]:
    """The log cut into blocks three ways (not at all, at 3 and at 100 line ends), each with what parsing every line
    alone gives of them: made once for every scanner and step kernel tested, by the step kernel's twin (the
    reference whichever is tested)."""
    ((data, scheduler),) = [(log, scheduler) for log_name, log, scheduler in _logs() if log_name == name]
    rng = random.Random(name)
    references = []
    for cuts in ([], _line_boundaries(data, rng, 3), _line_boundaries(data, rng, 100)):
        blocks = _blocks(data, cuts)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(native, "step_reader", step_fields_twin.StepReader)
            parsed = _every_line_alone(blocks, scheduler)
        assert any(batch.records for batch in parsed), "no records: the comparison would prove nothing"
        references.append((blocks, _comparable(parsed)))
    return tuple(references)


def test_a_traceback_split_across_blocks_ends_in_the_next_one():
    data = b"noise\nTraceback (most recent call last):\n  File \"x.py\", line 1\nValueError: bad\n\nnoise\n"
    cut = data.index(b"  File")
    parser = LineParser()
    first, second = (parser.parse_block(block) for block in _blocks(data, [cut]))
    events = [(record.kind, record.detail.get("exception")) for record in first.records + second.records]
    assert events == [("traceback", "ValueError")]
    assert first.unparsed + second.unparsed == 2  # the two noise lines


def test_lines_without_anchors_are_never_looked_at(monkeypatch):
    seen: list[bytes] = []

    class RecordingReader(step_fields_twin.StepReader):
        def read(self, data, starts, index, limit):
            taken = super().read(data, starts, index, limit)
            # The lines it took, and the one it declined.
            seen.extend(data[start:data.index(b"\n", start)] for start in starts[index:index + taken + 1])
            return taken

    monkeypatch.setattr(native, "step_reader", RecordingReader)
    data = b"plain\n{ step:[ 1/ 2], loss: 3.0 }\nHCCL noise\n{ step:[ 2/ 2], loss: 2.9 }\nfftsplus noise\n"
    batch = _Recording(seen).parse_block(data)
    # The first step line detects the format, the next goes to the kernel, then the next
    # anchored line to the kernel (no record there) and to the line parser. A line naming
    # HCCL without an error text is no anchor: HCCL's own INFO and WARNING lines all do.
    assert seen == [b"{ step:[ 1/ 2], loss: 3.0 }", b"{ step:[ 2/ 2], loss: 2.9 }", b"fftsplus noise",
                    b"fftsplus noise"]
    assert (batch.lines_by_rank, batch.unparsed, batch.lines_by_format) == ({None: 5}, 3, {"mindformers_pynative": 2})
    # The kernel cannot see the step of a line read alone: the line parser reads the step of the
    # kernel's next line, and only a step going back (a restart) starts a new batch.
    assert [(type(record), record.steps) for record in batch.records] == [(StepBatch, [1, 2])]
    restarted = LineParser().parse_block(b"{ step:[ 5/ 9], loss: 3.0 }\nfftsplus noise\n{ step:[ 2/ 9], loss: 2.9 }\n")
    assert [list(record.steps) for record in restarted.records if isinstance(record, StepBatch)] == [[5], [2]]


@pytest.mark.parametrize("name", ["generated", "prefixed_rank", "prefixed_stacked", "prefixed_stretches",
                                  "interleaved_tee", "interleaved_failures"])
def test_blocks_give_the_line_offsets_every_line_gives(name):
    # analyze reads its step lines again at these offsets (their timestamps): a prefix cut off block-wise moves
    # none of them.
    data = {log_name: log for log_name, log, _ in _logs()}[name]
    blocks = _blocks(data, _line_boundaries(data, random.Random(name), 40))

    def offsets(parser: LineParser) -> tuple[list, list]:
        # Each block's step lines rank by rank (a batch holds one rank's lines: how a rank's lines are cut into
        # batches, and the batches of ranks interleaved, is no contract), the other records in order.
        steps: list[tuple[int, int, int | None, int]] = []
        others: list[tuple[dict, int]] = []
        for number, block in enumerate(blocks):
            parsed = parser.parse_block(block)
            assert parsed.offsets is not None
            for record, offset in zip(parsed.records, parsed.offsets, strict=True):
                if isinstance(record, StepBatch):
                    assert record.line_starts is not None
                    rank = -1 if record.rank is None else record.rank
                    steps += ((number, rank, step, start)
                              for step, start in zip(record.steps, record.line_starts, strict=True))
                else:
                    others.append((record_as_dict(record), offset))
        return sorted(steps, key=lambda line: line[:2]), others

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_parser, "scanner_for", lambda formats: None)
        expected = offsets(LineParser(rows_per_batch=1, line_offsets=True))
    assert expected[0] and (expected[1] or name == "interleaved_tee")
    assert offsets(LineParser(line_offsets=True)) == expected


def test_a_rank_log_is_read_block_wise(monkeypatch):
    # One rank's prefix on every line: cut off once for the block, its noise never looked at, its step lines
    # read by the kernel into the rank's batch.
    seen: list[bytes] = []

    data = b"".join(b"[rank3]: " + line + b"\n" for line in [
        b"{ step:[ 1/ 9], loss: 3.0 }", b"plain", b"HCCL noise", *(b"{ step:[ %d/ 9], loss: 2.9 }" % step
                                                                    for step in range(2, 9))])
    parser = _Recording(seen, rank_offset=8)
    parser.parse_block(data)  # the first step line detects the format
    seen.clear()
    batch = parser.parse_block(data.replace(b"[ ", b"[ 1"))
    assert seen == []
    assert (batch.lines_by_rank, batch.unparsed) == ({3: 10}, 2)
    assert [(record.rank, list(record.steps)) for record in batch.records] == [(3, [11, *range(12, 19)])]


def test_a_block_with_rank_prefixes_is_parsed_line_by_line():
    data = b"[default0]:noise\n[default1]:{ step:[ 1/ 2], loss: 3.0 }\nlauncher line\n"
    batch = LineParser(rank_offset=8).parse_block(data)
    assert batch.lines_by_rank == {8: 1, 9: 1, None: 1}
    assert [record.rank for record in batch.records] == [9]


def test_a_parsed_line_with_another_role_prefix_counts_for_its_rank():
    data = b"launcher line\n[trainer1]:{ step:[ 1/ 2], loss: 3.0 }\nnoise\n"
    (expected,) = _every_line_alone([data], scheduler=False)
    batch = LineParser().parse_block(data)
    assert batch.lines_by_rank == expected.lines_by_rank == {None: 2, 1: 1}
    assert [record.rank for record in batch.records] == [1]


def test_a_format_without_a_literal_needs_every_line():
    loose = custom_format("loose", r"^it (?P<step>\d+) loss (?P<loss>[\d.]+)$")
    batch = LineParser([loose, *BUILTIN_FORMATS]).parse_block(b"noise\nit 7 loss 2.5\n")
    assert [record.steps for record in batch.records] == [[7]]


def test_scanner_finds_each_line_holding_an_anchor_once(scanner_implementation):
    scanner = native.scanner([b"step:[", b"HCCL"], [b"[rank"])
    data = b"a HCCL b step:[ c\nnothing\nHCCL\n[rank1]: HCCL\nx [rank2]: HCCL\nno newline at the end HCCL"
    newlines, starts, prefixed = scanner.scan(data)
    assert newlines == 5
    lines = data.split(b"\n")
    assert [data.count(b"\n", 0, start) for start in starts] == [0, 2, 3, 4, 5]
    assert all(start == 0 or data[start - 1:start] == b"\n" for start in starts)
    assert prefixed == [data.index(b"[rank1]")]
    assert lines[1] == b"nothing"


def test_every_anchor_is_long_enough_for_the_simd_prefilter():
    assert min(len(anchor) for anchor in anchors_for(BUILTIN_FORMATS)) >= 3
    assert all(anchors_for([fmt]) for fmt in BUILTIN_FORMATS)  # each file of a detected format is scanned
    assert anchors_for([SCHEDULER_FORMAT]) is None  # scheduler.log's format reads every line: line by line
    # One scan kernel holds them all: past that, several answer as one, a scan each, and no pass runs ahead.
    assert len(anchors_for(BUILTIN_FORMATS)) <= native.KERNEL_ANCHORS


def test_scanner_rejects_empty_anchors():
    with pytest.raises(ValueError):
        native.scanner([b"step", b""])


@pytest.mark.parametrize("name", ["generated", "tricky", "deepspeed", "mindformers_pynative_state_monitor",
                                  "megatron", "megatron_continued", "nemo_continued", "paddlenlp_continued",
                                  "torchrun_tee",
                                  "prefixed_stacked", "prefixed_stretches", "interleaved_tee",
                                  "interleaved_failures"])
def test_step_rows_are_each_lines_own_values(name):
    # analyze's CSV: a row per step line with that line's values and aux losses, from batches of many lines
    # (the kernel's runs), as a batch per line gives them.
    data = {log_name: log for log_name, log, _ in _logs()}[name]
    blocks = _blocks(data, _line_boundaries(data, random.Random(name), 30))
    expected = _rows(_each_line_a_batch(blocks))
    assert len(expected) >= 3
    in_blocks = [LineParser(step_rows=True).parse_block(block) for block in blocks]
    assert _rows(in_blocks) == expected
    # The long logs' rows come from batches of many lines.
    assert len(expected) < 100 or any(len(record.steps) > 1 for block in in_blocks for record in block.records
                                      if isinstance(record, StepBatch))


@pytest.mark.parametrize("seed", range(4))
def test_aux_losses_some_lines_lack_are_each_lines_own(seed, monkeypatch):
    """The kernel's runs give each line's aux losses as columns (read again with them as fields): lines lacking one,
    printing one twice (the second unreadable: the line's first is its value), a step printed twice (no step names a
    line), as a batch per line gives them. A run of lines printing them all is not read line by line."""
    rng = random.Random(seed)
    lines = []
    for line in worker_log_lines(3_000, seed=seed):
        change = rng.random()
        if "{ step:" in line and change < 0.1:
            line = line.replace(", load_balancing_loss:", ", lost:")
        elif "{ step:" in line and change < 0.12:
            line = line.replace(" }", ", mtp_1_loss: abc }")
        if "{ step:" in line and change > 0.99:  # the step again, without an aux loss
            lines += [line.replace(", load_balancing_loss:", ", lost:"), line]
        else:
            lines.append(line)
    data = "\n".join(lines).encode() + b"\n"
    blocks = _blocks(data, _line_boundaries(data, rng, 10))
    expected = _rows(_each_line_a_batch(blocks))
    assert _rows([LineParser(step_rows=True).parse_block(block) for block in blocks]) == expected
    lacking = [("load_balancing_loss" in aux) for *_, aux in expected]
    assert any(lacking) and not all(lacking)
    clean = "\n".join(worker_log_lines(3_000, seed=seed)).encode() + b"\n"
    monkeypatch.setattr(StepBatchBuilder, "_read_rows", None)  # a line read alone would raise
    assert _rows([LineParser(step_rows=True).parse_block(clean)]) == _rows(_each_line_a_batch([clean]))


@pytest.mark.parametrize("make_reader", [native.step_reader, step_fields_twin.StepReader], ids=["native", "twin"])
def test_runs_one_after_the_other_keep_a_batch_of_their_steps_a_range(make_reader):
    """A run going on where the one before it stopped (one difference on) joins its range; a line added alone, or a
    run that does not go on, makes the batch's steps and its series' a list, the same values either way."""
    table = next(fmt for fmt in BUILTIN_FORMATS if fmt.name == "keyvalue").step_table
    assert table is not None
    data = b"".join(b"step=%d loss=%d.5 step_time=0.1\n" % (step, step) for step in (10, 20, 30, 40, 60))
    starts = [index * len(b"step=10 loss=10.5 step_time=0.1\n") for index in range(5)]
    builder = StepBatchBuilder(rank=0)
    builder.read_by(make_reader(table.kernel_table), table.columns)
    assert builder.read_run(data, starts, 0, 2) == (2, None)
    assert not builder.goes_back(20)  # the run taken into the batch
    assert builder.read_run(data, starts, 2, 2) == (2, None)
    batch = builder.take()
    assert batch is not None and batch.steps == range(10, 50, 10)
    assert batch.series["loss"].steps == batch.series["step_time_seconds"].steps == range(10, 50, 10)
    assert list(batch.series["loss"].values) == [10.5, 20.5, 30.5, 40.5]
    builder.read_run(data, starts, 0, 2)
    assert not builder.goes_back(20)
    builder.read_run(data, starts, 4, 1)  # step 60: no range goes on to it
    builder.add_line(StepLine(step=70, values={"loss": 7.5}))
    batch = builder.take()
    assert batch is not None and batch.steps == [10, 20, 60, 70]
    assert batch.series["loss"] == ([10, 20, 60, 70], array("d", [10.5, 20.5, 60.5, 7.5]))
    assert batch.series["step_time_seconds"].steps == [10, 20, 60]


def _each_line_a_batch(blocks: list[bytes]) -> list:
    """What a batch per step line, no scan, gives of the blocks (with its rows)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_parser, "scanner_for", lambda formats, prefixes=True: None)
        return [LineParser(rows_per_batch=1, step_rows=True).parse_block(block) for block in blocks]


def _rows(parsed: list) -> list:
    """Each block's rows rank by rank: how the ranks' batches interleave is no contract (offsets, above); values by
    their repr (nan is no nan)."""
    found = [(number, -1 if record.rank is None else record.rank, step, repr(sorted(values.items())), aux)
             for number, block in enumerate(parsed) for record in block.records if isinstance(record, StepBatch)
             for step, (values, aux) in zip(record.steps, record.rows or [], strict=True)]
    return sorted(found, key=lambda row: row[:2])


@pytest.mark.parametrize("step_kernel", ["native", "twin"])
def test_an_interleaved_console_is_read_stream_by_stream(step_kernel, monkeypatch):
    # torchrun's --tee console: after the first block (formats discovered), a block of four ranks' lines is read
    # rank by rank, the step lines by the kernel: no line goes through the line parser but each rank's restart
    # (the copies' steps go back to 1; the kernel reads no step going back into a run, the batch ends there).
    if step_kernel == "twin":
        monkeypatch.setattr(native, "step_reader", step_fields_twin.StepReader)
    elif not native.available()["step_fields"]:
        require_native_kernels()
    seen: list[bytes] = []

    nan = (REAL / "torchrun_ddp_nan.log").read_bytes()
    parser = _Recording(seen, rank_offset=4)
    parser.parse_block(nan * 20)
    seen.clear()
    block = parser.parse_block(nan * 5)
    assert seen == []
    assert block.lines_by_rank == {None: 20, 4: 80, 5: 80, 6: 80, 7: 80}
    assert block.lines_by_format == {"keyvalue": 300}
    assert block.unparsed == 40  # the launcher's lines and each rank's "rank 2 of 4: training 30 steps"
    steps = [(record.rank, list(record.steps)) for record in block.records if isinstance(record, StepBatch)]
    assert sorted(steps) == sorted((rank, list(range(1, 16))) for rank in range(4, 8) for _ in range(5))
    # A block holding a failure, a glued line or two prefixes of one rank goes line by line, as before.
    for name in ("raise", "raise_glued"):
        seen.clear()
        parser.parse_block((REAL / f"torchrun_ddp_{name}.log").read_bytes())
        assert seen



def test_a_console_of_a_format_without_a_table_is_read_by_its_anchored_lines(monkeypatch):
    # torchtitan's console, its format without its field table (as Lightning's is): while formats are
    # discovered, its lines are counted by rank from their prefixes and only those holding an anchor reach the line
    # parser, in order; once discovered, it is read stream by stream, only the lines holding its literal read. Either
    # gives what every line alone gives.
    monkeypatch.setattr(line_parser, "DISCOVERY_STEP_LINES", 6)
    without_table = tuple(dataclasses.replace(fmt, step_table=None) if fmt.name == "torchtitan" else fmt
                          for fmt in BUILTIN_FORMATS)
    paths: list[tuple[str, bool]] = []
    for path in ("_parse_lines", "_parse_interleaved", "_count_streams"):
        monkeypatch.setattr(LineParser, path, functools.partialmethod(_noted, paths, path, getattr(LineParser, path)))
    seen: list[bytes] = []
    log = _continued_log(_TORCHTITAN, 8, whole=True)
    lines = log.splitlines(keepends=True)
    discovering, discovered = b"".join(lines[:256 * 4]), b"".join(lines[256 * 4:])
    parser = _Recording(seen, candidates=without_table)
    parsed = [parser.parse_block(discovering)]
    assert not parser._discovering and parser._kernel_format is None
    step_lines = [line for line in discovering.splitlines() if b"loss:" in line]
    assert [line for line in seen if b"loss:" in line] == step_lines
    assert len(seen) < len(discovering.splitlines()) // 10
    assert {path for path, _ in paths} == {"_parse_interleaved", "_count_streams"}
    assert paths[-1] == ("_count_streams", True)
    seen.clear()
    paths.clear()
    parsed.append(parser.parse_block(discovered))
    assert seen == [line for line in discovered.splitlines() if b"loss:" in line] and len(seen) == 8
    assert paths == [("_parse_interleaved", True)]
    assert parsed[1].lines_by_rank == {None: 4 * 15, 0: 4 * 241}
    assert _comparable(parsed) == _comparable(_every_line_alone([discovering, discovered], scheduler=False))


def test_a_console_of_bar_redraws_as_lines_is_read_by_its_anchored_lines():
    # Two ranks' bar redraws, a line each: the block's lines counted by rank, the redraws read in order, a held one
    # taken where the line-by-line path takes it (at the next line, whichever rank's), as every line alone gives.
    # (Blocks cut between a redraw and the next line are not compared: a held redraw crosses the cut differently,
    # line by line too.)
    paths: list[tuple[str, bool]] = []
    log = _bar_redraws_as_lines() + b"[default0]:a line after the bar\n"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LineParser, "_count_streams",
                      functools.partialmethod(_noted, paths, "_count_streams", LineParser._count_streams))
        parsed = LineParser().parse_block(log)
    assert paths == [("_count_streams", True)]
    assert sum(parsed.lines_by_format.values()) > 100
    assert _comparable([parsed]) == _comparable(_every_line_alone([log], scheduler=False))
    # Once the bar's format is found, a second such block too: a format that redraws is read in order, not stream
    # by stream (a held redraw is taken at the next line of any rank).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_parser, "DISCOVERY_STEP_LINES", 10)
        parser = LineParser()
        both = [parser.parse_block(log), parser.parse_block(log)]
    assert not parser._discovering
    assert _comparable(both) == _comparable(_every_line_alone([log, log], scheduler=False))


def _noted(parser, paths: list[tuple[str, bool]], name: str, method, *arguments):
    """``method`` of ``parser`` called, its name and whether it read the block noted in ``paths``."""
    done = method(parser, *arguments)
    paths.append((name, done is not False))
    return done


def test_a_console_of_chatter_is_counted_stream_by_stream():
    # Four ranks' NCCL INFO lines, no format found yet: no line goes through the line parser, each counts for the
    # rank its prefix names, as line by line; a block holding one line with an anchor goes line by line, as before.
    seen: list[bytes] = []

    chatter = _nccl_chatter()
    quiet = chatter[chatter.index(b"[default"):]  # the ranks' lines only
    (expected,) = _every_line_alone([quiet], scheduler=False)
    block = _Recording(seen, rank_offset=4).parse_block(quiet)
    assert seen == []
    assert block.lines_by_rank == {4: 129, 5: 128, 6: 128, 7: 128}
    assert (block.lines_by_rank, block.unparsed, block.records) == (
        {rank + 4: count for rank, count in expected.lines_by_rank.items()}, expected.unparsed, expected.records)
    assert LineParser().parse_block(quiet).lines_by_rank == expected.lines_by_rank
    for anchored in (b"[default2]:NCCL INFO NET/Plugin: Failed to find ncclCollNetPlugin_v4 symbol.\n",
                     b"[default1]:step=1/30 loss=2.5\n"):
        seen.clear()
        block = _Recording(seen).parse_block(quiet + anchored)
        assert seen
        assert sum(block.lines_by_rank.values()) == 514


def test_a_block_read_line_by_line_looks_only_at_its_lines_holding_an_anchor():
    # More rank prefixes than the streams' grouping keeps (128 ranks' NCCL INFO lines) and a traceback among them:
    # line by line, where only the lines holding an anchor (and an open failure block's) reach the line parser;
    # every line counts for its rank, as when each is read.
    seen: list[bytes] = []

    info = [line.split(b"]:", 1)[1] for line in _nccl_chatter().splitlines(keepends=True) if line.startswith(b"[")]
    traceback = [line.split(b"[rank1]: ", 1)[1] for line in (REAL / "torchrun_ddp_raise.log").read_bytes()
                 .splitlines(keepends=True) if line.startswith(b"[default1]:[rank1]: ")]
    lines = [b"[rank%d]:" % (index % 128) + line for index, line in enumerate(info)]
    lines[200:200] = [b"[rank7]: " + line for line in traceback]
    block = b"".join(lines)
    (expected,) = _every_line_alone([block], scheduler=False)
    parsed = _Recording(seen).parse_block(block)
    assert 0 < len(seen) < len(lines) // 4
    assert all(line.startswith(b"[rank7]:") for line in seen)
    assert _comparable([parsed]) == _comparable([expected])
    assert sum(parsed.lines_by_rank.values()) == len(lines) and len(parsed.lines_by_rank) == 128


def _read_in_pieces(parser: LineParser, blocks: list[bytes]) -> tuple[list[bytes], list]:
    """The blocks cut as the parser cuts them (LineParser.pieces), each piece parsed: the pieces, what they gave."""
    pieces, parsed = [], []
    for block in blocks:
        for piece in parser.pieces(block):
            pieces.append(piece)
            parsed.append(parser.parse_block(piece))
    return pieces, parsed


def test_a_block_is_cut_around_its_few_lines_holding_another_anchor(monkeypatch):
    # The real SIGKILL run's agent line (a failure, another anchor) amid an interleaved console's block: the pieces
    # around it are read stream by stream, it alone line by line, and they give what every line alone gives.
    if not native.available()["step_fields"]:
        require_native_kernels()
    nan = (REAL / "torchrun_ddp_nan.log").read_bytes()
    blocks = [nan * 20, nan * 10 + _exit_line() + nan * 10 + _exit_line() + nan * 10]
    seen: list[bytes] = []

    _read_in_pieces(_Recording(seen), blocks[:1])  # formats discovered: line by line, the lines holding an anchor
    first = len(seen)
    seen.clear()
    pieces, in_pieces = _read_in_pieces(_Recording(seen), blocks)
    assert len(pieces) > 5
    assert first < len(seen) < first + len(nan.splitlines()) * 5  # the second block: the exit lines and a few more
    assert _comparable(in_pieces) == _comparable(_every_line_alone(pieces, False))
    assert _comparable(in_pieces)[1] == _comparable(_every_line_alone(blocks, False))[1]  # the state, however cut
    # More such lines than a block is cut around: it goes line by line whole, as before.
    monkeypatch.setattr(line_parser, "MAX_LINES_CUT_AROUND", 1)
    assert _read_in_pieces(LineParser(), blocks)[0][-1] is blocks[1]


def test_a_console_of_step_lines_ends_discovery_near_its_step_lines_not_at_a_pieces_end():
    # Discovery reads until DISCOVERY_STEP_LINES step lines, whole 64 KiB pieces of the real healthy console some
    # 1,500, pieces sized by the step lines' density about 1,030. The ranks' lines in order, each by the kernel
    # after its prefix once the format is known: the line parser reads those it declines (the first of the format,
    # a launcher's), not each (90 us a line on the benchmark machine). What the pieces give is what every line alone
    # gives.
    if not native.available()["step_fields"]:
        require_native_kernels()
    block = (REAL / "torchrun_ddp_healthy.log").read_bytes() * 10
    seen: list[bytes] = []
    step_lines: list[int] = []

    class Recording(LineParser):
        def _parse_line(self, line, parsed):
            if self._discovering:
                seen.append(line)
            return super()._parse_line(line, parsed)

        def _end_discovery(self):
            step_lines.append(self._step_lines)
            super()._end_discovery()

    parser = Recording()
    pieces, in_pieces = _read_in_pieces(parser, [block])
    assert not parser._discovering
    assert len(step_lines) == 1
    assert line_parser.DISCOVERY_STEP_LINES <= step_lines[0] < 1.1 * line_parser.DISCOVERY_STEP_LINES
    assert 0 < len(seen) < 50
    assert len(pieces[0]) == block.find(b"\n", line_parser.DISCOVERY_PIECE_BYTES) + 1  # none read yet: a whole one
    assert _comparable(in_pieces)[1] == _comparable(_every_line_alone([block], False))[1]


def _exit_line() -> bytes:
    """The real SIGKILL run's agent line ``failed (exitcode: -9) local_rank: 1``: a failure on a line of its own,
    without a prefix, in a block otherwise read stream by stream."""
    console = (REAL / "torchrun_ddp_kill.log").read_bytes()
    at = console.index(b"failed (exitcode: -9)")
    return console[console.rindex(b"\n", 0, at) + 1:console.index(b"\n", at) + 1]


@pytest.mark.parametrize("failures", [(), ("raise", "kill", "raise_glued", "oom"), ("kill_exit",)],
                         ids=["nan", "failures", "exit-line"])
def test_analyze_of_an_interleaved_console_is_the_line_by_line_one(failures, tmp_path, monkeypatch):
    # analyze applies the records in the order of their lines (the CSV's rows, the cause model's findings): read
    # stream by stream, the report and the CSV are byte for byte what reading the console line by line gives. The
    # real NaN run again and again (blocks after the first, the discovery's, read by streams), the real failing
    # runs between its stretches.
    from exporter.analyze.command import run_analyze

    nan = (REAL / "torchrun_ddp_nan.log").read_bytes() * 200
    log = tmp_path / "train.log"
    log.write_bytes(nan + b"".join((_exit_line() if name == "kill_exit" else
                                    (REAL / f"torchrun_ddp_{name}.log").read_bytes()) + nan for name in failures))
    reads: list[int] = []
    interleaved = LineParser._parse_interleaved

    def counted(self, block, parsed):
        done = interleaved(self, block, parsed)
        reads.append(done)
        return done

    def analyze(csv_path: Path) -> tuple[str, bytes]:
        out = io.StringIO()
        assert run_analyze([str(log)], "json", csv=str(csv_path), stdout=out, stderr=io.StringIO()) in (0, 1)
        return out.getvalue(), csv_path.read_bytes()

    monkeypatch.setattr(LineParser, "_parse_interleaved", counted)
    in_streams = analyze(tmp_path / "streams.csv")
    assert any(reads), "no block was read stream by stream: the comparison would prove nothing"
    monkeypatch.setattr(LineParser, "_parse_interleaved", lambda self, block, parsed: False)
    assert in_streams == analyze(tmp_path / "lines.csv")


AHEAD_LOGS = [("generated", _logs()[0][1]), ("interleaved_failures", _interleaved_logs()[1][1]),
              ("hf_trainer_tqdm", (REAL / "hf_trainer_tqdm.log").read_bytes() * 12),
              ("rank_log", _prefixed(b"[rank3]: ", _logs()[0][1])),
              *((f"{spec.format}_continued", _continued_log(spec, 200)) for spec in formats.FORMATS
                if spec.format in ("megatron", "nemo", "paddlenlp")),
              # Read by their lines' shapes (parse/carriage.py): the segment kernel's pass ahead, no step tables'.
              *((f"{spec.format}_shaped", _continued_log(spec, 200)) for spec in formats.FORMATS
                if spec.format in ("generic", "hf_trainer_logged", "hf_trainer_own_step"))]


@pytest.mark.parametrize(("name", "data"), AHEAD_LOGS, ids=[name for name, _ in AHEAD_LOGS])
def test_blocks_read_with_the_next_one_started_give_what_every_line_gives(name, data, monkeypatch):
    # A catch-up hands the parser each block's successor before it (LineParser.prepare): the passes the blocks
    # before took are run over it on a thread of their own, and what they give is taken when the parser asks.
    if not native.available()["scan"]:
        require_native_kernels()
    taken = []

    class Counted:
        def __init__(self, block: bytes, passes: tuple) -> None:
            self._ahead = native._scan.Ahead(block, passes)

        def result(self, index: int):
            taken.append(index)
            return self._ahead.result(index)

    monkeypatch.setattr(native, "ahead", Counted)
    streams = []  # each StepsAhead started, and how many of its streams' runs were read
    steps_ahead = native.steps_ahead

    def counted_steps(*arguments):
        steps = steps_ahead(*arguments)
        if steps is not None:
            streams.append((steps, steps.pending))
        return steps

    monkeypatch.setattr(native, "steps_ahead", counted_steps)
    blocks = _blocks(data, _line_boundaries(data, random.Random(name), 60))
    expected = _read_in_pieces(_parser(False), blocks)
    assert not taken and any(batch.records for batch in expected[1])
    parser = _parser(False)
    pieces, parsed = [], []
    for block, coming in zip(blocks, [*blocks[1:], None], strict=True):
        if coming is not None:
            parser.prepare(coming)
        for piece in parser.pieces(block):
            pieces.append(piece)
            parsed.append(parser.parse_block(piece))
    assert pieces == expected[0]
    assert _comparable(parsed) == _comparable(expected[1])
    assert len(taken) >= 10  # blocks took their passes from ahead
    if name == "interleaved_failures" or name.endswith("_continued"):  # and the streams their runs of step lines
        assert sum(read - steps.pending for steps, read in streams) >= 10  # (a plain file of step lines: its one)
