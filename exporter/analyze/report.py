"""What an analysis found, as plain data: the report the renderers (text, JSON, Markdown) word.

The JSON keys are a contract (DESIGN 3.6): ``runs[].steps``, ``loss``, ``ranks``,
``findings`` with ``kind, step, rank, node, time, root_cause, message, context``. A value that is not finite
stays as it is here: JSON has none, and the JSON renderer writes it as null (the message says which it was).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from exporter.analyze import wording
from exporter.state.events import CONTEXT_FIELDS

__all__ = ["CONTEXT_FIELDS", "Finding", "LossSummary", "RankReport", "Report", "RunReport", "finding_order"]


@dataclass(slots=True)
class Finding:
    """One thing that went wrong, where (step, rank, node) and when (the line's own time)."""

    kind: str
    step: int | None
    rank: str
    node: str
    time: float | None
    said: str | None  # its message in full; None: worded from its kind, value and detail when read (``message``)
    root_cause: bool = False
    # For each of CONTEXT_FIELDS: (value before the finding's step, value at it) (None: not printed).
    context: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    count: int = 1  # occurrences merged into this finding (consecutive non-finite steps, repeated errors)
    last_step: int | None = None  # the last step of those occurrences
    # A root cause's followers: the findings it accounts for (collective timeouts after an OOM, ...).
    explains: Sequence[Finding] = ()
    # An error's fault as the fault knowledge names it (parse/faults/): None for findings that are no error.
    fault: dict[str, str] | None = None  # code, component, advice ("" where none applies)
    # The event's value before and at the step (an anomaly's) and what it said of itself (exception, code, ...):
    # the words of the message.
    value: tuple[float | None, float | None] = (None, None)
    detail: dict[str, str | int | float] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """One sentence: what happened, where (worded when read: most of 60,000 spikes are never shown)."""
        return self.said if self.said is not None else wording.describe(self.kind, self.step, self.rank, self.value,
                                                                         self.detail)

    def to_json(self) -> dict[str, object]:
        found: dict[str, object] = {"kind": self.kind, "step": self.step, "rank": self.rank, "node": self.node,
                                    "time": self.time, "root_cause": self.root_cause, "message": self.message,
                                    "context": self.context}
        if self.fault is not None:
            found.update(self.fault)
        if self.count > 1:
            found["count"] = self.count
            found["last_step"] = self.last_step
        if self.root_cause:
            found["explains"] = [{"kind": follower.kind, "rank": follower.rank, "node": follower.node,
                                  "step": follower.step, "time": follower.time,
                                  **({"code": follower.fault["code"]} if follower.fault else {})}
                                 for follower in self.explains]
        return found


@dataclass(slots=True)
class RankReport:
    """One rank's log: where it came from, how far it got, when it last wrote."""

    node: str
    rank: str
    role: str
    files: list[str]
    lines: int = 0
    first_step: int | None = None
    last_step: int | None = None
    steps_total: int = 0
    first_line_time: float | None = None
    last_line_time: float | None = None
    last_loss: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    anomalies: dict[str, int] = field(default_factory=dict)
    median_step_time: float | None = None
    # The exporter's restart and goodput accounting (DESIGN 3.3), as serve exposes it.
    restarts: int = 0
    productive_seconds: float = 0.0
    lost_seconds: dict[str, float] = field(default_factory=dict)

    @property
    def goodput(self) -> float | None:
        """Productive time over productive and lost time; None before any step time was printed."""
        accounted = self.productive_seconds + sum(self.lost_seconds.values())
        return self.productive_seconds / accounted if accounted > 0 else None

    def to_json(self) -> dict[str, object]:
        return {"node": self.node, "rank": self.rank, "role": self.role, "files": self.files, "lines": self.lines,
                "first_step": self.first_step, "last_step": self.last_step, "steps_total": self.steps_total,
                "first_line_time": self.first_line_time, "last_line_time": self.last_line_time,
                "last_loss": self.last_loss, "errors": self.errors, "anomalies": self.anomalies,
                "median_step_time_seconds": self.median_step_time, "restarts": self.restarts,
                "productive_seconds": self.productive_seconds, "lost_seconds": self.lost_seconds,
                "goodput": self.goodput}


@dataclass(slots=True)
class LossSummary:
    first: float | None = None
    last: float | None = None
    min: float | None = None
    max: float | None = None
    # The 5th to 95th percentile of the last finite losses before the first anomaly (or the end).
    normal_range: tuple[float, float] | None = None
    last_nonfinite_ranks: list[str] = field(default_factory=list)  # ranks whose last loss is NaN or inf
    outside_ranks: list[str] = field(default_factory=list)  # ranks whose last finite loss is outside the range

    def to_json(self) -> dict[str, object]:
        return {"first": self.first, "last": self.last,
                "min": self.min, "max": self.max,
                "normal_range": list(self.normal_range) if self.normal_range else None,
                "last_nonfinite_ranks": self.last_nonfinite_ranks, "outside_normal_range_ranks": self.outside_ranks}


@dataclass(slots=True)
class RunReport:
    run: str
    first_step: int | None
    last_step: int | None
    steps_total: int
    loss: LossSummary
    ranks: list[RankReport]
    findings: list[Finding]  # earliest first (finding_order)
    median_step_time: float | None = None
    planned_steps: int | None = None  # the total the step lines print (step:[ 100/ 1000]), as training_total_steps

    @property
    def root_cause(self) -> Finding | None:
        return next((finding for finding in self.findings if finding.root_cause), None)

    @property
    def first_incident(self) -> Finding | None:
        """Where the trouble started: the earliest finding by its time (by step when it has none)."""
        return self.findings[0] if self.findings else None

    def to_json(self) -> dict[str, object]:
        return {"run": self.run,
                "steps": {"first": self.first_step, "last": self.last_step, "total": self.planned_steps,
                          "lines": self.steps_total},
                "loss": self.loss.to_json(), "median_step_time_seconds": self.median_step_time,
                "ranks": [rank.to_json() for rank in self.ranks],
                "findings": [finding.to_json() for finding in self.findings]}


@dataclass(slots=True)
class Report:
    runs: list[RunReport]
    warnings: list[str] = field(default_factory=list)  # sources skipped in part or whole, one line each

    def to_json(self) -> dict[str, object]:
        return {"runs": [run.to_json() for run in self.runs], "warnings": self.warnings}


def finding_order(finding: Finding) -> tuple:
    """Earliest first: by time where known, then by step; a finding without either last."""
    return (finding.time is None, finding.time or 0.0, finding.step is None, finding.step or 0)

