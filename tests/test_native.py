"""The compiled kernels (exporter/native/*.c) give exactly what their Python twins define.

Each kernel is fed the same inputs as its twin: real logs, and fuzzed ones full of the
tokens and bytes that parsers get wrong (non-finite numbers, units, underscores, binary
junk, huge numbers, blocks cut anywhere), with the MindFormers field table and with a
table of other punctuation. Floats are compared bit for bit. ``make sanitize`` runs this
file against a build with AddressSanitizer and UndefinedBehaviorSanitizer.
"""

from __future__ import annotations

import errno
import gc
import itertools
import math
import random
import re
import struct
import sys
from array import array
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import pytest

from benchmarks.generate import worker_log_lines
from exporter import native
from exporter.native import _detectors, _scan, _step_fields  # the compiled kernels themselves
from exporter.native import detectors as detectors_twin
from exporter.native import scan as scan_twin
from exporter.native import step_fields as step_fields_twin
from exporter.native.step_fields import Kind
from exporter.parse.formats import (
    BUILTIN_FORMATS,
    deepspeed,
    fairseq,
    jsonl,
    keyvalue,
    megatron,
    mindformers,
    mindformers_static,
    mmengine,
    mmengine_scalars,
    nanogpt,
    nemo,
    paddlenlp,
    torchtitan,
)
from exporter.parse.formats.hf_trainer import segment_shape
from exporter.parse.ranks import PREFIX_ANCHORS
from exporter.parse.scan import anchors_for
from exporter.state.detectors import DetectorConfig, kernel_config

REPO = Path(__file__).resolve().parent.parent


def _bits(value):
    """A value with its floats as their bits: NaN equals NaN, 0.0 differs from -0.0."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_bits(item) for item in value]
    if isinstance(value, dict):
        return "dict", [(key, _bits(item)) for key, item in value.items()]
    if isinstance(value, array):  # a series' values (an array('d')): its bytes are its floats' bits
        return "array", value.typecode, value.tobytes()
    return value


def _both_readers(table):
    """The compiled reader of ``table`` and its twin: a reference line each reads alike."""
    return _step_fields.StepReader(table), step_fields_twin.StepReader(table)


def _taken_latest(reader):
    """The run a reader holds, taken: its steps, its total, each field's latest and each named value's name and
    value."""
    steps, total, fields, named = reader.take()
    return list(steps), total, [field[0] for field in fields], [(name, value) for name, value, *_ in named]


def test_every_kernel_is_built_here():
    # A test run without them would compare the twins with themselves: CI builds them.
    assert native.available() == {"scan": True, "step_fields": True, "detectors": True}


# --- kernel 1: the anchor scanner -----------------------------------------------------------

ALL_ANCHORS = sorted(anchors_for(BUILTIN_FORMATS) or ())


def _scan_kernel(anchors, line_starts, offsets=None, simd=True):
    """One scan kernel over all of ``anchors``, fingerprinted as the door does unless ``offsets`` says."""
    anchors = tuple(sorted(set(anchors)))
    offsets = offsets or tuple(map(scan_twin.fingerprint_offset, anchors))
    return _scan.Scanner(anchors, tuple(line_starts), offsets=offsets, commonness=scan_twin.COMMONNESS, simd=simd)


def _scan_both(anchors, data, line_starts=PREFIX_ANCHORS):
    """The native scan, checked against the twin, with and without its SIMD loop."""
    compiled = _scan_kernel(anchors, line_starts).scan(data)
    bytewise = _scan_kernel(anchors, line_starts, simd=False).scan(data)
    twin = native.scanner(anchors, line_starts, "regex").scan(data)
    assert compiled == twin == bytewise, (anchors[:5], data[:200])
    # Through the door: beyond native.KERNEL_ANCHORS anchors, several kernels answering as one.
    assert native.scanner(anchors, line_starts, "native").scan(data) == twin
    _scan_segments_both(anchors, data, line_starts)
    return compiled


def _scan_segments_both(anchors, data, line_starts):
    """scan_segments, native (with and without SIMD, through the door) against the twin: a carriage return ends a
    line too; anchors or line starts holding a line break are refused by both."""
    scanners = [_scan_kernel(anchors, line_starts), _scan_kernel(anchors, line_starts, simd=False),
                native.scanner(anchors, line_starts, "native")]
    twin = native.scanner(anchors, line_starts, "regex")
    if any(b"\r" in text or b"\n" in text for text in (*anchors, *line_starts)):
        for scanner in (*scanners, twin):
            with pytest.raises(ValueError, match="line break"):
                scanner.scan_segments(data)
        return
    expected = twin.scan_segments(data)
    assert expected[0] == data.count(b"\n")
    for scanner in scanners:
        assert scanner.scan_segments(data) == expected, (anchors[:5], data[:200])


def test_scanner_on_a_generated_worker_log_cut_anywhere():
    data = "\n".join(worker_log_lines(30_000, seed=11)).encode() + b"\n"
    rng = random.Random(1)
    found = 0
    for _ in range(40):
        start = rng.randrange(len(data))
        block = data[start:start + rng.choice([1, 31, 32, 33, 64, 1000, 70_000])]
        found += len(_scan_both(ALL_ANCHORS, block)[1])
    assert found > 0


def test_scanner_on_fuzzed_blocks():
    rng = random.Random(2)
    alphabet = b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789[]{}:,.'\"=\n\r\x00\xff\xe2\x80"
    for round_number in range(300):
        anchor_count = rng.choice([1, 2, 5, 8, 9, 47, 80, 150])
        anchors = sorted({bytes(rng.choice(alphabet.replace(b"\n", b"")) for _ in range(rng.randint(3, 9)))
                          for _ in range(anchor_count)} | set(rng.sample(ALL_ANCHORS, min(anchor_count, 10))))
        pieces = []
        for _ in range(rng.randint(0, 40)):
            kind = rng.random()
            if kind < 0.3:
                pieces.append(rng.choice(anchors))
            elif kind < 0.4:
                pieces.append(rng.choice(anchors)[: rng.randint(1, 3)])  # a fingerprint without its anchor
            else:
                pieces.append(bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 80))))
        data = b"".join(pieces)
        if round_number % 2:
            data += b"\n"
        _scan_both(anchors, data, line_starts=(b"[rank", rng.choice(anchors)))


def test_fingerprints_change_the_speed_of_the_scan_never_its_results():
    rng = random.Random(5)
    data = "\n".join(worker_log_lines(3000, seed=13)).encode() + b"\n"
    twin = native.scanner(ALL_ANCHORS, PREFIX_ANCHORS, "regex").scan(data)
    for _ in range(20):
        offsets = tuple(rng.randrange(len(anchor) - 2) for anchor in ALL_ANCHORS)
        for simd in (True, False):
            assert _scan_kernel(ALL_ANCHORS, PREFIX_ANCHORS, offsets, simd).scan(data) == twin


def test_anchors_sharing_one_fingerprint_are_each_found():
    # One fingerprint, many anchors: the kernel's table chains them, and every one must be tried.
    anchors = sorted({b"abc%d" % digit for digit in range(10)} | {b"Xabc", b"abcabc", b"zzabc"})
    offsets = tuple(anchor.index(b"abc") for anchor in anchors)
    lines = [b"abc", b"abc ", b"ab abc", *(b"x " + anchor + b" y" for anchor in anchors), b"Xab", b"zzab c"]
    data = b"\n".join(lines) + b"\n"
    twin = native.scanner(anchors, (), "regex").scan(data)
    assert len(twin[1]) == len(anchors)
    for simd in (True, False):
        assert _scan_kernel(anchors, (), offsets, simd).scan(data) == twin


def test_fingerprint_offset_avoids_word_edges_and_common_bytes():
    # " by" would be three rare bytes alone; as the start of a word it is in every other line.
    assert scan_twin.fingerprint_offset(b"is killed by signal: ") != b"is killed by signal: ".index(b" by")
    assert b"NVRM: Xid"[scan_twin.fingerprint_offset(b"NVRM: Xid"):][:3] in {b"NVR", b"VRM"}
    # Where two words meet, a space is no boundary: "ory" of "memory" is in every other device log line.
    assert b"out of memory"[scan_twin.fingerprint_offset(b"out of memory"):][:3] == b"f m"
    assert all(0 <= scan_twin.fingerprint_offset(anchor) <= len(anchor) - 3 for anchor in ALL_ANCHORS)


@pytest.mark.parametrize(("offsets", "commonness", "error"), [
    ((0,), scan_twin.COMMONNESS, "one per anchor"),
    ((0, 1, 0), scan_twin.COMMONNESS, "one per anchor"),
    ((0, -1), scan_twin.COMMONNESS, "one per anchor"),
    ((0, 0), b"\x01" * 255, "256 bytes"),
])
def test_scan_kernel_refuses_bad_fingerprints(offsets, commonness, error):
    with pytest.raises(ValueError, match=error):
        _scan.Scanner((b"abc", b"step:["), (), offsets=offsets, commonness=commonness)
    with pytest.raises(TypeError, match="required"):
        _scan.Scanner((b"abc",), ())


def test_scanner_edges():
    anchors = [b"abc", b"step:[", b"bcd"]
    for data in (b"", b"abc", b"ab", b"\nabc\n", b"x" * 31 + b"abc", b"x" * 32 + b"abc", b"x" * 61 + b"abcd\n",
                 b"abcabcabc\nbcd", b"\n" * 100, b"step:" + b"[" * 40, b"\x00abc\x00\n\xffbcd"):
        _scan_both(anchors, data)
    assert native.scanner(anchors, (), "native").scan(bytearray(b"1 abc\n2\n3 bcd\n")) == (3, [0, 8], [])


def test_scanner_on_runs_of_anchored_lines():
    lines = [line.encode() for line in worker_log_lines(3000, seed=12)]
    steps = [line for line in lines if b"step:[" in line]
    data = b"\n".join(lines[:500] + steps * 3 + lines[500:] + steps) + b"\n"  # consecutive, and far into the block
    newlines, starts, _ = _scan_both(ALL_ANCHORS, data)
    assert len(starts) > 3 * len(steps) and newlines == data.count(b"\n")


def test_scanner_refuses_anchors_too_short_for_its_fingerprint():
    with pytest.raises(ValueError):
        native.scanner([b"ab"], (), "native")
    with pytest.raises(ValueError):
        native.scanner([b""], (), "regex")


def test_a_scanner_initialised_again_with_bad_anchors_stays_as_it_was():
    given = [b"abc" + bytes([65 + n]) * n for n in range(1, 40)]  # abcB, abcCC, abcDDD, ...
    scanner = _scan_kernel(given, [b"[rank"])
    data = b"x abcBB y\n[rank1]: abcCCC\nabcB\n"
    before = scanner.scan(data)
    assert before == native.scanner(given, [b"[rank"], "regex").scan(data) == (3, [0, 10, 26], [10])
    # Nothing but the scanner holds its anchors now: were they let go, its table would point into freed memory.
    anchors = [anchor.hex() for anchor in scanner.anchors]
    del given
    with pytest.raises(ValueError, match="three bytes"):
        scanner.__init__([b"bytes" + bytes([48 + n]) for n in range(40)] + [b"ab"], (), offsets=(0,) * 41,
                         commonness=scan_twin.COMMONNESS)
    gc.collect()
    assert [anchor.hex() for anchor in scanner.anchors] == anchors
    assert scanner.scan(data) == before


# --- kernel 2: step lines read by a field table ---------------------------------------------

MINDFORMERS = mindformers.PYNATIVE_RECORD.kernel_table
# The same kernel with other punctuation: nothing of MindFormers' grammar is in the C.
OTHER = (b"(", b")", b";", b"=", b"it", (b"<", b">|"),
         ((b"loss", Kind.FLOAT, 1, b"", b""), (b"rate", Kind.FLOAT, 0, b"-", b""),
          (b"t", Kind.DURATION, 0, b"", b"us"), (b"tok", Kind.NUMBER_WITH_UNIT, 1, b"", b""),
          (b"gn", Kind.FLOAT, 1, b"NaN", b"")))

TOKENS = ["1.0", "2.345678", "10.483969", "nan", "NaN", "inf", "-inf", "+inf", "Infinity", "infinity", "1e5",
          "1E-5", "4.000000e-05", "1_000", "1__0", "5.", ".5", "+.5", ".", "-", "e5", "1e", "1e999", "-0.0",
          "0x10", "12345678901234567890.5", "0." + "1" * 70, "", " ", "  7  ", "850ms", "851 ms", "1.2s", "5sec",
          "5 seconds", "3us", "2MS", "nanms", "inf s", "12.34T", "12.20T", "1.5 samples/s", "99%", "nanT", "infT",
          "5eT", "1,234", "7 x", "3.0\t", "\x1f4.5", "1\x002", "1,234.5", "12,345,678", "1,23", "1,2345", ",123",
          "1,234ms", "-1,000.25", "1,000T", "1,000,0"]
NAMES = ["loss", "lr", "grad_norm", "per_step_time", "throughput", "load_balancing_loss", "mtp_1_loss",
         "loss_scale", "_x", "a1", "1bad", "mtp_loss", "loss", "rate", "t", "tok", "gn", "step"]


def _fuzzed_record_line(rng: random.Random, punctuation: tuple[str, ...]) -> str:
    opener, closer, pair, name, step_name = punctuation
    space = lambda: rng.choice(["", " ", "  ", "\t"])  # noqa: E731
    fields = [f"{rng.choice(NAMES)}{space()}{name}{space()}{rng.choice(TOKENS)}" for _ in range(rng.randint(0, 9))]
    if rng.random() < 0.1:
        fields.append(f"{rng.choice(NAMES)}{name}")
    body = pair.join(fields)
    step = rng.choice(["1", "42", "  100", "007", "99999999999999999", "999999999999999999", "1234567890123456789",
                       "123456789012345678901", "x"])
    total = rng.choice(["1000", "60001", "", "0001234567890123456789"])
    record = (f"{opener}{space()}{step_name}{name}{space()}[{space()}{step}{space()}/{space()}{total}{space()}]"
              f"{space()}{pair}{body}{space()}{closer}")
    prefix = rng.choice(["", "[INFO] 2026-06-09 10:20:40 [mindformers/core/callback/callback.py:231] _print_log: ",
                         f"{opener} not a record {closer} ", "[default3]:", "[rank1]: ", "<rank1>|", "[trainer]:",
                         f"{opener} {step_name}{name}[ 1/ 2] ", "é "])
    suffix = rng.choice(["", " trailing", f" {opener} {step_name}{name}[ 2/ 3]{pair} loss{name} 9.0 {closer}", closer,
                         f" {opener}"])
    return prefix + record + suffix


def _record_lines(table: tuple, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    punctuation = tuple(part.decode() for part in table[:5])
    generated = worker_log_lines(20_000, seed=4) if table is MINDFORMERS else ()
    lines = [line.encode() for line in generated if "step:[" in line]
    lines += [_fuzzed_record_line(rng, punctuation).encode("utf-8") for _ in range(6000)]
    lines += [b"{ step:[ 1/ 2], loss: 2.0, \xff }", b"{ step:[ 1/ 2], loss: 2.0 }\x80", b"no record", b"{}",
              b"{ step:[1/2],}", b"(it=[1/2]; loss=1)"]
    rng.shuffle(lines)
    return lines


def _read_in_runs_by_both(table: tuple, lines: list[bytes]) -> tuple[int, int, int]:
    """The lines read in runs of random limits by the kernel and its twin, compared run by run and take by take
    (a few runs taken as one, as a block's are): how many runs of more than a line, rows and takes there were."""
    data = b"\n".join(lines) + b"\n"
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    rng = random.Random(5)
    compiled, twin = _step_fields.StepReader(table), step_fields_twin.StepReader(table)
    index = runs = rows = takes = 0
    while index < len(starts):
        limit = rng.choice([0, 1, 2, 7, 100, 10_000])
        taken = compiled.read(data, starts, index, limit)
        assert taken == twin.read(data, starts, index, limit), lines[index:index + taken + 1]
        assert len(compiled) == len(twin)
        if rng.random() < 0.2:
            assert _bits(compiled.take()) == _bits(twin.take()), lines[index - 20:index + taken + 1]
            takes += 1
        runs += taken > 1
        rows += taken
        index += taken or 1
    assert _bits(compiled.take()) == _bits(twin.take())
    return runs, rows, takes


@pytest.mark.parametrize("table", [MINDFORMERS, OTHER], ids=["mindformers", "other-punctuation"])
def test_a_run_declines_only_lines_the_per_line_reader_must_take(table):
    """Declined: not ASCII, tagged as another stream, a step beyond 18 digits; the per-line reader takes any, and
    reads every line as the twin does (the compiled reader's record, the twin's where it declines). (Each line
    read alone: a step below the one read before it since the last take is declined too, below.)"""
    tag_open, tag_close = (re.escape(part) for part in table[5])
    tagged = re.compile(tag_open + rb"\w+" + tag_close)
    reader = native.step_reader(table)
    declined = 0
    for line in _record_lines(table, seed=6):
        reader.take()
        taken = reader.read(line + b"\n", [0], 0, 1)
        text = line.decode("utf-8", "replace")
        record = step_fields_twin.read_record(table, text)
        assert _bits(native.read_record(table, text)) == _bits(record)  # the per-line reader: compiled or twin
        if taken:
            assert record is not None
        elif record is not None:
            assert not line.isascii() or tagged.match(line) or re.search(rb"\d{19}", line), line
            declined += 1
    assert declined > 100


@pytest.mark.parametrize("make_reader", [native.step_reader, step_fields_twin.StepReader], ids=["native", "twin"])
def test_a_run_ends_where_the_step_goes_back(make_reader):
    """A restart (the step going back) ends a run, also across runs not taken yet: a batch's steps never go back."""
    data = b"".join(b"{ step:[ %d/ 9], loss: 2.5 }\n" % step for step in (4, 5, 5, 3, 4))
    starts = [index * 28 for index in range(5)]
    assert all(data[start:start + 1] == b"{" for start in starts)
    reader = make_reader(MINDFORMERS)
    assert reader.read(data, starts, 0, 2) == 2
    assert reader.read(data, starts, 2, 10) == 1  # 5 again is no restart, 3 is
    assert reader.take()[0] == [4, 5, 5]  # a step printed twice: no range
    assert reader.read(data, starts, 3, 10) == 2  # after a take, the run starts afresh
    assert reader.take()[0] == range(3, 5)  # steps one apart: a range


@pytest.mark.parametrize("make_reader", [native.step_reader, step_fields_twin.StepReader], ids=["native", "twin"])
def test_a_run_of_steps_one_difference_apart_is_a_range(make_reader):
    """Steps a log interval apart are a range (no int object a line), a series' steps that same range when every
    line printed its value, a list of its own when one did not; steps that do not go up by one difference, a list."""
    def run(steps, losses):
        data = b"".join(b"{ step:[ %d/ 900], %s }\n" % (step, loss and b"loss: " + loss or b"lr: 0.1")
                        for step, loss in zip(steps, losses, strict=True))
        starts = [0]
        for line in data.splitlines(keepends=True)[:-1]:
            starts.append(starts[-1] + len(line))
        reader = make_reader(MINDFORMERS)
        assert reader.read(data, starts, 0, len(starts)) == len(starts)
        steps, _, fields, _ = reader.take()
        return steps, dict(zip((field[0].decode() for field in MINDFORMERS[6]), fields, strict=True))["loss"][2]

    steps, loss_steps = run([10, 20, 30, 40], [b"2.5"] * 4)
    assert steps == range(10, 50, 10) and loss_steps is steps
    steps, loss_steps = run([10, 20, 30, 40], [b"2.5", b"", b"2.4", b"2.3"])  # a line without a loss
    assert steps == range(10, 50, 10) and loss_steps == [10, 30, 40]
    steps, loss_steps = run([10, 20, 25], [b"2.5"] * 3)
    assert steps == loss_steps == [10, 20, 25] and loss_steps is not steps  # a list each: a batch grows them apart


def test_the_mindformers_reference_line():
    line = (b"[INFO] 2026-06-09 10:20:40 [mindformers/core/callback/callback.py:231] _print_log: { step:[    1/60001], "
            b"loss:  10.483969, per_step_time:    851ms, lr: 4.000000e-05, grad_norm: NaN, throughput:  12.10T, "
            b"load_balancing_loss: 0.001300, mtp_1_loss:  10.983969 }")
    reader = native.step_reader(MINDFORMERS)
    assert reader.read(line, [0], 0, 5) == 1 and len(reader) == 1
    steps, total, fields, named = reader.take()
    by_name = dict(zip((field[0].decode() for field in MINDFORMERS[6]), fields, strict=True))
    assert (list(steps), total, len(reader)) == ([1], 60001, 0)
    # A series' values: an array('d'); its steps the run's range (every line printed it).
    assert by_name["loss"] == (10.483969, None, range(1, 2), array("d", [10.483969]))
    assert by_name["loss"][2] is steps
    assert by_name["grad_norm"] == (None, None, [], array("d"))  # NaN: not obtained this step
    assert (by_name["lr"][0], by_name["per_step_time"][0], by_name["throughput"][:2]) == (4e-05, 0.851, (12.1, "T"))
    assert named == [("load_balancing_loss", 0.0013, 1, 0, 0, None), ("mtp_1_loss", 10.983969, 1, 0, 1, None)]
    # A series: goodput and the slowdown detector.
    assert by_name["per_step_time"][2:] == (range(1, 2), array("d", [0.851]))
    series, latest_only = (None, None, [], array("d")), (None, None, None, None)
    empty = (series, series, latest_only, series, latest_only)  # loss, grad_norm, lr, per_step_time, throughput
    assert reader.take() == ([], None, empty, [])


@pytest.mark.parametrize("reader", [_step_fields.StepReader, step_fields_twin.StepReader], ids=["native", "twin"])
def test_a_thousands_separator_is_part_of_the_value(reader):
    # A comma followed by exactly three digits and a non-digit cannot start a pair (a name starts
    # with a letter): 1,234.5 is 1234.5, not 1.0; '1,23' and '1,2345' end at their comma.
    data = (b"{ step:[1/9], loss: 1,234.5, lr: 1,000, mtp_1_loss: 12,345,678 }\n"
            b"{ step:[2/9], loss: 1,23, x: 5 }\n{ step:[3/9], loss: 1,2345, y: 1,000}\n")
    compiled = reader(MINDFORMERS)
    assert compiled.read(data, [0, data.index(b"\n") + 1, data.index(b"{ step:[3")], 0, 3) == 3
    _steps, _total, fields, named = compiled.take()
    by_name = dict(zip((field[0].decode() for field in MINDFORMERS[6]), fields, strict=True))
    assert by_name["loss"][3] == array("d", [1234.5, 1.0, 1.0])
    assert by_name["lr"][0] == 1000.0
    assert [(name, value) for name, value, *_ in named] == [("mtp_1_loss", 12345678.0), ("x", 5.0), ("y", 1000.0)]


def test_named_values_count_lines_and_remember_where_they_first_appeared():
    data = b"{ step:[1/9], a: 1, b: 2, a: 3 }\n{ step:[2/9], c: 4, b: 5 }\n{ step:[3/9], zz: junk }\n"
    for reader in _both_readers(MINDFORMERS):
        assert reader.read(data, [0, 33], 0, 9) == 2 and reader.read(data, [0, 33, 60], 2, 9) == 1
        assert reader.take()[3] == [("a", 3.0, 1, 0, 0, None), ("b", 5.0, 2, 0, 1, None), ("c", 4.0, 1, 1, 0, None)]


@pytest.mark.parametrize("table", [
    (b"{{", b"}", b",", b":", b"step", (b"[", b"]:"), ()),
    (b"{", b"}", b"a", b":", b"step", (b"[", b"]:"), ()),
    (b"{", b"}", b",", b" ", b"step", (b"[", b"]:"), ()),
    (b"{", b"}", b",", b":", b"step", (b"[", b"]:"), ((b"x", 9, 0, b"", b""),)),
    (b"{", b"}", b",", b":", b"step", (b"[", b"]:"), ((b"x", Kind.DURATION, 0, b"", b"hours"),)),
    (b"{", b"}", b",", b":", b"step", (b"[", b"]:"), ((b"x", 1, 0, b"", b""), (b"x", 1, 1, b"", b""))),
])
def test_both_refuse_a_table_they_cannot_read_alike(table):
    for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
        with pytest.raises(ValueError):
            reader(table)


# The pairs grammar (``step=12/30 loss=2.5 lr=0.01``): keyvalue's table, and another with other punctuation.
KEYVALUE = keyvalue.RECORD.kernel_table
PADDLENLP = paddlenlp.RECORD.kernel_table  # ``name: value``: spaces after the name separator, a reciprocal kind
OTHER_PAIRS = (b"", b"", b"&", b":", (b"it", b"iter"), (b"<", b">|"),
               ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"l", Kind.FLOAT, 1, b"", b"", 0),
                (b"t", Kind.DURATION, 0, b"", b"us", 1), (b"tok", Kind.NUMBER_WITH_UNIT, 1, b"", b"", 2),
                (b"gn", Kind.FLOAT, 1, b"NaN", b"", 3)), 0)
