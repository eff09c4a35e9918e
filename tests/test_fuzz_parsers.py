"""Fuzz targets, one per parser entry point: whatever bytes a log holds, nothing raises.

``LineParser.parse_block`` is the one way bytes become records (auto-detection, and each
format forced, as the configuration and msrun's scheduler.log do); the fuzzed lines mix
random bytes with each format's anchors and numbers of any length, signs and spellings.
Whatever they hold, the block parses, the records apply to a state, /metrics renders it
and a checkpoint of it reads back. The example count is bounded so CI stays short
(TRAINLOG_FUZZ_EXAMPLES raises it for a longer run).
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.export import text_format
from exporter.parse import LineParser
from exporter.parse.formats import BUILTIN_FORMATS, registered
from exporter.parse.numbers import MAX_INTEGER
from exporter.parse.records import StepBatch
from exporter.state import TrainingState
from exporter.state.snapshot import dump_state, restore_state

EXAMPLES = int(os.environ.get("TRAINLOG_FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

ANCHORS = sorted({fmt.prefilter for fmt in registered()} | {b"Running MindFormers in PYNATIVE_MODE",
                  b"Traceback (most recent call last):", b"RuntimeError: CUDA out of memory", b"[rank3]: ",
                  b"[default1]:", b"terminate called after throwing an instance of 'c10::Error'",
                  b"torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", b"exitcode  : -6",
                  b" | ", b": ", b", ", b"}", b"{", b"/", b"[", b"]", b"=", b"\"", b"ms", b"T"})
NUMBERS = st.one_of(st.integers(), st.integers(min_value=10**17, max_value=10**500),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["nan", "-inf", "1,234.5", "NaN"]),
                    st.integers(4000, 5000).map(lambda digits: "9" * digits))  # past int()'s 4,300-digit limit
PIECES = st.one_of(st.sampled_from(ANCHORS), NUMBERS.map(lambda number: str(number).encode()),
                   st.binary(max_size=40), st.text(max_size=20).map(lambda text: text.encode("utf-8", "surrogatepass")))
LINES = st.lists(st.lists(PIECES, max_size=12).map(b"".join).map(lambda line: line.replace(b"\n", b" ")),
                 min_size=1, max_size=20)


def parse_apply_render(parser: LineParser, lines: list[bytes]) -> None:
    """Parse the lines as one block, apply the records, render /metrics and round-trip a checkpoint."""
    parsed = parser.parse_block(b"".join(line + b"\n" for line in lines))
    state = TrainingState()
    for record in parsed.records:
        if isinstance(record, StepBatch):
            assert all(step is None or abs(step) <= MAX_INTEGER for step in record.steps)
        with state.lock:
            state.ingest(("run", "node", str(record.rank)), 1, [record], None, 0.0)
    text_format.render(state).decode("utf-8")
    with state.lock:
        dumped = json.loads(json.dumps(dump_state(state)))
    restore_state(TrainingState(), dumped)


@FUZZ
@given(LINES)
def test_fuzz_parse_block_detecting_the_format(lines):
    parse_apply_render(LineParser(), lines)


@pytest.mark.parametrize("fmt", [*BUILTIN_FORMATS, *(fmt for fmt in registered() if fmt not in BUILTIN_FORMATS)],
                         ids=lambda fmt: fmt.name)
@FUZZ
@given(lines=LINES)
def test_fuzz_parse_block_with_each_format_forced(fmt, lines):
    parse_apply_render(LineParser(forced=fmt), lines)
