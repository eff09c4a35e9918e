"""Records as the plain dicts used by the fixtures' *.expected.json files."""

from __future__ import annotations

import math
from pathlib import Path

from exporter.parse import ErrorEvent, LineParser, RunInfo, SchedulerEvent, StepRecord


def plain_number(value: float | None) -> float | str | None:
    """JSON has no NaN/Inf: fixtures spell them 'nan', 'inf', '-inf'."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def record_as_dict(record) -> dict:
    if isinstance(record, StepRecord):
        return {
            "type": "step",
            "step": record.step,
            "total_steps": record.total_steps,
            "loss": plain_number(record.loss),
            "lr": plain_number(record.learning_rate),
            "grad_norm": plain_number(record.grad_norm),
            "step_time_seconds": plain_number(record.step_time_seconds),
            "throughput": plain_number(record.throughput),
            "throughput_unit": record.throughput_unit,
            "aux": {name: plain_number(value) for name, value in record.aux_losses.items()},
            "extra": {name: plain_number(value) for name, value in record.extra.items()},
        }
    if isinstance(record, ErrorEvent):
        return {"type": "error", "kind": record.kind, "detail": dict(record.detail)}
    if isinstance(record, SchedulerEvent):
        return {"type": "scheduler", "kind": record.kind, "node_id": record.node_id}
    if isinstance(record, RunInfo):
        return {"type": "info", **record.values}
    raise TypeError(f"unknown record {record!r}")


def parse_fixture(path: Path) -> list[dict]:
    """Every record of a fixture log, header comments skipped."""
    parser = LineParser()
    records = []
    for line in path.read_bytes().split(b"\n"):
        if line.startswith(b"# "):
            continue
        records.extend(record_as_dict(record) for record in parser.parse(line))
    return records