OTHER_SPACED = (b"", b"", b";&", b"= ", (b"it", b"iter"), (b"<", b">|"),
                ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"rate", Kind.RECIPROCAL, 1, b"", b"", 1),
                 (b"t", Kind.DURATION, 0, b"", b"us", 2), (b"l", Kind.FLOAT, 1, b"", b"", 0)), 0)
# DeepSpeed's: ``/`` ends a value, values printed as lists, a unit renamed away, names of which a record prints one.
DEEPSPEED = deepspeed.RECORD.kernel_table
# torchtitan's: no separator (values end at spaces), ANSI escapes, a value's second item in parentheses, ``validate``
# before a step making no record; and the last options with other punctuation.
TORCHTITAN = torchtitan.RECORD.kernel_table
OTHER_LAST = (b"", b"", b";", b"=", (b"it", b"iter"), (b"<", b">|"),
              ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"t", Kind.DURATION, 0, b"", b"ms", 1)), 0,
              (b"", b"", ((b"mem", b"mem_mb", b"MB"), (b"pct", b"pct", b"%")), b"", (), b"", (), ((b"mem", b"pct"),),
               (), (), 1, b"{}", (b"eval", b"val")))
# fairseq's: a lead (``| epoch 001:``) before the pairs, its counter a named value; and a lead with other punctuation,
# spaced pairs and words before a step's name.
FAIRSEQ = fairseq.RECORD.kernel_table
OTHER_PAIRS_LEAD = (b"", b"", b";|", b": ", (b"it", b"iter"), (b"<", b">|"),
                    ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"t", Kind.DURATION, 0, b"", b"ms", 1)), 0,
                    (b"", b"", (), b"", (), b"", (), (), (), (), 0, b"", (b"eval",), b"Round", b"round_no", b""))
PAIRS_TABLES = [KEYVALUE, OTHER_PAIRS, PADDLENLP, OTHER_SPACED, DEEPSPEED, TORCHTITAN, OTHER_LAST, FAIRSEQ,
                OTHER_PAIRS_LEAD]
PAIRS_IDS = ["keyvalue", "other-punctuation", "paddlenlp", "other-spaced", "deepspeed", "torchtitan", "other-last",
             "fairseq", "other-pairs-lead"]
PAIR_NAMES = ["step", "global_step", "iteration", "it", "iter", "loss", "l", "lr", "learning_rate", "grad_norm",
              "num_updates", "nll_loss", "clip", "Round", "round_no",
              "interval_steps_per_second", "interval_samples_per_second", "rate", "epoch",
              "gnorm", "step_time", "per_step_time", "time_per_step", "throughput", "t", "tok", "gn", "mtp_1_loss",
              "acc", "_x", "a1", "1bad", "x.step", "xstep", "skipped", "CurrSamplesPerSec", "MemAllocated", "mom",
              "RunningAvgSamplesPerSec", "micro_step", "memory", "memory_percent", "mfu", "tps", "wps", "tflops",
              "mem", "pct"]
ESCAPES = ["\x1b[31m", "\x1b[38;2;180;60;0m", "\x1b[m", "\x1b[39m", "\x1b[", "\x1b", "\x1bx", "\x1b[3", "\x1b[1;m"]
STEPS = ["1", "42", "007", "3/30", "12/", "/3", "x", "1.5", "999999999999999999", "1234567890123456789",
         "5/1" + "0" * 19, "1,000", " 5", "  6"]


def _fuzzed_pairs_line(rng: random.Random, table: tuple) -> str:
    separator = table[3].decode()
    breaks = [" ", "  ", "\t", *table[2].decode(), ", ", "=", ":"]
    step_name, loss_name = table[4][0].decode(), table[6][0][0].decode()
    last = table[8][10:13] if len(table) == 9 and len(table[8]) >= 13 else (0, b"", ())  # escapes, item brackets, ...
    led = len(table) == 9 and len(table[8]) == 16
    lead, close = (table[8][13].decode(), table[8][15].decode()) if led else ("", "")
    words = [word.decode() for word in last[2]]
    before_step = rng.choice(["", ""] + [f"{word} " for word in words] + [f"x{word} " for word in words]
                             + [f"{word}  " for word in words] + [f"{word}." for word in words][:1])
    pairs = [f"{before_step}{step_name}{separator}{rng.choice(STEPS)}", f"{loss_name}{separator}{rng.choice(TOKENS)}"]
    pairs = pairs if rng.random() < 0.6 else []  # a record's step and required field, most of the time
    open_, shut = (last[1].decode() or "()")[:1], (last[1].decode() or "()")[1:]
    for _ in range(rng.randint(0, 6)):
        name = rng.choice(PAIR_NAMES)
        value = rng.choice(STEPS) if name in ("step", "global_step", "iteration", "it", "iter") else rng.choice(TOKENS)
        value = rng.choice([value] * 6 + [f"[{value}, {value}]", f"[{value}]", f"[({value}", "[", "[]", f"{value}GB",
                                          f"[{value}GB]", "GB", f"{value}GiB{open_}{value}%{shut}",
                                          f"{value}MB{open_}{value}%{shut}", f"{value}{open_}{value}{shut}",
                                          f"{open_}{value}{shut}", f"5{open_}{shut}", f"5{open_}3{shut}x",
                                          f"5{open_}{open_}3{shut}{shut}"])
        joint = rng.choice([separator] * 8 + ["", " ", separator * 2, separator[0], separator + "  ", separator + "\t"])
        pairs.append(f"{name}{joint}{value}")
    line = "".join(f"{pair}{rng.choice(breaks)}" for pair in pairs)
    prefix = rng.choice(["", "[INFO] ", "[default3]:", "<rank1>|", "é ", "Epoch 1 ", "."])
    if lead and rng.random() < 0.9:  # the lead, most often before the pairs (fairseq's), or a lead that is none
        counter = rng.choice(["001", "1", "0", "12", "9" * 19, "x", ""])
        counted = close + rng.choice(["    550 / 1891 ", "1/2", " 3 /4", "   0%| | 50/11265 [", " x / 3 ", " 5 / ",
                                      " 1 / " + "9" * 19 + " ", " " + "9" * 19 + " / 3 ", ""])
        printed = rng.choice([f"| {lead} {counter}{counted}", f"{lead} {counter} ", f"{lead}\t{counter}{counted}",
                              f"{lead}{counter}{counted} ", f"x{lead} {counter}{counted}", f"{lead}  {counter}",
                              f"{lead} {counter},"])
        cut = 0 if rng.random() < 0.8 else rng.randint(0, len(line))
        line = line[:cut] + printed + line[cut:]
    line = prefix + line + rng.choice(["", " trailing", ",", "|x"])
    for _ in range(rng.randint(0, 4) if last[0] or rng.random() < 0.1 else 0):  # escapes anywhere, a few broken
        cut = rng.randint(0, len(line))
        line = line[:cut] + rng.choice(ESCAPES) + line[cut:]
    return line


def _lead(table: tuple) -> bytes:
    """A lead the table reads (none: the table has none), printed before a line's pairs."""
    if len(table) != 9 or len(table[8]) != 16:
        return b""
    lead, _, close = table[8][13:16]
    return b"| " + lead + b" 001" + (close + b"    550 / 1891 " if close else b" ")


def _pairs_lines(table: tuple, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    real = {id(PADDLENLP): "paddlenlp.log", id(DEEPSPEED): "healthy/deepspeed_dschat_sft_opt1.3b.log",
            id(TORCHTITAN): "healthy/torchtitan_qwen3_14b_run54.log", id(FAIRSEQ): "fairseq_plain.log"}
    path = REPO / "tests" / "fixtures" / "real" / real.get(id(table), "torchrun_ddp_nan.log")
    console = path.read_bytes().splitlines()
    lines = [_fuzzed_pairs_line(rng, table).encode("utf-8") for _ in range(8000)]
    lines.append(b"step=1 loss=2 " + b"".join(b"x%d=1 " % number for number in range(70)))  # more pairs than it reads
    lines += console
    rng.shuffle(lines)
    # Runs: fuzzed lines at steps going up, the real console's lines in order with their prefix and without.
    step_name, separator = table[4][0], table[3]
    lines += [_lead(table) + _fuzzed_pairs_line(rng, table).encode("utf-8").replace(step_name + separator,
                                                                                    b"_" + step_name, 1)
              + b" " + step_name + separator + b"%d" % (step // 3) for step in range(3000)]
    return lines + [line.split(b"]:", 1)[-1] for line in console] * 5 + console


@pytest.mark.parametrize("table", PAIRS_TABLES, ids=PAIRS_IDS)
def test_a_line_printing_the_names_of_the_line_before_is_read_as_the_twin_reads_it(table):
    """The kernel reads a line printing the names of the line before it after the same bytes (its joints: a space, a
    separator and a space, ...) without looking its names up again: each line here follows such a line and differs
    from it by a little (a pair more, a name longer, a space more, a value missing, a separator, another joint), so a
    shortcut taken where the line is not of the same shape shows. Joints after which the loop finds other names or
    none (a name byte, a ``.``) are among them. (A table with a lead: its lines print it first.)"""
    step_name, separator = table[4][0], table[3]
    lead = _lead(table)
    names = [step_name, table[6][0][0], *(field[0] for field in table[6][1:4]), b"mtp_1_loss"]
    rng = random.Random(7)
    variants = [b"", b" extra" + separator + b"1", b" " + names[1] + separator + b"3", b" ", b"\t", b",", b"|x",
                table[2][:1], table[2][:1] + b"y" + separator + b"2"]
    joints = [b" ", b" ", b" ", table[2][:1] + b" ", table[2][:1], b"  ", b" [x] ", b" a.", b" .", b"x"]
    lines = []
    for step in range(1, 2500):
        pairs = [name + separator + (b"%d" % step if name == step_name else rng.choice(TOKENS).encode())
                 for name in names[: rng.randint(2, len(names))]]
        start, joint = rng.choice([b"", b"", b"[INFO] ", b"a.", b"| ", b"x" + separator + b"a "]), rng.choice(joints)
        lines.append(lead + start + joint.join(pairs))
        changed = list(pairs)
        where = rng.randrange(len(changed))
        change = rng.randrange(6)
        if change == 0:
            changed[where] = changed[where].replace(separator, b"x" + separator, 1)  # a name one byte longer
        elif change == 1:
            changed[where] = changed[where].replace(separator, separator + b" ", 1)  # the value after a space
        elif change == 2:
            changed[where] = changed[where].split(separator)[0] + separator  # no value
        elif change == 3:
            changed[where] = b" " + changed[where]  # two spaces before a pair
        elif change == 4 and where > 0:
            changed[where] = rng.choice(joints) + changed[where]  # another joint before a pair
        elif change == 5:
            start = start.replace(b"a ", b"eval ")  # a word before the step's name (other-last's: no record)
        lines.append(lead + start + joint.join(changed) + rng.choice(variants))
    runs, rows, _ = _read_in_runs_by_both(table, lines)
    assert runs > 100 and rows > 500


@pytest.mark.parametrize("table", PAIRS_TABLES, ids=PAIRS_IDS)
def test_the_same_pairs_after_other_bytes_before_them_are_read_as_the_twin_reads_them(table):
    """A line's bytes before its pairs change from line to line (a timestamp, DeepSpeed's and fairseq's) while its
    pairs do not: the kernel reads the pairs of the line before without looking their names up again. Bytes before
    them after which the loop finds another first name (a name byte glued to it, a ``.``, a separator before it, a
    word before a step's name) are among them."""
    step_name, separator = table[4][0], table[3]
    lead = _lead(table)
    names = [step_name, table[6][0][0], *(field[0] for field in table[6][1:4])]
    rng = random.Random(11)
    befores = [b"", b" ", b"x", b"a.", b".", b"_", b"9", b"y" + separator + b"2 ", b"y" + separator, b"eval ",
               b"[INFO] [logging.py:96:log_dist] [Rank 0] ", b"|", separator]
    lines = []
    for step in range(1, 3000):
        if step % 50 == 1:  # now and then other pairs (other names, another joint)
            count, joint = rng.randint(2, len(names)), rng.choice([table[2][:1] + b" ", table[2][:1] or b" "])
        stamp = (b"[2023-04-18 %02d:%02d:%02d,%03d] " % (step % 24, step % 60, (7 * step) % 60, step % 1000)).replace(
            separator[:1], b".")  # a separator in it: the pairs begin in the timestamp (other-punctuation's ``:``)
        before = stamp if rng.random() < 0.7 else stamp + rng.choice(befores) if rng.random() < 0.5 else rng.choice(
            befores)
        pairs = [name + separator + (b"%d" % step if name == step_name else rng.choice(TOKENS).encode())
                 for name in names[:count]]
        lines.append(lead + before + joint.join(pairs))
    runs, rows, _ = _read_in_runs_by_both(table, lines)
    assert runs > 50 and rows > 500


@pytest.mark.parametrize("table", PAIRS_TABLES, ids=PAIRS_IDS)
def test_a_pairs_run_reads_a_line_as_the_per_line_reader_does(table):
    """A line the run reads gives the per-line reader's record (the dict reading); it declines only what that reader
    must take: not ASCII, tagged, a step beyond 18 digits, a name twice, two names of a column, two step names,
    more than 64 pairs."""
    grammar = step_fields_twin._grammar(table)

    def declinable(text: str, _: object) -> bool:
        unescaped = step_fields_twin._unescaped(grammar, text)  # a step's digits may be printed around an escape
        pairs = unescaped[step_fields_twin._before_pairs(grammar, unescaped)[2]:]  # after a lead
        return step_fields_twin._ambiguous_pairs(grammar, pairs) or re.search(r"\d{19}", unescaped) is not None

    read, declined = _each_line_read_alone(table, _pairs_lines(table, seed=6), declinable)
    assert read > 300 and declined > 100


def _each_line_read_alone(table: tuple, lines: list[bytes], declinable: Callable) -> tuple[int, int]:
    """Each line read alone by the compiled reader and the twin's run, against the per-line reader's record: a line
    a run takes gives that record; one it declines holding a record is not ASCII, tagged, has a number beyond 18
    digits, or is ``declinable(text, record)`` (the grammar's own declines). How many were read and declined."""
    tagged = re.compile(re.escape(table[5][0]) + rb"\w+" + re.escape(table[5][1]))
    declined = read = 0
    for line in lines:
        text = line.decode("utf-8", "replace")
        record = step_fields_twin.read_record(table, text)
        assert _bits(native.read_record(table, text)) == _bits(record)  # the per-line reader: compiled or twin
        for reader in (_step_fields.StepReader(table), step_fields_twin.StepReader(table)):
            if reader.read(line + b"\n", [0], 0, 1):
                steps, total, fields, named = reader.take()
                assert record is not None and list(steps) == [record.step] and total == record.total
                assert _bits([field[:2] for field in fields]) == _bits([(value, unit) for value, unit in record.values])
                assert _bits([(name, value) for name, value, *_ in named]) == _bits(list(record.named.items()))
                read += 1
            elif record is not None:
                assert (not line.isascii() or tagged.match(line) or re.search(rb"\d{19}", line)
                        or declinable(text, record)), line
                declined += 1
    return read, declined


def test_the_keyvalue_reference_line():
    line = (b"[default1]:step=12/30 loss=nan lr=0.03225806451612903 grad_norm=nan step_time=0.20997321600043506 "
            b"mtp_1_loss=1,234.5")
    for reader in _both_readers(KEYVALUE):
        assert reader.read(line, [11], 0, 1) == 1
        steps, total, fields, named = reader.take()
        loss, lr, grad_norm, step_time, throughput = fields
        assert (list(steps), total, lr[0], step_time[:1], throughput) == ([12], 30, 0.03225806451612903,
                                                                     (0.20997321600043506,), (None, None, None, None))
        assert math.isnan(loss[0]) and math.isnan(grad_norm[0]) and named == [("mtp_1_loss", 1234.5, 1, 0, 0, None)]
        assert reader.read(line, [0], 0, 1) == 0  # another stream's line: tagged
        assert reader.read(b"step=3 loss=1 lr=1 learning_rate=2", [0], 0, 1) == 0  # two names of one column
        assert reader.read(b"iteration=4 loss=1|lr=2;x=3", [0], 0, 1) == 1 and reader.take()[1] is None


def _decimals(rng: random.Random, count: int) -> list[str]:
    """Numbers as programs print them and beside them: repr() of random doubles (17 digits: the kernel's exact
    path up to 19 digits), random decimals of 1-21 digits with a point, a sign and an exponent anywhere, and
    integers exactly halfway between two doubles (rounded to even)."""
    found = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.3:
            found.append(repr(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]))
        elif kind < 0.6:
            found.append(repr(rng.uniform(-100, 100) * 10.0 ** rng.randint(-30, 30)))
        elif kind < 0.9:
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 21)))
            point = rng.randint(0, len(digits))
            text = digits[:point] + "." + digits[point:] if rng.random() < 0.8 else digits
            if rng.random() < 0.4:
                text += rng.choice("eE") + rng.choice(["", "-", "+"]) + str(rng.randint(0, 40))
            found.append(rng.choice(["", "-", "+"]) + text)
        else:
            halfway = ((rng.getrandbits(52) | 1 << 52) * 2 + 1) << rng.randint(0, 10)
            found.append(str(halfway)[:19] if rng.random() < 0.2 else str(halfway))
    return found


