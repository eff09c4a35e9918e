"""Catch-up: the exporter reads a log directory from the start to its end, then exits.

The same path the serve loop takes after a restart: the Follower discovers the files and
reads every one to its end through the Pipeline into the TrainingState (all fields
parsed, events matched, detectors run). Prints a JSON summary of the state on stdout so
the benchmark can check that the work was done, not skipped.

    python -m benchmarks.catchup_exporter DIR
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before the exporter's imports: their cost is part of a catch-up

import json  # noqa: E402
import sys  # noqa: E402

from exporter import native  # noqa: E402
from exporter.follow import Follower  # noqa: E402
from exporter.pipeline import Pipeline  # noqa: E402
from exporter.state import TrainingState  # noqa: E402

IMPORTED = time.perf_counter()


def catch_up(directory: str) -> dict[str, object]:
    """Read everything under ``directory`` once; a summary of the resulting state."""
    state = TrainingState()
    follower = Follower([directory], Pipeline(state, node="bench", run_for_directory=lambda _: "bench"))
    reading = time.perf_counter()
    follower.run_once()
    read = time.perf_counter()
    return {**summary(state), "seconds": {"imports": IMPORTED - STARTED, "reading": read - reading},
            "speedups": {**native.available(), "AVX2": native.scan_simd()}}


def summary(state: TrainingState) -> dict[str, object]:
    ranks = {}
    for (_run, _node, rank), values in sorted(state.series.items()):
        ranks[rank] = {
            "lines": values.lines_total,
            "steps": values.steps_total,
            "step": values.step,
            "loss": values.loss,
            "grad_norm": values.grad_norm,
            "aux_losses": dict(values.aux_losses),
            "errors": {kind: count for kind, count in values.errors.items() if count},
        }
    return {"ranks": ranks, "lines_unparsed": state.stats.lines_unparsed_total,
            "bytes_read": state.stats.bytes_read_total}


if __name__ == "__main__":
    print(json.dumps(catch_up(sys.argv[1])))
