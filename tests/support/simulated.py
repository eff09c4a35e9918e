"""Simulated runs for tests: generated in memory, parsed by the real parser, or written to disk."""

from __future__ import annotations

import itertools
from collections import defaultdict
from pathlib import Path

from exporter.parse import LineParser, Record
from exporter.simulate import RunConfig, parse_incident, simulate, write_run
from tests.support.records import parse_lines


def run_config(*specs: str, ranks: int = 8, steps: int = 1000, **options) -> RunConfig:
    config = RunConfig(ranks, steps, tuple(parse_incident(spec) for spec in specs), **options)
    config.check()
    return config


def lines_by_file(config: RunConfig) -> dict[str, list[str]]:
    """Every line of the run, per file name, in writing order."""
    files: dict[str, list[str]] = defaultdict(list)
    for slot in simulate(config):
        for name, lines in slot.lines.items():
            files[name].extend(lines)
    return dict(files)


def records_by_file(config: RunConfig) -> dict[str, list[Record]]:
    """What the exporter's real line parser makes of each file, a StepBatch per step line."""
    records = {}
    for name, lines in lines_by_file(config).items():
        # One block per file: a failure that ends the file is emitted when its block ends.
        records[name] = parse_lines(LineParser(rows_per_batch=1), (line.encode() for line in lines)).records
    return records


def write_simulated(root: Path, config: RunConfig, run: str = "drill", until_slot: int | None = None) -> Path:
    """Write the run (all at once, optionally only up to a slot) into root/<run>/msrun_log."""
    log_dir = root / run / "msrun_log"
    slots = simulate(config)
    if until_slot is not None:
        slots = itertools.islice(slots, until_slot + 1)
    write_run(slots, log_dir)
    return log_dir