def _decimal_tokens() -> list[str]:
    """_decimals and the edges of the exact paths: a float to read, each."""
    tokens = [token for token in _decimals(random.Random(8), 60_000) if token.strip("+-.")]
    tokens += ["9007199254740993", "9007199254740995", "9007199254740993.0", "4503599627370497.5", "1e23", "-0.0",
               "0.04950495049504951", "11.792409896850586", "1.7976931348623157e308", "2.2250738585072014e-308",
               "5e-324", "1e-27", "1e27", "9999999999999999999e-27", "1.0000000000000000000", "0.000000000000000000001"]
    # Fractions read eight digits at a time: after zeros that are not significant, across the 19-digit limit.
    rng = random.Random(29)
    tokens += [f"{whole}.{'0' * zeros}{rng.randrange(10 ** digits):0{digits}d}{exponent}"
               for whole in ("0", "7", "12345678901") for zeros in range(0, 12) for digits in range(1, 22)
               for exponent in ("", "e-7")]
    return tokens


def test_the_kernel_reads_every_decimal_as_float_does():
    """Bit for bit: the exact paths (Clinger's, Eisel-Lemire's) and strtod's, against float() itself."""
    tokens = _decimal_tokens()
    data = b"".join(b"step=%d loss=%s\n" % (step, token.encode()) for step, token in enumerate(tokens, 1))
    starts = [0, *(index + 1 for index in range(len(data) - 1) if data[index] == 10)]
    reader = _step_fields.StepReader(KEYVALUE)
    assert reader.read(data, starts, 0, len(starts)) == len(tokens)
    _, _, steps, values = reader.take()[2][0]  # the loss column: latest, unit, each value's step, the values
    assert len(steps) == len(tokens)
    assert _bits(values) == _bits(array("d", [float(tokens[step - 1]) for step in steps]))


def test_segment_records_read_every_decimal_as_float_does():
    """The records' values by the step kernel's exact paths (decimal.h), bit for bit against float()."""
    tokens = _decimal_tokens()
    data = b"".join(b"\r %d/9 [\r{'a': '%s'}\n" % (step, token.encode()) for step, token in enumerate(tokens, 1))
    _, _, _, _, steps, _, (values,) = _scan.segment_records(data, (b"{'a': '", b"'}"), b" [")
    assert steps == list(range(1, len(tokens) + 1))
    assert _bits(values) == _bits([float(token) for token in tokens])


def _csv_cells(rng: random.Random, count: int) -> list:
    """Cells as analyze's rows hold them: random doubles (17 digits), decimals of 1-17 digits over the exact powers
    and beyond and their neighbours, float32 values (what torch prints), powers of two (a nearer neighbour below),
    short values as trainers print them, the edges of repr's notations, ints of any size, None."""
    edges = [0.0, -0.0, 1e15, 1e16, 9e15, 1e22, 1e23, 9e21, 1e-4, 1e-5, 0.0001234, 123456789012345.0,
             1234567890123456.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, math.inf, -math.inf,
             math.nan, 1e30, 100.0, 0.1, 0.3, 2.5e-05, 999999999999999.9, 0.000999999999999999]
    cells: list = []
    for _ in range(count):
        kind = rng.random()
        if kind < 0.25:
            cells.append(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0])
        elif kind < 0.45:
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 17)))
            decimal = float(f"{rng.choice('-+')}{digits[0]}.{digits[1:]}e{rng.randint(-40, 40)}")
            cells.append(rng.choice((decimal, math.nextafter(decimal, 0), math.nextafter(decimal, math.inf))))
        elif kind < 0.55:
            single = struct.unpack("<f", struct.pack("<f", rng.random() * 10 ** rng.randint(-12, 12)))[0]
            cells.append(rng.choice((single, math.ldexp(1.0, rng.randint(-60, 60)))))
        elif kind < 0.8:
            cells.append(float(f"{rng.random() * 10 ** rng.randint(-3, 4):.{rng.randint(1, 6)}g}"))
        elif kind < 0.9:
            cells.append(rng.choice(edges) * rng.choice((1, -1)))
        elif kind < 0.97:
            cells.append(rng.choice((1, -1)) * rng.getrandbits(rng.choice((3, 40, 63, 64, 100))))
        else:
            cells.append(None)
    return cells


def _written(write_rows, path: Path, jobs: list) -> str:
    """What ``write_rows`` writes of ``jobs`` to a fresh file."""
    with path.open("wb") as handle:
        write_rows(handle.fileno(), jobs)
    return path.read_bytes().decode()


def _write_ahead(fd: int, jobs: list) -> None:
    """write_rows by the kernel's own thread (RowsAhead), waited for."""
    _step_fields.RowsAhead(fd, jobs).wait()


WRITERS = (_step_fields.write_rows, _write_ahead, step_fields_twin.write_rows)


def test_write_rows_writes_each_number_as_repr_does(tmp_path):
    """The compiled rows, at once and on their own thread (which hands back to wait() each cell only repr writes:
    beyond 2**53, below 1e-10, ints beyond 64 bits), against the twin (repr itself), character for character,
    several jobs in one call."""
    rng = random.Random(41)
    for width, rows in ((1, 200_000), (3, 20_000), (10, 2_000)):
        columns = tuple(_csv_cells(rng, rows) for _ in range(width))
        taken = rows - 1  # fewer than the columns hold: the last row is not written
        jobs = ["head\r\n", (columns, taken, ""), (columns, 3, "rün,")]
        compiled = _written(_step_fields.write_rows, tmp_path / "compiled", jobs)
        assert compiled == _written(step_fields_twin.write_rows, tmp_path / "twin", jobs)
        assert _written(_write_ahead, tmp_path / "ahead", jobs) == compiled
        assert compiled.count("\r\n") == 1 + taken + 3
        assert compiled.split("\r\n")[1:4] == [",".join("" if cell is None else repr(cell) for cell in row)
                                                for row in list(zip(*columns, strict=True))[:3]]
    for write_rows in WRITERS:
        def written(*jobs: object, write_rows=write_rows) -> str:
            return _written(write_rows, tmp_path / "rows", list(jobs))
        assert written((([1, None], (2.5, 1e-05), range(7, 9)), 2, "")) == "1,2.5,7\r\n,1e-05,8\r\n"
        assert written((([1.0], [-0.0]), 1, "")) == "1.0,-0.0\r\n"
        # A run's steps as a range (each computed), going down too, and one whose last step is beyond 64 bits.
        ranges = (range(10, 50, 10), range(5, -5, -3), range(2**63 - 3, 2**63), range(2**63 - 2, 2**63 + 2))
        assert written((ranges, 3, "")) == "".join(f"{','.join(str(column[row]) for column in ranges)}\r\n"
                                                    for row in range(3))
        doubles = array("d", [2.5, -0.0, math.nan, 1e-05])  # a kernel's series: its buffer read, or its items
        assert written(((doubles, memoryview(doubles)[::2], [1, 2]), 2, "")) == "2.5,2.5,1\r\n-0.0,nan,2\r\n"
        assert written((([1, 2], [None, 0.5]), 2, "rün,,3,"), "x") == "rün,,3,1,\r\nrün,,3,2,0.5\r\nx"
        assert written((([1], [2]), 0, ""), ((), 5, ""), "") == ""
        refused = [((([1],), 1, b"run,"), TypeError, "a job"),
                   ((([1, "2"],), 2, ""), TypeError, "int, a float or None"),
                   ((([True],), 1, ""), TypeError, "int, a float or None"),
                   ((([1], [1, 2]), 2, ""), ValueError, "at least"), (([[1]], 1, ""), TypeError, "a job"),
                   (((array("d", [1.0]), [1, 2]), 2, ""), ValueError, "at least"),
                   (((range(1), [1, 2]), 2, ""), ValueError, "at least"),
                   (b"text", TypeError, "a job")]
        for bad, error, words in refused:
            path = tmp_path / "refused"
            with path.open("wb") as handle, pytest.raises(error, match=words):
                write_rows(handle.fileno(), ["before the bad job: not written", bad])
            assert path.read_bytes() == b""


def test_write_rows_tells_a_failed_write(tmp_path):
    """A full device (/dev/full) and a closed descriptor: OSError, from each."""
    for write_rows in WRITERS:
        with open("/dev/full", "wb") as full, pytest.raises(OSError) as failed:
            write_rows(full.fileno(), [(([1.5] * 10,), 10, "x,")])
        assert failed.value.errno == errno.ENOSPC
        with (tmp_path / "closed").open("wb") as handle:
            descriptor = handle.fileno()
        with pytest.raises(OSError):
            write_rows(descriptor, ["x"])


def test_rows_ahead_writes_what_the_jobs_held_when_given(tmp_path):
    """The thread writes the cells the columns held when the writing began (a list may change afterwards), the rows
    after one only repr writes (1e-300, 2**70) included, once; a second wait returns at once, and one dropped
    unwaited leaves nothing running."""
    steps, losses = list(range(1, 1001)), [0.5] * 1000
    losses[10], steps[500] = 1e-300, 2**70
    path = tmp_path / "rows"
    with path.open("wb") as handle:
        writing = _step_fields.RowsAhead(handle.fileno(), [((steps, losses), 1000, "r,")])
        losses[20] = 7.0
        steps.clear()
        writing.wait()
        writing.wait()
    rows = path.read_bytes().decode().split("\r\n")
    assert len(rows) == 1001 and rows[-1] == ""
    assert rows[10] == "r,11,1e-300" and rows[20] == "r,21,0.5" and rows[500] == f"r,{2**70},0.5"
    assert rows[999] == "r,1000,0.5"
    with (tmp_path / "dropped").open("wb") as handle:
        _step_fields.RowsAhead(handle.fileno(), [((list(range(100_000)),), 100_000, "")])
    gc.collect()
    assert (tmp_path / "dropped").read_bytes().count(b"\n") == 100_000


def test_rows_ahead_after_another_writes_in_the_order_made(tmp_path):
    """Writings each following the one before write in the order they were made, whatever each thread's pace: a
    writing whose rows wait() finishes (1e-300, which only repr writes) keeps the ones after it behind it; a failed
    write fails the ones after it, which write nothing; a chain dropped unwaited is written whole."""
    def chain(handle: BinaryIO, count: int, rows: int, odd: int | None = None) -> list:
        writings: list = []
        for number in range(count):
            values = [float(number)] * rows
            if number == odd:
                values[rows // 2] = 1e-300
            writings.append(_step_fields.RowsAhead(handle.fileno(), [((values,), rows, f"{number},")],
                                                   writings[-1] if writings else None))
        return writings

    def expected(count: int, rows: int, odd: int | None = None) -> list[str]:
        return [f"{number},{1e-300 if number == odd and row == rows // 2 else float(number)!r}"
                for number in range(count) for row in range(rows)]

    for odd in (None, 0, 3):
        path = tmp_path / f"chain-{odd}"
        with path.open("wb") as handle:
            for writing in chain(handle, 8, 20_000, odd):
                writing.wait()
        assert path.read_bytes().decode().split("\r\n")[:-1] == expected(8, 20_000, odd)
    with (tmp_path / "newest first").open("wb") as handle:  # the writings before it are waited for by it
        chain(handle, 5, 1_000, odd=1)[-1].wait()
    assert (tmp_path / "newest first").read_bytes().decode().split("\r\n")[:-1] == expected(5, 1_000, odd=1)
    with open("/dev/full", "wb") as full:
        writings = chain(full, 3, 100_000)
        for writing in writings:
            with pytest.raises(OSError) as failed:
                writing.wait()
            assert failed.value.errno == errno.ENOSPC
    with (tmp_path / "dropped").open("wb") as handle:
        chain(handle, 6, 50_000, odd=2)
    gc.collect()
    assert (tmp_path / "dropped").read_bytes().decode().split("\r\n")[:-1] == expected(6, 50_000, odd=2)
    with (tmp_path / "refused").open("wb") as handle, pytest.raises(TypeError, match="after"):
        _step_fields.RowsAhead(handle.fileno(), ["x"], "not a writing")


def test_rows_ahead_holds_no_number_of_the_columns(tmp_path):
    """The job's numbers are read when it is given: a float of a column is freed with its list while the thread
    writes (its last reference), not after the writing; only an int beyond 64 bits, which repr writes, is held."""
    loss, big = float("2.5000001"), 2**70 + 1
    losses, steps = [loss] * 3, [1, big, 3]
    held = sys.getrefcount(loss), sys.getrefcount(big)
    with (tmp_path / "rows").open("wb") as handle:
        writing = _step_fields.RowsAhead(handle.fileno(), [((steps, losses), 3, "r,")])
        assert (sys.getrefcount(loss), sys.getrefcount(big)) == (held[0], held[1] + 1)
        writing.wait()
    assert (sys.getrefcount(loss), sys.getrefcount(big)) == held
    assert (tmp_path / "rows").read_bytes().decode() == f"r,1,2.5000001\r\nr,{big},2.5000001\r\nr,3,2.5000001\r\n"


@pytest.mark.parametrize("table", [
    (b"", b"", b",=", b"=", (b"step",), (b"[", b"]:"), ()),
    (b"", b"", b",", b"=", (), (b"[", b"]:"), ()),
    (b"", b"", b",", b"=", (b"1x",), (b"[", b"]:"), ()),
    (b"", b"", b",", b"=", (b"step",), (b"[", b"]:"), ((b"x", 1, 0, b"", b"", 1),)),
    (b"", b"", b",", b"=", (b"step",), (b"[", b"]:"), ((b"x", 1, 0, b"", b"", 0), (b"y", 1, 1, b"", b"", 0))),
    (b"", b"", b",", b"=", (b"step",), (b"[", b"]:"), ((b"x", 1, 0, b"", b"", 0),), 1),
])
def test_both_refuse_a_pairs_table_they_cannot_read_alike(table):
    for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
        with pytest.raises(ValueError):
            reader(table)


# The pairs grammar's options (``Iter(train) [ 10/270]  lr: 1e-02  decode.loss_ce: 1.2``): MMEngine's table, and
# another with other punctuation, step names one the start of the other, and names renamed to nothing and to others.
MMENGINE = mmengine.RECORD.kernel_table
OTHER_BRACKETS = (b"", b"", b"|;", b"=", (b"at", b"at(x)"), (b"<", b">|"),
                  ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"t", Kind.DURATION, 0, b"", b"ms", 1),
                   (b"m.x", Kind.FLOAT, 0, b"", b"", 2)), -1,
                  (b"<>", b"./-", ((b"skip", b"", b""), (b"m", b"m_mb", b"MB")), b"{}", ()))
MINDFORMERS_STATIC = mindformers_static.RECORD.kernel_table
# The further options with other punctuation: an outer count, second items, words, names left to the per-line reader.
OTHER_OUTER = (*OTHER_BRACKETS[:8], (*OTHER_BRACKETS[8], b"Epoch", (b"epoch", b"", b"inner", b"per"),
                                     ((b"loss", b"loss_mean"), (b"m", b"m_second")), ((b"False", 0.0), (b"yes", 1.5)),
                                     (b"local", b"x_y")))
# A step printed after a count, other punctuation: ``round<3><10/20>|``.
OTHER_COUNTED = (*OTHER_BRACKETS[:8], (*OTHER_BRACKETS[8], b"", (), (), (), (), 0, b"", (), b"", b"", b"", b"round",
                                       (b"At", b"at(y)")))
BRACKET_TABLES = [MMENGINE, OTHER_BRACKETS, MINDFORMERS_STATIC, OTHER_OUTER, OTHER_COUNTED]
BRACKET_IDS = ["mmengine", "other-brackets", "mindformers-static", "other-outer", "other-counted"]
BRACKET_NAMES = ["loss", "lr", "grad_norm", "time", "t", "m.x", "eta", "memory", "skip", "m", "data_time",
                 "decode.loss_ce", "aux.acc_seg", "a-b", "x/y", "Loss_CLS", "_", "__x__", "a__b", "x.", "1bad", "Iter",
                 "at", "n" * 130, "cond", "global_norm", "per_step_time", "device_local_norm", "local_norm/x.w",
                 "micro_local_loss", "x_y_z", "epoch", "loss_mean"]
BRACKET_VALUES = [*TOKENS, "0:00:27", "8 days, 4:44:34", "1,234", "22159", "", "{1.5", "{2}", "{", "3MB", "{4MB}",
                  "[1.5/2.5]", "[  nan/  nan]", "[1, 2]", "[1,234.5/7]", "[ 3 ]", "[", "[]", "[/4]", "[4/]", "False",
                  "True", "yes", "{1/2}", "{ 1 , 2 }", "[1.5 ms]", "{3MB/4}", "[2/3/4]"]


def _fuzzed_bracket_line(rng: random.Random, table: tuple) -> str:
    separator = table[3].decode()[:1]
    open_, shut = (chr(byte) for byte in table[8][0])
    names = [name.decode() for name in table[4]]
    gap = ["", " ", "  ", "\t"]
    counts = [name.decode() for name in table[8][17]] if len(table[8]) == 18 else []
    name = rng.choice([*names, *counts * 2, "Epoch", "x" + names[0]])
    count = (f"{open_}{rng.choice(gap)}{rng.choice(['1', '3', '0', '12', 'x', '9' * 19, ''])}"
             f"{rng.choice([shut] * 4 + [''])}{rng.choice(gap)}" if rng.random() < (0.8 if name in counts else 0.1)
             else "")
    step = (f"{name}{rng.choice(gap)}{count}{open_}{rng.choice(gap)}"
            f"{rng.choice(STEPS)}{rng.choice([shut] * 6 + ['', shut + shut])}")
    outer = table[8][5].decode() if len(table[8]) == 10 else ""
    if outer and rng.random() < 0.8:  # the outer count before the step, or after it
        counted = (f"{rng.choice([outer] * 6 + ['x' + outer, outer.lower()])}{rng.choice(gap)}{open_}{rng.choice(gap)}"
                   f"{rng.choice([*STEPS, *['1/2', '0/3', '2/2', '3/ 4'] * 4])}{rng.choice([shut] * 6 + [''])}"
                   f"{rng.choice([', ', ' ', ''])}")
        step = counted + step if rng.random() < 0.9 else step + " " + counted
    pairs = []
    for _ in range(rng.randint(0, 8)):
        joint = rng.choice([separator + " "] * 6 + [separator, separator + "  ", separator + "\t", "", " "])
        pairs.append(f"{rng.choice(BRACKET_NAMES)}{joint}{rng.choice(BRACKET_VALUES)}")
    breaks = ["  ", ", ", " ", "\t", *table[2].decode(), ","]
    body = "".join(f"{rng.choice(breaks)}{pair}" for pair in pairs)
    before = rng.choice(["", "04/22 11:14:42 - mmengine - INFO - ", "lr: 3 ", "[default3]:", "é ", "x"])
    if rng.random() < 0.2:  # the step among the pairs, or twice
        cut = rng.randint(0, len(body))
        return before + body[:cut] + " " + step + body[cut:] + (" " + step if rng.random() < 0.3 else "")
    return before + step + body


