# The detector kernel (detectors.c); its twin and definition: detectors.py.
from collections.abc import Sequence

from exporter.native.detectors import PlateauState, SeriesCheck, SlowdownState, SpikeState, StepTimesCheck

def check_series(config: tuple, spikes: SpikeState | None, plateau: PlateauState | None,
                 steps: Sequence[int | None], values: Sequence[float]) -> SeriesCheck: ...
def check_step_times(config: tuple, slowdown: SlowdownState, steps: Sequence[int | None], values: Sequence[float],
                     spans: Sequence[float], productive: float, checkpoint: float) -> StepTimesCheck: ...
def consecutive(steps: list[int | None]) -> bool: ...
