"""What the state emits: one typed event for each thing that happened on a rank.

The state applies an event to its own counters and gauges (training_anomalies_total,
training_errors_total, training_restarts_total, ...) and hands it to its listener: the
status page's incidents, ``analyze``'s findings and the cause model read the same events,
so no reader decides on its own what happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

SeriesKey = tuple[str, str, str]  # (run, node, rank)
# The values an anomaly's context gives, before its step and at it (DESIGN 3.6).
CONTEXT_FIELDS = ("learning_rate", "grad_norm", "step_time_seconds")


@dataclass(slots=True)
class Event:
    """One thing that happened on one rank: an anomaly, a failure, a scheduler event, a restart."""

    kind: str  # a name of exporter/kinds.py
    key: SeriesKey
    step: int | None  # the step it happened at (an error: the rank's last step before its line); None: unknown
    time: float | None  # the line's own time where the reader knows it, else when it was read
    count: int = 1  # occurrences it stands for (consecutive non-finite values of one batch)
    # The value that is the anomaly (loss, grad_norm, device_local_norm, a step time), before and at the step.
    value: tuple[float | None, float | None] = (None, None)
    # For each of CONTEXT_FIELDS: (value before the step, value at it); None: not printed.
    context: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    # What the line said about itself (exception, exit code, signal, ...) or the detector about the event
    # (the name of the value, the baseline, the step a restart came after).
    detail: dict[str, str | int | float] = field(default_factory=dict)
    # An anomaly that goes on from the batch before (a NaN loss every step): the same incident, more of it.
    continued: bool = False

    @property
    def run(self) -> str:
        return self.key[0]

    @property
    def node(self) -> str:
        return self.key[1]

    @property
    def rank(self) -> str:
        return self.key[2]


# Hears the events the state applied, in order: one at a time, or the events of one detector's finding in one batch
# at once (one kind, one rank, many steps: a repeated console's spikes come by the thousand).
Listener = Callable[[Sequence[Event]], None]