def _bracket_lines(table: tuple, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    real = [line for name in ("mmengine_iter.log", "mmcv_iter.log", "mmengine_runner_iter.log", "mmcv_epoch.log",
                              "msrun_nan_worker_1.log", "mindformers_legacy.log", "mindvision_lossmonitor.log")
            for line in (REPO / "tests" / "fixtures" / "real" / name).read_bytes().splitlines()]
    lines = [_fuzzed_bracket_line(rng, table).encode("utf-8") for _ in range(8000)] + real
    rng.shuffle(lines)
    # Runs: real lines renumbered at steps going up, fuzzed ones with a step after them going up.
    open_, shut = table[8][0][:1], table[8][0][1:]
    lines += [re.sub(rb"\[\s*\d+/", b"[%d/" % step, rng.choice(real)) for step in range(1, 2000)]
    outer = table[8][5] + open_ + b"1/2" + shut + b", " if len(table[8]) == 10 else b""
    lines += [_fuzzed_bracket_line(rng, table).encode("utf-8").replace(open_, b"(", 1) + b" " + outer + table[4][0]
              + open_ + b"%d/9%s " % (step // 3, shut) + table[3][:1] + b" " + rng.choice(BRACKET_VALUES).encode()
              for step in range(3000)]
    return lines


def test_two_kinds_of_lines_in_turn_and_a_list_open_in_a_joint_are_read_as_the_twin_reads_them():
    """MindFormers' static records and its weight-norm lines in turn each take the shape of the line before them of
    their kind; a joint holding a list's open (``x [``, no shut after it on its line) keeps no shape: a later line of
    the same joints printing a shut after it holds the pair ``x`` (the loop looks at each byte there)."""
    lines = []
    for step in range(1, 300):
        lines.append(b"{ Epoch:[  1/  2], step:[ %d/ 9999], loss:[%d.5/3.0], per_step_time: 12ms, lr: 0.0%d, "
                     b"overflow cond: False, global_norm: [1.%d] }" % (step, step % 7, step % 9 + 1, step))
        lines.append(b"Epoch:[  1/  2], step:[ %d/ 9999] weight_norm: %d.25" % (step, step))
    for step in range(300, 400):
        lr = b"[0.1]" if step % 2 else b"0.2"
        lines.append(b"Epoch:[  1/  2], step:[ %d/ 9999] loss: 2.5, x [ lr: %s" % (step, lr))
    runs, rows, _ = _read_in_runs_by_both(MINDFORMERS_STATIC, lines)
    assert rows == len(lines) and runs > 2


@pytest.mark.parametrize("table", BRACKET_TABLES, ids=BRACKET_IDS)
def test_a_bracketed_line_printing_the_names_of_the_line_before_is_read_as_the_twin_reads_it(table):
    """A table whose step is printed in brackets (no step pair) keeps the shape of its pairs too: each line here
    follows a line of the same pairs and differs from it by a little (a name longer, more spaces after a separator, a
    value missing or a list, another joint, a pair more), after the same step and outer count."""
    separator, open_, shut = table[3], table[8][0][:1], table[8][0][1:]
    outer = table[8][5] + open_ + b"1/2" + shut + b", " if len(table[8]) > 5 and table[8][5] else b""
    count = open_ + b"3" + shut if len(table[8]) > 16 and table[8][16] else b""
    step_name = table[8][17][0] if count else table[4][0]
    names = [field[0] for field in table[6]] + [b"mtp_1_loss", b"memory"]
    rng = random.Random(17)
    joints = [b" ", b"  ", b", ", table[2][:1] + b" ", b"\t", b" [x] ", b" a.", b"x"]
    changes = (lambda pair: pair.replace(separator, b"x" + separator, 1),  # a name one byte longer
               lambda pair: pair.replace(separator, separator + b"  ", 1),  # more spaces after its separator
               lambda pair: pair.split(separator)[0] + separator,  # no value
               lambda pair: pair.split(separator)[0] + separator + b"[1.5, 2]",  # a list
               lambda pair: rng.choice(joints) + pair)  # another joint before it
    lines = []
    for step in range(1, 2500):
        pairs = [name + separator + rng.choice(TOKENS).encode() for name in names[: rng.randint(1, len(names))]]
        start, joint = rng.choice([b"", b"[INFO] ", b"04/22 11:14:42 - mmengine - INFO - "]), rng.choice(joints)
        head = start + outer + step_name + count + open_ + b"%d/9999" % step + shut + rng.choice([b" ", b"  ", b", "])
        lines.append(head + joint.join(pairs))
        changed = list(pairs)
        where = rng.randrange(len(changed))
        changed[where] = rng.choice(changes)(changed[where])
        lines.append(head.replace(b"%d/" % step, b"%d/" % (step + 1)) + joint.join(changed)
                     + rng.choice([b"", b" extra" + separator + b"1", b" ", b","]))
    runs, rows, _ = _read_in_runs_by_both(table, lines)
    assert runs > 2 and rows > 2000  # long runs: each line read after one of its shape


@pytest.mark.parametrize("table", BRACKET_TABLES, ids=BRACKET_IDS)
def test_a_bracketed_run_reads_a_line_as_the_per_line_reader_does(table):
    """As a pairs run (above), and it declines a line printing a name longer than MAX_NAME or an outer count whose
    step or total is 2**63 or more: that is all (a name whose every value the run keeps is read)."""
    grammar = step_fields_twin._grammar(table)

    def declinable(text: str, record: step_fields_twin.Record) -> bool:
        step = grammar.step_brackets.search(text)
        return (step_fields_twin._ambiguous_pairs(grammar, text[step.end():])
                or (grammar.outer is not None and max(record.step, record.total or 0) >= 2**63))

    read, declined = _each_line_read_alone(table, _bracket_lines(table, seed=6), declinable)
    assert read > 1000 and declined > 20


def test_the_mindformers_static_reference_lines():
    """Real MFLossMonitor and TrainingStateMonitor lines (tests/fixtures/real/msrun_nan_worker_1.log, mindformers 2.1):
    the step counted within the epoch, the loss pair's second item, ``overflow cond`` a word, a rank's own value's every
    line's value kept."""
    prefix = (b"2026-12-03 08:38:49,550 - mindformers/tmp/w27/inc_nan/output/log"
              b"[mindformers/core/callback/callback.py:747] ")
    record = (prefix + b"- INFO - { Epoch:[  2/  3], step:[    8/   16], loss:[  nan/  2.5], per_step_time: 894ms, "
              b"lr: 0.029411765, overflow cond: True, loss_scale: 1.0, global_norm [nan]")
    for reader in _both_readers(MINDFORMERS_STATIC):
        assert reader.read(record, [0], 0, 1) == 1
        steps, total, fields, named = reader.take()
        assert (list(steps), total) == ([24], 48)
        assert _bits([field[:2] for field in fields]) == _bits([(math.nan, None), (0.894, None), (0.029411765, None),
                                                                (math.nan, None), (None, None)])
        assert _bits([(name, value) for name, value, *_ in named]) == _bits([
            ("epoch", 2.0), ("total_epochs", 3.0), ("epoch_step", 8.0), ("steps_per_epoch", 16.0),
            ("loss_epoch_mean", 2.5), ("overflow", 1.0), ("loss_scale", 1.0)])
        monitor = prefix + b"- INFO - Epoch:[  1/  1], step:[    8/   16] weight_norm: 5.95"
        assert reader.read(monitor, [0], 0, 1) == 1
        assert [(name, value) for name, value, *_ in reader.take()[3]][-1] == ("weight_norm", 5.95)
        # A rank's own values: every line's kept, with its step (the rank-divergence detector takes each).
        own = [monitor.replace(b"weight_norm: 5.95", b"device_local_norm: 1.5"),
               monitor.replace(b"weight_norm", b"local_norm/model.layers.0.attention.wq.weight"),
               monitor.replace(b"8/   16] weight_norm: 5.95", b"9/   16] device_local_norm: nan"),
               monitor.replace(b"8/   16]", b"9/   16]")]
        joined = b"\n".join(own)
        assert reader.read(joined, [0, *(joined.index(line) for line in own[1:])], 0, 4) == 4
        steps, _, _, named = reader.take()
        kept = {name: (value, lines, every) for name, value, lines, _, _, every in named}
        assert steps == [8, 8, 9, 9] and kept["weight_norm"] == (5.95, 1, None)
        assert kept["local_norm_model_layers_0_attention_wq_weight"] == (5.95, 1, ([8], array("d", [5.95])))
        latest, lines, (every_step, every_value) = kept["device_local_norm"]
        assert math.isnan(latest) and lines == 2 and every_step == [8, 9]
        assert every_value[0] == 1.5 and math.isnan(every_value[1])
        assert reader.read(b"Epoch:[999999999999999999/2], step:[999999999999999999/9]", [0], 0, 1) == 0
        assert reader.read(b"step:[    8/   16] weight_norm: 5.95", [0], 0, 1) == 0  # no epoch: no record


def test_the_torchtitan_reference_lines():
    """A real torchtitan line (tests/fixtures/real/healthy/torchtitan_qwen3_14b_run54.log, its rank prefix cut off):
    colored by ANSI escapes, the memory's percent in parentheses after it, the throughput with a thousands comma; a
    validation line (``validate step:``, as torchtitan's validator prints it) is no training step."""
    line = (b"[titan] 2026-05-19 15:23:46,006 - root - INFO - \x1b[31mstep: 10  \x1b[32mloss:  9.00300  "
            b"\x1b[38;2;180;60;0mgrad_norm: 33.0000  \x1b[38;2;54;234;195mmemory: 171.79GiB(96.32%)  "
            b"\x1b[34mtps: 4,816  \x1b[36mtflops: 452.73  \x1b[35mmfu: 20.12%\x1b[39m")
    for reader in _both_readers(TORCHTITAN):
        assert reader.read(line, [0], 0, 1) == 1
        assert _taken_latest(reader) == ([10], None, [9.003, 33.0, 4816.0, None, 452.73], [
            ("memory_gib", 171.79), ("memory_percent", 96.32), ("mfu_percent", 20.12)])
        validation = line.replace(b"\x1b[31mstep:", b"\x1b[33mvalidate step:")
        assert reader.read(validation, [0], 0, 1) == 0
        assert reader.read(line.replace(b"\x1b", b""), [0], 0, 1) == 0  # an escape's rest is no escape
    assert torchtitan.RECORD.read_line(validation.decode()) is None


def test_the_mmcv_reference_line():
    """A real mmcv line (tests/fixtures/real/mmcv_iter.log): its step in brackets, dotted names normalised, ``eta``
    not read (a duration), ``memory`` renamed, ``time`` a duration of its field; epoch-based lines."""
    line = (b"2020-07-24 22:05:29,408 - mmseg - INFO - Iter [4200/40000]\tlr: 9.060e-03, eta: 11:32:31, time: 1.138, "
            b"data_time: 0.011, memory: 6840, decode.loss_seg: 2.5972, eta: 8 days, aux.acc_seg: 3.0267, loss: 3.6536")
    for reader in _both_readers(MMENGINE):
        assert reader.read(line.replace(b", eta: 8 days", b""), [0], 0, 1) == 1
        assert _taken_latest(reader) == ([4200], 40000, [3.6536, 9.060e-03, None, 1.138], [
            ("data_time", 0.011), ("memory_mb", 6840.0), ("decode_loss_seg", 2.5972), ("aux_acc_seg", 3.0267)])
        assert reader.read(line, [0], 0, 1) == 0  # eta twice: the per-line reader's dict reading
        assert reader.read(b"Iter(train) [ 10/270]  lr: 1e-2  loss: 5.3", [0], 0, 1) == 1
        assert reader.take()[:2] == (range(10, 11), 270)
        # Epoch-based (tests/fixtures/real/mmcv_epoch.log, mmengine_epoch_run.log): the step counted within the epoch,
        # the epoch the line's first named value, no total (the fraction's is the epoch's iterations).
        epochs = [b"Epoch [3][50/2500]\tlr: 0.02000, time: 1.090, loss: 0.0394",
                  b"2026/12/07 02:19:15 - mmengine - INFO - Epoch(train) [3][ 51/2500]  lr: 2.7500e-02  loss: 2.5001"]
        assert reader.read(b"\n".join(epochs), [0, len(epochs[0]) + 1], 0, 2) == 2
        steps, total, fields, named = reader.take()
        assert (steps, total, fields[0][0]) == (range(5050, 5052), None, 2.5001)
        assert [(name, value, lines) for name, value, lines, *_ in named] == [("epoch", 3.0, 2)]
        assert reader.read(b"Epoch [3/9]\tlr: 0.02000, loss: 0.0394", [0], 0, 1) == 0  # no count: no step
        assert reader.read(b"Epoch(val) [3][50/2500]\tlr: 0.02000, loss: 0.0394", [0], 0, 1) == 0


def test_the_deepspeed_reference_lines():
    """Real DeepSpeed lines (tests/fixtures/real/healthy/deepspeed_dschat_sft_opt1.3b.log): the lr report, the lr
    printed per parameter group (the first group's read), and the throughput timer, its ``/``-joined counters and its
    memory in GB."""
    report = (b"[2023-04-18 01:46:59,142] [INFO] [logging.py:96:log_dist] [Rank 0] step=10, skipped=6, "
              b"lr=[9.649992967150629e-06, 9.649992967150629e-06], mom=[(0.9, 0.95), (0.9, 0.95)]")
    timer = (b"[2023-04-18 01:46:59,171] [INFO] [timer.py:199:stop] epoch=0/micro_step=10/global_step=10, "
             b"RunningAvgSamplesPerSec=173.4455644119137, CurrSamplesPerSec=171.97903593624417, MemAllocated=3.96GB, "
             b"MaxMemAllocated=22.95GB")
    for reader in _both_readers(DEEPSPEED):
        assert reader.read(report + b"\n" + timer, [0, len(report) + 1], 0, 2) == 2
        steps, total, fields, named = reader.take()
        assert (steps, total, [field[0] for field in fields]) == ([10, 10], None, [9.649992967150629e-06,
                                                                                   171.97903593624417])
        assert [(name, value, lines) for name, value, lines, *_ in named] == [
            ("skipped_steps", 6.0, 1), ("epoch", 0.0, 1), ("micro_step", 10.0, 1),
            ("running_avg_samples_per_sec", 173.4455644119137, 1), ("mem_allocated_gb", 3.96, 1),
            ("max_mem_allocated_gb", 22.95, 1)]
        assert reader.read(b"step=14000, skipped=25, lr=[1e-05], mom=[0.9]", [0], 0, 1) == 1
        assert [field[0] for field in reader.take()[2]] == [1e-05, None]
        assert reader.read(b"step=3 loss=2.5 lr=0.1", [0], 0, 1) == 0  # no name marking a DeepSpeed line


def test_the_fairseq_reference_lines():
    """Real fairseq progress records (tests/fixtures/real/fairseq_plain.log): the lead's counter the named value
    ``epoch``, the step ``num_updates``, ``clip=0%`` no number; its valid line, a record of fairseq before 0.6 (no
    ``num_updates``) and a redraw of its tqdm bar (facebookresearch/fairseq issue #247), no record."""
    line = (b"| epoch 001:    550 / 1891 loss=11.186, nll_loss=10.492, ppl=1440.01, wps=53627, ups=0.5, wpb=104800, "
            b"bsz=5311, num_updates=545, lr=0.000109086, gnorm=1.469, clip=0%, oom=0, loss_scale=2.000, wall=1065, "
            b"train_wall=925")
    for reader in _both_readers(FAIRSEQ):
        assert reader.read(line, [0], 0, 1) == 1
        assert _taken_latest(reader) == ([545], None, [11.186, 0.000109086, 1.469, 53627.0], [
            ("epoch", 1.0), ("nll_loss", 10.492), ("ppl", 1440.01), ("ups", 0.5), ("wpb", 104800.0), ("bsz", 5311.0),
            ("oom", 0.0), ("loss_scale", 2.0), ("wall", 1065.0), ("train_wall", 925.0)])
        valid = b"| epoch 001 | valid on 'valid' subset | valid_loss 8.11425 | valid_nll_loss 6.8834 | num_updates 600"
        assert reader.read(valid, [0], 0, 1) == 0
        assert reader.read(line.replace(b" num_updates=545,", b""), [0], 0, 1) == 0
        assert reader.read(line.replace(b"| epoch 001:", b"|"), [0], 0, 1) == 0  # no lead: no record
        assert reader.read(line.replace(b"550 / 1891", b"550 /"), [0], 0, 1) == 0  # no count of a total after it
        bar = (b"| epoch 001:   0%| | 50/11265 [02:25<9:05:31,  2.92s/it, loss=0.000, ppl=1.00, wps=0, ups=0.0, wpb=0, "
               b"bsz=0, num_updates=0, lr=1e-07,")
        assert reader.read(bar, [0], 0, 1) == 0
        assert reader.read(line.replace(b"epoch 001", b"epoch " + b"1" * 19), [0], 0, 1) == 0  # the per-line reader's
    long_lead = fairseq.RECORD.read_line(line.replace(b"epoch 001", b"epoch " + b"1" * 19).decode())
    assert long_lead is not None and long_lead.step == 545 and long_lead.named["epoch"] == float(int("1" * 19))
    assert fairseq.RECORD.read_line(bar.decode()) is None


def test_a_table_with_marks_tells_a_line_without_them_as_its_grammar_does():
    """StepTable.read_line declines a line holding no mark followed by the name separator before reading it: the
    grammar finds no record in such a line either."""
    told = 0
    for line in _pairs_lines(DEEPSPEED, seed=8):
        text = line.decode("utf-8", "replace")
        record = native.read_record(DEEPSPEED, text)
        assert (deepspeed.RECORD.read_line(text) is None) == (record is None), text
        told += record is not None and "skipped=" in text
    assert told > 300


_LISTED = (b"[]", b"", (), b"[]", ())  # the first five options, the value brackets given
_FOUR = (b"epoch", b"", b"", b"")
_TEN = (*_LISTED, b"", (), (), (), ())  # the first ten options
_THIRTEEN = (b"", b"", (), b"", (), b"", (), (), (), (), 0, b"", ())  # the first thirteen, no step brackets
_SIXTEEN = (*_TEN, 0, b"", (), b"", b"", b"")  # the first sixteen, the step brackets given


@pytest.mark.parametrize("options", [
    (b"[", b"", (), b"", ()), (b"[ ]", b"", (), b"", ()), (b"[a", b"", (), b"", ()), (b"[|", b"", (), b"", ()),
    (b"[:", b"", (), b"", ()), (b"", b"x", (), b"", ()), (b"", b" ", (), b"", ()), (b"", b",", (), b"", ()),
    (b"", b"", ((b"", b"x", b""),), b"", ()), (b"", b"", ((b"x", b"y" * 129, b""),), b"", ()),
    (b"", b"", ((b"x", b"y"),), b"", ()), (b"", b"", ((b"x", "y", b""),), b"", ()),
    (b"", b"", tuple((b"x%d" % i, b"y", b"") for i in range(17)), b"", ()), (b"", b"", (), b"(", ()),
    (b"", b"", (), b"[,", ()), (b"", b"", (), b"", (b"",)), (b"", b"", (), b"", ("x",)),
    (b"", b"", (), b"", tuple(b"m%d" % i for i in range(9))), (b"", b"", (), b"", b"x"),
    (b"[]", b"", [], b"", ()), ("[]", b"", (), b"", ()), (b"[]", b"", ()), (b"[]", b"", (), b""),
    # The five further options (outer, outer_names, seconds, words, per_line).
    (*_LISTED, b"Epoch:", (), (), (), ()), (b"", b"", (), b"[]", (), b"Epoch:", _FOUR, (), (), ()),
    (*_LISTED, b":x", _FOUR, (), (), ()), (*_LISTED, b"", (b"e",), (), (), ()), (*_LISTED, "Epoch:", _FOUR, (), (), ()),
    (b"[]", b"", (), b"", (), b"", (), ((b"loss", b"m"),), (), ()), (*_LISTED, b"", (), ((b"loss", b"Mean"),), (), ()),
    (*_LISTED, b"", (), ((b"loss", b"loss"),), (), ()), (*_LISTED, b"", (), ((b"", b"m"),), (), ()),
    (*_LISTED, b"", (), tuple((b"x%d" % i, b"m") for i in range(17)), (), ()), (*_LISTED, b"", (), ((b"x",),), (), ()),
    (*_LISTED, b"", (), (), ((b"False", 0),), ()), (*_LISTED, b"", (), (), ((b"", 0.0),), ()),
    (*_LISTED, b"", (), (), ((b"False",),), ()), (*_LISTED, b"", (), (), (), (b"",)),
    (*_LISTED, b"", (), (), (), tuple(b"p%d" % i for i in range(9))), (*_LISTED, b"", (), (), ()),
    # The last three (escapes, item_brackets, not_after).
    (*_TEN, 2, b"", ()), (*_TEN, True, b"", ()), (*_TEN, b"", b"", ()), (*_TEN, 0, b"(", ()), (*_TEN, 0, b"[]", ()),
    (*_TEN, 0, b"(a", ()), (*_TEN, 0, b",)", ()), (*_TEN, 0, "()", ()), (*_TEN, 0, b"", (b"",)),
    (*_TEN, 0, b"", (b"1x",)), (*_TEN, 0, b"", (b"a b",)), (*_TEN, 0, b"", tuple(b"w%d" % i for i in range(9))),
    (*_TEN, 0, b"", "x"), (*_TEN, 0, b""), (b"", b"", (), b"", (), b"", (), ((b"loss", b"m"),), (), (), 0, b"", ()),
    # The lead (lead, lead_name, lead_close).
    (*_THIRTEEN, b"epoch"), (*_THIRTEEN, b"epoch", b"epoch"), (*_THIRTEEN, b"epoch", b"", b""),
    (*_THIRTEEN, b"", b"epoch", b""), (*_THIRTEEN, b"1x", b"e", b""), (*_THIRTEEN, b"ep och", b"e", b""),
    (*_THIRTEEN, b"epoch", b"Epoch", b""), (*_THIRTEEN, b"epoch", b"e" * 129, b""), (*_THIRTEEN, "epoch", b"e", b""),
    (*_THIRTEEN, b"epoch", "e", b""), (*_TEN, 0, b"", (), b"epoch", b"epoch", b""), (*_THIRTEEN, b"", b"", b"#"),
    (*_THIRTEEN, b"epoch", b"e", b"#;"), (*_THIRTEEN, b"epoch", b"e", b"a"), (*_THIRTEEN, b"epoch", b"e", b" "),
    (*_THIRTEEN, b"epoch", b"e", b":"), (*_THIRTEEN, b"epoch", b"e", b","), (*_THIRTEEN, b"epoch", b"e", "#"),
    (*_THIRTEEN, b"epoch", b"e", b"#", b""),
    # The step count (step_count, count_steps).
    (*_SIXTEEN, b"epoch", ()), (*_SIXTEEN, b"", (b"Epoch",)), (*_SIXTEEN, b"Epoch", (b"Epoch",)),
    (*_SIXTEEN, "epoch", (b"Epoch",)), (*_SIXTEEN, b"epoch", (b"1x",)), (*_SIXTEEN, b"epoch", (b"",)),
    (*_SIXTEEN, b"epoch", tuple(b"E%d" % i for i in range(9))), (*_SIXTEEN, b"epoch", b"Epoch"),
    (*_THIRTEEN, b"", b"", b"", b"epoch", (b"Epoch",)), (*_SIXTEEN, b"epoch"),
    (*_LISTED, b"Epoch:", _FOUR, (), (), (), 0, b"", (), b"", b"", b"", b"epoch", (b"Epoch",)),
])
def test_both_refuse_pairs_options_they_cannot_read_alike(options):
    table = (b"", b"", b",|", b":", (b"Iter",), (b"[", b"]:"), ((b"loss", 1, 1, b"", b"", 0),), -1, options)
    for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
        with pytest.raises((ValueError, TypeError)):
            reader(table)
    with pytest.raises(ValueError):
        _step_fields.StepReader((b"{", b"}", *table[2:8], (b"[]", b"", ())))


# The JSON grammar (``{"current_steps": 10, "total_steps": 30, "loss": 2.5}``): the JSON lines format's table, and
# another with other names, a prefix of its own dropped and a name left to the per-line reader.
JSONL = jsonl.RECORD.kernel_table
OTHER_JSON = (b"", b"", b",", b":", (b"it", b"iter"), (b"<", b">|"),
              ((b"l", Kind.FLOAT, 1, b"", b"", 0), (b"loss", Kind.FLOAT, 1, b"", b"", 0),
               (b"t", Kind.DURATION, 0, b"", b"ms", 1), (b"tok", Kind.NUMBER_WITH_UNIT, 0, b"", b"", 2)), 0,
              ((b"of",), b"x/", (b"skip",)))
MMENGINE_SCALARS = mmengine_scalars.RECORD.kernel_table
# Keys renamed and marks, with other names.
OTHER_JSON_MARKED = (*OTHER_JSON[:8], (*OTHER_JSON[8], (((b"t", b"tt", b""), (b"skip", b"of", b""),
                                                          (b"epoch", b"e_x", b"")), (b"data_time", b"iter", b"tt"))))
JSON_TABLES = [JSONL, OTHER_JSON, MMENGINE_SCALARS, OTHER_JSON_MARKED]
JSON_IDS = ["jsonl", "other-json", "mmengine-scalars", "other-json-marked"]
JSON_KEYS = ["step", "iteration", "global_step", "current_steps", "num_updates", "total_steps", "max_steps", "loss",
             "train_loss", "train/loss", "Train/Loss", "lr", "learning_rate", "train/learning_rate", "grad_norm",
             "gnorm", "step_time", "iteration_time", "tps", "tokens_per_sec", "throughput", "data_time", "eval_loss",
             "epoch", "elapsed_time", "percentage", "a b", "x/loss", "_", "MTP-1 Loss (x)", "it", "iter", "of", "l",
             "t", "tok", "skip", "x" * 130, "caf\u00e9", "e\\x", ""]
JSON_VALUES = ["3200", "0", "-1", "01", "4.4671", "1e-05", "1E+5", "-0", "1.", ".5", "+1", "2.5e", "1" + "0" * 310,
               "1" + "0" * 20, "NaN", "Infinity", "-Infinity", "nan", "null", "true", "false", "nul", '"10"', '"1,234"',
               '"5:13:22"', '" 1.5"', '"nan"', '"x\\ny"', '"\t"', '""', '"12s"', '"2.5T"', "{}", "[1, 2]", '"é"']


# What JSON reads (besides the step's and the total's), for lines most of which a run reads.
JSON_READ = ["3200", "0", "-1", "4.4671", "1e-05", "1E+5", "-0", "1" + "0" * 20, "NaN", "Infinity", "-Infinity",
             "null", "true", "false", '"10"', '"1,234"', '"5:13:22"', '" 1.5"', '"nan"', '""', '"12s"', '"2.5T"']


def _fuzzed_json_line(rng: random.Random, read: bool = False) -> str:
    """A line of a JSON object, or of what looks like one; ``read``: one JSON reads, most of the time."""
    gap = ["", " ", "  ", "\t"]
    members = []
    for key in (rng.sample(JSON_KEYS, rng.randint(0, 5)) if read else rng.choices(JSON_KEYS, k=rng.randint(0, 9))):
        value = rng.choice(JSON_READ if read and rng.random() < 0.98 else JSON_VALUES)
        if key in ("step", "current_steps", "it", "of", "total_steps"):
            value = rng.choice([f"{rng.randrange(10**6)}", f'"{rng.randrange(10**6)}"', "null", value])
        members.append(f'"{key}"{rng.choice(gap)}:{rng.choice(gap)}{value}')
    breaks = [","] if read else [","] * 12 + [";", ", ,", ""]
    body = "".join(f"{rng.choice(gap)}{member}{rng.choice(gap)}{rng.choice(breaks)}" for member in members).rstrip(",")
    before = rng.choice(["", "", "[INFO] "] if read else ["", "", "[INFO] ", "{", "x{", "\r", "{\"a\": {"])
    after = rng.choice(["", "", " ", "\t"] if read else ["", "", " ", "\t", "\r", "x", "}", ","])
    return f"{before}{{{body}}}{after}"


def _json_lines(seed: int) -> list[bytes]:
    rng = random.Random(seed)
    real = [line for name in ("llamafactory_trainer_log.log", "mmengine_runner_scalars.log")
            for line in (REPO / "tests" / "fixtures" / "real" / name).read_bytes().splitlines()]
    lines = [_fuzzed_json_line(rng).encode("utf-8") for _ in range(12000)] + real
    rng.shuffle(lines)
    # Runs: real lines at steps going up, fuzzed ones with a step and a loss first.
    lines += [re.sub(rb'"current_steps": \d+', b'"current_steps": %d' % step, real[step % 4]) for step in range(2000)]
    for step in range(3000):
        line = _fuzzed_json_line(rng, read=True)
        name = rng.choice(["step", "step", "current_steps", "it", "it", "of"])
        marked = '"data_time": 0.1, ' if rng.random() < 0.9 else ""  # MMEngine's scalars.json records print it
        lines.append(line.replace("{", f'{{"{name}": {step // 3}, "loss": 1.5, {marked}', 1).replace(", }", "}")
                     .encode())
    return lines


@pytest.mark.parametrize("table", JSON_TABLES, ids=JSON_IDS)
def test_a_json_run_reads_a_line_as_the_per_line_reader_does(table):
    read, _ = _each_line_read_alone(table, _json_lines(seed=6), lambda text, record: False)
    assert read > 600


def test_a_json_record_the_kernel_reads_is_the_one_the_format_parses():
    """The JSON lines format parses a line with json.loads and its aliases; the kernel reads by the format's table
    only what gives the same step line (gauges, units, named values in order), and leaves the rest to it."""
    read = declined = 0
    for line in _json_lines(seed=9):
        text = line.decode("utf-8", "replace")
        reader = _step_fields.StepReader(JSONL)
        if not reader.read(line + b"\n", [0], 0, 1):
            declined += 1
            continue
        kernel, parsed = jsonl.RECORD.read_line(text), jsonl.parse(text)
        assert kernel is not None and parsed is not None, text
        assert (kernel.step, _bits(sorted(kernel.values.items())), kernel.units, _bits(kernel.named)) == (
            parsed.step, _bits(sorted(parsed.values.items())), parsed.units, _bits(parsed.named)), text
        read += 1
    assert read > 2000 and declined > 3000


def test_the_mmengine_scalars_reference_lines():
    """MMEngine's vis_data/scalars.json records (tests/fixtures/real/mmengine_runner_scalars.log): ``time`` the step
    time, ``memory`` read as ``memory_mb``; a JSON line without ``data_time`` is no such record."""
    scalars = (REPO / "tests" / "fixtures" / "real" / "mmengine_runner_scalars.log").read_bytes().splitlines()
    for reader in _both_readers(MMENGINE_SCALARS):
        assert reader.read(scalars[0], [0], 0, 1) == 1
        assert _taken_latest(reader) == ([1], None, [7.916203022003174, 0.05, None, 0.11687707901000977], [
            ("data_time", 0.0019211769104003906), ("iter", 1.0)])
        assert reader.read(scalars[1].replace(b', "step"', b', "memory": 512, "step"'), [0], 0, 1) == 1
        assert _taken_latest(reader)[3][-1] == ("memory_mb", 512.0)
        assert reader.read(b'{"step": 3, "loss": 2.5, "time": 0.5}', [0], 0, 1) == 0


def test_the_llamafactory_reference_line():
    line = (b'{"current_steps": 3200, "total_steps": 3235, "loss": 4.4671, "eval_loss": null, "predict_loss": null, '
            b'"reward": null, "learning_rate": 1.4439610072863874e-08, "epoch": 0.99, "percentage": 98.92, '
            b'"elapsed_time": "5:13:22", "remaining_time": "0:03:25"}')
    for reader in _both_readers(JSONL):
        assert reader.read(line, [0], 0, 1) == 1
        assert _taken_latest(reader) == ([3200], 3235, [4.4671, 1.4439610072863874e-08, None, None, None], [
            ("epoch", 0.99), ("percentage", 98.92)])
        assert reader.read(b'{"step": 1, "train/loss": 2, "loss": 3}', [0], 0, 1) == 0
        assert reader.read(b'{"step": 1, "loss": {"a": 2}}', [0], 0, 1) == 0
        assert reader.read(b'{"step": "7", "loss": 2, "total_steps": null} ', [0], 0, 1) == 1
        assert reader.take()[:2] == (range(7, 8), None)


@pytest.mark.parametrize("json", [
    ((b"of",), b"x/"), ((b"",), b"", ()), ((b"of",), "x", ()), ((b"of",), b"", (b"",)), (("of",), b"", ()),
    (tuple(b"t%d" % i for i in range(9)), b"", ()), ((b"of",), b"", tuple(b"d%d" % i for i in range(9))),
    # The fourth item (renamed, marks).
    ((b"of",), b"", (), ()), ((b"of",), b"", (), ((), (), ())), ((b"of",), b"", (), (((b"a", b"", b""),), ())),
    ((b"of",), b"", (), (((b"A", b"b", b""),), ())), ((b"of",), b"", (), (((b"a", b"b"),), ())),
    ((b"of",), b"", (), (((b"a", "b", b""),), ())), ((b"of",), b"", (), (((b"a", b"b", b"MB"),), ())),
    ((b"of",), b"", (), (((b"a" * 129, b"b", b""),), ())),
    ((b"of",), b"", (), ([(b"a", b"b", b"")], ())), ((b"of",), b"", (), ((), (b"",))),
    ((b"of",), b"", (), (tuple((b"a%d" % i, b"b", b"") for i in range(17)), ())), ((b"of",), b"", (), ((), "x")),
    ((b"of",), b"", (), ((), tuple(b"m%d" % i for i in range(9)))), ((b"of",), b"", (), [(), ()]),
])
def test_both_refuse_a_json_table_they_cannot_read_alike(json):
    table = (*OTHER_JSON[:8], json)
    for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
        with pytest.raises((ValueError, TypeError)):
            reader(table)
    for other in ((*OTHER_JSON[:2], b";", *OTHER_JSON[3:]), (*OTHER_JSON[:3], b"=", *OTHER_JSON[4:]),
                  (*OTHER_JSON[:4], (), *OTHER_JSON[5:]), (b"{", b"}", *OTHER_JSON[2:])):
        for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
            with pytest.raises((ValueError, TypeError)):
                reader(other)


# The segments grammar (``iteration 5/ 90 | lm loss: 2.5 |``): Megatron-LM's table, and another with other punctuation.
MEGATRON = megatron.RECORD.kernel_table
NEMO = nemo.RECORD.kernel_table
OTHER_SEGMENTS = (b"", b"", b";", b"=", b"it", (b"<", b">|"),
                  ((b"loss", Kind.FLOAT, 1, b"", b"", 0), (b"l", Kind.FLOAT, 1, b"", b"", 0),
                   (b"t", Kind.DURATION, 1, b"", b"us", 1), (b"tok", Kind.NUMBER_WITH_UNIT, 0, b"", b"", 2),
                   (b"gn", Kind.FLOAT, 1, b"NaN", b"", 3)), -1, (b"n ", b"bad", b"", b"", b"", b"", b""))
# A lead counter and a step segment (NeMo's shape) with other punctuation and words.
OTHER_LEAD = (*OTHER_SEGMENTS[:8], (b"", b"", b"it2", b"Run pass", b"pass", b"", b""))
# A step without its total, closed (nanoGPT's ``iter 10:``), and percents named so: nanoGPT's table and another.
NANOGPT = nanogpt.RECORD.kernel_table
OTHER_CLOSE = (*OTHER_SEGMENTS[:8], (b"n ", b"bad", b"", b"", b"", b"#", b"_pct"))
SEGMENT_TABLES = [MEGATRON, NEMO, OTHER_SEGMENTS, OTHER_LEAD, NANOGPT, OTHER_CLOSE]
SEGMENT_IDS = ["megatron", "nemo", "other-punctuation", "other-lead", "nanogpt", "other-close"]
PERCENTS = ["16.68%", "-100.00%", "0%", "-0.0%", "nan%", "%", "1,234%", "5 %", "x%", "1e999%", "-inf%", "12%%"]
SEGMENT_NAMES = ["lm loss", "LM Loss", "loss", "lm_loss", "elapsed time per iteration (ms)",
                 "elapsed time per iteration", "elapsed time per iteration (s)", "elapsed time per iteration ( ms)",
                 "elapsed (MS) time per iteration",
                 "learning rate", "grad norm", "throughput per GPU (TFLOP/s/GPU)", "TFLOPs", "mtp_1 loss",
                 "load_balancing_loss", "number of nan iterations", "number of skipped iterations", "nan iterations",
                 "consumed samples", "  spaced  out ", "a (b (c) d) e", "x (unclosed", "__x__", "t", "l", "tok", "gn",
                 "n bad", "bad", "(ms)", "x" * 130, "1st", "a-b/c", "iteration", "global_step", "global step", "it2",
                 "epoch", "pass", "reduced_train_loss", "train_step_timing in s", "lr"]


def _fuzzed_segments_line(rng: random.Random, table: tuple) -> str:
    separator, name_separator, step = (part.decode() for part in (table[2], table[3], table[4]))
    lead = table[8][3].decode()
    space = lambda: rng.choice(["", " ", "   ", "\t"])  # noqa: E731
    segments = []
    for _ in range(rng.randint(0, 14)):
        value = rng.choice([*TOKENS, *PERCENTS, "0", "0.0", "  0", "1.5E+00", "nan", "120", "0077", "1" * 19])
        shape = rng.random()
        if shape < 0.8:
            segments.append(f"{space()}{rng.choice(SEGMENT_NAMES)}{space()}{name_separator}{space()}{value}{space()}")
        elif shape < 0.9:  # no name separator: the value is the last word
            segments.append(f" {rng.choice(SEGMENT_NAMES)} {value} ")
        else:
            segments.append(rng.choice(["", " ", name_separator, f"{name_separator} 5", "justoneword"]))
    if rng.random() < 0.02:
        segments += [f" x{number}{name_separator} 1" for number in range(70)]  # more segments than a run reads
    number = rng.choice(["1", "42", "007", "99999999999999999", "999999999999999999", "1234567890123456789", "x"])
    total = rng.choice(["100", "  50000", "", "12345678901234567890"])
    close = table[8][5].decode()
    anchor = rng.choice([f"{step}{space()} {number}/{space()}{total}{space()}{separator}",
                         f"{step} {number}{separator}", f"x{step} {number}/{total}{separator}",
                         f"{step} {number}/{total}", *([f"{step}{space()} {number}{space()}{close}",
                                                        f"{step} {number}/{total}{close}", f"{step}{number}{close}",
                                                        f"x{step} {number}{close}"] * 2 if close else [])])
    if lead and rng.random() < 0.9:
        counter = rng.choice(["0", "3", "  12", "1" * 19, "x", ""])
        anchor = rng.choice([f"{lead}{space()} {counter},{space()}", f"{lead} {counter} ", f"x{lead} 1, "]) + anchor
    prefix = rng.choice(["", " [2024-04-06 03:02:12] ", "[default3]:", "<rank1>|", "é ", f"{step} 3/4 ", "validation "])
    return prefix + anchor + separator.join(segments) + rng.choice(["", separator, " trailing"])


def _segments_lines(table: tuple, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    lines = [_fuzzed_segments_line(rng, table).encode("utf-8") for _ in range(8000)]
    rng.shuffle(lines)
    if table is MEGATRON:  # the real logs, in order
        for name in ("megatron_tflops.log", "megatron_no_colon.log"):
            lines += (REPO / "tests" / "fixtures" / "real" / name).read_bytes().splitlines() * 3
        lines += (REPO / "tests" / "fixtures" / "formats" / "megatron.log").read_bytes().splitlines() * 3
    if table is NEMO:
        lines += (REPO / "tests" / "fixtures" / "real" / "nemo2.log").read_bytes().splitlines() * 3
    if table is NANOGPT:
        lines += (REPO / "tests" / "fixtures" / "real" / "nanogpt.log").read_bytes().splitlines() * 3
    # Runs: fuzzed lines at steps going up.
    step, lead = table[4].decode(), table[8][3].decode()
    close = table[8][5].decode()
    for number in range(3000):
        line = _fuzzed_segments_line(rng, table)
        start = f"{number // 3}{close}" if close else f"{number // 3}/ 9000 {table[2].decode()}"
        lines.append(f"{lead + ' 1, ' if lead else ''}{step} {start}{line}".encode())
    return lines


# Each grammar's lines (fuzzed and real) by each of its tables: the lines, and at least how many runs of more than a
# line, rows and takes reading them in runs gives.
RUN_CASES = [
    *((table, _record_lines, (100, 1000, 50)) for table in (MINDFORMERS, OTHER)),
    *((table, _pairs_lines, (50, 500, 50)) for table in PAIRS_TABLES),
    *((table, _bracket_lines, (50, 500, 50)) for table in BRACKET_TABLES),
    *((table, lambda _, seed: _json_lines(seed), (30, 300, 50)) for table in JSON_TABLES),
    *((table, _segments_lines, (50, 500, 50)) for table in SEGMENT_TABLES),
]
RUN_IDS = ["record-mindformers", "record-other-punctuation", *(f"pairs-{name}" for name in PAIRS_IDS),
           *(f"brackets-{name}" for name in BRACKET_IDS), *(f"json-{name}" for name in JSON_IDS),
           *(f"segments-{name}" for name in SEGMENT_IDS)]


@pytest.mark.parametrize(("table", "lines", "least"), RUN_CASES, ids=RUN_IDS)
def test_lines_read_in_runs_match_the_twin(table, lines, least):
    runs, rows, takes = _read_in_runs_by_both(table, lines(table, seed=3))
    assert runs > least[0] and rows > least[1] and takes > least[2]


@pytest.mark.parametrize("table", SEGMENT_TABLES, ids=SEGMENT_IDS)
def test_a_segments_run_reads_a_line_as_the_per_line_reader_does(table):
    """A line the run reads gives the per-line reader's record; it declines only what that reader must take: not
    ASCII, tagged, a step or counter beyond 18 digits, a name beyond 128 bytes, more than 64 segments, the counted
    value not 0, a step segment not digits."""
    grammar = step_fields_twin._grammar(table)
    assert grammar.record is not None and grammar.segments is not None
    dropped, counted, step_segment, *_ = grammar.segments

    def declinable(text: str, record: step_fields_twin.Record) -> bool:
        match = grammar.record.search(text)
        segments = step_fields_twin._segments(grammar, text[match.end():])
        step_values = [raw for name, raw in segments if step_segment
                       and step_fields_twin.normalised_name(name.removeprefix(dropped)) == step_segment]
        return (len(segments) > 64 or any(len(name) > 128 for name, _ in segments)
                or record.named.get(counted, 0) != 0
                or any(not re.fullmatch(r"[0-9]{1,18}", raw) for raw in step_values))

    read, declined = _each_line_read_alone(table, _segments_lines(table, seed=6), declinable)
    assert read > 300 and declined > 100


@pytest.mark.parametrize("table", SEGMENT_TABLES, ids=SEGMENT_IDS)
def test_a_line_printing_the_segments_of_the_line_before_is_read_as_the_twin_reads_it(table):
    """The kernel takes a segment whose bytes up to its name separator are the line before's at that place without
    reading its name again: each line here follows such a line and differs from it by a little (a name a byte
    longer, a space more, a separator gone or doubled, a segment more or less), so a shortcut taken where the
    segment is not the same shows."""
    separator, name_separator, step = table[2], table[3], table[4]
    step = table[8][3] + b" 1, " + step if table[8][3] else step
    close = table[8][5]
    fraction = b"%d" + close if close else b"%d/ 9999 " + separator
    rng = random.Random(11)
    names = [name.encode() for name in SEGMENT_NAMES[:20] if "nan" not in name]
    lines = []
    for number in range(1, 2500):
        segments = [b" " + name + name_separator + b" " + rng.choice(TOKENS).encode() + b" "
                    for name in names[: rng.randint(2, 12)]]
        lines.append(step + b" " + fraction % number + separator.join(segments))
        changed = list(segments)
        where = rng.randrange(len(changed))
        change = rng.randrange(6)
        if change == 0:
            changed[where] = changed[where].replace(name_separator, b"x" + name_separator, 1)
        elif change == 1:
            changed[where] = b" " + changed[where]
        elif change == 2:
            changed[where] = changed[where].replace(name_separator, b" ", 1)
        elif change == 3:
            changed[where] = changed[where].replace(name_separator, name_separator * 2, 1)
        elif change == 4:
            changed[where] = changed[where].replace(name_separator, separator, 1)
        else:
            del changed[where]
        lines.append(step + b" " + fraction % number + separator.join(changed))
    assert _read_in_runs_by_both(table, lines)[1] == len(lines)  # every line a record


def test_the_megatron_reference_line():
    line = (b" [2024-04-06 03:02:12] iteration       71/     100 | consumed samples:         9088 | elapsed time per "
            b"iteration (ms): 5361.6 | throughput per GPU (TFLOP/s/GPU): 243.6 | learning rate: 1.420000E-05 | global "
            b"batch size:   128 | lm loss: 1.818812E+00 | load_balancing_loss: 1.013377E+00 | loss scale: 1.0 | grad "
            b"norm: 1.300 | num zeros: 0.0 | number of skipped iterations:   0 | number of nan iterations:   0 |")
    for reader in (_step_fields.StepReader(MEGATRON), step_fields_twin.StepReader(MEGATRON)):
        assert reader.read(line, [0], 0, 1) == 1
        steps, total, fields, named = reader.take()
        loss, step_time, lr, grad_norm, throughput = fields
        assert (list(steps), total, loss[3], step_time[0], lr[0], grad_norm[0], throughput[:2]) == (
            [71], 100, array("d", [1.818812]), 5.3616, 1.42e-05, 1.3, (243.6, None))
        assert [(name, value) for name, value, *_ in named] == [
            ("consumed_samples", 9088.0), ("global_batch_size", 128.0), ("load_balancing_loss", 1.013377),
            ("loss_scale", 1.0), ("num_zeros", 0.0), ("skipped_iterations", 0.0), ("nan_iterations", 0.0)]
        nan_interval = line.replace(b"nan iterations:   0", b"nan iterations:   2")
        assert reader.read(nan_interval, [0], 0, 1) == 0  # the per-line reader counts its unprinted NaN losses
        assert reader.read(line.replace(b"iteration    ", b"iterations   "), [0], 0, 1) == 0


@pytest.mark.parametrize("key", ["tokens per gpu per second (tgs)", "train/mfu", "Elapsed Time (ms) per  iteration",
                                 "a (b (c) d) e", "x (unclosed", "  __x__ ", "(ms)", "", "UPPER-case_9 x"])
def test_the_kernel_normalises_a_name_as_the_twin_does(key):
    table = (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"", b""))
    for reader in (_step_fields.StepReader(table), step_fields_twin.StepReader(table)):
        assert reader.read(b"it 1/2 | %s: 5 |" % key.encode(), [0], 0, 1) == 1
        named = reader.take()[3]
        assert [name for name, *_ in named] == ([step_fields_twin.normalised_name(key)] if key.strip() else [])


@pytest.mark.parametrize("table", [
    (b"", b"", b"|", b"|", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"", b"")),
    (b"", b"", b"||", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"", b"")),
    (b"", b"", b"|", b":", b"1t", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"", b"")),
    (b"{", b"}", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), ((b"x", 1, 0, b"", b""),), 0, (b"", b"", b"", b"", b"", b"", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"",)),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", "x")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b":")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"::", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b"a", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b" ", b"")),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b":", b"_" * 33)),
    (b"", b"", b"|", b":", b"it", (b"<", b">|"), (), -1, (b"", b"", b"", b"", b"", b":", "_percent")),
])
def test_both_refuse_a_segments_table_they_cannot_read_alike(table):
    for reader in (_step_fields.StepReader, step_fields_twin.StepReader):
        with pytest.raises((ValueError, TypeError)):
            reader(table)


