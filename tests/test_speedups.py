"""The native twins (exporter/*/_speedups.c) give exactly what their Python definitions give.

Each is fed the same inputs as its twin: real logs, and fuzzed ones full of the tokens and
bytes that parsers get wrong (non-finite numbers, units, underscores, binary junk, huge
numbers, blocks cut anywhere). Floats are compared bit for bit.
"""

from __future__ import annotations

import math
import random
import re
import struct
from pathlib import Path

import pytest

from benchmarks.generate import worker_log_lines
from exporter.parse import block as block_module
from exporter.parse import columns as columns_module
from exporter.parse.block import AnchorScanner
from exporter.parse.formats import BUILTIN_FORMATS
from exporter.parse.line_parser import anchors_for
from exporter.parse.prefixes import PREFIX_ANCHORS, RANK_PREFIX
from exporter.state import detectors
from exporter.state.detectors import DetectorConfig, PlateauTracker, SpikeDetector
from tests.support.tools import require_native_speedups

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _native_built():
    if block_module._speedups is None or columns_module.NativeStepColumns is None or detectors._speedups is None:
        require_native_speedups()


def _bits(value):
    """A value with its floats as their bits: NaN equals NaN, 0.0 differs from -0.0."""
    if isinstance(value, float):
        return ("float", struct.pack("<d", value))
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_bits(item) for item in value]
    if isinstance(value, dict):
        return "dict", [(key, _bits(item)) for key, item in value.items()]
    return value


# --- the block scanner ----------------------------------------------------------------------

ALL_ANCHORS = sorted(anchors_for(BUILTIN_FORMATS))


def _scan_both(anchors, data, line_starts=PREFIX_ANCHORS):
    """The native scan, checked against the Python one, with and without its SIMD loop."""
    native = AnchorScanner(anchors, line_starts, implementation="native").scan(data)
    python = AnchorScanner(anchors, line_starts, implementation="regex").scan(data)
    bytewise = block_module._speedups.Scanner(anchors, line_starts, simd=False).scan(data)
    assert tuple(native) == tuple(python) == tuple(bytewise), (anchors[:5], data[:200])
    return native


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
    alphabet = b"abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789[]{}:,.'\"=\n\x00\xff\xe2\x80"
    for round_number in range(300):
        anchor_count = rng.choice([1, 2, 5, 8, 9, 47, 80])
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


def test_scanner_edges():
    anchors = [b"abc", b"step:[", b"bcd"]
    for data in (b"", b"abc", b"ab", b"\nabc\n", b"x" * 31 + b"abc", b"x" * 32 + b"abc", b"x" * 61 + b"abcd\n",
                 b"abcabcabc\nbcd", b"\n" * 100, b"step:" + b"[" * 40, b"\x00abc\x00\n\xffbcd"):
        _scan_both(anchors, data)
    assert AnchorScanner(anchors, implementation="native").scan(bytearray(b"1 abc\n2\n3 bcd\n")) == (3, [0, 8], [])


def test_scanner_on_runs_of_anchored_lines():
    lines = [line.encode() for line in worker_log_lines(3000, seed=12)]
    steps = [line for line in lines if b"step:[" in line]
    data = b"\n".join(lines[:500] + steps * 3 + lines[500:] + steps) + b"\n"  # consecutive, and far into the block
    newlines, starts, _ = _scan_both(ALL_ANCHORS, data)
    assert len(starts) > 3 * len(steps) and newlines == data.count(b"\n")


def test_scanner_refuses_anchors_too_short_for_its_fingerprint():
    with pytest.raises(ValueError):
        AnchorScanner([b"ab"], implementation="native")
    with pytest.raises(ValueError):
        AnchorScanner([b""], implementation="regex")


# --- MindFormers PyNative step columns ------------------------------------------------------

TOKENS = ["1.0", "2.345678", "10.483969", "nan", "NaN", "inf", "-inf", "+inf", "Infinity", "infinity", "1e5",
          "1E-5", "4.000000e-05", "1_000", "1__0", "5.", ".5", "+.5", ".", "-", "e5", "1e", "1e999", "-0.0",
          "0x10", "12345678901234567890.5", "0." + "1" * 70, "", " ", "  7  ", "850ms", "851 ms", "1.2s", "5sec",
          "5 seconds", "3us", "2MS", "nanms", "inf s", "12.34T", "12.20T", "1.5 samples/s", "99%", "nanT", "infT",
          "5eT", "1,234", "7 x", "3.0\t", "\x1f4.5"]
