"""What parsers produce: plain value objects, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StepRecord:
    """One training step line. Absent fields stay None; non-finite values stay float('nan'/'inf')."""

    step: int
    total_steps: int | None = None
    loss: float | None = None
    learning_rate: float | None = None
    grad_norm: float | None = None
    step_time_seconds: float | None = None
    throughput: float | None = None
    throughput_unit: str | None = None
    aux_losses: dict[str, float] = field(default_factory=dict)
    # Numeric extras a framework prints (loss_scale, skipped iterations, mfu, ...).
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class ErrorEvent:
    """A failure signature: out of memory, communication error, crash, ..."""

    kind: str
    detail: dict[str, str | float] = field(default_factory=dict)


@dataclass(slots=True)
class SchedulerEvent:
    """A cluster event from msrun's scheduler.log."""

    kind: str
    node_id: str | None = None


@dataclass(slots=True)
class RunInfo:
    """Facts about the run printed once (banners): framework, mode, ..."""

    values: dict[str, str]


Record = StepRecord | ErrorEvent | SchedulerEvent | RunInfo