def test_the_kinds_are_numbered_alike():
    compiled = {name.removeprefix("KIND_"): getattr(_step_fields, name) for name in dir(_step_fields)
                if name.startswith("KIND_")}
    assert {kind.name: int(kind) for kind in Kind} == compiled


# --- kernel 3: the detectors ----------------------------------------------------------------

def _series(rng: random.Random, length: int) -> tuple[list, list]:
    steps: list[int | None] = []
    values: list[float] = []
    level = 2.5
    for index in range(length):
        repeated = steps[-1] if steps and rng.random() < 0.1 else None  # the same step printed again
        steps.append(repeated if repeated is not None else None if rng.random() < 0.05
                     else index * rng.choice([1, 1, 1, 3]))
        roll = rng.random()
        if roll < 0.03:
            values.append(rng.choice([math.nan, math.inf, -math.inf]))
        elif roll < 0.04:  # finite, but near float's limit: the smoothing overflows
            values.append(rng.choice([1e308, -1e308, 1.7976931348623157e308, -1.5e308]))
        elif roll < 0.08:
            values.append(level * rng.uniform(3, 30))  # a spike
        else:
            level = max(0.1, level * rng.uniform(0.995, 1.001))
            values.append(level + rng.gauss(0, 0.02))
    return steps, values


