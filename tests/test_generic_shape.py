"""The generic reader's lines read a block at a time (a line's shape, parse/carriage.py) give exactly what reading
each line alone gives, whatever numbers the lines print: the shape is guessed from one line, so every line of it
with other numbers must read as that line's parse reads it, or go to the parser."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from benchmarks.formats import continued
from exporter.parse import LineParser, carriage
from exporter.parse.carriage import merged
from exporter.parse.formats.generic import parse, segment_shape
from tests.test_block_parse import _blocks, _comparable, _line_boundaries
from tests.test_carriage import block_path_runs, segment_kernel  # noqa: F401 - fixtures of the tests below

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
UNNAMED = (REAL / "generic_unnamed_trainers.log").read_bytes()
LLM_C = b"".join(UNNAMED.splitlines(keepends=True)[:3])  # karpathy/llm.c's train_gpt2cu step lines

NAMES = ["step", "iter", "it", "loss", "lm loss", "train/loss", "loss_train", "lr", "norm", "grad norm", "dt", "mfu",
         "epoch", "tok/s", "tokens_per_second", "time", "ms/step", "rank", "val loss", "eval", "x", "update"]
SEPARATORS = [" ", ": ", "=", " = ", ":"]
JOINTS = [" | ", ", ", " ", "  ", " || ", "; ", " - "]
UNITS = ["", "", "", "ms", "s", "%", " ms", " tok/s", "/100"]
# What a line of a shape may print where its line printed a number: numbers of every form parse and float() read.
PRINTED = ["0", "7", "42", "007", "123456789", "-3", "+4", "1.5", "-0.25", "5.", ".5", "0.0", "1e5", "2.5e-04",
           "3E+2", "nan", "inf", "-inf", "NaN", "1,234", "12,345,678", "9" * 20, "1e400", "0x10", "1_0"]


def _same(blocks: list[bytes]) -> tuple:
    """What the blocks give read by their lines' shapes, and read line by line in the same batches: the state's
    seconds lost to replayed steps depend on the batching (a step time of 1e-6 s counted or not), whichever way the
    lines are read."""
    by_shapes = _read(blocks)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LineParser, "_segment_records_found", lambda self: False)
        return by_shapes, _read(blocks)


def _read(blocks: list[bytes]) -> tuple:
    parser = LineParser()
    return _comparable([parser.parse_block(block) for block in blocks])


def _fuzzed_line(rng: random.Random) -> bytes:
    parts = [rng.choice(["", "", "iter ", "[train] ", "=> "])]
    names = [rng.choice(["step", "iter", "update"]), rng.choice(["loss", "lm loss", "train/loss"]),
             *rng.choices(NAMES, k=rng.randint(0, 5))]
    rng.shuffle(names)
    for index, name in enumerate(names):
        value = rng.choice(["12", "3.25", "0.5", "1e-3", "250", "-1.5", "7", "61/74", "1,234", "1,23", "0.5/2"])
        parts.append((rng.choice(JOINTS) if index else "") + name + rng.choice(SEPARATORS) + value
                     + rng.choice(UNITS))
    return "".join(parts).encode()


def _renumbered(line: bytes, rng: random.Random) -> bytes:
    """``line`` with each of its numbers printed otherwise (PRINTED), or kept."""
    return re.sub(rb"[0-9][0-9.eE+-]*", lambda _: rng.choice([*PRINTED, _.group().decode()]).encode(), line)


def test_a_line_of_the_shape_reads_as_parse_reads_it_whatever_its_numbers(block_path_runs):  # noqa: F811
    rng = random.Random(41)
    shaped = 0
    for _ in range(1000):
        line = _fuzzed_line(rng)
        shape = segment_shape(line)
        if shape is None:
            continue
        shaped += 1
        block = b"".join([line + b"\n"] * 3 + [_renumbered(line, rng) + b"\n" for _ in range(40)]) * 2
        blocks = _blocks(block, _line_boundaries(block, rng, 3))
        by_blocks, by_lines = _same(blocks)
        assert by_blocks == by_lines, line
    assert shaped > 80, "few lines had a shape: the comparison would prove little"
    # A block holding a line another format's byte test picks (``loss=``, ``iter ``) goes line by line: a third do not.
    assert sum(block_path_runs) > shaped // 3, "the block path hardly ran"


def test_the_shape_of_llm_c_lines():
    shape = segment_shape(LLM_C.splitlines()[0])
    assert shape is not None and shape.guessed
    assert shape.pieces[:3] == (b"step   ", b"/", b" | loss ")
    assert [name for _, name in shape.targets] == ["step", "total_steps", "loss", "grad_norm", "learning_rate",
                                                   "step_time_seconds", "", "throughput"]
    assert shape.scales[5] == 1e-3 and dict(shape.units) == {"throughput": "tok/s"}
    # The MFU printed before ``% bf16 MFU`` is no value parse reads: the shape reads none there.
    assert "mfu" not in str(parse(LLM_C.splitlines()[0].decode()))


@pytest.mark.parametrize("line", [
    b"12 loss 3.5",  # begins with a number: a prefix the records found after it would drop
    b"step 5 loss 1,234",  # parse reads one number, the shape two
    b"step 5 | loss 1,23",  # the same, printing 1,234 with the same shape
    b"val loss 3.5 step 4",  # an evaluation's: parse reads none
    b"loss nan step 4",  # no number where parse reads the loss
    b"epoch 0.5 step 3 loss 2.0",
])
def test_lines_without_a_shape(line):
    shape = segment_shape(line)
    if line.startswith(b"epoch"):  # a shape, but only if a step-named fraction reads as it reads a count
        assert shape is None or shape.targets[0] == (False, "epoch")
    else:
        assert shape is None


def _llm_c_log(copies: int) -> bytes:
    """llm.c's real step lines continued (steps on, each copy), its NaN lines, an evaluation's, other trainers'."""
    counter = re.compile(rb"(step +)(\d+)(/)(\d+)")
    return continued(LLM_C, counter, copies, whole=True) + UNNAMED + continued(LLM_C, counter, copies // 2, whole=True)


@pytest.mark.parametrize("name", ["llm_c", "widths"])
def test_blocks_give_what_every_line_gives(name, segment_kernel, block_path_runs, monkeypatch):  # noqa: F811
    merges = []
    monkeypatch.setattr(carriage, "merged", lambda *found: merges.append(found) or merged(*found))
    data = _llm_c_log(400)
    if name == "widths":  # llm.c pads the step to four digits: from 1 on, at 10, 100 and 1000 a line of another shape
        data = re.sub(rb"step +(\d+)/", lambda found: b"step %4d/" % (int(found.group(1)) - 18), data)
        assert all(re.search(rb"\nstep%s\d+/" % spaces, data) for spaces in (b"    ", b"   ", b"  ", b" "))
    rng = random.Random(name)
    for blocks in ([data], *(_blocks(data, _line_boundaries(data, rng, count)) for count in (7, 60))):
        by_shapes, by_lines = _same(blocks)
        assert by_shapes == by_lines
    assert sum(block_path_runs) >= 20
    # A block where the step gets a digit more reads the lines of both widths by their shapes.
    assert bool(merges) == (name == "widths")
