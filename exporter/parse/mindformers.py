"""MindFormers PyNative LossCallback step lines and the run_mindformer.py mode banner.

Anchored on the record itself, ``{ step:[  100/ 1000], loss: ..., ... }``, never on the
logger prefix in front of it, which differs between versions and launchers.
"""

from __future__ import annotations

import re

from exporter.parse.fields import add_named
from exporter.parse.numbers import parse_duration_seconds, parse_float, parse_number_with_unit
from exporter.parse.records import RunInfo, StepRecord

PREFILTER = b"step:["
BANNER_PREFILTER = b"Running MindFormers in "

_RECORD = re.compile(r"\{\s*step:\s*\[\s*(\d+)\s*/\s*(\d+)\s*\]\s*,(?P<body>[^{}]*)\}")
_FIELD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*([^,}]+)")
_BANNER = re.compile(r"Running MindFormers in (PYNATIVE|GRAPH)_MODE")

# MindFormers prints the literal "NaN" when it could not obtain the gradient norm this
# step: that is a missing sample, not a numerical anomaly (a real NaN prints as "nan").
GRAD_NORM_NOT_OBTAINED = "NaN"


def parse_pynative(text: str) -> StepRecord | None:
    """Parse one LossCallback record; None when the line holds none."""
    match = _RECORD.search(text)
    if match is None:
        return None
    record = StepRecord(step=int(match.group(1)), total_steps=int(match.group(2)))
    for name, raw in _FIELD.findall(match.group("body")):
        _apply_field(record, name, raw.strip())
    return record


def _apply_field(record: StepRecord, name: str, raw: str) -> None:
    if name == "loss":
        record.loss = parse_float(raw)
    elif name == "lr":
        record.learning_rate = parse_float(raw)
    elif name == "grad_norm":
        if raw != GRAD_NORM_NOT_OBTAINED:
            record.grad_norm = parse_float(raw)
    elif name == "per_step_time":
        record.step_time_seconds = parse_duration_seconds(raw, default_unit="ms")
    elif name == "throughput":
        parsed = parse_number_with_unit(raw)
        if parsed is not None:
            record.throughput, record.throughput_unit = parsed[0], parsed[1] or None
    else:
        add_named(record, name, parse_float(raw))


def parse_banner(text: str) -> RunInfo | None:
    """The ``Running MindFormers in PYNATIVE_MODE.`` (or GRAPH_MODE) banner from run_mindformer.py."""
    match = _BANNER.search(text)
    if match is None:
        return None
    return RunInfo({"framework": "mindformers", "mode": match.group(1).lower()})
