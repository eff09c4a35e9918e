"""Catch-up: the exporter reads a log directory from the start to its end, then exits.

The same path the serve loop takes after a restart: the Follower discovers the files and
reads every one to its end through the Pipeline into the TrainingState (all fields
parsed, events matched, detectors run). Prints a JSON summary of the state on stdout so
the benchmark can check that the work was done, not skipped.

    python benchmarks/catchup_exporter.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from exporter.follow import Follower  # noqa: E402
from exporter.pipeline import Pipeline  # noqa: E402
from exporter.state import TrainingState  # noqa: E402


def catch_up(directory: str) -> dict[str, object]:
    """Read everything under ``directory`` once; a summary of the resulting state."""
    state = TrainingState()
    follower = Follower([directory], Pipeline(state, node="bench", run_for_directory=lambda _: "bench"))
    follower.run_once()
    return summary(state)


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
    return {"ranks": ranks, "lines_unparsed": state.stats.lines_unparsed_total, "bytes_read": state.stats.bytes_read_total}


if __name__ == "__main__":
    print(json.dumps(catch_up(sys.argv[1])))