FRESH_SPIKES = (0.0, 0.0, 0, 0)
FRESH_PLATEAU: tuple = (None, 0.0, 0.0, [], [], None, None)


@pytest.mark.parametrize("seed", range(12))
def test_check_series_native_matches_the_twin_bit_for_bit(seed):
    rng = random.Random(seed)
    config = kernel_config(DetectorConfig(spike_warmup_steps=rng.choice([0, 5, 20]),
                                          plateau_window_steps=rng.choice([1, 10, 100]),
                                          spike_max_excursion_steps=rng.choice([1, 3, 10])))
    with_plateau = seed % 3 != 0
    spikes, plateau = FRESH_SPIKES, FRESH_PLATEAU if with_plateau else None
    for _ in range(6):
        steps, values = _series(rng, rng.choice([1, 7, 200]))
        compiled = _detectors.check_series(config, spikes, plateau, steps, values)
        twin = detectors_twin.check_series(config, spikes, plateau, steps, values)
        assert _bits(compiled) == _bits(twin)
        # The step kernel's series come as array('d'): read through the buffer, the same bits.
        assert _bits(_detectors.check_series(config, spikes, plateau, steps, array("d", values))) == _bits(compiled)
        # Its steps as a range where they go up by one difference: read as the list of them is.
        ranged = range(rng.choice([0, 7, 2**40]), 10**12, rng.choice([1, 10]))[:len(values)]
        assert _bits(_detectors.check_series(config, spikes, plateau, ranged, values)) == _bits(
            detectors_twin.check_series(config, spikes, plateau, list(ranged), values))
        *_, spikes, plateau = compiled


@pytest.mark.parametrize("check", [_detectors.check_series, detectors_twin.check_series], ids=["native", "twin"])
def test_one_step_printed_again_and_again_holds_one_history_entry(check):
    """A trainer printing at every micro-batch repeats its step: the plateau's window holds one entry a step,
    so its memory (and a checkpoint's size) is bounded by steps, not lines."""
    config = kernel_config(DetectorConfig(plateau_window_steps=100))
    plateau = FRESH_PLATEAU
    for _ in range(20):
        *_, plateau = check(config, FRESH_SPIKES, plateau, [7] * 5_000, [2.5] * 5_000)
    assert plateau[3] == [7] and len(plateau[4]) == 1
    *_, plateau = check(config, FRESH_SPIKES, plateau, [step for step in range(8, 300) for _ in range(50)],
                        [2.5] * (292 * 50))
    assert len(plateau[3]) == len(set(plateau[3])) <= 101


def _small_batch_loss(rng: random.Random, level: Callable[[int], float]) -> list[float]:
    """3,000 steps of a loss around ``level(step)`` with a small batch's noise: 40 % per step, one hard batch
    in fifty doubling it."""
    return [max(0.01, level(step) * (1 + 0.4 * rng.gauss(0, 1)) * (2 if rng.random() < 0.02 else 1))
            for step in range(1, 3001)]


def _longest_without_progress(check: Callable, values: list[float]) -> int:
    config, spikes, plateau, longest = kernel_config(DetectorConfig()), FRESH_SPIKES, FRESH_PLATEAU, 0
    for step, value in enumerate(values, 1):
        *_, spikes, plateau = check(config, spikes, plateau, [step], [value])
        longest = max(longest, step - plateau[5])
    return longest


@pytest.mark.parametrize("check", [_detectors.check_series, detectors_twin.check_series], ids=["native", "twin"])
@pytest.mark.parametrize("seed", range(3))
def test_a_loss_falling_by_less_than_its_noise_in_a_window_is_progress_a_flat_one_is_not(check, seed):
    """A small batch's loss falling from 2.0 toward 0.75 over thousands of steps improves by less than the noise
    of a 100-step window, but clearly below its value at the last progress after a few windows: never 2,000 steps
    (PLATEAU_STEPS) without progress. The same noise on a loss flat from step 300 goes without progress from
    about step 300 on, and a flat one from the first window on."""
    rng = random.Random(seed)
    falling = _small_batch_loss(rng, lambda step: 0.75 + 1.25 * math.exp(-step / 800))
    assert _longest_without_progress(check, falling) < 1600
    flat_from_300 = _small_batch_loss(rng, lambda step: 0.6 + 1.4 * math.exp(-min(step, 300) / 60))
    assert _longest_without_progress(check, flat_from_300) > 2600
    assert _longest_without_progress(check, _small_batch_loss(rng, lambda step: 1.0)) >= 2800


def test_check_series_counts_non_finite_values_without_detectors():
    config = kernel_config(DetectorConfig())
    for check in (_detectors.check_series, detectors_twin.check_series):
        assert check(config, None, None, [4, None, 6], [math.nan, math.inf, -math.inf]) == (3, 6, 0, [], None, None)
        with pytest.raises(ValueError):
            check(config, None, None, [1], [1.0])


def test_check_series_runs_the_twin_for_steps_beyond_64_bits():
    config = kernel_config(DetectorConfig(spike_warmup_steps=0))
    huge = 10**30
    steps, values = [huge, huge + 1, huge + 2], [2.0, 50.0, math.nan]
    with pytest.raises(OverflowError):
        _detectors.check_series(config, FRESH_SPIKES, FRESH_PLATEAU, steps, values)
    result = native.check_series(config, FRESH_SPIKES, FRESH_PLATEAU, steps, values)
    assert result == detectors_twin.check_series(config, FRESH_SPIKES, FRESH_PLATEAU, steps, values)
    for beyond in (range(huge, huge + 3), range(2**60, 2**62 + 1, 2**61)):  # a range's first step or its last
        with pytest.raises(OverflowError):
            _detectors.check_series(config, FRESH_SPIKES, FRESH_PLATEAU, beyond, values)
        assert native.check_series(config, FRESH_SPIKES, FRESH_PLATEAU, beyond, values) == detectors_twin.check_series(
            config, FRESH_SPIKES, FRESH_PLATEAU, list(beyond), values)
    assert result[:4] == (1, huge + 2, 1, [huge + 1])


def test_shape_in_lines_matches_the_twin_and_the_regex():
    """The lines whose first ``width`` bytes, up to their newline, hold the shape (``:dd:``, the clock's): as a regex
    search of each prefix."""
    rng = random.Random(9)
    for _ in range(600):
        # The clock's shape, one ending in digits, one of two bytes; lines short, or long (no newline at all).
        shape = rng.choice([b":##:", b":##:", b":##", b"a#"])
        pattern = re.compile(re.escape(shape).replace(b"\\#", b"#").replace(b"#", rb"\d"))
        alphabet = b"::0123456789a " + (b"\n" if rng.random() < 0.5 else b"")
        data = bytes(rng.choice(alphabet) for _ in range(rng.randint(0, 300)))
        starts = rng.sample(range(len(data) + 1), rng.randint(0, min(len(data) + 1, 20)))
        if rng.random() < 0.8:  # ascending, as a batch's lines; else going back too
            starts.sort()
        width = rng.choice([0, 3, 4, 7, 19, 20, 21, 120])
        expected = [index for index, start in enumerate(starts)
                    if pattern.search(data[start:start + width].split(b"\n")[0])]
        for given in (starts, array("q", starts)):
            assert scan_twin.shape_in_lines(data, given, shape, width) == expected
            assert _scan.shape_in_lines(data, given, shape, width) == expected
            assert native.shape_in_lines(data, given, shape, width) == expected
    data = b"12:34:56 a\nx\n\n:7:89:\nb.c#"
    assert _scan.shape_in_lines(data, [0, 1, 11, 13, 14, 16], b":##:", 120) == [0, 1, 4, 5]
    assert _scan.shape_in_lines(data, [0, 14], b":##:", 6) == [0, 1]
    assert _scan.shape_in_lines(data, [0, 14], b":##:", 5) == []  # each ":dd:" ends past the line's first 5 bytes
    assert _scan.shape_in_lines(data, [16, 11, 0, 14, 14], b":##:", 120) == [0, 2, 3, 4]
    assert _scan.shape_in_lines(data, [22], b".c#", 5) == []  # a '#' after the first byte is a digit, not itself
    for shape_in_lines in (_scan.shape_in_lines, scan_twin.shape_in_lines):
        for shape, width in ((b"", 9), (b"#1", 9), (b":#\n", 9), (b":##:", -1)):
            with pytest.raises(ValueError):
                shape_in_lines(b"123", [0], shape, width)
        with pytest.raises(IndexError):
            shape_in_lines(b"123", [4], b":##:", 9)
        with pytest.raises(TypeError):
            shape_in_lines(b"123", [0, "1"], b":##:", 9)


def test_first_bytes_native_matches_the_twin():
    rng = random.Random(5)
    for _ in range(200):
        data = bytes(rng.choice(b"[ 0123456789\r\n{abc\xff") for _ in range(rng.randint(1, 300)))
        offsets = sorted(rng.sample(range(len(data)), rng.randint(0, min(40, len(data)))))
        expected = scan_twin.first_bytes(data, offsets)
        assert expected == bytes(sorted({data[at] for at in offsets}))
        assert _scan.first_bytes(data, offsets) == expected == native.first_bytes(data, offsets)
    for first_bytes in (_scan.first_bytes, scan_twin.first_bytes):
        with pytest.raises(IndexError):
            first_bytes(b"abc", [0, 3])
        with pytest.raises(IndexError):
            first_bytes(b"abc", [-1])
        assert first_bytes(b"", []) == b""


def test_shift_offsets_native_matches_the_twin():
    """Each offset moved by delta, in place; one that would leave 64 bits refuses the whole shift, and only an
    array('q') is taken."""
    rng = random.Random(8)
    for _ in range(100):
        offsets = [rng.randrange(-2**40, 2**40) for _ in range(rng.randint(0, 300))]
        delta = rng.randrange(-2**40, 2**40)
        compiled, twin = array("q", offsets), array("q", offsets)
        _scan.shift_offsets(compiled, delta)
        scan_twin.shift_offsets(twin, delta)
        assert compiled == twin == array("q", [offset + delta for offset in offsets])
    for shift_offsets in (_scan.shift_offsets, scan_twin.shift_offsets):
        edge = array("q", [5, 2**63 - 1])
        with pytest.raises(OverflowError):
            shift_offsets(edge, 1)
        assert edge == array("q", [5, 2**63 - 1])
        shift_offsets(edge, -5)
        assert edge == array("q", [0, 2**63 - 6])
        for bad in ([1, 2], array("d", [1.0]), array("l", [1]), array("i", [1])):
            with pytest.raises(TypeError):
                shift_offsets(bad, 1)


