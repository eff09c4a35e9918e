"""When a rank's silence is a stall: its threshold, learned from its own pace (DESIGN 3.3).

A run whose steps take a second and that has printed nothing for two minutes is hung; a run
that prints a line every ten minutes is not. Each rank's threshold is its usual silence
between two step lines (smoothed, long gaps such as a checkpoint save left out of the
learning) times ``stall_factor``, never below ``stall_floor_seconds``. Before its pace is
known (start-up: loading the model, compiling, the first steps) and after a restart it is
``stall_phase_seconds``. A line announcing a long phase (a checkpoint save, an evaluation:
parse/phases.py) extends it until the next step line: to three times the longest such phase
the rank has shown, or ``stall_phase_seconds`` before it showed one. Exposed as
``training_stall_threshold_seconds``; TrainingStalled fires past it (docs/detectors.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.thresholds import STALL_FLOOR_SECONDS

# A gap between step lines this many times the learned interval is a long phase (a save, an evaluation,
# a stall that ended), not the pace: it is not learned from.
OUTLIER_FACTOR = 5.0
# An announced phase may last this many times the longest one of its kind the rank has shown.
PHASE_FACTOR = 3.0
INTERVAL_ALPHA = 0.1  # smoothing of the learned interval per batch of step lines


@dataclass(frozen=True)
class StallConfig:
    """The stall threshold's floor, factor and the allowance of a start-up or an announced long phase."""

    # Stall threshold: a rank is stalled when silent for this many times its usual interval between step
    # lines, and never before the floor (seconds); until its pace is known (start-up, the first steps, after a
    # restart) and in an announced long phase (a checkpoint save, an evaluation) it has not shown yet, the
    # phase allowance (seconds) holds instead.
    stall_factor: float = 10.0
    stall_floor_seconds: float = float(STALL_FLOOR_SECONDS)
    stall_phase_seconds: float = 1800.0

    def stall_threshold(self, interval: float | None, *, starting: bool = False) -> float:
        """The silence after which a rank is stalled, for its learned ``interval`` (None: not learned yet)."""
        if starting or interval is None:
            return max(self.stall_floor_seconds, self.stall_phase_seconds)
        return max(self.stall_floor_seconds, self.stall_factor * interval)

    def paced_threshold(self, interval: float | None) -> float:
        """The threshold of a rank that is not starting now (its log was last written long ago): its pace's, the
        floor where no pace is known. A start-up allowance is for a run that starts now."""
        return self.stall_floor_seconds if interval is None else self.stall_threshold(interval)

    def phase_threshold(self, interval: float | None, longest: float | None) -> float:
        """The threshold in an announced long phase, the longest of its kind shown so far ``longest`` (None:
        none yet)."""
        allowance = self.stall_phase_seconds if longest is None else PHASE_FACTOR * longest
        return max(self.stall_threshold(interval), allowance)

    def after_steps(self, interval: float | None, since_last: float | None, printed: float,
                    lines: int) -> tuple[float | None, float]:
        """The usual silence between step lines after a batch of ``lines`` step lines that came ``since_last``
        seconds after the batch before (None: not learned from, a start) and printed ``printed`` seconds of step
        time; and the threshold it gives. One call per step batch: the live path's."""
        if since_last is not None and lines > 0 and since_last >= 0:
            sample = (since_last if since_last > printed else printed) / lines
            if interval is None:
                interval = sample
            elif sample <= OUTLIER_FACTOR * interval:
                interval += INTERVAL_ALPHA * (sample - interval)
        if interval is None:
            return None, max(self.stall_floor_seconds, self.stall_phase_seconds)
        threshold = self.stall_factor * interval
        return interval, threshold if threshold > self.stall_floor_seconds else self.stall_floor_seconds
