"""What parsers produce: plain value objects, no behaviour.

``rank`` on a record is the global rank named by the line's own prefix (``[rank3]:``, or
``[default3]:`` plus the node's rank offset) in a file that mixes ranks; None means "the
file's rank". Format parsers never set it: the per-file LineParser does.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class StepRecord:
    """One training step line. Absent fields stay None; non-finite values stay float('nan'/'inf')."""

    # None when the format prints no step (Hugging Face Trainer's log dicts).
    step: int | None
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
    # Steps of the logging interval whose loss was non-finite although the line shows none
    # (Megatron-LM's "number of nan iterations": it drops a NaN loss from the line).
    nonfinite_loss_steps: int = 0
    rank: int | None = None


@dataclass(slots=True)
class StepBatch:
    """Consecutive step lines of one rank, in columns: what the state needs of them, in order.

    Applying a batch does what applying its lines' StepRecords one by one does
    (tests/test_step_columns.py), without an object per line (parse/columns.py). Every
    row has a step; the other fields are the latest value any row printed.
    """

    steps: list[int]
    total_steps: int | None
    loss_steps: list[int]  # the step of each loss, for the detectors
    losses: list[float]
    grad_norm_steps: list[int]
    grad_norms: list[float]
    learning_rate: float | None
    step_time_seconds: float | None
    throughput: float | None
    throughput_unit: str | None  # of the last row whose throughput had a unit
    # aux losses (``*_loss``) and other named values: name -> (latest value, rows holding it),
    # in the order a row-by-row application first meets them.
    named: dict[str, tuple[float, int]]
    rank: int | None = None


@dataclass(slots=True)
class ErrorEvent:
    """A failure signature: out of memory, communication error, crash, ..."""

    kind: str
    detail: dict[str, str | float] = field(default_factory=dict)
    rank: int | None = None


@dataclass(slots=True)
class SchedulerEvent:
    """A cluster event from msrun's scheduler.log."""

    kind: str
    node_id: str | None = None
    # The rank the event is about (from the node's registration), not the series it lands in.
    node_rank: int | None = None
    detail: dict[str, str | float] = field(default_factory=dict)
    rank: int | None = None


@dataclass(slots=True)
class RunInfo:
    """Facts about the run printed once (banners): framework, mode, ..."""

    values: dict[str, str]
    rank: int | None = None


Record = StepRecord | StepBatch | ErrorEvent | SchedulerEvent | RunInfo