@pytest.mark.parametrize("seed", range(6))
def test_consecutive_native_matches_the_twin(seed):
    rng = random.Random(seed)
    for _ in range(300):
        first = rng.choice([0, 1, -5, 2**40, 2**62])
        steps: list[int | None] = list(range(first, first + rng.choice([0, 1, 2, 50])))
        if steps and rng.random() < 0.6:  # a line printing no step, a step repeated, skipped or going back
            at = rng.randrange(len(steps))
            steps[at] = rng.choice([None, steps[at] + 1, steps[at] - 1, steps[at] + 2])
        expected = detectors_twin.consecutive(steps)
        assert _detectors.consecutive(steps) is expected, steps
        assert native.consecutive(steps) is expected
    for difference in (1, 2, 10):  # the step kernel's steps as a range
        for count in (0, 1, 2, 50):
            ranged = range(7, 7 + count * difference, difference)
            assert _detectors.consecutive(ranged) is detectors_twin.consecutive(ranged) is (
                detectors_twin.consecutive(list(ranged))), ranged


@pytest.mark.parametrize("seed", range(4))
def test_steps_counted_native_matches_the_twin(seed):
    rng = random.Random(seed)
    for _ in range(2000):
        base = rng.choice([0, 7, 2**62, 2**70])  # beyond 64 bits too: the kernel compares, it does not convert
        steps: list[int | None] = [rng.choice([None, base, base + 1, base + 2, base + 5])
                                   for _ in range(rng.randrange(12))]
        if rng.random() < 0.5:
            steps = [step for step in steps if step is not None]
            steps.sort()
        step_before = rng.choice([None, base, base + 1])
        expected = detectors_twin.steps_counted(step_before, steps)
        assert _detectors.steps_counted(step_before, steps) == expected, (step_before, steps)
        assert native.steps_counted(step_before, steps) == expected
    for ranged in (range(5, 9), range(6, 9), range(5, 50, 10), range(5, 5), range(2**70, 2**70 + 3)):  # a run's steps
        for step_before in (None, 5, 2**70):
            expected = detectors_twin.steps_counted(step_before, list(ranged))
            assert _detectors.steps_counted(step_before, ranged) == expected == detectors_twin.steps_counted(
                step_before, ranged), (step_before, ranged)
    # a line naming no step is a step; the rank's step printed again is not
    assert _detectors.steps_counted(5, [5, 5, None, 6, 6, None, None, 6, 7]) == 5
    with pytest.raises(TypeError):
        _detectors.steps_counted(None, (1, 2))


def test_consecutive_runs_the_twin_for_steps_beyond_64_bits():
    steps = [2**63 - 1, 2**63, 2**63 + 1]
    with pytest.raises(OverflowError):
        _detectors.consecutive(steps)
    assert native.consecutive(steps) is True
    assert native.consecutive([2**64, 2**64 + 2]) is False
    with pytest.raises(TypeError):
        _detectors.consecutive([1, 2.0])
    with pytest.raises(TypeError):
        _detectors.consecutive((1, 2))


def _a_step_time(rng: random.Random) -> float:
    pick = rng.random()
    if pick < 0.05:
        return rng.choice([0.0, -1.0, math.nan, math.inf, -math.inf, 1e308, 1.7e308, 5e-324, 1e-16, 1e16])
    if pick < 0.3:
        return rng.uniform(-1e3, 1e3)
    if pick < 0.6:
        return 10 ** rng.uniform(-20, 20)
    return rng.uniform(0.01, 0.02)


@pytest.mark.parametrize("seed", range(6))
def test_covered_native_gives_fsums_bits(seed):
    # fsum's exact partials, half-even rounding, its infinities and NaN, and its overflow (inf here, not raised).
    rng = random.Random(seed)
    for _ in range(3000):
        count = rng.randint(0, 60)
        seconds = [_a_step_time(rng) for _ in range(count)]
        spans = [rng.choice([1.0, 1.0, 2.0, 100.0, rng.uniform(0.5, 3), 1e300, math.inf, -1.0, math.nan])
                 for _ in range(count)]
        try:
            expected: object = struct.pack("d", detectors_twin.covered(seconds, spans))
        except ValueError as error:  # -inf + inf
            expected = str(error)
        for given in ((seconds, spans), (array("d", seconds), array("d", spans))):  # a list's floats, an array's
            try:
                got: object = struct.pack("d", _detectors.covered(*given))
            except ValueError as error:
                got = str(error)
            assert got == expected, (seconds, spans)


def test_covered_counts_past_fsums_first_partials_and_does_not_overflow():
    # More exponents than the 32 partials kept on the stack; 1/3 of each so no two cancel.
    seconds = [10.0 ** exponent / 3 for exponent in range(-300, 300, 7)] * 3
    spans = [1.0] * len(seconds)
    assert _detectors.covered(seconds, spans) == math.fsum(seconds) == detectors_twin.covered(seconds, spans)
    assert _detectors.covered((1e-16, 1.0, 1e16), (1.0, 1.0, 1.0)) == 1.0000000000000002e16  # fsum's half-even
    with pytest.raises(OverflowError):
        math.fsum([1.7e308, 1.7e308])
    for covered in (_detectors.covered, detectors_twin.covered, native.covered):
        assert covered([1.7e308, 1.7e308, 2.0], [1.0, 1.0, 1.0]) == math.inf
        assert covered([0.5, -1.0, math.nan, math.inf, 0.25], [1.0, 1.0, 1.0, 1.0, 4.0]) == 1.5
        assert covered([], []) == 0.0
        with pytest.raises(ValueError, match="differ in length|zip"):
            covered([1.0], [])


@pytest.mark.parametrize("seed", range(4))
def test_extent_native_gives_the_twins_bits(seed):
    # min() and max() of the finite values: non-finite ones skipped, the first of equal ones (0.0 and -0.0).
    rng = random.Random(seed)
    for _ in range(2000):
        values = [rng.choice([math.nan, math.inf, -math.inf, 0.0, -0.0, 5e-324, -1.7e308, 1.7e308,
                              rng.uniform(-10, 10), rng.uniform(-10, 10)]) for _ in range(rng.randrange(12))]
        expected = detectors_twin.extent(values)
        for given in (values, array("d", values), tuple(values)):
            got = _detectors.extent(given)
            assert (got is None) == (expected is None), values
            if expected is not None:
                assert struct.pack("dd", *got) == struct.pack("dd", *expected), values
                assert native.extent(given) == got
    assert _detectors.extent([-0.0, 0.0, 2.5, math.nan]) == (-0.0, 2.5)
    assert math.copysign(1, _detectors.extent([0.0, -0.0])[0]) == 1.0  # min() keeps the first of equal ones
    assert _detectors.extent([math.nan, math.inf]) is None and _detectors.extent(array("d")) is None
    with pytest.raises(TypeError):
        _detectors.extent(["1.0"])
    with pytest.raises(TypeError):
        _detectors.extent(3.0)


@pytest.mark.parametrize("check", [_detectors.check_series, detectors_twin.check_series], ids=["native", "twin"])
def test_two_huge_finite_values_do_not_switch_the_detectors_off(check):
    # 1e308 held for 10 steps becomes the baseline; -1e308 then overflows it and the noise level
    # (an infinite baseline no value exceeds). Both start afresh, so after a new warm-up a jump
    # is a spike again and the plateau tracker sees progress again.
    config = kernel_config(DetectorConfig(spike_warmup_steps=5, plateau_window_steps=10))
    values = [2.0] * 20 + [1e308] * 10 + [-1e308] + [2.0 - 0.01 * index for index in range(30)] + [40.0] + [1.5] * 7
    steps = list(range(len(values)))
    nonfinite, _, spiked, spike_steps, spikes, plateau = check(config, FRESH_SPIKES, FRESH_PLATEAU, steps, values)
    assert (nonfinite, spiked, spike_steps) == (0, 2, [20, 61])  # the first 1e308, then 40.0 at step 61
    mean, deviation, *_ = spikes
    assert math.isfinite(mean) and math.isfinite(deviation)
    smoothed, change, _, _, _, best_step, _ = plateau
    assert math.isfinite(smoothed) and math.isfinite(change) and best_step > 40


def _step_times(rng: random.Random, length: int) -> tuple[list, list]:
    """Step times with noise, one-step blips (saves), sustained slowdowns and values that are no times."""
    steps, values, level = [], [], rng.uniform(0.2, 5)
    slow_left = 0
    for index in range(length):
        steps.append(None if rng.random() < 0.05 else index * rng.choice([1, 1, 2]))
        roll = rng.random()
        if slow_left == 0 and roll < 0.02:
            slow_left = rng.choice([1, 2, 5, 30])
        if roll > 0.98:
            values.append(rng.choice([math.nan, math.inf, 0.0, -1.0]))
        elif slow_left:
            slow_left -= 1
            values.append(level * rng.uniform(1.6, 40))
        else:
            values.append(level * (1 + rng.gauss(0, 0.03)))
    return steps, values


FRESH_SLOWDOWN: tuple = (0.0, 0, 0, 0.0, False, [], 1.0)


@pytest.mark.parametrize("seed", range(12))
def test_check_step_times_native_matches_the_twin_bit_for_bit(seed):
    rng = random.Random(seed)
    config = (rng.choice([1.2, 1.5, 3.0]), rng.choice([1, 2, 5, 20]), rng.choice([1, 4, 20]), rng.choice([0.05, 1.0]))
    state, productive, checkpoint = FRESH_SLOWDOWN, 0.0, 0.0
    for _ in range(8):
        steps, values = _step_times(rng, rng.choice([1, 7, 300]))
        spans = [float(rng.choice([1, 1, 10, 100])) for _ in values]
        compiled = _detectors.check_step_times(config, state, steps, values, spans, productive, checkpoint)
        twin = detectors_twin.check_step_times(config, state, steps, values, spans, productive, checkpoint)
        assert _bits(compiled) == _bits(twin)
        buffered = _detectors.check_step_times(config, state, steps, array("d", values), array("d", spans), productive,
                                               checkpoint)
        assert _bits(buffered) == _bits(compiled)
        ranged = range(rng.choice([0, 7, 2**40]), 10**12, rng.choice([1, 10]))[:len(values)]  # the step kernel's steps
        from_range = _detectors.check_step_times(config, state, ranged, values, spans, productive, checkpoint)
        assert _bits(from_range) == _bits(
            detectors_twin.check_step_times(config, state, list(ranged), values, spans, productive, checkpoint))
        _, _, productive, checkpoint, state = compiled
    assert productive > 0


def test_check_step_times_tells_a_save_from_a_slowdown():
    config = (1.5, 5, 4, 0.1)
    steps = list(range(1, 21))
    values = [1.0] * 6 + [11.0] + [1.0] * 5 + [2.0] * 8  # a 10 s save at step 7, slow from step 13
    for check in (_detectors.check_step_times, detectors_twin.check_step_times):
        slowdowns, step, productive, checkpoint, state = check(config, FRESH_SLOWDOWN, steps, values, [1.0] * 20,
                                                               0.0, 0.0)
        assert (slowdowns, step, checkpoint) == (1, 17, 10.0)
        assert productive == sum(values) - 10.0
        assert state == (1.0, 11, 8, 0.0, True, [], 1.0)


def test_check_step_times_counts_a_step_time_for_every_step_it_stands_for():
    # A line every 10 steps with the mean time of one: a save inside an interval raised its mean by 1 s.
    config = (1.5, 5, 4, 0.1)
    steps = list(range(10, 210, 10))
    values = [1.0] * 6 + [2.0] + [1.0] * 13
    for check in (_detectors.check_step_times, detectors_twin.check_step_times):
        slowdowns, _, productive, checkpoint, state = check(config, FRESH_SLOWDOWN, steps, values, [10.0] * 20,
                                                            0.0, 0.0)
        assert (slowdowns, checkpoint, productive) == (0, 10.0, 200.0)
        assert state[-1] == 10.0  # the span of the held time, kept until the next step tells a save


def test_check_step_times_runs_the_twin_for_steps_beyond_64_bits():
    huge = 10**30
    config = (1.5, 1, 1, 0.1)
    with pytest.raises(OverflowError):
        _detectors.check_step_times(config, FRESH_SLOWDOWN, [huge, huge + 1], [1.0, 3.0], [1.0, 1.0], 0.0, 0.0)
    result = native.check_step_times(config, FRESH_SLOWDOWN, [huge, huge + 1], [1.0, 3.0], [1.0, 1.0], 0.0, 0.0)
    assert result[:2] == (1, huge + 1)


def test_group_lines_matches_the_twin():
    # The streams of an interleaved block (LineParser._parse_interleaved): each prefix's line count and the offsets
    # of its lines holding a literal, on real consoles cut anywhere and fuzzed ones.
    rng = random.Random(29)
    consoles = [(REPO / "tests" / "fixtures" / "real" / f"torchrun_ddp_{name}.log").read_bytes()
                for name in ("nan", "raise", "raise_glued", "kill")]
    pieces = [b"[default1]:", b"[rank3]: ", b"[default0]:[rank0]: ", b"[x]:", b"[", b"]:", b" 3: ", b"", b"[a1]:  ",
              b"step=", b"\n"]
    blocks = [console[:rng.randint(0, len(console))] for console in consoles for _ in range(20)]
    blocks += [b"".join(rng.choice(pieces) + rng.choice(pieces) + b"x\n" for _ in range(rng.randint(0, 30)))
               for _ in range(300)]
    blocks.append(b"".join(b"[r%d]:step=1\n" % number for number in range(70)))  # more prefixes than it keeps
    for data in blocks:
        for literal, tags, loose in ((b"step=", (b"[", b"]:"), b"[ 0123456789"), (b"x", (b"[", b"]:"), b""),
                                     (b"s", (b"<", b">"), b"3"), (b"", (b"[", b"]:"), b"[ 0123456789")):
            assert _scan.group_lines(data, literal, *tags, loose) == scan_twin.group_lines(data, literal, *tags, loose)
    assert scan_twin.group_lines(blocks[-1], b"step=", b"[", b"]:", b"") is None
    grouped = _scan.group_lines(b"[default1]:step=1\nlaunch\n[default0]:[rank0]: x [rank2]: y\n 3: z\n",
                                b"step=", b"[", b"]:", b" ")
    # The starts of a group are an array of int64 (a console's every step line: no int object each).
    assert grouped == ([b"[default1]:", b"", b"[default0]:[rank0]: "], [1, 2, 1],
                       [array("q", [11]), array("q"), array("q")], 1, 1)
    counted = _scan.group_lines(b"[default1]:step=1\nlaunch\n", b"", b"[", b"]:", b" ")  # no literal: counts only
    assert counted == ([b"[default1]:", b""], [1, 1], [array("q"), array("q")], 0, 0)


def test_count_starts_matches_the_twin():
    # The one-stream test of a block (LineParser._parse_one_stream): lines beginning with a prefix, occurrences of
    # a literal (non-overlapping, as bytes.count), on cut, glued and fuzzed blocks.
    rng = random.Random(29)
    lines = [line.encode() for line in worker_log_lines(3000, seed=29)]
    pieces = [b"[rank3]: ", b"[rank", b"[default1]:", b"\n", b"aa", b" 3: ", b"rank3]"]
    for _ in range(300):
        data = b"".join(rng.choice(pieces) + rng.choice(lines) + b"\n" for _ in range(rng.randint(0, 40)))
        data = data[:rng.randint(0, len(data))] if rng.random() < 0.3 else data
        for prefix in (b"[rank3]: ", b" 3: ", b"a", b"\n["):
            for literal in (b"[rank", b"aa", b"a", b"[rank3]: "):
                assert _scan.count_starts(data, prefix, literal) == scan_twin.count_starts(data, prefix, literal)
    for count_starts in (_scan.count_starts, scan_twin.count_starts):
        assert count_starts(b"[rank3]: a\n[rank3]: b[rank3]: c\nx\n[rank3]:", b"[rank3]: ", b"[rank") == (2, 4, 3)
        assert count_starts(b"aaaa", b"a", b"aa") == (1, 2, 0)
        with pytest.raises(ValueError, match="empty"):
            count_starts(b"x", b"", b"x")


@pytest.mark.parametrize("kernel", ["native", "twin"])
def test_segment_records_reads_the_fraction_before_each_record(kernel):
    read = _scan.segment_records if kernel == "native" else scan_twin.segment_records
    pieces = (b"{'a': '", b"', 'b': '", b"'}")
    data = (b"{'a': '0', 'b': '0'}\n"  # the whole line, no bar drawn: no step
            b"\r 1/9 [x]\r 2/9 [y]\r  \r{'a': '1.5', 'b': 'nan'}\n"  # the last bar before it, past a blank segment
            b"x 3/9 [\r{'a': '2', 'b': '1e-05'}\n"  # the bar is the line's first segment
            b"x 9/9 [ {'a': '2', 'b': '3'}\n"  # a fraction before it on its line, no carriage return: none
            b"{{'a': '2', 'b': '3'}\n"  # a brace before it: none
            b"{'a': '4', 'b': '5'}\n"
            b"[INFO|x] a.py:1 >> {'a': '6', 'b': '7'}  \t \n"  # a logger's prefix, no bar; a terminal's padding
            b"\r{'a': '2', 'b': '3'}\n"  # no bar before it
            b"\r 4/9 [ 5/6\r{'a': '2', 'b': '3'}\n"  # a fraction after the last ``[``: no step
            b"\r 7/9 [\r{'a': 'x', 'b': '3'}\n"  # not a number
            b"\r 8/9 [\r{'a': '1', 'b': '2'} x\n"  # not the whole segment
            b"\r\xd9\xa39/9 [\r{'a': '1', 'b': '2'}\n"  # a digit of another script before the step
            b"\r 10/9 [\r{'a': '1', 'b': '2'}\r\n")  # the line continues
    newlines, continued, starts, lines, steps, totals, columns = read(data, pieces, b" [")
    assert newlines == 13 and continued == [data.rindex(b"\r 10/9")]
    assert [data[start:start + 9] for start in starts] == [b"{'a': '0'", b"{'a': '1.", b"{'a': '2'", b"{'a': '4'",
                                                            b"{'a': '6'"]
    assert lines == [0, data.index(b"\r 1/9"), data.index(b"x 3/9"), data.index(b"{'a': '4'"), data.index(b"[INFO")]
    assert (steps, totals) == ([-1, 2, 3, -1, -1], [-1, 9, 9, -1, -1])
    assert columns[0] == [0.0, 1.5, 2.0, 4.0, 6.0] and columns[1][2] == 1e-05 and columns[1][1] != columns[1][1]
    with pytest.raises(ValueError):
        read(data, (b"{",), b" [")


@pytest.mark.parametrize("kernel", ["native", "twin"])
def test_segment_records_gives_the_columns_of_digits_as_ints(kernel):
    """A column whose bit ``digits`` sets (a step, a total) comes as ints, read where it is taken; a record whose such
    value is no digits only is none."""
    read = _scan.segment_records if kernel == "native" else scan_twin.segment_records
    data = (b"step 7/100 | loss 2.5\n"
            b"step 8/100 | loss 2.25\n"
            b"step 9.5/100 | loss 2.0\n"  # a step that is no count: no record
            b"step -3/100 | loss 1.0\n"
            b"step 123456789012345678/100 | loss 1.0\n")  # 18 digits: taken, as the double reads them
    pieces = (b"step ", b"/", b" | loss ", b"")
    _, _, starts, _, _, _, (steps, totals, losses) = read(data, pieces, b" [", 0b011)
    assert [type(step) for step in steps] == [int, int, int] and steps[:2] == [7, 8]
    assert steps[2] == int(float(b"123456789012345678")) and totals == [100, 100, 100]
    assert [type(loss) for loss in losses] == [float] * 3 and losses[:2] == [2.5, 2.25]
    assert len(starts) == 3
    _, _, _, _, _, _, (floats, _, _) = read(data, pieces, b" [")
    assert floats[:4] == [7.0, 8.0, 9.5, -3.0] and all(type(step) is float for step in floats)


