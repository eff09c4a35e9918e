"""Records as the plain dicts of the fixtures' *.expected.json files, and how they are compared.

The comparison follows docs/formats-research.md section 0: records are compared per rank
in order (a traceback's events are emitted when its block ends, after lines of other
ranks); every key an expected record names is compared, keys it leaves out are not (the
core fixtures name ``throughput_unit``, the format fixtures ``rank``); inside ``detail``
the keys in REQUIRED_DETAIL must agree both ways, any other key only where both have it.
A fixture is parsed with a StepBatch per step line, so that each line's values show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

from exporter.parse import ErrorEvent, LineParser, ParsedBlock, Record, RunInfo, SchedulerEvent, StepBatch
from exporter.parse.formats import FormatSelection
from exporter.parse.records import PhaseStart, StepLine
from exporter.parse.step_batch import StepBatchBuilder

REQUIRED_DETAIL = {"exception", "code", "op", "seq_num", "timeout_seconds", "root_cause_rank", "exitcode"}


def plain_number(value: float | None) -> float | str | None:
    """JSON has no NaN/Inf: fixtures spell them 'nan', 'inf', '-inf'."""
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


# The printed values record_as_dict names above; any other one appears under its own name.
_NAMED_KEYS = {"total_steps", "loss", "learning_rate", "grad_norm", "step_time_seconds", "throughput"}


def record_as_dict(record) -> dict:
    if isinstance(record, StepBatch):
        (step,) = record.steps  # a batch of one line: what that line printed
        values = record.latest
        return {
            "type": "step",
            "rank": record.rank,
            "step": step,
            "total_steps": values.get("total_steps"),
            "loss": plain_number(values.get("loss")),
            "lr": plain_number(values.get("learning_rate")),
            "grad_norm": plain_number(values.get("grad_norm")),
            "step_time_seconds": plain_number(values.get("step_time_seconds")),
            "throughput": plain_number(values.get("throughput")),
            "throughput_unit": record.units.get("throughput"),
            "aux": {name: plain_number(value) for name, (value, _, aux) in record.named.items() if aux},
            "extra": {name: plain_number(value) for name, (value, _, aux) in record.named.items() if not aux},
            "nonfinite_loss_steps": record.unprinted_nonfinite_losses,
            **{name: plain_number(value) for name, value in values.items() if name not in _NAMED_KEYS},
        }
    if isinstance(record, ErrorEvent):
        return {"type": "error", "kind": record.kind, "rank": record.rank, "detail": dict(record.detail)}
    if isinstance(record, SchedulerEvent):
        return {"type": "scheduler", "kind": record.kind, "node_id": record.node_id, "node_rank": record.node_rank,
                "rank": record.rank, "detail": dict(record.detail)}
    if isinstance(record, RunInfo):
        return {"type": "info", "rank": record.rank, **record.values}
    if isinstance(record, PhaseStart):
        return {"type": "phase", "phase": record.phase, "rank": record.rank}
    raise TypeError(f"unknown record {record!r}")


def fixture_parser(path: Path) -> LineParser:
    """The parser the exporter gives the fixture (scheduler logs get their format), with a batch per step line."""
    role = "scheduler" if path.stem.endswith("scheduler") else "worker"
    selection = FormatSelection()
    return LineParser(selection.candidates(), forced=selection.forced(path.name, role), rows_per_batch=1)


def parse_lines(parser: LineParser, lines: Iterable[bytes]) -> ParsedBlock:
    """``parse_block`` of lines given without their newlines, as a whole file (what its end completes too)."""
    parsed = parser.parse_block(b"".join(line + b"\n" for line in lines))
    ended = parser.finish()
    if ended is not None:
        parsed.records += ended[1].records
        parsed.unparsed += ended[1].unparsed
        for rank, count in ended[1].lines_by_rank.items():
            parsed.lines_by_rank[rank] = parsed.lines_by_rank.get(rank, 0) + count
    return parsed


def in_batches(*items: StepLine | Record) -> list[Record]:
    """Records as a LineParser hands them on: each run of step lines (one rank's) gathered into StepBatches."""
    records: list[Record] = []
    builder = StepBatchBuilder(None)
    for item in items:
        if isinstance(item, StepLine):
            if builder.goes_back(item.step) and (batch := builder.take()) is not None:
                records.append(batch)
            if builder.add_line(item) and (batch := builder.take()) is not None:
                records.append(batch)
            continue
        batch = builder.take()
        records.extend([batch, item] if batch else [item])
    batch = builder.take()
    return [*records, batch] if batch else records


def fixture_lines(path: Path) -> list[bytes]:
    """The fixture's lines without its header comments (only at the top of the file)."""
    lines = path.read_bytes().split(b"\n")
    while lines and lines[0].startswith(b"# "):
        lines.pop(0)
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def parse_fixture(path: Path, parser: LineParser | None = None) -> list[dict]:
    """Every record of a fixture log, read as one batch."""
    parser = parser or fixture_parser(path)
    return [record_as_dict(record) for record in parse_lines(parser, fixture_lines(path)).records]


def by_rank(records: list[dict]) -> list[dict]:
    """Records grouped by rank (no rank first), each rank's records in their order."""
    return sorted(records, key=lambda record: (record.get("rank") is not None, record.get("rank") or 0))


def comparable(actual: list[dict], expected: list[dict]) -> tuple[list, list]:
    """Both sides reduced to what the comparison rules check, ready for ``==`` with a readable diff."""
    actual, expected = by_rank(actual), by_rank(expected)
    shown = [_project(got, want) for got, want in zip(actual, expected, strict=False)] + actual[len(expected):]
    return _rounded(shown), _rounded(expected)


def _project(actual: dict, expected: dict) -> dict:
    projected = {key: actual.get(key, "<missing>") for key in expected}
    if "detail" in expected and isinstance(actual.get("detail"), dict):
        got, want = actual["detail"], expected["detail"]
        keys = set(want) | (set(got) & REQUIRED_DETAIL)
        projected["detail"] = {key: got.get(key, "<missing>") if key in REQUIRED_DETAIL or key in got else want[key]
                               for key in keys}
    return projected


def _rounded(value):
    """Floats to 10 significant digits: 48211.7 / 1000 and 48.2117 are the same value."""
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value
