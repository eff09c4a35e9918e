"""A state's dump as far as it must not depend on how its lines came in batches."""

from __future__ import annotations

from typing import Any

from exporter.state import TrainingState
from exporter.state.snapshot import dump_state


def batching_free_dump(state: TrainingState) -> dict[str, Any]:
    """``dump_state`` without what is learned per batch as read: the pace (the stall threshold's base, from the
    silence between batches) and the values around an incident's events (a batch's own series); the incidents'
    events are there by kind, rank and step."""
    dump = dump_state(state)
    for series in dump["series"]:
        for name in ("line_interval", "stall_threshold_seconds"):
            series["values"].pop(name)
    dump["incidents"] = {run: [(event["kind"], event["key"], event["step"]) for event in incident["events"]]
                         for run, incident in dump["incidents"].items()}
    return dump
