"""MindFormers PyNative LossCallback step lines and the run_mindformer.py mode banner.

Anchored on the record itself, ``{ step:[  100/ 1000], loss: ..., ... }``, never on the
logger prefix in front of it, which differs between versions and launchers. The record's
grammar is a field table: runs of step lines are read by the step-field kernel, any other
line by the same table in Python.
"""

from __future__ import annotations

from exporter.parse.formats.registry import Banner, Format, register
from exporter.parse.patterns import lazy
from exporter.parse.records import RunInfo
from exporter.parse.step_table import Kind, StepField, StepTable

FRAMEWORK = "mindformers"

PYNATIVE_RECORD = StepTable((
    StepField("loss", Kind.FLOAT, "loss"),
    # MindFormers prints the literal "NaN" when it could not obtain the gradient norm this
    # step: that is a missing sample, not a numerical anomaly (a real NaN prints as "nan").
    StepField("grad_norm", Kind.FLOAT, "grad_norm", absent="NaN"),
    StepField("lr", Kind.FLOAT, "learning_rate"),
    StepField("per_step_time", Kind.DURATION, "step_time_seconds", default_unit="ms"),
    StepField("throughput", Kind.NUMBER_WITH_UNIT, "throughput"),
))

_BANNER = lazy(r"Running MindFormers in (PYNATIVE|GRAPH)_MODE")


def parse_banner(text: str) -> RunInfo | None:
    """The ``Running MindFormers in PYNATIVE_MODE.`` (or GRAPH_MODE) banner from run_mindformer.py."""
    match = _BANNER.search(text)
    if match is None:
        return None
    return RunInfo({"framework": FRAMEWORK, "mode": match.group(1).lower()})


BANNER = Banner(b"Running MindFormers in ", parse_banner)
FORMAT = register(Format("mindformers_pynative", FRAMEWORK, b"step:[", PYNATIVE_RECORD.read_line, detection_order=20,
                         step_table=PYNATIVE_RECORD, banner=BANNER))
