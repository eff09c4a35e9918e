"""What a detector is: a unit with its thresholds, its state, its kinds and ``apply(view) -> found``.

Prometheus scrapes every 15-60 s while a step takes about a second: a one-step spike or a
NaN between two scrapes never reaches PromQL. The detectors see every value a step line
prints, a batch of a rank's steps at a time (``StepView``), and say what they found
(``Found``); the state turns that into events with the lines' times and the values around
them (state/events.py). Each detector's state is a dataclass that checkpoints save and
restore field by field (state/snapshot.py), so a restart carries on without a new warm-up.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from exporter.parse.records import Series


class RankValue(NamedTuple):
    """The values of one name a rank printed for itself (device_local_norm), admitted by the cardinality cap."""

    name: str
    steps: Sequence[int | None]
    values: Sequence[float]
    previous: float | None  # its value before the batch


@dataclass(slots=True)
class StepView:
    """A batch of one rank's steps as the detectors see it: replayed steps left out, every step known."""

    series: dict[str, Series]  # loss, grad_norm, step_time_seconds: every value, each at its step
    spans: Sequence[float] = ()  # how many steps each step time stands for
    rank_values: list[RankValue] = field(default_factory=list)
    unprinted_nonfinite_losses: int = 0  # Megatron-LM's "number of nan iterations" of the batch's last line
    step_time_window: int = 1  # the step times are means of this many steps (MMEngine's window; fields.window_of)
    step: int | None = None  # the rank's step after the batch
    # Seconds of training so far: [productive, checkpoint]; the slowdown detector, which alone tells a
    # one-step save from slow training, adds the batch's step times to them.
    time_split: list[float] = field(default_factory=lambda: [0.0, 0.0])
    # The event the state would make of ``kind`` at a step of this batch (with the line's time and the values
    # around it), for a detector that reports it later, from another batch (``Found.earlier``).
    event_at: Callable[[str, int | None, str | None], Any] = lambda kind, step, subject: None


@dataclass(slots=True)
class Found:
    """What a detector found in a batch: the state makes an event of it."""

    kind: str  # an ANOMALY kind of exporter/kinds.py
    step: int | None
    count: int = 1
    subject: str | None = None  # the series whose value is the anomaly (its value before and at the step)
    detail: dict[str, str | int | float] = field(default_factory=dict)
    continued: bool = False  # goes on from the batch before (a NaN every step): the same incident
    value: tuple[float | None, float | None] | None = None  # the value before and at the step, if not a subject's
    # Where an earlier batch held the step: the event the state made of it then (its time and values).
    earlier: Any = None
    # Findings of the kind at each of these steps, made one (``step`` the first, ``count`` how many): a block read at
    # once holds thousands of spikes, which a state without a listener only counts; it makes an event of each for one.
    steps: Sequence[int | None] | None = None


class Detector(ABC):
    """One registered detector. Its thresholds are a dataclass that DetectorConfig inherits from."""

    name: str  # the key of its state in RankState.detectors and in checkpoints
    kinds: tuple[str, ...]  # the anomaly kinds it can find
    Config: ClassVar[type]
    State: ClassVar[type]  # a dataclass; State() is a fresh one

    def new_state(self) -> Any:
        return self.State()

    @abstractmethod
    def apply(self, config: Any, state: Any, view: StepView) -> list[Found]:
        """Feed the batch, changing ``state``; what was found, in order."""