NAMES = ["loss", "lr", "grad_norm", "per_step_time", "throughput", "load_balancing_loss", "mtp_1_loss",
         "loss_scale", "_x", "a1", "1bad", "mtp_loss", "loss"]


def _fuzzed_record_line(rng: random.Random) -> str:
    space = lambda: rng.choice(["", " ", "  ", "\t"])  # noqa: E731
    fields = [f"{rng.choice(NAMES)}{space()}:{space()}{rng.choice(TOKENS)}" for _ in range(rng.randint(0, 9))]
    if rng.random() < 0.1:
        fields.append(f"{rng.choice(NAMES)}:")
    body = ",".join(fields)
    step = rng.choice(["1", "42", "  100", "007", "99999999999999999", "123456789012345678901", "x"])
    record = f"{{{space()}step:{space()}[{space()}{step}{space()}/{space()}{rng.choice(['1000', '60001', ''])}{space()}]{space()},{body}{space()}}}"
    prefix = rng.choice(["", "[INFO] 2026-06-09 10:20:40 [mindformers/core/callback/callback.py:231] _print_log: ",
                         "{ not a record } ", "[default3]:", "[rank1]: ", "{ step:[ 1/ 2] ", "é "])
    suffix = rng.choice(["", " trailing", " { step:[ 2/ 3], loss: 9.0 }", "}", " {"])
    return prefix + record + suffix


def _columns_lines() -> list[bytes]:
    rng = random.Random(3)
    lines = [line.encode() for line in worker_log_lines(20_000, seed=4) if "step:[" in line]
    lines += [_fuzzed_record_line(rng).encode("utf-8") for _ in range(6000)]
    lines += [b"{ step:[ 1/ 2], loss: 2.0, \xff }", b"{ step:[ 1/ 2], loss: 2.0 }\x80", b"no record", b"{}", b"{ step:[1/2],}"]
    return lines


def _as_tuple(*fields):
    return fields


def _declined_for_a_reason(line: bytes) -> bool:
    """A line the native columns may leave to the line parser although Python reads a record in it."""
    return (not line.isascii() or RANK_PREFIX.match(line) is not None
            or re.search(rb"\d{19}", line) is not None)


def test_step_columns_match_the_python_parser_line_by_line_and_in_batches():
    rng = random.Random(5)
    native = columns_module.NativeStepColumns(_as_tuple)
    python = columns_module.StepColumns(_as_tuple)
    taken = 0
    for line in _columns_lines():
        accepted = native.add(line)
        if accepted:
            assert python.add(line), line
        elif python.add(line):
            assert _declined_for_a_reason(line), line
            python = columns_module.StepColumns(_as_tuple)  # start both over: the line went elsewhere
            native.take()
            continue
        assert len(native) == len(python)
        if rng.random() < 0.05:
            assert _bits(native.take()) == _bits(python.take())
            taken += 1
    assert _bits(native.take()) == _bits(python.take())
    assert taken > 50


def test_step_columns_read_the_reference_line():
    line = (b"[INFO] 2026-06-09 10:20:40 [mindformers/core/callback/callback.py:231] _print_log: { step:[    1/60001], "
            b"loss:  10.483969, per_step_time:    851ms, lr: 4.000000e-05, grad_norm: NaN, throughput:  12.10T, "
            b"load_balancing_loss: 0.001300, mtp_1_loss:  10.983969 }")
    columns = columns_module.NativeStepColumns(columns_module.StepBatch)
    assert columns.add(line) and len(columns) == 1
    batch = columns.take()
    assert (batch.steps, batch.total_steps, batch.losses, batch.learning_rate, batch.step_time_seconds) == (
        [1], 60001, [10.483969], 4e-05, 0.851)
    assert (batch.grad_norms, batch.throughput, batch.throughput_unit) == ([], 12.1, "T")
    assert batch.named == {"load_balancing_loss": (0.0013, 1), "mtp_1_loss": (10.983969, 1)}
    assert len(columns) == 0 and columns.take().steps == []


# --- the detector loop ----------------------------------------------------------------------

def _series(rng: random.Random, length: int) -> tuple[list, list]:
    steps, values, level = [], [], 2.5
    for index in range(length):
        steps.append(None if rng.random() < 0.05 else index * rng.choice([1, 1, 1, 3]))
        roll = rng.random()
        if roll < 0.03:
            values.append(rng.choice([math.nan, math.inf, -math.inf]))
        elif roll < 0.08:
            values.append(level * rng.uniform(3, 30))  # a spike
        else:
            level = max(0.1, level * rng.uniform(0.995, 1.001))
            values.append(level + rng.gauss(0, 0.02))
    return steps, values


