from __future__ import annotations

import math
from pathlib import Path

import pytest

from exporter.native.step_fields import normalised_name
from exporter.parse import LineParser, fields, signatures
from exporter.parse.numbers import parse_duration_seconds, parse_float, parse_number_with_unit
from tests.support.records import parse_lines


@pytest.mark.parametrize(
    ("text", "default_unit", "seconds"),
    [("850ms", "s", 0.85), ("850", "ms", 0.85), ("1.5s", "ms", 1.5), ("  12 ms ", "s", 0.012), ("fast", "s", None)],
)
def test_durations_are_converted_to_seconds(text, default_unit, seconds):
    assert parse_duration_seconds(text, default_unit) == seconds


def test_numbers_with_separators_units_and_non_finite_values():
    assert parse_float("1,234.5") == 1234.5
    assert math.isnan(parse_float("NaN"))
    assert parse_float("-inf") == -math.inf
    assert parse_float("T") is None
    assert parse_number_with_unit("12.34T") == (12.34, "T")
    assert parse_number_with_unit("oops") is None


@pytest.mark.parametrize(
    "line",
    [b"", b"\xff\xfe\x00binary junk \x80\x81 step:[ {", b"{ step:[ 1/ 2], loss: \xff\xff }",
     b"x" * 100_000 + b"step=1 loss=", b"Traceback (most recent call last):"],
)
def test_junk_never_raises(line):
    parse_lines(LineParser(), [line])


def test_a_traceback_is_one_event_when_its_batch_ends():
    # Emitted at the end of the batch, not at the exception line: a chained traceback or a
    # cause printed below the exception (MindSpore) may still follow in the same batch.
    lines = [
        b"Traceback (most recent call last):",
        b'  File "train.py", line 10, in <module>',
        b"    main()",
        b"    ^^^^^^",
        b"ValueError: bad batch",
    ]
    events = parse_lines(LineParser(), lines).records
    assert len(events) == 1
    assert events[0].kind == "traceback"
    assert events[0].detail == {"exception": "ValueError"}


def test_classify_gives_the_same_events_without_the_multi_literal_pass(monkeypatch):
    lines = [line for path in sorted((Path(__file__).parent / "fixtures" / "formats").glob("*.log"))
             for line in path.read_bytes().split(b"\n")]
    lines += [b"out of memory isn't enough and alloc failed, alloc size: 12B", b"EI0001 HCCL NCCL error in: x, y"]
    with_automaton = [signatures.classify(line) for line in lines]
    gates = [signatures.has_failure_literal(line) for line in lines]
    monkeypatch.setattr(signatures, "BytesAhoCorasick", None)  # a platform without ahocorasick_rs's wheel
    monkeypatch.setattr(signatures, "_find_literals", signatures._literal_finder())
    without = [signatures.classify(line) for line in lines]
    assert with_automaton == without
    assert gates == [signatures.has_failure_literal(line) for line in lines]
    assert all(gate for gate, event in zip(gates, without, strict=True) if event is not None)
    assert sum(event is not None for event in without) > 20


def test_a_metric_name_is_the_same_remembered_or_not_and_a_long_key_is_not_kept():
    keys = ["tokens per gpu per second (tgs)", "train/mfu", "lm loss", "Elapsed Time Per Iteration (ms)"]
    assert [fields.metric_name(key) for key in keys] == [
        "tokens_per_gpu_per_second", "train_mfu", "lm_loss", "elapsed_time_per_iteration"]
    assert [fields.metric_name(key) for key in keys] == [normalised_name(key) for key in keys]  # met again
    kept = fields._known_metric_name.cache_info().currsize
    long_key = "a field " * (fields.MAX_CACHED_KEY_CHARS // 8 + 1)
    assert fields.metric_name(long_key) == "_".join(["a_field"] * (fields.MAX_CACHED_KEY_CHARS // 8 + 1))
    assert fields._known_metric_name.cache_info().currsize == kept