def test_line_prefixes_matches_its_twin_on_fuzzed_and_real_consoles():
    """The prefixes at the lines' starts, their order, a role's literal elsewhere (None), a rank after a return."""
    rng = random.Random(30)
    pieces = [b"[rank3]: ", b"[rank3]:", b"[default1]:", b"[default1]:[rank5]: ", b"[worker2]: ", b"\r", b"\r  \r",
              b"\r[", b"\r 12: ", b"\r 1234567: ", b" 3: ", b"[rank", b"[12]: ", b"[ab]: ", b"x", b"loss 1.0",
              b"\n", b"[rank3]x", b"\r\t\r[rank1]: ", b"\r 123456: ", b"[work"]
    found = Counter()
    for _ in range(5000):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) + b"\n" * (rng.random() < 0.7)
        literals = rng.choice([PREFIX_ANCHORS, (), (b"[w",), (b"x",), (b"[[", b"["), (b"[rank", b"x")])
        compiled, twin = _scan.line_prefixes(data, literals), scan_twin.line_prefixes(data, literals)
        assert compiled == twin and list(compiled[0] or ()) == list(twin[0] or ()), data
        found[compiled[0] is None, compiled[1], bool(compiled[0])] += 1
    assert len(found) == 6  # every outcome, each more than once
    # Blocks long enough for the 32-byte search of literals sharing a first byte (one literal of one byte: none).
    for _ in range(1500):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(20, 200)))
        literals = rng.choice([PREFIX_ANCHORS, (b"[rank", b"[r", b"[d"), (b"[[", b"["), (b"[w", b"[1", b"[a", b"[x")])
        assert _scan.line_prefixes(data, literals) == scan_twin.line_prefixes(data, literals), (data, literals)
    for name in ("hf_trainer_tqdm.log", "torchrun_ddp_healthy.log"):
        data = (Path(__file__).parent / "fixtures" / "real" / name).read_bytes()
        for cut in range(0, len(data), len(data) // 7 + 1):
            block = data[cut:data.rfind(b"\n", 0, cut + len(data) // 7) + 1]
            assert _scan.line_prefixes(block, PREFIX_ANCHORS) == scan_twin.line_prefixes(block, PREFIX_ANCHORS)
    for line_prefixes in (_scan.line_prefixes, scan_twin.line_prefixes):
        assert line_prefixes(b"[rank1]: a\n[rank1]: b\n\r 7: c\n", PREFIX_ANCHORS) == ({b"[rank1]: ": 2}, True)
        with pytest.raises(ValueError):
            line_prefixes(b"x", (b"a\nb",))


def test_segment_records_matches_its_twin_on_cut_and_fuzzed_consoles():
    shape = segment_shape(b"{'loss': '4.036', 'grad_norm': '0.3374', 'learning_rate': '0.004667', 'epoch': '0.1562'}")
    assert shape is not None
    rng = random.Random(29)
    data = b"".join((REPO / "tests" / "fixtures" / "real" / name).read_bytes() * 3
                    for name in ("hf_trainer_tqdm.log", "hf_trainer_nan.log", "hf_trainer_no_bar.log",
                                 "healthy/llamafactory_finetuneLLM_running_log.log"))
    for _ in range(300):
        sample = bytearray(data[rng.randrange(len(data)):][:rng.randrange(1, 4000)])
        for _ in range(rng.randrange(4)):
            if sample:
                sample[rng.randrange(len(sample))] = rng.choice(b"\r\n/ [0123456789'}{\xd9\xa3.e-")
        sample = bytes(sample)
        # repr: NaN is not equal to itself.
        assert repr(_scan.segment_records(sample, shape.pieces, b" [")) == repr(
            scan_twin.segment_records(sample, shape.pieces, b" ["))


def _pass_blocks(rng: random.Random) -> list[bytes]:
    """Real consoles (torchrun's, a Hugging Face Trainer's, a generated MindFormers log) cut anywhere, and fuzzed."""
    consoles = [(REPO / "tests" / "fixtures" / "real" / name).read_bytes()
                for name in ("torchrun_ddp_healthy.log", "torchrun_ddp_raise.log", "hf_trainer_tqdm.log",
                             "lightning_bar_nan.log")]
    consoles.append("".join(line + "\n" for line in worker_log_lines(2000, seed=29)).encode())
    blocks = [console[start:start + rng.randrange(1, 60_000)] for console in consoles
              for start in (rng.randrange(len(console)) for _ in range(8))]
    pieces = [b"[default1]:", b"[rank3]: ", b"\r", b"\n", b"step=4 loss=1.5", b" 12/90 [", b"\r{'loss': '2.5'}",
              b"Traceback", b"[rank", b"x", b"\xd9\xa3"]
    blocks += [b"".join(rng.choice(pieces) for _ in range(rng.randrange(40))) for _ in range(60)]
    return [b"", *blocks]


def _passes() -> tuple[tuple, ...]:
    shape = segment_shape(b"{'loss': '4.036', 'grad_norm': '0.3374', 'learning_rate': '0.004667', 'epoch': '0.1562'}")
    assert shape is not None
    scanner = _scan_kernel(tuple(ALL_ANCHORS), PREFIX_ANCHORS)
    return (("scan", scanner), ("scan_segments", _scan_kernel((b"loss", b"Traceback", b"epoch"), ())),
            ("group_lines", b"step=", b"[", b"]:", b"[ 0123456789"), ("segment_records", shape.pieces, b" [", 0),
            ("line_prefixes", PREFIX_ANCHORS), ("scan", scanner),
            ("bar_records", b"Epoch ", (b", train_loss=", b", lr=", b", grad_norm=", b"]"), 0))


def _direct(data: bytes, call: tuple):
    name, *arguments = call
    if name in native.SCAN_PASSES:
        return getattr(arguments[0], name)(data)
    return getattr(_scan, name)(data, *arguments)


def test_passes_ahead_give_what_their_functions_give():
    # A catch-up's next block scanned on a thread of its own (parse/ahead.py): each result is the function's, in
    # any order asked, twice alike; as bytes, a bytearray or a memoryview.
    rng = random.Random(29)
    for data in _pass_blocks(rng):
        passes = tuple(rng.sample(_passes(), len(_passes())))  # line prefixes before or after segment records
        ahead = _scan.Ahead(rng.choice([bytes, bytearray, memoryview])(data), passes)
        order = list(range(len(passes)))
        rng.shuffle(order)
        for index in order + order[:2]:
            assert repr(ahead.result(index)) == repr(_direct(data, passes[index])), (data[:80], passes[index][0])


def test_passes_ahead_without_the_kernel_run_when_asked_for():
    # A scanner that is no kernel's (the twin's), or no kernel built: the same results, each computed when asked.
    data = (REPO / "tests" / "fixtures" / "real" / "hf_trainer_tqdm.log").read_bytes()
    twin = native.scanner([b"loss", b"epoch"], implementation="regex")
    passes = (("scan_segments", twin), ("line_prefixes", PREFIX_ANCHORS))
    later = native.ahead(data, passes)
    assert not isinstance(later, _scan.Ahead)
    assert later.result(0) == twin.scan_segments(data) and later.result(1) == _scan.line_prefixes(data, PREFIX_ANCHORS)
    with pytest.raises(ValueError, match="no pass"):
        native.ahead(data, (("scan_segments", twin), ("wc", b"x")))


@pytest.mark.parametrize(("passes", "error"), [
    ((("wc", b"x"),), ValueError),
    ((("scan",),), ValueError),
    ((("line_prefixes", (b"[rank",), b"x"),), ValueError),
    (("scan",), TypeError),
    (((b"scan", None),), TypeError),
    ((("scan", "not a scanner"),), TypeError),
    ((("group_lines", b"step=", b"", b"]:", b""),), ValueError),
    ((("group_lines", b"step=", b"[", b"]:", "text"),), TypeError),
    ((("segment_records", (b"{",), b" [", 0),), ValueError),
    ((("segment_records", [b"{", b"}"], b" [", 0),), TypeError),
    ((("line_prefixes", (b"a\nb",)),), ValueError),
    ((("bar_records", b"", (b"{", b"}"), 0),), ValueError),
    ((("bar_records", b"Epoch ", [b"{", b"}"], 0),), TypeError),
    ((("bar_records", b"Epoch ", (b"{", b"}")),), ValueError),
])
def test_passes_ahead_refuse_what_their_functions_refuse(passes, error):
    with pytest.raises(error):
        _scan.Ahead(b"[rank1]: step=1\n", passes)


def test_a_scanner_scanning_ahead_is_not_initialised_again():
    scanner = _scan_kernel((b"loss",), ())
    data = b"loss 1\n" * 100_000
    ahead = _scan.Ahead(data, (("scan", scanner), ("scan_segments", scanner)))
    with pytest.raises(RuntimeError, match="ahead"):
        scanner.__init__((b"grad",), (), offsets=(0,), commonness=scan_twin.COMMONNESS)
    assert ahead.result(0)[0] == 100_000
    with pytest.raises(IndexError):
        ahead.result(2)
    del ahead
    gc.collect()
    scanner.__init__((b"grad",), (), offsets=(0,), commonness=scan_twin.COMMONNESS)  # no longer scanning
    assert scanner.scan(data)[1] == []


def test_passes_ahead_hold_their_data_and_may_be_dropped_unasked():
    data = bytearray(b"[rank1]: loss 1\n" * 200_000)
    ahead = _scan.Ahead(data, (("line_prefixes", PREFIX_ANCHORS),))
    with pytest.raises(BufferError):
        data.extend(b"x")  # the thread reads it: it may not move
    assert ahead.result(0) == ({b"[rank1]: ": 200_000}, False)
    for _ in range(20):  # dropped while their thread runs: joined, nothing leaks (make sanitize)
        _scan.Ahead(bytes(data), (("scan", _scan_kernel((b"loss",), ())), ("line_prefixes", PREFIX_ANCHORS)))


def _interleaved_blocks(rng: random.Random) -> list[bytes]:
    """torchrun ``--tee`` consoles: real ones cut anywhere, and fuzzed ranks' pairs lines interleaved (steps going
    up, back now and then, a number only float() reads, a line of another shape)."""
    real = [(REPO / "tests" / "fixtures" / "real" / f"torchrun_ddp_{name}.log").read_bytes()
            for name in ("healthy", "nan", "raise", "kill")]
    blocks = [console[start:console.find(b"\n", start + rng.randrange(1, 20_000)) + 1] for console in real
              for start in (0, *(console.find(b"\n", rng.randrange(len(console))) + 1 for _ in range(5)))]
    for _ in range(40):
        steps = dict.fromkeys(range(rng.randrange(1, 6)), 0)
        lines = []
        for _ in range(rng.randrange(1, 400)):
            rank = rng.choice(list(steps))
            steps[rank] += 1 if rng.random() > 0.01 else -5
            loss = f"{rng.random():.17g}" if rng.random() > 0.05 else rng.choice(["2.5", "nan", "1_000.5", "7"])
            line = f"step={steps[rank]} loss={loss} lr=0.01 grad_norm={rng.random()} step_time={rng.random()}"
            lines.append(f"[default{rank}]:" + (line if rng.random() > 0.01 else _fuzzed_pairs_line(rng, KEYVALUE)))
        blocks.append(("\n".join(lines) + "\n").encode())
    return blocks


def test_steps_ahead_are_the_runs_the_reader_reads():
    # An interleaved console's next block: its rank streams grouped and each stream's run of step lines read on a
    # thread of its own (LineParser.prepare); the reader takes a stream's run whole, and it is what it reads itself.
    rng = random.Random(29)
    grouping = (b"step=", b"[", b"]:", b"[ 0123456789")
    taken = declined = 0
    for block in _interleaved_blocks(rng):
        ahead = _step_fields.StepsAhead(block, _step_fields.StepReader(KEYVALUE), *grouping)
        grouped = ahead.groups()
        assert grouped == _scan.group_lines(block, *grouping)
        pending = ahead.pending
        for starts in grouped[2] if grouped else ():
            limit = len(starts) if rng.random() < 0.9 else rng.randrange(len(starts) + 1)
            alone, given = _step_fields.StepReader(KEYVALUE), _step_fields.StepReader(KEYVALUE)
            assert given.read(block, starts, 0, limit, ahead) == alone.read(block, starts, 0, limit)
            assert repr(given.take()) == repr(alone.take())
            taken += pending - ahead.pending
            declined += pending == ahead.pending and bool(starts)
            pending = ahead.pending
    # Most streams' runs taken; not those read with too small a limit, or holding a number float() reads.
    assert taken > 60 and declined > 5, (taken, declined)


def test_steps_ahead_are_taken_only_by_an_empty_reader_of_their_table_for_their_block():
    block = (REPO / "tests" / "fixtures" / "real" / "torchrun_ddp_healthy.log").read_bytes()
    ahead = _step_fields.StepsAhead(block, _step_fields.StepReader(KEYVALUE), b"step=", b"[", b"]:", b"")
    starts = ahead.groups()[2][1]
    pending = ahead.pending
    other = _step_fields.StepReader(OTHER_PAIRS)
    other.read(block, starts, 0, len(starts), ahead)
    used = _step_fields.StepReader(KEYVALUE)
    used.read(block, starts, 0, 1)
    used.read(block, starts, 1, len(starts), ahead)  # not from the stream's first line
    copy = _step_fields.StepReader(KEYVALUE)
    copy.read(bytes(bytearray(block)), starts, 0, len(starts), ahead)  # another block of the same bytes
    busy, alone = _step_fields.StepReader(KEYVALUE), _step_fields.StepReader(KEYVALUE)
    for reader, given in ((busy, ahead), (alone, None)):  # a reader holding lines of its own: they stay
        reader.read(block, ahead.groups()[2][2], 0, 3)
        reader.read(block, starts, 0, len(starts), given)
    assert repr(busy.take()) == repr(alone.take())
    other_lines = [*starts[:-1], starts[-2]]  # as many lines from the same first one, not the stream's
    for lines in (other_lines, array("q", other_lines)):  # a list, an array (compared as bytes)
        for reader, given in ((busy, ahead), (alone, None)):
            reader.read(block, lines, 0, len(lines), given)
        assert repr(busy.take()) == repr(alone.take())
    assert ahead.pending == pending
    for wrong in (tuple(starts), array("i", starts), array("d", starts), memoryview(starts).cast("B"), b"\0" * 8):
        for reader in _both_readers(KEYVALUE):
            with pytest.raises(TypeError, match="starts"):
                reader.read(block, wrong, 0, 1)
    reader = _step_fields.StepReader(KEYVALUE)
    assert reader.read(block, starts, 0, len(starts), ahead) == len(starts) and ahead.pending == pending - 1
    with pytest.raises(TypeError):
        reader.read(block, starts, 0, 1, "ahead")
    ahead_reader = _step_fields.StepReader(KEYVALUE)
    held = _step_fields.StepsAhead(block, ahead_reader, b"step=", b"[", b"]:", b"")
    with pytest.raises(RuntimeError, match="ahead"):
        ahead_reader.__init__(OTHER_PAIRS)
    del held
    gc.collect()
    ahead_reader.__init__(OTHER_PAIRS)  # no longer read by
    for _ in range(10):  # dropped while their thread runs: joined, nothing leaks (make sanitize)
        _step_fields.StepsAhead(block * 20, ahead_reader, b"step=", b"[", b"]:", b"")
    with pytest.raises(ValueError):
        _step_fields.StepsAhead(block, ahead_reader, b"step=", b"", b"]:", b"")


def test_bar_steps_taking_and_apart_match_their_twins():
    """native.bar_steps, bar_taking and bars_apart against their twins (scan.py, the definition): random bars of
    steps going on, back (a resumed run) and to a step taken before, with epochs' starts (a count of 0), triggers,
    and segments between bars."""
    generator = random.Random(29)
    for _ in range(3000):
        count = generator.randrange(0, 14)
        ends = array("q", itertools.accumulate(generator.choice([5, 5, 9]) for _ in range(count)))
        starts = array("q", [0, *(end + generator.choice([1, 1, 3]) for end in ends[:-1])][:count])
        first = generator.randrange(count + 1)
        final = generator.randrange(first, count + 1)
        assert _scan.bars_apart(starts, ends, first, final) == scan_twin.bars_apart(starts, ends, first, final)
        leads = array("q", sorted(generator.randrange(3) for _ in range(count)))
        counts = array("q", (generator.choice([0, *range(1, 6)]) for _ in range(count)))
        if generator.random() < 0.5:
            counts = array("q", sorted(counts))
        totals = array("q", [5] * count)
        limit = generator.choice([8, 1 << 40])
        steps = _scan.bar_steps(leads, counts, totals, limit)
        assert steps == scan_twin.bar_steps(leads, counts, totals, limit)
        if steps is None:
            continue
        lines = array("q", sorted(generator.randrange(1000) for _ in range(count)))
        first = generator.randrange(count + 1)
        last = generator.randrange(first, count + 1)
        triggers = sorted((generator.randrange(-1, count + 2), generator.randrange(1000))
                          for _ in range(generator.randrange(3)))
        held, taken = generator.choice([None, *range(20)]), generator.choice([None, *range(20)])
        arguments = (steps, lines, first, last, triggers, held, taken)
        assert _scan.bar_taking(*arguments) == scan_twin.bar_taking(*arguments), arguments


def test_sorted_difference_matches_its_twin():
    generator = random.Random(7)
    for _ in range(2000):
        removed = array("q", sorted(generator.sample(range(-5, 40), generator.randrange(20))))
        values = sorted(generator.sample(range(-5, 40), generator.randrange(25)))
        if generator.random() < 0.3:  # going back, and numbers past 64 bits
            values += [*generator.sample(range(-5, 40), 3), 1 << 70, -(1 << 70)]
        assert _scan.sorted_difference(values, removed) == scan_twin.sorted_difference(values, removed)
        assert _scan.sorted_difference(values, list(removed)) == scan_twin.sorted_difference(values, removed)


@pytest.mark.parametrize(("function", "arguments", "error"), [
    ("bars_apart", (array("q", [1, 2]), array("q", [1]), 0, 2), IndexError),
    ("bars_apart", (array("q", [1, 2]), array("q", [1, 2]), 2, 1), IndexError),
    ("bars_apart", ([1, 2], array("q", [1, 2]), 0, 2), TypeError),
    ("sorted_difference", ([1, "2"], array("q", [1])), TypeError),
    ("sorted_difference", ([1, 2], array("i", [1])), TypeError),
    ("sorted_difference", ([1, 2], [1, "2"]), TypeError),
    ("sorted_difference", ([1, 2], [1, 1 << 70]), OverflowError),
])
def test_apart_and_difference_refuse_what_is_no_offsets(function, arguments, error):
    with pytest.raises(error):
        getattr(_scan, function)(*arguments)


@pytest.mark.parametrize(("arguments", "error"), [
    ((array("q", [1]), array("q", [1, 2]), array("q", [1]), 9), ValueError),
    (([1], array("q", [1]), array("q", [1]), 9), TypeError),
    ((array("d", [1.0]), array("q", [1]), array("q", [1]), 9), TypeError),
])
def test_bar_steps_refuses_what_is_no_bars(arguments, error):
    with pytest.raises(error):
        _scan.bar_steps(*arguments)


@pytest.mark.parametrize(("arguments", "error"), [
    (([1, 2], array("q", [0, 1]), 1, 3, [], None, None), IndexError),
    (([1, 2], array("q", [0, 1]), -1, 1, [], None, None), IndexError),
    (([1, 2], array("q", [0, 1]), 0, 2, [(1, -5)], None, None), ValueError),
    (([1, 2], array("q", [0, 1]), 0, 2, [[1, 5]], None, None), TypeError),
    (([1, 2], array("q", [0, 1]), 0, 2, [], 1.5, None), TypeError),
    (([1, 2], [0, 1], 0, 2, [], None, None), TypeError),
])
def test_bar_taking_refuses_what_is_no_bars(arguments, error):
    with pytest.raises(error):
        _scan.bar_taking(*arguments)