def _detector_state(spikes, plateau):
    return _bits((spikes.snapshot() if spikes else None, plateau.snapshot() if plateau else None))


@pytest.mark.parametrize("seed", range(12))
def test_check_series_native_matches_python_bit_for_bit(seed, monkeypatch):
    rng = random.Random(seed)
    config = DetectorConfig(spike_warmup_steps=rng.choice([0, 5, 20]), plateau_window_steps=rng.choice([1, 10, 100]),
                            spike_max_excursion_steps=rng.choice([1, 3, 10]))
    pairs = [(SpikeDetector(config), PlateauTracker(config)) for _ in range(2)]
    with_plateau = seed % 3 != 0
    for chunk in range(6):
        steps, values = _series(rng, rng.choice([1, 7, 200]))
        (native_spikes, native_plateau), (python_spikes, python_plateau) = pairs
        native = detectors._speedups.check_series(native_spikes, native_plateau if with_plateau else None, steps, values)
        python = detectors.python_check_series(python_spikes, python_plateau if with_plateau else None, steps, values)
        assert _bits(native) == _bits(python)
        assert _detector_state(native_spikes, native_plateau) == _detector_state(python_spikes, python_plateau)
        if chunk == 3:  # as after a restart from a checkpoint
            pairs = [(SpikeDetector.restored(config, spikes.snapshot()), PlateauTracker.restored(config, plateau.snapshot()))
                     for spikes, plateau in pairs]


def test_check_series_counts_non_finite_values_without_detectors():
    assert detectors.check_series(None, None, [4, None, 6], [math.nan, math.inf, -math.inf]) == (3, 6, 0, None)
    with pytest.raises(ValueError):
        detectors._speedups.check_series(None, None, [1], [1.0])


def test_check_series_falls_back_to_python_for_steps_beyond_64_bits():
    config = DetectorConfig(spike_warmup_steps=0)
    huge = 10**30
    native_spikes, native_plateau = SpikeDetector(config), PlateauTracker(config)
    python_spikes, python_plateau = SpikeDetector(config), PlateauTracker(config)
    steps, values = [huge, huge + 1, huge + 2], [2.0, 50.0, math.nan]
    with pytest.raises(OverflowError):
        detectors._speedups.check_series(native_spikes, native_plateau, steps, values)
    assert native_spikes.snapshot() == SpikeDetector(config).snapshot()  # untouched
    result = detectors.check_series(native_spikes, native_plateau, steps, values)
    assert result == detectors.python_check_series(python_spikes, python_plateau, steps, values) == (1, huge + 2, 1, huge + 1)
    assert _detector_state(native_spikes, native_plateau) == _detector_state(python_spikes, python_plateau)


def test_add_lines_reads_a_run_of_step_lines_as_add_does():
    lines = _columns_lines()
    data = b"\n".join(lines) + b"\n"
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    runs = 0
    for kind in (columns_module.NativeStepColumns, columns_module.StepColumns):
        in_runs, one_by_one = kind(_as_tuple), kind(_as_tuple)
        index = 0
        while index < len(starts):
            taken = in_runs.add_lines(data, starts, index)
            expected = 0
            while index + expected < len(lines) and one_by_one.add(lines[index + expected]):
                expected += 1
            assert taken == expected
            assert _bits(in_runs.take()) == _bits(one_by_one.take())
            runs += taken > 1
            index += taken + 1  # past the declined line
    assert runs > 100


# --- failure signatures without Aho-Corasick ------------------------------------------------

def test_classify_gives_the_same_events_without_the_multi_literal_pass(monkeypatch):
    from exporter.parse import events

    lines = [line for path in sorted((REPO / "tests" / "fixtures" / "formats").glob("*.log"))
             for line in path.read_bytes().split(b"\n")]
    lines += [b"out of memory isn't enough and alloc failed, alloc size: 12B", b"EI0001 HCCL NCCL error in: x, y"]
    with_automaton = [events.classify(line) for line in lines]
    monkeypatch.setattr(events, "_present", lambda line: None)
    without = [events.classify(line) for line in lines]
    assert with_automaton == without
    assert sum(event is not None for event in without) > 20
